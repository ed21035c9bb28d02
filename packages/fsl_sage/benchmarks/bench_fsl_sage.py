"""FSL-SAGE timings in one run, reported as ratios (not run by pytest).

    python packages/fsl_sage/benchmarks/bench_fsl_sage.py [--repeats 10] [--no-flower] [--json out.json]

writes benchmarks/results/bench_fsl_sage.json (``--json`` elsewhere);

1. client step FSL-SAGE / CSE-FSL (aim ≤ 1.3), digits split and the paper's ResNet-18 split;
2. first-order estimate vs the official second-order path (create_graph=True) (aim ≥ 1.3× faster);
3. analytic linear-aux alignment vs double back-propagation (aim ≥ 3×);
4. vmapped alignment of 10 clients vs a loop (aim ≥ 1.5×);
5. server compute per round FSL-SAGE / SplitFed-v2 (≈ 1/q);
6. Flower simulation round time / in-process lazy round time (report; Ray start-up excluded where possible).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fsl_sage import FSLConfig, GradScalarAux, digits_cnn_split, resnet18_split
from fsl_sage.align import AuxAdamState, align_aux, align_many_vmap, alignment_generator, cut_gradients
from fsl_sage.runner import make_optimizer, server_step
from fsl_sage.sage import FSLSAGE
from icml25_shared.bench import compare, write_performance

RESULTS = Path(__file__).resolve().parent / "results"


def _client_steps(models, x, y):
    client, server, aux = models
    c1, a1 = copy.deepcopy(client), copy.deepcopy(aux)
    opt_sage = make_optimizer(c1.parameters(), FSLConfig())
    c2, a2 = copy.deepcopy(client), copy.deepcopy(aux)
    opt_cse = make_optimizer(list(c2.parameters()) + list(a2.parameters()), FSLConfig())

    def sage():
        z = c1(x)
        opt_sage.zero_grad()
        z.backward(a1.estimate(z.detach(), y) / len(y))
        opt_sage.step()

    def cse():
        z = c2(x)
        opt_cse.zero_grad()
        F.nll_loss(a2(z), y).backward()
        opt_cse.step()

    def second_order():  # the official path: the estimate keeps its graph
        z = c1(x)
        opt_sage.zero_grad()
        z.backward(a1.estimate(z.detach(), y, create_graph=True) / len(y))
        opt_sage.step()

    return sage, cse, second_order


def _align_pair(make, server):
    """(vmapped, looped) alignment of 10 clients' aux models, 5 epochs over buffers of 200 in batches of 100."""
    auxes_v = [make() for _ in range(10)]
    auxes_l = copy.deepcopy(auxes_v)
    zs = [torch.randn(200, 32, 4, 4) for _ in range(10)]
    ys = [torch.randint(0, 10, (200,)) for _ in range(10)]
    gs = [cut_gradients(server, zz, yy) for zz, yy in zip(zs, ys)]
    sv = [AuxAdamState() for _ in range(10)]
    sl = [AuxAdamState() for _ in range(10)]

    def vm():
        gens = [alignment_generator(0, i, 0) for i in range(10)]
        align_many_vmap(auxes_v, sv, zs, ys, gs, 5, 100, 1e-3, generators=gens)

    def loop():
        for i in range(10):
            align_aux(
                auxes_l[i],
                sl[i],
                zs[i],
                ys[i],
                server,
                5,
                100,
                1e-3,
                generator=alignment_generator(0, i, 0),
                targets=gs[i],
            )

    return vm, loop


_PERF = {  # row key -> (case, peer, goal)
    "1. client step digits: CSE-FSL / FSL-SAGE": ("client step, digits CNN, B = 32", "CSE-FSL client step", "≤ 1.3×"),
    "1. client step ResNet-18 split: CSE-FSL / FSL-SAGE": (
        "client step, ResNet-18 split, B = 16", "CSE-FSL client step", "≤ 1.3×"),
    "2. digits: second-order / first-order (closed form)": (
        "first-order estimate, digits (closed form)", "second-order estimate (official path)", "≤ 0.77×"),
    "2. ResNet-18 aux: second-order / first-order VJP": (
        "first-order estimate, ResNet-18 aux", "second-order estimate (official path)", "≤ 0.77×"),
    "3. alignment (10 epochs, |D| = 1000): double backprop / analytic": (
        "alignment, linear aux, |D| = 1,000, 10 epochs", "double back-propagation", "≤ 0.33×"),
    "4. align 10 clients (linear aux): loop / vmap": ("10 clients aligned, linear aux (vmap)", "a loop", "≤ 0.67×"),
    "4. align 10 clients (MLP aux): loop / vmap": ("alignment of 10 clients, MLP aux (vmap)", "a loop", "≤ 0.67×"),
    "5. server compute per client round: FSL-SAGE / SplitFed-v2 (inverse)": (
        "server compute per client round (q = 5)", "SplitFed-v2 server", "≈ 0.2×"),
}  # fmt: skip


def performance_rows(rows: dict) -> list[dict]:
    """The README's rows: ours / peer from each interleaved comparison (time_a is ours)."""
    out = []
    for key, (case, peer, goal) in _PERF.items():
        if key in rows:
            r = rows[key]
            ratio = r["time_a"]["median_s"] / r["time_b"]["median_s"]
            out.append({"case": case, "peer": peer, "metric": "time", "ratio": ratio, "goal": goal,
                        "load": rows["load_1min"]})  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--no-flower", action="store_true")
    ap.add_argument("--json", default=str(RESULTS / "bench_fsl_sage.json"), help="where to write the results")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (tiny models: 1 is fastest)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    r = args.repeats
    rows: dict[str, dict] = {}

    def report(name, cmp, aim):
        rows[name] = cmp.to_dict() | {"aim": aim}
        print(
            f"{name:58s} {cmp.name_a} {cmp.a.median * 1e3:8.2f} ms | {cmp.name_b} {cmp.b.median * 1e3:8.2f} ms "
            f"| ratio b/a {cmp.ratio:5.2f}  (aim {aim})"
        )

    torch.manual_seed(0)
    # 1-2: client step, digits (B = 32) and ResNet-18 split (B = 16, 32×32)
    xd, yd = torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))
    sage, cse, second = _client_steps(digits_cnn_split(), xd, yd)
    report(
        "1. client step digits: CSE-FSL / FSL-SAGE",
        compare(sage, cse, names=("sage", "cse"), repeats=5 * r),
        "SAGE/CSE ≤ 1.3 ⇔ ratio ≥ 0.77",
    )
    report(
        "2. digits: second-order / first-order (closed form)",
        compare(sage, second, names=("first", "second"), repeats=5 * r),
        "≥ 1.3",
    )
    xr, yr = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    sage_r, cse_r, second_r = _client_steps(resnet18_split(10), xr, yr)
    report(
        "1. client step ResNet-18 split: CSE-FSL / FSL-SAGE",
        compare(sage_r, cse_r, names=("sage", "cse"), repeats=r),
        "SAGE/CSE ≤ 1.3 ⇔ ratio ≥ 0.77",
    )
    report(
        "2. ResNet-18 aux: second-order / first-order VJP",
        compare(sage_r, second_r, names=("first", "second"), repeats=r),
        "≥ 1.3",
    )

    # 3: alignment of the digits linear aux on a full buffer, analytic vs double backprop
    _, server, aux = digits_cnn_split()
    z, y = torch.randn(1000, 32, 4, 4), torch.randint(0, 10, (1000,))
    g = cut_gradients(server, z, y)
    a1, a2 = copy.deepcopy(aux), copy.deepcopy(aux)
    s1, s2 = AuxAdamState(), AuxAdamState()
    report(
        "3. alignment (10 epochs, |D| = 1000): double backprop / analytic",
        compare(
            lambda: align_aux(a1, s1, z, y, server, 10, 1000, 1e-3, targets=g, analytic=True),
            lambda: align_aux(a2, s2, z, y, server, 10, 1000, 1e-3, targets=g, analytic=False),
            names=("analytic", "double-bp"),
            repeats=r,
        ),
        "≥ 3",
    )

    # 4: ten clients' alignments, vmapped vs loop (linear and an MLP aux)
    for label, make in [
        ("linear", lambda: GradScalarAux(nn.Sequential(nn.Flatten(), nn.Linear(512, 10), nn.LogSoftmax(1)))),
        (
            "MLP",
            lambda: GradScalarAux(
                nn.Sequential(nn.Flatten(), nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10), nn.LogSoftmax(1))
            ),
        ),
    ]:
        vm, loop = _align_pair(make, server)
        report(
            f"4. align 10 clients ({label} aux): loop / vmap",
            compare(vm, loop, names=("vmap", "loop"), repeats=max(3, r // 2)),
            "≥ 1.5",
        )

    # 5: server compute per client round (digits, 15 batches of 32, q = 5)
    _, server, _ = digits_cnn_split()
    s1, s2 = copy.deepcopy(server), copy.deepcopy(server)
    o1, o2 = make_optimizer(s1.parameters(), FSLConfig()), make_optimizer(s2.parameters(), FSLConfig())
    zb, yb = torch.randn(32, 32, 4, 4), torch.randint(0, 10, (32,))

    def sage_server():
        for k in range(15):
            if k % 5 == 0:
                server_step(s1, o1, zb, yb)

    def splitfed_server():
        for _ in range(15):
            zz = zb.clone().requires_grad_(True)
            o2.zero_grad()
            F.nll_loss(s2(zz), yb).backward()
            o2.step()

    report(
        "5. server compute per client round: FSL-SAGE / SplitFed-v2 (inverse)",
        compare(sage_server, splitfed_server, names=("sage", "splitfed"), repeats=5 * r),
        "≈ q = 5",
    )

    # 6: Flower simulation vs in-process lazy (3 rounds)
    if not args.no_flower:
        rows["6. flower"] = _flower(3)
        print(f"{'6. Flower simulation / in-process lazy (3 rounds)':58s} {rows['6. flower']}")
    rows["load_1min"] = os.getloadavg()[0]
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2, default=str) + "\n", encoding="utf-8")
    write_performance(out.parent, out.name, performance_rows(rows))
    print(f"wrote {out}")


def _flower(rounds: int) -> dict:
    from flwr.simulation import run_simulation

    from fsl_sage.data import client_datasets, load_digits_split
    from fsl_sage.flower import make_client_app, make_server_app

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    xtr, ytr, _, _ = load_digits_split(0)
    data = client_datasets(xtr, ytr, 3, alpha=1.0, seed=0)
    cfg = FSLConfig(rounds=rounds, batch_size=32, mode="lazy", align_interval=1, align_epochs=20)

    def model_fn():
        torch.manual_seed(0)
        return digits_cnn_split()

    times: list[float] = []
    out: dict = {}

    def on_finish(strategy, result):
        out["done"] = time.perf_counter()

    server_app = make_server_app(model_fn, cfg, rounds, 3, on_finish=on_finish)
    client_app = make_client_app(model_fn, lambda pid, n: data[pid], cfg)
    t0 = time.perf_counter()
    run_simulation(server_app, client_app, 3, backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    flower_total = time.perf_counter() - t0
    c, s, a = model_fn()
    t0 = time.perf_counter()
    FSLSAGE(c, s, a, cfg).fit(data)
    inproc = time.perf_counter() - t0
    times.append(inproc)
    return {
        "flower_total_s_incl_ray_startup": flower_total,
        "in_process_s": inproc,
        "ratio_incl_startup": flower_total / inproc,
    }


if __name__ == "__main__":
    main()
