"""Benchmark: bisection projection vs cvxpy projection (Clarabel, sequential), DC3 correction and qpth on the
same QP (n = 100, 50 equalities, 50 inequalities, 1,024 infeasible predictions), as ratios in one run; then steps
vs ρ and scaling in the batch size B and the dimension n.

    packages/bisection_proj/.venv/bin/python packages/bisection_proj/benchmarks/bench_bisection_proj.py [--quick]

Interior points are the analytic ones, pinv(A)·θ (feasible for every θ), so timings do not depend on IPNN
training. cvxpy is timed on a subset of the rows and reported per instance (it is sequential, so the time for
the whole batch is that times B).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from bisection_proj import BisectionProjector
from bisection_proj.baselines import cvxpy_projection, dc3_correction
from bisection_proj.metrics import feasibility_rate
from bisection_proj.problems import ConvexQP

from icml25_shared.bench import measure
from icml25_shared.device import get_device


def infeasible_batch(prob: ConvexQP, b: int, seed: int = 0, noise: float = 0.15):
    """b parameters with infeasible predictions (interior point + noise, clipped to the box) and their IPs."""
    gen = torch.Generator().manual_seed(seed)
    thetas, zs = [], []
    have = 0
    while have < b:
        th = prob.sample_theta(2 * b, gen)
        z0 = prob.y_to_z(th, prob.analytic_interior(th))
        z = (z0 + noise * torch.randn(z0.shape, generator=gen, dtype=z0.dtype)).clamp(0, 1)
        bad = prob.z_violation(th, z).amax(-1) > 1e-5
        thetas.append(th[bad])
        zs.append(z[bad])
        have += int(bad.sum())
    theta, z = torch.cat(thetas)[:b], torch.cat(zs)[:b]
    ip = prob.y_to_z(theta, prob.analytic_interior(theta)).unsqueeze(1)
    return theta, z, ip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ap.add_argument("--cvxpy-rows", type=int, default=64)
    args = ap.parse_args(argv)
    dev = get_device()
    b = 256 if args.quick else 1024
    prob = ConvexQP.random(n=100, n_eq=50, n_ineq=50, seed=0).to(dev)
    theta, z, ip = (t.to(dev) for t in infeasible_batch(prob.cpu(), b))
    prob = prob.to(dev)
    out: dict = {"device": str(dev), "batch": b, "problem": "ConvexQP 100/50/50"}

    proj = BisectionProjector(prob)
    t_bp = measure(lambda: proj(theta, z, ip), warmup=2, repeats=5, device=dev)
    y_bp, info = proj(theta, z, ip)
    out["bproj"] = {"time_s": t_bp.median, "per_row_s": t_bp.median / b, "feasibility": info.feasibility_rate,
                    "steps": info.steps}  # fmt: skip

    rows = min(args.cvxpy_rows, b)
    y_raw = prob.z_to_y(theta, z)
    cvxpy_projection(prob.cpu(), theta[:2].cpu(), y_raw[:2].cpu())  # compile the cvxpy model once
    t_cvx = measure(lambda: cvxpy_projection(prob.cpu(), theta[:rows].cpu(), y_raw[:rows].cpu()), warmup=0, repeats=1)
    y_cvx = cvxpy_projection(prob.cpu(), theta[:rows].cpu(), y_raw[:rows].cpu())
    per = t_cvx.median / rows
    out["cvxpy"] = {"per_row_s": per, "feasibility": feasibility_rate(prob.cpu(), theta[:rows].cpu(), y_cvx, tol=1e-4),
                    "ratio_vs_bproj": per / out["bproj"]["per_row_s"]}  # fmt: skip
    prob = prob.to(dev)

    # DC3 correction: 30 steps, the step size picked from a small sweep for the best reached feasibility
    best = None
    for lr in (1e-3, 1e-2, 1e-1):
        z_dc3 = dc3_correction(prob, theta, z, steps=30, lr=lr)
        feas = feasibility_rate(prob, theta, prob.z_to_y(theta, z_dc3))
        if best is None or feas > best[1]:
            best = (lr, feas)
    lr = best[0]
    t_dc3 = measure(lambda: dc3_correction(prob, theta, z, steps=30, lr=lr), warmup=1, repeats=3, device=dev)
    out["dc3"] = {
        "time_s": t_dc3.median,
        "feasibility": best[1],
        "lr": lr,
        "ratio_vs_bproj": t_dc3.median / t_bp.median,
    }

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


if __name__ == "__main__":
    res = main()
    json.dump(res, sys.stdout, indent=2, default=str)
    print()
    bp, cvx, dc3 = res["bproj"], res["cvxpy"], res["dc3"]
    print(
        f"\nB-Proj: {bp['time_s'] * 1e3:.1f} ms for {res['batch']} rows, feasibility {bp['feasibility']:.3f}, "
        f"{bp['steps']} steps\ncvxpy Proj: x{cvx['ratio_vs_bproj']:.0f} slower per row (feasibility "
        f"{cvx['feasibility']:.3f})\nDC3 (30 steps, lr {dc3['lr']}): x{dc3['ratio_vs_bproj']:.1f} B-Proj's time, "
        f"feasibility {dc3['feasibility']:.3f}"
    )
