"""Benchmark: bisection projection vs cvxpy projection (Clarabel, sequential, as its users run it) and DC3's
gradient correction on the same QP (n = 100, 50 equalities, 50 inequalities, 1,024 infeasible predictions), each
pair timed interleaved in one run and reported as a ratio; then steps vs ρ and scaling in the batch size B and the
dimension n. Writes ``benchmarks/results/bench_bisection_proj.json`` (and ``.log``). Torch runs on one thread
(``--threads``), like the reproduction, so that a shared machine does not oversubscribe its cores.

    .venv/bin/python packages/bisection_proj/benchmarks/bench_bisection_proj.py [--quick]

Interior points are the analytic ones, pinv(A)·θ (feasible for every θ), so timings do not depend on IPNN
training. cvxpy is timed against B-Proj on the same subset of rows (it is sequential, so the time for the whole
batch is the per-row time times B).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from bisection_proj import BisectionProjector
from bisection_proj.baselines import cvxpy_projection, dc3_correction
from bisection_proj.experiments import infeasible_batch
from bisection_proj.metrics import feasibility_rate
from bisection_proj.problems import ConvexQP
from icml25_shared.bench import compare, measure, write_performance
from icml25_shared.device import get_device, torch_threads

RESULTS = Path(__file__).parent / "results"
log = logging.getLogger("bench_bisection_proj")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ap.add_argument("--cvxpy-rows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads on CPU (cvxpy is sequential)")
    args = ap.parse_args(argv)
    with torch_threads(args.threads):
        return _run(args)


def _run(args: argparse.Namespace) -> dict[str, Any]:
    dev = get_device()
    b = 256 if args.quick else 1024
    prob = ConvexQP.random(n=100, n_eq=50, n_ineq=50, seed=0)
    theta, z, ip = (t.to(dev) for t in infeasible_batch(prob, b))
    prob = prob.to(dev)
    out: dict[str, Any] = {"device": str(dev), "batch": b, "problem": "ConvexQP 100/50/50", "quick": args.quick,
                           "torch_threads": args.threads}  # fmt: skip

    proj = BisectionProjector(prob)
    y_bp, info = proj(theta, z, ip)
    t_bp = measure(lambda: proj(theta, z, ip), warmup=2, repeats=5, device=dev)
    out["bproj"] = {"time_s": t_bp.median, "per_row_s": t_bp.median / b, "feasibility": info.feasibility_rate,
                    "steps": info.steps}  # fmt: skip

    # cvxpy Proj vs B-Proj on the same rows, interleaved (cvxpy on CPU, one instance at a time)
    rows = min(args.cvxpy_rows, b)
    cpu = prob.cpu()
    th_c, z_c, ip_c = theta[:rows].cpu(), z[:rows].cpu(), ip[:rows].cpu()
    y_raw = cpu.z_to_y(th_c, z_c)
    cvxpy_projection(cpu, th_c[:2], y_raw[:2])  # compile the cvxpy model once
    proj_cpu = BisectionProjector(cpu)
    cmp_cvx = compare(lambda: proj_cpu(th_c, z_c, ip_c), lambda: cvxpy_projection(cpu, th_c, y_raw),
                      names=("B-Proj", "cvxpy Proj"), warmup=0, repeats=3)  # fmt: skip
    y_cvx = cvxpy_projection(cpu, th_c, y_raw)
    out["cvxpy"] = {"rows": rows, "per_row_s": cmp_cvx.b.median / rows,
                    "feasibility": feasibility_rate(cpu, th_c, y_cvx, tol=1e-4), "ratio_vs_bproj": cmp_cvx.ratio,
                    "comparison": {**cmp_cvx.to_dict(), "times_a_s": cmp_cvx.a.times,
                                   "times_b_s": cmp_cvx.b.times}}  # fmt: skip
    prob = prob.to(dev)

    # DC3 correction: 30 steps, the step size picked from a small sweep for the best reached feasibility
    best = None
    for lr in (1e-3, 1e-2, 1e-1):
        z_dc3 = dc3_correction(prob, theta, z, steps=30, lr=lr)
        feas = feasibility_rate(prob, theta, prob.z_to_y(theta, z_dc3))
        if best is None or feas > best[1]:
            best = (lr, feas)
    lr = best[0]
    cmp_dc3 = compare(lambda: proj(theta, z, ip), lambda: dc3_correction(prob, theta, z, steps=30, lr=lr),
                      names=("B-Proj", "DC3 correction"), warmup=1, repeats=3, device=dev)  # fmt: skip
    out["dc3"] = {"time_s": cmp_dc3.b.median, "feasibility": best[1], "lr": lr, "ratio_vs_bproj": cmp_dc3.ratio,
                  "comparison": {**cmp_dc3.to_dict(), "times_a_s": cmp_dc3.a.times,
                                 "times_b_s": cmp_dc3.b.times}}  # fmt: skip

    try:  # optional peer: batched exact QP projection (OptNet)
        import qpth  # noqa: F401

        out["qpth"] = "installed but not wired (needs the equality-reduced QP); skipped"
    except ImportError:
        out["qpth"] = "not installed; skipped"

    out["ratio"] = {}
    for rho in (0.5, 0.7, 0.9):
        p = BisectionProjector(prob, ratio=rho)
        t = measure(lambda p=p: p(theta, z, ip), warmup=1, repeats=3, device=dev)
        _, inf = p(theta, z, ip)
        out["ratio"][str(rho)] = {"steps": inf.steps, "time_s": t.median, "feasibility": inf.feasibility_rate}

    out["scaling_B"] = {}
    for bb in (256, 1024, 4096) if not args.quick else (64, 256):
        th, zz, ii = (t.to(dev) for t in infeasible_batch(prob.cpu(), bb, seed=1))
        prob = prob.to(dev)
        t = measure(lambda th=th, zz=zz, ii=ii: proj(th, zz, ii), warmup=1, repeats=3, device=dev)
        out["scaling_B"][bb] = {"time_s": t.median, "per_row_us": 1e6 * t.median / bb}
    out["scaling_n"] = {}
    for n in (50, 100, 200) if not args.quick else (50, 100):
        pn = ConvexQP.random(n=n, n_eq=n // 2, n_ineq=n // 2, seed=0, n_subsets=200)
        th, zz, ii = infeasible_batch(pn, 512, seed=2)
        pn, th, zz, ii = pn.to(dev), th.to(dev), zz.to(dev), ii.to(dev)
        pp = BisectionProjector(pn)
        t = measure(lambda pp=pp, th=th, zz=zz, ii=ii: pp(th, zz, ii), warmup=1, repeats=3, device=dev)
        out["scaling_n"][n] = {"time_s": t.median}
    return out


def summary(res: dict[str, Any]) -> str:
    bp, cvx, dc3 = res["bproj"], res["cvxpy"], res["dc3"]
    return (
        f"B-Proj: {bp['time_s'] * 1e3:.1f} ms for {res['batch']} rows, feasibility {bp['feasibility']:.3f}, "
        f"{bp['steps']} steps\ncvxpy Proj: x{cvx['ratio_vs_bproj']:.0f} B-Proj's time on the same {cvx['rows']} rows "
        f"(feasibility {cvx['feasibility']:.3f})\nDC3 (30 steps, lr {dc3['lr']}): x{dc3['ratio_vs_bproj']:.1f} "
        f"B-Proj's time, feasibility {dc3['feasibility']:.3f}"
    )


def performance_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows (ours / peer, time on the same rows, interleaved) from a benchmark result; spread = the
    paired per-round ratios (when the result has them)."""
    load = res.get("load_1min", 10.0)  # the committed run before the load was recorded: about 10 (its log)
    rows = []
    for key, peer in (("cvxpy", "cvxpy + Clarabel exact projection (sequential, 64 rows)"),
                      ("dc3", "DC3 gradient correction (30 steps; never feasible here)")):  # fmt: skip
        cmp = res[key]["comparison"]
        ratio = cmp["time_a"]["median_s"] / cmp["time_b"]["median_s"]
        paired = [a / b for a, b in zip(cmp.get("times_a_s", []), cmp.get("times_b_s", []), strict=True)]
        rows.append({"case": "B-Proj, QP 100/50/50", "peer": peer, "metric": "time", "ratio": ratio,
                     "lo": min(paired) if paired else None, "hi": max(paired) if paired else None,
                     "load": load})  # fmt: skip
    return rows


if __name__ == "__main__":
    import sys

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if "--summarize" in sys.argv:  # rebuild performance.json from the committed result
        committed = RESULTS / "bench_bisection_proj.json"
        write_performance(RESULTS, committed.name, performance_rows(json.loads(committed.read_text())))
        raise SystemExit(0)
    load_start = os.getloadavg()[0]
    res = main()
    res["load_1min_start"] = load_start
    res["load_1min"] = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    name = "bench_bisection_proj" + ("_quick" if res["quick"] else "")
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    (RESULTS / f"{name}.log").write_text(summary(res) + "\n")
    if not res["quick"]:
        write_performance(RESULTS, f"{name}.json", performance_rows(res))
    log.info("%s\nwrote %s", summary(res), RESULTS / f"{name}.json")
