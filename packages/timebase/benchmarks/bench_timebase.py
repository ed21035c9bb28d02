"""Time and peak memory of TimeBase vs DLinear and a PatchTST-sized model at equal T, H and C, on one torch thread.

    python packages/timebase/benchmarks/bench_timebase.py [--channels 21] [--horizon 720] [--batch 8] [--summarize]

Every comparison is one interleaved run (``icml25_shared.bench.compare``: TimeBase and the peer alternate, so that
machine drift hits both alike); figures are ratios ours / peer (< 1: TimeBase is cheaper), with their spread over
the per-round paired ratios:

* forward + backward of one training step (MSE loss) vs DLinear at the batch size, and vs a PatchTST-sized model
  (3 layers, d_model 128, patch 16, stride 8) at batch 2, TimeBase re-measured at the same batch;
* CPU inference latency per sample (batch 1, no grad) vs DLinear; each timed call runs ``--inner`` forwards, so
  that one round is long enough for a clock reading (paper Table 3: 3.25 ms vs 0.98 ms, 3.3x faster);
* peak memory of one training step: the peak of torch's CPU allocations during the step above what was allocated
  before it (``torch.profiler`` memory events, exact and deterministic), so no spread is given;
* the materialised affine map (y = x A + c, ``TimeBase.as_affine``) against the module at the batch size (printed
  and saved for reference, not a peer comparison: the dense T x H map is not cheaper than the factorised module).

Writes ``benchmarks/results/bench_timebase.{json,log}`` and the rows of ``benchmarks/results/performance.json``;
``--summarize`` rebuilds those rows from the committed JSON without timing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from icml25_shared.bench import compare, paired, save_results, write_performance
from icml25_shared.device import torch_threads
from timebase import PatchTST, TimeBase, TimeBaseConfig
from timebase.baselines import DLinear

RESULTS = Path(__file__).parent / "results"
SOURCE = "bench_timebase.json"
PAPER_INFERENCE = 0.98 / 3.25  # paper Table 3: TimeBase 0.98 ms vs DLinear 3.25 ms per sample on CPU


def _train_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()

    return step


def peak_allocated(fn: Callable[[], Any]) -> tuple[int, int]:
    """(peak, net) bytes of torch CPU allocations during one call of ``fn`` (after one untimed call), from the
    profiler's memory events in time order: what the call allocates on top of what was live before it."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    results = prof.profiler.kineto_results if prof.profiler is not None else None
    if results is None:
        raise RuntimeError("the profiler returned no events")
    events = sorted((e for e in results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak, live


def _load() -> float:
    return os.getloadavg()[0]


def _paired(cmp) -> dict[str, Any]:
    """A :class:`~icml25_shared.bench.Comparison` of TimeBase (a) and a peer (b) as JSON, with the per-round times
    and :func:`~icml25_shared.bench.paired`'s per-round ratios a / b (ours / peer), their median and extremes."""
    return {**cmp.to_dict(), "times_s": {cmp.name_a: cmp.a.times, cmp.name_b: cmp.b.times}, **paired(cmp.a, cmp.b)}


def _memory(models: dict[str, torch.nn.Module], steps: dict[str, Callable[[], None]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, step in steps.items():
        peak, net = peak_allocated(step)
        grads = sum(p.numel() * p.element_size() for p in models[name].parameters())
        # zero_grad(set_to_none=True) frees the old gradients before the profiled step starts and backward allocates
        # new ones that stay: what remains live after the step must be exactly the gradients
        if net != grads:
            raise RuntimeError(f"{name}: {net} bytes live after the step, expected the gradients' {grads}")
        out[name] = peak
    return out


def measure(t: int, h: int, c: int, b: int, repeats: int, inner: int) -> dict[str, Any]:
    torch.manual_seed(0)
    x, y = torch.randn(b, t, c), torch.randn(b, h, c)
    models: dict[str, Any] = {
        "TimeBase": TimeBase(TimeBaseConfig(t, h)),
        "DLinear": DLinear(t, h),
        "PatchTST": PatchTST(t, h, c, patch_len=16, stride=8, d_model=128, n_layers=3, n_heads=16, d_ff=256),
    }
    res: dict[str, Any] = {
        "setting": {"seq_len": t, "horizon": h, "channels": c, "batch": b, "repeats": repeats, "inner": inner},
        "threads": torch.get_num_threads(),
        "params": {k: m.num_parameters() for k, m in models.items()},
        "macs_per_sample": {k: m.macs(c) for k, m in models.items()},
    }
    for peer, batch, reps in (("DLinear", b, repeats), ("PatchTST", 2, 5)):
        xp, yp = x[:batch], y[:batch]
        steps = {"TimeBase": _train_step(models["TimeBase"], xp, yp), peer: _train_step(models[peer], xp, yp)}
        load0 = _load()
        cmp = compare(steps["TimeBase"], steps[peer], names=("TimeBase", peer), repeats=reps)
        mem = _memory(models, steps)
        res[f"fwd_bwd_vs_{peer}"] = {
            "batch": batch,
            **_paired(cmp),
            "peak_alloc_bytes": mem,
            "mem_ratio": mem["TimeBase"] / mem[peer],
            "load_1min": [load0, _load()],
        }
    tb, dl = models["TimeBase"].eval(), models["DLinear"].eval()
    x1 = torch.randn(1, t, c)

    def per_sample(model: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            for _ in range(inner):
                model(x1)

        return run

    with torch.no_grad():
        load0 = _load()
        inf = compare(per_sample(tb), per_sample(dl), names=("TimeBase", "DLinear"), repeats=3 * repeats)
        res["cpu_inference_per_sample_vs_DLinear"] = {
            **_paired(inf),
            "per_sample_s": {"TimeBase": inf.a.median / inner, "DLinear": inf.b.median / inner},
            "paper": "3.25 ms / 0.98 ms = 3.3x",
            "load_1min": [load0, _load()],
        }
        a, c0 = tb.as_affine()
        load0 = _load()
        aff = compare(
            lambda: torch.einsum("btc,th->bhc", x, a) + c0[:, None], lambda: tb(x), names=("affine", "TimeBase")
        )
        res["affine_fast_path_vs_module"] = {**_paired(aff), "load_1min": [load0, _load()]}
    return res


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _bytes(n: float) -> str:
    return f"{n / 1e6:.3g} MB" if n >= 1e6 else f"{n / 1e3:.3g} kB"


def rows_of(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``performance.json``: ours / peer with the per-round spread; each case names the absolute figures
    (TimeBase vs the peer)."""
    s = res["setting"]
    shape = f"T = {s['seq_len']}, H = {s['horizon']}, C = {s['channels']}"

    def timed(case: str, label: str, r: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"case": case, "peer": label, "metric": "time", "ratio": r["ratio"], "lo": r["lo"], "hi": r["hi"],
                "load": max(r["load_1min"]), **extra}  # fmt: skip

    rows = []
    for peer, label in (("DLinear", "DLinear"), ("PatchTST", "PatchTST-sized (3 layers, d_model 128)")):
        r = res[f"fwd_bwd_vs_{peer}"]
        mem = r["peak_alloc_bytes"]
        times = f"{_ms(r['time_a']['median_s'])} vs {_ms(r['time_b']['median_s'])}"
        rows.append(timed(f"training step (forward + backward), batch {r['batch']}, {shape}: {times}", label, r))
        if peer == "DLinear":
            inf = res["cpu_inference_per_sample_vs_DLinear"]
            ps = inf["per_sample_s"]
            case = f"CPU inference per sample (batch 1), {shape}: {_ms(ps['TimeBase'])} vs {_ms(ps['DLinear'])}"
            rows.append(timed(case, label, inf, goal=f"≤ {PAPER_INFERENCE:.2f} (paper Table 3: 3.3x faster)"))
        rows.append({
            "case": f"training step, batch {r['batch']}, {shape}: {_bytes(mem['TimeBase'])} vs {_bytes(mem[peer])}",
            "peer": label,
            "metric": "peak memory",
            "ratio": r["mem_ratio"],
            "load": max(r["load_1min"]),
        })  # fmt: skip
    return rows


def _spread(r: dict[str, Any]) -> str:
    return f"{r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"


def lines_of(res: dict[str, Any]) -> list[str]:
    s, p = res["setting"], res["params"]
    lines = [
        f"T = {s['seq_len']}, H = {s['horizon']}, C = {s['channels']}, {res['threads']} torch thread(s); params "
        + ", ".join(f"{k} {v:,}" for k, v in p.items())
        + "; MACs per sample "
        + ", ".join(f"{k} {v:,}" for k, v in res["macs_per_sample"].items())
    ]
    for peer in ("DLinear", "PatchTST"):
        r = res[f"fwd_bwd_vs_{peer}"]
        m = r["peak_alloc_bytes"]
        lines.append(
            f"training step vs {peer} (batch {r['batch']}): TimeBase {r['time_a']['median_s'] * 1e3:.3f} ms, {peer} "
            f"{r['time_b']['median_s'] * 1e3:.3f} ms; ours/peer {_spread(r)}; peak alloc TimeBase "
            f"{m['TimeBase']:,} B, {peer} {m[peer]:,} B (ratio {r['mem_ratio']:.4f}); "
            f"load {r['load_1min'][0]:.2f}-{r['load_1min'][1]:.2f}"
        )
    inf = res["cpu_inference_per_sample_vs_DLinear"]
    ps = inf["per_sample_s"]
    lines.append(
        f"CPU inference per sample: TimeBase {ps['TimeBase'] * 1e3:.4f} ms, DLinear {ps['DLinear'] * 1e3:.4f} ms; "
        f"ours/peer {_spread(inf)} (paper {PAPER_INFERENCE:.3f}); "
        f"load {inf['load_1min'][0]:.2f}-{inf['load_1min'][1]:.2f}"
    )
    aff = res["affine_fast_path_vs_module"]
    lines.append(
        f"affine map vs module (batch {s['batch']}): affine/module {_spread(aff)}; "
        f"load {aff['load_1min'][0]:.2f}-{aff['load_1min'][1]:.2f}"
    )
    if "wall_s" in res:
        lines.append(f"{res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} CPU-s")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, default=21)
    ap.add_argument("--seq-len", type=int, default=720)
    ap.add_argument("--horizon", type=int, default=720)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20, help="rounds vs DLinear (inference: 3x as many)")
    ap.add_argument("--inner", type=int, default=20, help="single-sample forwards per timed inference call")
    ap.add_argument("--summarize", action="store_true", help="rebuild performance.json from the committed JSON")
    ap.add_argument("--results", type=Path, default=RESULTS, help="results folder")
    args = ap.parse_args()
    if args.summarize:
        res = json.loads((args.results / SOURCE).read_text(encoding="utf-8"))
    else:
        t0, c0, load0 = time.perf_counter(), time.process_time(), _load()
        with torch_threads(1):
            res = measure(args.seq_len, args.horizon, args.channels, args.batch, args.repeats, args.inner)
        res["wall_s"], res["cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
        res["load_1min"] = [load0, _load()]
        lines = lines_of(res)
        print("\n".join(lines))
        save_results(args.results / SOURCE, res, lines)
    path = write_performance(args.results, SOURCE, rows_of(res), notes=[])
    print(f"rows written to {path}; load {res['load_1min'][0]:.2f}-{res['load_1min'][1]:.2f}")


if __name__ == "__main__":
    main()
