"""Command line: ``supercollapse report`` and ``supercollapse predict-schedule`` (also ``python -m supercollapse``).

    supercollapse report runs.parquet --L0 fit --out DIR [--schedule linear] [--sizes 1e6 4e6]
    supercollapse predict-schedule runs.csv --const const --fit linear --out DIR

``report`` normalises every schedule's runs (each run's last point is its horizon), writes ``report.json`` (Δ, σ,
Δ/σ, excess per x, the L0 used) and one ``collapse_<schedule>.png`` per schedule. ``--L0 fit`` fits
``L = a·c^−b + L0`` on the seed-averaged final losses per size (of the schedule being reported).
``predict-schedule`` fits the noise model's α on the ``--fit`` schedules (per size, against that size's constant
run) and writes ``predict.json`` with α and the RMSE of every other schedule, plus ``predict.png``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from supercollapse.collapse import collapse_report, normalize
from supercollapse.laws import fit_scaling_law
from supercollapse.noise import NoiseModel
from supercollapse.runs import Runs

__all__ = ["main"]


def _l0_spec(text: str) -> str:
    """``--L0``: ``fit`` or a finite number >= 0."""
    if text == "fit":
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be 'fit' or a finite number >= 0, got {text!r}")
    return text


def _l0(runs: Runs, spec: str) -> float:
    if spec != "fit":
        return float(spec)
    finals = runs.meta().groupby("size")[["final_compute", "final_loss"]].mean()
    return fit_scaling_law(np.asarray(finals["final_compute"]), np.asarray(finals["final_loss"])).L0


def _report(args: argparse.Namespace) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    runs = Runs.read(args.runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {}
    for sched in args.schedule or runs.schedules:
        sub = runs.where(schedule=sched)
        l0 = _l0(sub, args.L0)
        rep = collapse_report(normalize(sub, l0), pool=args.pool, sizes=args.sizes)
        fig = rep.plot(title=f"{sched}, L0 = {l0:.4g}")
        fig.savefig(out / f"collapse_{sched}.png", dpi=120)
        frame = rep.to_frame().replace({np.nan: None})
        result[sched] = {"L0": l0, "mean_ratio_x_ge_0.2": rep.mean("ratio", 0.2), **frame.to_dict(orient="list")}
    (out / "report.json").write_text(json.dumps(result, indent=2))
    return result


def _predict(args: argparse.Namespace) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = Runs.read(args.runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fit_parts: list = []
    result: dict[str, Any] = {"per_size": {}}
    consts = {}
    for size in runs.sizes:
        at = runs.where(size=float(size))
        if args.const not in at.schedules:
            raise ValueError(f"size {size:g} has no run of the constant schedule {args.const!r}")
        const = at.where(schedule=args.const)
        consts[float(size)] = const.where(run_id=const.meta()["run_id"].iloc[0])  # the first seed's constant run
        for sched in args.fit:
            if sched in at.schedules:
                fit_parts += [(float(size), g) for _, g in at.where(schedule=sched).groups()]
    if not fit_parts:
        raise ValueError(f"no run of the fitting schedule(s) {args.fit}")
    # α is one scalar for every size: pool the least-squares sums over sizes
    num = den = 0.0
    for size, g in fit_parts:
        m = NoiseModel().fit(consts[size], g)
        L, base, z, s = m._parts(g)
        ok = (s < 1 - 1e-12) & np.isfinite(base) & np.isfinite(z)
        num += float(np.dot(L[ok] - base[ok], z[ok]))
        den += float(np.dot(z[ok], z[ok]))
    alpha = num / den
    result["alpha"] = alpha
    fig, ax = plt.subplots(figsize=(6, 4))
    for _, g in runs.groups():
        sched, size = g["schedule"].iloc[0], float(g["size"].iloc[0])
        if sched == args.const:
            continue
        m = NoiseModel(alpha=alpha)
        m._set_const(consts[size])
        result["per_size"].setdefault(f"{size:g}", {})[f"{sched}/{g['run_id'].iloc[0]}"] = {
            "rmse_noise_model": m.rmse(g),
            "rmse_tau_const": m.rmse(g, alpha=0.0),
            "fitted_on": sched in args.fit,
        }
        line = ax.plot(g["step"], g["loss"], label=f"{sched} p={size:.3g}")[0]
        ax.plot(g["step"], m.predict(g), "--", color=line.get_color())
    ax.set(xlabel="step", ylabel="loss", yscale="log", title=f"noise model, α = {alpha:.3f} (dashed)")
    ax.legend(fontsize=6)
    fig.savefig(out / "predict.png", dpi=120)
    (out / "predict.json").write_text(json.dumps(result, indent=2))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``supercollapse`` command."""
    parser = argparse.ArgumentParser(prog="supercollapse", description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("report", help="normalised curves, Δ, σ, Δ/σ per schedule")
    rp.add_argument("runs", help="a .parquet / .csv file or a directory of shards")
    rp.add_argument("--L0", default="fit", type=_l0_spec, help="'fit' or a number >= 0")
    rp.add_argument("--out", required=True)
    rp.add_argument("--schedule", nargs="*", help="schedules to report (default: all)")
    rp.add_argument("--sizes", nargs="*", type=float, help="subset of sizes for Δ and σ")
    rp.add_argument("--pool", default="rms", choices=("rms", "mean"))
    pp = sub.add_parser("predict-schedule", help="fit the noise model's α and predict the other schedules")
    pp.add_argument("runs")
    pp.add_argument("--const", default="const", help="the constant-LR schedule label")
    pp.add_argument("--fit", nargs="+", default=["linear"], help="schedules to fit α on")
    pp.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = _report(args) if args.command == "report" else _predict(args)
    print(json.dumps({k: (v if k == "alpha" else "...") for k, v in result.items()}, indent=1))
    return 0
