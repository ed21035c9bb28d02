"""``icml25 reproduce bisection_proj``: bisection projection restores the feasibility of a neural QP solver at a small
fraction of the cost of orthogonal projection, with an optimality gap close to it (the paper's headline claim).

Quick: ``ConvexQP.random(n=50, n_eq=25, n_ineq=25, seed=0)`` with box [-3, 3]; an NN solver trained unsupervised
for a short time (so raw feasibility is well below 1), an IPNN trained with the margin scheme, 256 test θ labelled
by Clarabel, B-Proj and cvxpy ``Proj`` on the infeasible predictions. ``full``: QP and convex QCQP at 100/50/50,
JCCIM with 20 scenarios, the three 2-D toys (IP validity and γ curves) and the steps for ρ ∈ {0.5, 0.9}. The
experiments themselves are in :mod:`bisection_proj.experiments`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bisection_proj.experiments import PipelineSettings, ratio_steps, run_pipeline, train_toys
from bisection_proj.problems import JCCIM, ConvexQCQP, ConvexQP
from icml25_shared.device import torch_threads
from icml25_shared.parts import Parts
from icml25_shared.report import Claim, ReproResult, save_figure, subplots
from icml25_shared.verdict import seed_list

__all__ = ["reproduce"]


def _headline(rs: list[dict[str, Any]], seeds: list[int], problem: str) -> list[Claim]:
    """The headline as three statements, each judged on the interval over ``seeds`` (one run per seed)."""
    kind, size = problem.split()[:2]
    tag = f"{kind} {size.split('/')[0]}"  # "QP 50", "QP 100", "QCQP 100": distinct labels in one result
    feas = [r["feas_bp"] for r in rs]
    raw = [r["feas_raw"] for r in rs]
    per_seed = [{k: v for k, v in r.items() if not isinstance(v, (list, dict))} for r in rs]
    return [
        Claim(
            f"{problem}: bisection projection makes every infeasible prediction of the NN solver feasible",
            "100% feasibility",
            ", ".join(f"{x:.3f}" for x in feas) + f" ({len(seeds)} seeds)",
            all(x == 1.0 for x in feas),
            rule="feasibility rate after B-Proj = 1 at every seed (a guarantee: one unrepaired point at one seed "
            "fails it); raw NN feasibility " + ", ".join(f"{x:.3f}" for x in raw) + " must be < 1",
            short=f"{tag}: B-Proj feasibility",
            details={"feas_bp": dict(zip(map(str, seeds), feas)), "feas_raw": raw, "runs": per_seed},
        )
        if all(x < 1.0 for x in raw)
        else Claim(
            f"{problem}: bisection projection makes every infeasible prediction feasible",
            "100% feasibility",
            f"raw NN already feasible at some seed ({raw}): nothing to repair",
            None,
            short=f"{tag}: B-Proj feasibility",
        ),
        Claim.over_seeds(
            f"{problem}: on the infeasible predictions B-Proj is far cheaper than orthogonal projection (cvxpy)",
            "orders of magnitude faster than Proj",
            [math.log10(r["speedup_post"]) for r in rs],
            ">=",
            math.log10(50.0),
            seeds=seeds,
            rule="log10(time(Proj) / time(B-Proj)) >= log10(50) = 1.70 on the infeasible subset (best of repeated "
            "calls; timing ratios are judged on a log scale); ratios per seed: "
            + ", ".join(f"{r['speedup_post']:.0f}x" for r in rs),
            unit="log10 x",
            digits=2,
            short=f"{tag}: Proj/B-Proj time",
        ),
        Claim.over_seeds(
            f"{problem}: B-Proj keeps the optimality gap close to the raw prediction's (the paper: close to Proj's)",
            "gap close to Proj",
            [r["gap_bp"] - r["gap_raw"] for r in rs],
            "<=",
            0.05,
            seeds=seeds,
            rule="gap(B-Proj) - gap(raw) <= 0.05 (mean relative optimality gap over the test θ); Proj's gap: "
            + ", ".join(f"{r['gap_proj']:.3f}" for r in rs),
            digits=4,
            short=f"{tag}: gap B-Proj - raw",
        ),
    ]


def _plot_pipeline(r: dict[str, Any], out_dir: Path, name: str) -> str:
    fig, (ax, ax2, ax3) = subplots(1, 3, figsize=(15, 4))
    labels = ["raw NN", "B-Proj", "Proj (cvxpy)", "IP alone"]
    ax.bar(labels, [r["feas_raw"], r["feas_bp"], r["feas_proj"], r["ip_validity"]], color="C0")
    ax.set_ylabel("feasibility rate")
    ax.set_ylim(0, 1.05)
    ax2.bar(labels, [r["gap_raw"], r["gap_bp"], r["gap_proj"], r["gap_ip"]], color="C1")
    ax2.set_ylabel("mean optimality gap")
    h = r["history"]
    ax3.plot(h["step"], h["validity"], label="IP validity")
    ax3.set_xlabel("IPNN step")
    ax3.set_ylabel("validity rate")
    ax3.set_ylim(-0.02, 1.05)
    ax3b = ax3.twinx()
    ax3b.semilogy(h["step"], h["gamma"], color="C3", label="γ")
    ax3b.set_ylabel("margin γ")
    fig.suptitle(f"{name}: Proj/B-Proj time ratio x{r['speedup_post']:.0f} on {r['n_infeasible']} infeasible")
    return str(save_figure(fig, out_dir, name))


def _toy_claims(
    out_dir: Path, iters: int, seed: int = 0, parts: Parts | None = None
) -> tuple[list[Claim], str, dict[str, Any]]:
    def train() -> dict[str, Any]:
        return {k: h.to_dict() for k, h in train_toys(iters, seed=seed).items()}

    raw = parts.run(f"toys_seed{seed}", train) if parts is not None else train()
    hists = {k: SimpleNamespace(**v) for k, v in raw.items()}
    fig, axes = subplots(1, 2, figsize=(12, 4))
    claims = []
    for name, h in hists.items():
        axes[0].plot(h.step, h.validity, label=name)
        axes[1].semilogy(h.step, h.gamma, label=name)
        claims.append(
            Claim(
                f"toy {name}: the margin-trained IPNN predicts feasible interior points",
                "validity -> 1 over training (toy curves)",
                h.validity[-1],
                h.validity[-1] >= 0.95,
                rule="final IP validity >= 0.95 on the training θ",
                details={"gamma_final": h.gamma[-1], "gamma_init": 1e-3},
                short=f"toy {name} IP validity",
            )
        )
    axes[0].set(xlabel="step", ylabel="IP validity", ylim=(-0.02, 1.05))
    axes[1].set(xlabel="step", ylabel="margin γ")
    axes[0].legend()
    return claims, str(save_figure(fig, out_dir, "toys_validity_gamma")), raw


def _results(r: dict[str, Any]) -> dict[str, Any]:
    """Every figure and the IPNN history of a pipeline run, without the per-row distance lists (what a stored part
    and the settings keep)."""
    return {k: v for k, v in r.items() if k not in ("dist_bp_all", "dist_proj_all")}


def reproduce(
    full: bool, out_dir: Path, *, download: bool = False, seed: int = 0, setup: PipelineSettings | None = None
) -> ReproResult:
    """Run the reproduction on one torch thread and return its claims; plots go into ``out_dir``. ``download`` is
    accepted for the common signature: every problem is generated, no data set is read. ``seed`` is the base seed:
    both modes run each pipeline on 3 seeds (``seed_list(seed, 3)``); each seed draws its own problem
    instance, training data and networks. ``full`` is resumable: each finished pipeline is stored in
    ``out_dir/parts/`` and reused by the next run with the same settings. ``setup`` (tests only) replaces the
    settings of every pipeline (quick and full) to shrink the run."""
    with torch_threads(1):
        return _reproduce(full, Path(out_dir), seed, setup)


def _reproduce(full: bool, out_dir: Path, seed: int, setup: PipelineSettings | None = None) -> ReproResult:
    quick = setup or PipelineSettings()
    seeds = seed_list(seed, 3)
    runs = [
        run_pipeline(ConvexQP.random(n=50, n_eq=25, n_ineq=25, seed=s, box=3.0), replace(quick, seed=s)) for s in seeds
    ]
    claims = _headline(runs, seeds, "QP 50/25/25")
    claims.append(
        Claim(
            "the margin-trained IPNN's interior points are feasible (needed for the guarantee)",
            "valid IPNN -> 100% B-Proj feasibility",
            ", ".join(f"{r['ip_validity']:.3f}" for r in runs),
            None,
            rule="share of test θ whose IP is feasible, per seed (shown)",
            short="QP IP validity",
        )
    )
    arts = [_plot_pipeline(runs[0], out_dir, "qp_50_25_25")]
    settings: dict[str, Any] = {
        "seed": seed,
        "seeds": seeds,
        "quick": {**quick.__dict__, "problem": "ConvexQP.random(50, 25, 25, seed=s, box=3) for s in seeds"},
        "quick_results": {str(s): _results(r) for s, r in zip(seeds, runs)},
    }
    if full:
        big = setup or PipelineSettings(n_train=8192, n_test=512, solver_iters=2000, ipnn_iters=4000)
        jset = setup or PipelineSettings(n_train=4096, n_test=256, solver_iters=1000, ipnn_iters=3000)
        parts = Parts(
            out_dir / "parts",
            fingerprint={"big": big.__dict__, "jccim": jset.__dict__, "version": version("icml25-bisection-proj")},
        )

        def pipe(tag: str, make: Any, st: PipelineSettings, s: int) -> dict[str, Any]:
            return parts.run(f"{tag}_seed{s}", lambda: _results(run_pipeline(make(s), replace(st, seed=s))))

        for name, make in (
            ("QP 100/50/50", lambda s: ConvexQP.random(n=100, n_eq=50, n_ineq=50, seed=s)),
            ("QCQP 100/50/50", lambda s: ConvexQCQP.random(n=100, n_eq=50, n_ineq=50, seed=s)),
        ):
            tag = name.split()[0].lower() + "_100_50_50"
            rr = [pipe(tag, make, big, s) for s in seeds]
            claims += _headline(rr, seeds, name)
            arts.append(_plot_pipeline(rr[0], out_dir, tag))
            settings[name] = {str(s): _results(r) for s, r in zip(seeds, rr)}
        rj = [
            pipe("jccim_50_25_25", lambda s: JCCIM.random(n=50, n_eq=25, n_ineq=25, seed=s, n_scenarios=20), jset, s)
            for s in seeds
        ]
        gaps = [r["feas_bp"] - r["ip_validity"] for r in rj]
        claims.append(
            Claim(
                "JCCIM (non-convex, 20 scenarios): every θ with a feasible interior point is repaired by B-Proj",
                "100% feasibility",
                "; ".join(f"{r['feas_raw']:.3f} -> {r['feas_bp']:.3f} (IP {r['ip_validity']:.3f})" for r in rj)
                + f" ({len(seeds)} seeds)",
                all(g >= 0 for g in gaps),
                rule="feas(B-Proj) >= IP validity at every seed (a guarantee); per seed: raw -> B-Proj (IP validity)",
                short="JCCIM: B-Proj feasibility",
                details={"feas_bp_minus_ip": dict(zip(map(str, seeds), gaps))},
            )
        )
        arts.append(_plot_pipeline(rj[0], out_dir, "jccim_50_25_25"))
        settings["JCCIM"] = {str(s): _results(r) for s, r in zip(seeds, rj)}
        toy_iters = 2000 if setup is None else 20
        toy_claims, toy_plot, settings["toys"] = _toy_claims(out_dir, iters=toy_iters, seed=seed, parts=parts)
        claims += toy_claims
        arts.append(toy_plot)
        steps = settings["ratio_steps"] = parts.run(
            f"ratio_steps_seed{seed}",
            lambda: ratio_steps(ConvexQP.random(n=100, n_eq=50, n_ineq=50, seed=seed), seed=1 + seed),
        )
        settings["parts"] = {"reused": parts.reused, "computed": parts.computed}
        claims.append(
            Claim(
                "ρ = 0.5 needs fewer steps than ρ = 0.9 to reach conv_tol = 1e-5",
                "ρ = 0.5 (paper default)",
                f"steps ρ=0.5: {steps['0.5']['steps']}, ρ=0.9: {steps['0.9']['steps']}",
                None,
                rule="shown",
                short="steps, ρ = 0.5 vs 0.9",
            )
        )
    return ReproResult("bisection_proj", claims, settings=settings, artifacts=arts, seed=seed)
