"""``icml25 reproduce rsd``: the paper's efficiency claim on chain arithmetic mod 10 with tiny GPT-2 models.

Quick mode (seconds on one CPU thread): the shipped fixture models (draft 1 x 48, target 2 x 96), 300 seeded test
problems with 2-4 operations, greedy decoding, target-only, draft-only and RSD (binary ω, δ = 0.7), on
``setup.n_seeds`` problem sets (problem seed ``2025 + s``, noisy-PRM seed ``s``, s in ``seed_list(seed, n)``):

1. "RSD matches the target's accuracy with far fewer FLOPs" (abstract: up to 4.4x fewer FLOPs than target-only,
   accuracy at or above it), every model call priced: the PRM as a model of the draft's size (the paper's
   setting: a 1.5B PRM beside the 1.5B draft). Holds if generated-token FLOPs(target-only) / FLOPs(RSD) >= 2.0
   and accuracy(RSD) - accuracy(target-only) >= -0.01 on the t-interval over the problem sets, and the target is
   more accurate than the draft (the premise); the cached ratio and the free-PRM variant are shown beside it;
2. the same with a noisy PRM (Beta(8, 2) / Beta(2, 8) rewards), shown;
3. the fixtures meet their bar (step accuracy: target >= 95 %, draft in [60 %, 95 %]).

``--full`` runs on 300 problems of 2-6 operations and adds the noisy-PRM δ sweep, binary vs clipped vs sigmoid ω at a
matched target-call rate, Best-of-N with the draft at N = 2..16 (the paper's "parallel decoding" comparison), HF
assisted generation and T = 0.7, each on every problem set.

``--retrain``: :func:`reproduce_retrained` trains both models from scratch by the fixtures' recipe (about 15
CPU-min) instead of loading the shipped ones, stamped and written like any run::

    python -m icml25_shared.runner rsd rsd.reproduce:reproduce_retrained OUT_DIR [--full]
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from icml25_shared.report import Claim, ReproResult
from icml25_shared.validate import check_int
from icml25_shared.verdict import combine, judge, seed_list, spread
from rsd.experiments import (
    FULL,
    QUICK,
    Setup,
    full_claims,
    full_runs,
    load_models,
    plot_accuracy_vs_flops,
    run_methods,
)
from rsd.flops import ModelCost
from rsd.tasks.arithmetic import step_accuracy

__all__ = ["reproduce", "reproduce_retrained"]


def _ratio(base, res, mode, free=False):
    if free:
        return base.flops_free_prm[mode] / res.flops_free_prm[mode]
    return base.flops[mode] / res.flops[mode]


def _with(claim: Claim, *verdicts: str, more: str = "") -> Claim:
    """``claim`` with further verdicts combined into its own and ``more`` appended to its measured text."""
    return replace(claim, holds=None, verdict=combine(claim.verdict, *verdicts), measured=f"{claim.measured}{more}")


def reproduce_retrained(full: bool, out_dir: Path, *, download: bool = False, seed: int = 0) -> ReproResult:
    """:func:`reproduce` with both models retrained from scratch (the ``--retrain`` route)."""
    return reproduce(full, out_dir, download=download, seed=seed, retrain=True)


def reproduce(
    full: bool,
    out_dir: Path,
    *,
    download: bool = False,
    seed: int = 0,
    setup: Setup | None = None,
    retrain: bool = False,
) -> ReproResult:
    """Run the experiments of the module docstring and judge the claims; ``setup`` overrides the mode's sizes,
    ``retrain`` trains the models instead of loading the fixtures."""
    st = setup or (FULL if full else QUICK)
    base = check_int("seed", seed, min=0)
    reps = [replace(st, seed=st.seed + s, noisy_seed=st.noisy_seed + s) for s in seed_list(base, st.n_seeds)]
    seeds = [r.seed for r in reps]
    draft_model, target_model = load_models(retrain, st.retrain_steps)
    runs = [run_methods(r, draft_model, target_model) for r in reps]
    cd, ct = ModelCost.from_model(draft_model), ModelCost.from_model(target_model)
    prm_text = "priced as a model of the draft's size" if st.prm_cost == "draft" else "priced at 0 (free)"
    t0, r0 = runs[0]["target_only"], runs[0]["rsd"]
    g = [_ratio(x["target_only"], x["rsd"], "generated") for x in runs]
    cached = spread([_ratio(x["target_only"], x["rsd"], "cached") for x in runs], seeds)
    free = spread([_ratio(x["target_only"], x["rsd"], "generated", free=True) for x in runs], seeds)
    acc_v, acc = judge([x["rsd"].accuracy - x["target_only"].accuracy for x in runs], ">=", -0.01, seeds=seeds)
    pre_v, pre = judge([x["target_only"].accuracy - x["draft_only"].accuracy for x in runs], ">", 0.0, seeds=seeds)
    per = r0.flops_by_model
    c1 = Claim.over_seeds(
        "RSD matches the target's accuracy with far fewer FLOPs (draft writes, PRM judges, target rewrites "
        f"rejected steps); every call priced: draft N={cd.n_nonembedding:,}, target N={ct.n_nonembedding:,}, "
        f"exact PRM {prm_text} (the paper: a 1.5B PRM beside the 1.5B draft)",
        "up to 4.4x fewer FLOPs, acc >= target-only",
        g, ">=", 2.0, seeds=seeds, digits=2, unit="x fewer FLOPs (generated tokens)",
        rule="FLOPs_gen(target-only)/FLOPs_gen(RSD) >= 2.0 (our bar: half the paper's 4.4x) and "
        "acc(RSD) - acc(target-only) >= -0.01 on the interval, with a target more accurate than the draft (else "
        "the comparison is void)",
        short="FLOPs saving at target accuracy",
        details={"ratio_cached": cached.to_dict(), "ratio_generated_free_prm": free.to_dict(),
                 "acc_rsd_minus_target": acc.to_dict(), "acc_target_minus_draft": pre.to_dict(),
                 "prm_cost": st.prm_cost, "model_costs": {"draft": asdict(cd), "target": asdict(ct)},
                 "flops_per_problem_by_model_first_seed": {"rsd": per, "target_only": t0.flops_by_model}},
    )  # fmt: skip
    claims = [
        _with(
            c1,
            acc_v,
            pre_v,
            more=f"; cached {cached.text(2)}; acc RSD - target {acc.text(3)}; per problem (first set): draft "
            f"{per.get('draft', 0):.3g} + PRM {per.get('prm', 0):.3g} + target {per.get('target', 0):.3g} FLOPs vs "
            f"target-only {t0.flops['generated']:.3g}; free-PRM variant {free.text(2)}",
        )  # fmt: skip
    ]
    ng = spread([_ratio(x["target_only"], x["rsd_noisy"], "generated") for x in runs], seeds)
    nc = spread([_ratio(x["target_only"], x["rsd_noisy"], "cached") for x in runs], seeds)
    nf = spread([_ratio(x["target_only"], x["rsd_noisy"], "generated", free=True) for x in runs], seeds)
    na = spread([x["rsd_noisy"].accuracy for x in runs], seeds)
    claims.append(
        Claim(
            "with a noisy PRM (Beta(8,2) rewards for correct steps, Beta(2,8) for wrong ones) RSD keeps most of the "
            f"saving (PRM {prm_text})",
            None,
            f"{ng.text(2)} fewer FLOPs (cached {nc.text(2)}); acc {na.text(3)}; free-PRM variant {nf.text(2)}",
            None,
            rule="shown",
            short="noisy PRM",
            details={
                "ratio_generated": ng.to_dict(),
                "ratio_cached": nc.to_dict(),
                "accuracy": na.to_dict(),
                "ratio_generated_free_prm": nf.to_dict(),
            },
        )  # fmt: skip
    )
    probe = 7 + base  # the fixtures' probe set (seed 7 at base seed 0)
    acc_d, acc_t = step_accuracy(draft_model, seed=probe), step_accuracy(target_model, seed=probe)
    claims.append(
        Claim(
            "the fixture models meet their bar: a strong target and a draft that is often but not always right",
            "target >= 0.95, draft in [0.60, 0.95]",
            f"target {acc_t:.3f}, draft {acc_d:.3f}",
            bool(acc_t >= 0.95 and 0.60 <= acc_d <= 0.95),
            rule=f"greedy step accuracy after a gold prefix, 200 probes (probe seed {probe})",
            short="fixture step accuracy",
        )
    )
    res = runs[0]
    points = {m.name: (m.flops["generated"], m.accuracy) for m in res.values()}
    settings = {**asdict(st), "base_seed": base, "problem_seeds": seeds,
                "noisy_prm_seeds": [r.noisy_seed for r in reps],
                "models": "retrained" if retrain else "shipped fixtures"}  # fmt: skip
    settings["methods"] = {k: v.summary() for k, v in res.items()}
    settings["methods_per_seed"] = {str(r.seed): {k: v.summary() for k, v in x.items()} for r, x in zip(reps, runs)}
    if full:
        extras = [full_runs(r, draft_model, target_model) for r in reps]
        claims += full_claims(extras, runs, seeds)
        extra = extras[0]
        for group in ("sweep", "best_of_n"):
            points.update({m.name: (m.flops["generated"], m.accuracy) for m in extra[group].values()})
        points[extra["t07"].name] = (extra["t07"].flops["generated"], extra["t07"].accuracy)
        settings["full"] = {
            "sweep": {str(k): v.summary() for k, v in extra["sweep"].items()},
            "weightings": {k: {"delta": dl, **m.summary()} for k, (dl, m) in extra["weightings"].items()},
            "best_of_n": {str(k): v.summary() for k, v in extra["best_of_n"].items()},
            "assisted": extra["assisted"],
            "t07": extra["t07"].summary(),
            "fixture_accuracy": extra["fixture_accuracy"],
            "fixture_accuracy_setup_ops": extra["fixture_accuracy_setup_ops"],
        }
    plot = plot_accuracy_vs_flops(points, out_dir, "accuracy_vs_flops", "chain arithmetic mod 10, tiny GPT-2s")
    return ReproResult("rsd", claims, settings=settings, artifacts=[str(plot)])
