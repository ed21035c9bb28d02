"""SoftShape timing against its peers in one run, reported as ratios ours / peer (not run by pytest).

    python packages/softshape/benchmarks/bench_softshape.py [--epochs 60] [--fit-rounds 3] [--rounds 20]
    python packages/softshape/benchmarks/bench_softshape.py --summarize

Every comparison is interleaved (``icml25_shared.bench.compare`` for two callables, ``round_robin`` with a fresh
seeded order every round for three or more), on one torch thread, and reported as the median of the per-round
ratios with their minimum and maximum:

1. Vectorised top-1 MoE dispatch (stacked experts, two ``baddbmm``) vs the official per-expert loop, forward +
   backward on 1920 tokens, D = 128, the router spread over E experts.
2. Inception convolution with the kernel capped to its central 2N - 1 taps vs the full 'same' kernel (k = 39,
   32 channels) on the token counts where capping applies. No limit: the full kernel's time does not scale with its
   taps (the capped kernel's share of the taps, kept in the JSON, is above the measured ratio).
3. Whole train step (forward, backward, Adam) soft-sparse (rate 0.5) vs dense at depth 3, both running the MoE in
   every layer (claim 1's pairing), on the fold-0 training batch. Timed in the same rounds: what no sparsification
   can remove (shape embedding and layer 1, which never sparsifies, forward + backward, and the Adam step over every
   parameter); the limit is its share of the dense step.
4. Fit time vs aeon MiniRocket and RDST on GunPoint and ItalyPowerDemand (fold 0 of the paper's merged 5-fold
   protocol, the aeon copies bundled with aeon: no download); the test accuracy of each is in the case text. numba
   compilation of the peers and torch's first-call overheads are spent on a small untimed fit first. Every fit runs
   on one thread (the peers with n_jobs=1; torch is set to one thread around each fit, since aeon's numba OpenMP
   layer raises the process's OpenMP thread count, which torch reads, after its own fits).

Writes ``benchmarks/results/bench_softshape.json`` and ``.log`` (``icml25_shared.bench.save_results``) and the
headline rows into ``benchmarks/results/performance.json``; ``--summarize`` rebuilds those rows from the committed
JSON without timing.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from icml25_shared.bench import Log, compare, paired, round_robin, save_results, write_performance
from icml25_shared.device import torch_threads
from softshape import SoftShapeClassifier, ucr_shape_size
from softshape.experiments import fold_data, train_steps
from softshape.layers import SharedMoE, capped_same_conv1d, moe_dispatch_loop

DATASETS = ("GunPoint", "ItalyPowerDemand")
RESULTS = Path(__file__).resolve().parent / "results"
SOURCE = "bench_softshape.json"
GOAL_STEP = 0.85  # claim 1's rule: soft / dense train-step time <= 0.85 at depth 3 (with equal accuracy)


def load1() -> float:
    return os.getloadavg()[0]


# ---------------------------------------------------------------------------------------------------------------
# 1. MoE dispatch


def moe_dispatch(repeats: int) -> list[dict[str, Any]]:
    out = []
    for n_experts in (2, 16):
        load0 = load1()
        torch.manual_seed(0)
        moe = SharedMoE(128, n_experts=n_experts).eval()
        with torch.no_grad():
            moe.w_gate.normal_()  # spread over the experts, as after training (zero-init sends all to expert 0)
        h = torch.randn(120 * 16, 128, requires_grad=True)
        with torch.no_grad():
            ti, g = moe.route(h)
            err = float((moe.dispatch(h, ti, g) - moe_dispatch_loop(moe, h, ti, g)).abs().max())

        def run(fn: Any, moe: SharedMoE = moe, h: torch.Tensor = h) -> Any:
            def f() -> None:
                top_i, gates = moe.route(h)
                fn(moe, h, top_i, gates).sum().backward()

            return f

        cmp = compare(
            run(lambda m, h, i, g: m.dispatch(h, i, g)),
            run(moe_dispatch_loop),
            names=("vectorised", "loop"),
            repeats=repeats,
        )
        out.append({
            "n_experts": n_experts,
            "tokens": int(h.shape[0]),
            "dim": 128,
            "vectorised_s": cmp.a.times,
            "loop_s": cmp.b.times,
            **paired(cmp.a.times, cmp.b.times),
            "max_abs_diff": err,
            "max_expert_load": int(torch.bincount(ti[:, 0], minlength=n_experts).max()),
            "load_1min": [load0, load1()],
        })  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------------------------
# 2. Inception kernel capping

INCEPTION_CASES = (  # (where it occurs, batch, tokens N)
    ("ItalyPowerDemand layer 1", 657, 11),
    ("GunPoint depth-2 layer 2", 120, 16),
)


def inception_capping(repeats: int, kernel: int = 39, channels: int = 32) -> list[dict[str, Any]]:
    out = []
    for where, batch, n in INCEPTION_CASES:
        load0 = load1()
        torch.manual_seed(0)
        x = torch.randn(batch, channels, n, requires_grad=True)
        w = torch.randn(channels, channels, kernel, requires_grad=True)
        with torch.no_grad():
            err = float((capped_same_conv1d(x, w) - F.conv1d(x, w, padding=kernel // 2)).abs().max())
        cmp = compare(
            lambda x=x, w=w: capped_same_conv1d(x, w).sum().backward(),
            lambda x=x, w=w: F.conv1d(x, w, padding=kernel // 2).sum().backward(),
            names=("capped", "full"),
            repeats=repeats,
        )
        out.append({
            "where": where,
            "batch": batch,
            "tokens": n,
            "kernel": kernel,
            "channels": channels,
            "capped_s": cmp.a.times,
            "full_s": cmp.b.times,
            **paired(cmp.a.times, cmp.b.times),
            "tap_share": min(kernel, 2 * n - 1) / kernel,
            "max_abs_diff": err,
            "load_1min": [load0, load1()],
        })  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------------------------
# 3. sparse vs dense train step, with the dense step's breakdown


def sparse_vs_dense_one(ds: str, rounds: int, depth: int = 3, rate: float = 0.5) -> dict[str, Any]:
    load0 = load1()
    rates = {v: {"sparse_rate": r, "moe_in_dense": True} for v, r in (("soft", rate), ("dense", 0.0))}
    nets, steps, (xb, yb) = train_steps(ds, rates, depth)  # the same weights for both

    # what no sparsification can remove: shape embedding and layer 1 (never sparsified), forward + backward, and
    # the optimizer step over every parameter, on a copy of the dense model
    fixed_net = copy.deepcopy(nets["dense"])
    fixed_opt = torch.optim.Adam(fixed_net.parameters(), lr=1e-3)
    for prm in fixed_net.parameters():
        prm.grad = torch.zeros_like(prm)

    def fixed() -> None:
        z = fixed_net.layer(0, fixed_net.embed_shapes(xb), 1.0)[0]
        fixed_opt.zero_grad(set_to_none=False)
        F.gelu(z).mean().backward()
        fixed_opt.step()

    fns = {**steps, "embedding + layer 1 + Adam": fixed}
    t = round_robin(fns, repeats=rounds, warmup=1, order="shuffle")
    times = {k: v.times for k, v in t.items()}
    floor = [a / b for a, b in zip(times["embedding + layer 1 + Adam"], times["dense"], strict=True)]
    return {
        "dataset": ds,
        "depth": depth,
        "sparse_rate": rate,
        "keep_ratios": list(nets["soft"].config.keep_ratios),
        "batch": len(yb),
        "times_s": times,
        **paired(times["soft"], times["dense"]),
        "unremovable_share_rounds": floor,
        "limit": statistics.median(floor),
        "load_1min": [load0, load1()],
    }


def sparse_vs_dense(rounds: int) -> list[dict[str, Any]]:
    return [sparse_vs_dense_one(ds, rounds) for ds in DATASETS]


# ---------------------------------------------------------------------------------------------------------------
# 4. fit time and accuracy vs aeon MiniRocket and RDST


def fit_vs_peers(epochs: int, rounds: int) -> list[dict[str, Any]]:
    from aeon.classification.convolution_based import MiniRocketClassifier
    from aeon.classification.shapelet_based import RDSTClassifier

    def make(name: str, ds: str, n_epochs: int) -> Any:
        if name == "SoftShape":
            return SoftShapeClassifier(
                shape_size=ucr_shape_size(ds),
                epochs=n_epochs,
                warmup_epochs=n_epochs // 3,
                early_stopping=None,
                batch_size=100_000,
                random_state=0,
                n_threads=1,  # aeon's numba fits can leave torch at two threads; the peers run with n_jobs=1
            )
        if name == "MiniRocket":
            return MiniRocketClassifier(random_state=0, n_jobs=1)
        return RDSTClassifier(random_state=0, n_jobs=1)

    names = ("SoftShape", "MiniRocket", "RDST")
    warm: dict[str, float] = {}
    Xw, yw, _, _ = fold_data("GunPoint", 0)
    for name in names:  # numba compilation (peers) and torch first-call overheads, untimed in the rounds
        t0 = time.perf_counter()
        make(name, "GunPoint", 2).fit(Xw[:20] if name == "SoftShape" else Xw[:20].astype(np.float64), yw[:20])
        warm[name] = time.perf_counter() - t0
    return [fit_one(ds, epochs, rounds, make, names, warm) for ds in DATASETS]


def fit_one(ds: str, epochs: int, rounds: int, make: Any, names: tuple[str, ...], warm: dict) -> dict[str, Any]:
    load0 = load1()
    X, y, Xt, yt = fold_data(ds, 0)
    # RDST's numba code takes float64 only; SoftShape trains in float32 either way
    data = {n: (X, Xt) if n == "SoftShape" else (X.astype(np.float64), Xt.astype(np.float64)) for n in names}
    fitted: dict[str, Any] = {}

    def fit(name: str) -> Any:
        def run() -> None:
            fitted[name] = make(name, ds, epochs).fit(data[name][0], y)

        return run

    t = round_robin({n: fit(n) for n in names}, repeats=rounds, warmup=0, order="shuffle")
    acc = {n: float(np.mean(np.asarray(fitted[n].predict(data[n][1])) == np.asarray(yt))) for n in names}
    times = {k: v.times for k, v in t.items()}
    return {
        "dataset": ds,
        "fold": 0,
        "n_train": len(y),
        "n_test": len(yt),
        "epochs": epochs,
        "fit_s": times,
        "accuracy": acc,
        "vs": {p: paired(times["SoftShape"], times[p]) for p in names[1:]},
        "warmup_fit_s": warm,
        "load_1min": [load0, load1()],
    }


# ---------------------------------------------------------------------------------------------------------------
# rows, table


def _row(case: str, peer: str, r: dict[str, Any], load: list[float], limit: float | None = None, goal=None) -> dict:
    # one time row: ``r`` holds the paired per-round ratio and its spread (icml25_shared.bench.paired)
    return {"case": case, "peer": peer, "metric": "time", "ratio": r["ratio"], "lo": r["lo"], "hi": r["hi"],
            "limit": limit, "goal": goal, "load": max(load)}  # fmt: skip


def rows_of(res: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for c in res.get("moe_dispatch", []):
        case = f"MoE dispatch, {c['tokens']} tokens, D {c['dim']}, {c['n_experts']} experts (fwd + bwd)"
        rows.append(_row(case, "per-expert loop (official)", c, c["load_1min"]))
    for c in res.get("inception_capping", []):
        case = (f"Inception conv k {c['kernel']} capped to {2 * c['tokens'] - 1} taps, {c['where']} "
                f"({c['batch']} x {c['tokens']} tokens, fwd + bwd)")  # fmt: skip
        rows.append(_row(case, "full 'same' kernel", c, c["load_1min"]))
    for c in res.get("sparse_vs_dense", []):
        case = (f"train step, soft rate {c['sparse_rate']} vs dense, depth {c['depth']}, MoE in every layer, "
                f"{c['dataset']} ({c['batch']} series)")  # fmt: skip
        rows.append(_row(case, "dense (rate 0)", c, c["load_1min"], c["limit"], f"<= {GOAL_STEP} (claim 1)"))
    for c in res.get("fit_vs_peers", []):
        acc = c["accuracy"]
        for peer, v in c["vs"].items():
            case = (f"fit, {c['dataset']} fold 0 ({c['n_train']} series, {c['epochs']} epochs); test acc "
                    f"{acc['SoftShape']:.3f} vs {acc[peer]:.3f}")  # fmt: skip
            rows.append(_row(case, f"aeon {peer}", v, c["load_1min"]))
    return rows


def lines_of(res: dict[str, Any]) -> list[str]:
    s = res["settings"]
    lines = [
        f"softshape benchmark: {s['torch_threads']} torch thread, {s['epochs']} epochs, {s['fit_rounds']} fit rounds, "
        f"{s['rounds']} step rounds, {s['repeats']} kernel repeats; load {res['load_1min']['start']:.2f} -> "
        f"{res['load_1min']['end']:.2f}; {res['wall_s']:.0f} s wall, {res['cpu_s']:.0f} CPU-s",
        "ratio = ours / peer, median of the per-round ratios [min, max]",
    ]
    if s.get("note"):
        lines.insert(1, f"settings: {s['note']}")
    for name, took in res.get("sections", {}).items():
        lines.append(f"  {name}: {took['wall_s']:.1f} s wall, {took['cpu_s']:.1f} CPU-s")
    for r in rows_of(res):
        lim = f", limit {r['limit']:.3f}" if r["limit"] is not None else ""
        lines.append(
            f"{r['case']} vs {r['peer']}: {r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]{lim}; load {r['load']:.2f}"
        )
    for c in res.get("fit_vs_peers", []):
        med = ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in c["fit_s"].items())
        lines.append(f"  {c['dataset']} median fit: {med}")
    for c in res.get("sparse_vs_dense", []):
        med = ", ".join(f"{k} {1e3 * statistics.median(v):.1f} ms" for k, v in c["times_s"].items())
        lines.append(f"  {c['dataset']} median step: {med}")
    return lines


NOTES: list[str] = []  # the README's lead paragraph explains the rows and the limit


def summarize(out: Path) -> None:
    res = json.loads(out.read_text(encoding="utf-8"))
    path = write_performance(out.parent, out.name, rows_of(res), notes=NOTES)
    print("\n".join(lines_of(res)))
    print(f"wrote {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--epochs", type=int, default=60, help="SoftShape fit epochs (warm-up: a third)")
    p.add_argument("--fit-rounds", type=int, default=3, help="interleaved rounds of the three fits")
    p.add_argument("--rounds", type=int, default=20, help="interleaved rounds of the train-step timing")
    p.add_argument("--repeats", type=int, default=30, help="repeats of the MoE / Inception comparisons")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument(
        "--wait-load", type=float, default=None, help="wait (up to 3 min) for the 1-minute load to fall below this"
    )
    p.add_argument("--note", type=str, default="", help="a note on the settings, kept in the JSON")
    p.add_argument("--json", type=str, default=str(RESULTS / SOURCE), help="where to write")
    p.add_argument("--only", nargs="*", default=None, help="time only these sections (a trial; not committed)")
    p.add_argument("--summarize", action="store_true", help="rebuild performance.json from the committed JSON")
    args = p.parse_args()
    out = Path(args.json)
    if args.summarize:
        summarize(out)
        return
    waited = 0.0
    if args.wait_load is not None:  # the 1-minute load decays slowly after other jobs end
        while load1() >= args.wait_load and waited < 180:
            time.sleep(5.0)
            waited += 5.0
    t0, c0 = time.perf_counter(), time.process_time()
    res: dict[str, Any] = {
        "settings": {
            "torch_threads": args.threads,
            "epochs": args.epochs,
            "fit_rounds": args.fit_rounds,
            "rounds": args.rounds,
            "repeats": args.repeats,
            "note": args.note,
            "waited_for_load_s": waited,
            "torch": torch.__version__,
        },
        "load_1min": {"start": load1()},
    }
    log = Log()
    with torch_threads(args.threads):
        for name, fn in (
            ("moe_dispatch", lambda: moe_dispatch(args.repeats)),
            ("inception_capping", lambda: inception_capping(args.repeats)),
            ("sparse_vs_dense", lambda: sparse_vs_dense(args.rounds)),
            ("fit_vs_peers", lambda: fit_vs_peers(args.epochs, args.fit_rounds)),
        ):
            if args.only is not None and name not in args.only:
                continue
            s0, sc0 = time.perf_counter(), time.process_time()
            res[name] = fn()
            took = {"wall_s": time.perf_counter() - s0, "cpu_s": time.process_time() - sc0, "load_1min": load1()}
            res.setdefault("sections", {})[name] = took
            print(f"[{name}: {took['wall_s']:.1f} s wall, {took['cpu_s']:.1f} CPU-s, load {took['load_1min']:.2f}]")
    res["load_1min"]["end"] = load1()
    res["wall_s"], res["cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    for line in lines_of(res):
        log(line)
    save_results(out, res, log)
    if out.parent == RESULTS and args.only is None:
        write_performance(out.parent, out.name, rows_of(res), notes=NOTES)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
