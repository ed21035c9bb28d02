"""``icml25 reproduce downscaling``: the position paper's central argument measured at tiny scale.

The paper (Sengupta, Goel, Chakraborty, ICML 2025) has no tables of its own; its argument rests on Chinchilla's
observation that at a fixed training budget the compute-optimal model is smaller than the largest affordable one
(Hoffmann et al. 2022), so that a downscaled model serves at a fraction of the cost. Quick mode (Tiny Shakespeare,
characters, Llama configs from scratch, context 64), every noisy figure measured on ``setup.n_seeds`` seeds
(``seed_list(seed, n)``, package seed ``setup.seed + s``; base seed 0 starts with today's single-seed run) and
judged on the t-interval of the mean:

1. equal training compute: a 4-layer and a 2-layer Llama trained with the same FlopCounterMode-counted training
   FLOPs; holds iff bpc_small - bpc_large <= 0.02 (interval) and forward FLOPs/token large/small >= 5;
2. int8 dynamic quantization (torch.ao) of the large model: logits cosine > 0.99, Linear bytes / >= 3.8,
   relative bpc change <= 1 % (intervals);
3. 50 % unstructured pruning without recovery: bpc(Wanda) - bpc(magnitude) <= 0 on the large model (interval);
   the same margin on the small model is shown beside it (the trend with size).

``--full`` (3 seeds) adds the compute sweep (3 budgets x 3 sizes: claim 1 judged at every budget, the range where
it holds stated; a fitted Chinchilla law; Wanda vs magnitude on the three sizes at the largest budget) and
distillation, the pipeline, data selection and the perceptron crossover on the first seed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from downscaling.experiments import (
    FULL,
    QUICK,
    Setup,
    compute_sweep,
    extra_claims,
    full_extras,
    kd_vs_scratch,
    pareto_plot,
    seed_runs,
    sweep_claims,
)
from icml25_shared.report import Claim, ReproResult
from icml25_shared.text import CharCorpus
from icml25_shared.validate import check_int
from icml25_shared.verdict import FAILS, HOLDS, combine, judge, seed_list, spread

__all__ = ["reproduce"]


def _also(claim: Claim, *verdicts: str) -> Claim:
    """``claim`` with its verdict combined with further (deterministic) ones."""
    return replace(claim, holds=None, verdict=combine(claim.verdict, *verdicts))


def _ok(cond: bool) -> str:
    return HOLDS if cond else FAILS


def reproduce(
    full: bool, out_dir: Path, *, download: bool = False, seed: int = 0, setup: Setup | None = None
) -> ReproResult:
    """Run the experiments of the module docstring and judge the claims; ``setup`` overrides the mode's sizes."""
    st = setup or (FULL if full else QUICK)
    base = check_int("seed", seed, min=0)
    seeds = [st.seed + s for s in seed_list(base, st.n_seeds)]
    corpus = CharCorpus.tinyshakespeare(download=download)
    runs = seed_runs(st, seeds, corpus)
    first = runs[0]
    large, small = first["ec"]["large"], first["ec"]["small"]
    margin = [r["ec"]["small"].val_bpc - r["ec"]["large"].val_bpc for r in runs]
    fwd = first["ec"]["fwd_ratio"]  # shapes only: the same on every seed
    flops_eq = max(abs(r["ec"]["small"].train_flops / r["ec"]["large"].train_flops - 1) for r in runs)
    per_seed = [{"seed": r["seed"], "bpc_large": r["ec"]["large"].val_bpc, "bpc_small": r["ec"]["small"].val_bpc,
                 "steps_small": r["ec"]["small"].steps} for r in runs]  # fmt: skip
    c1 = Claim.over_seeds(
        f"at equal training compute ({first['ec']['budget_flops']:.3g} FLOPs) a downscaled model matches the "
        "larger one at a fraction of the inference cost",
        "no figure of its own; Chinchilla: N*(C) < largest affordable N",
        margin, "<=", 0.02, seeds=seeds,
        rule="bpc_small - bpc_large <= 0.02 (our tolerance: a tie at 2 % of a bit), FLOPs/token large/small >= 5, "
        "training FLOPs equal within 1%",
        unit="bits/char (small - large)",
        short="small = large at equal compute",
        details={"per_seed": per_seed, "fwd_flops_ratio": fwd, "train_flops_rel_diff_max": flops_eq,
                 "fwd_flops_per_token_large": large.fwd_flops_per_token,
                 "fwd_flops_per_token_small": small.fwd_flops_per_token,
                 "train_flops_large": large.train_flops, "train_flops_small": small.train_flops,
                 "train_flops_6nd_large": large.train_flops_6nd, "train_flops_6nd_small": small.train_flops_6nd,
                 "steps_large": large.steps, "steps_small": small.steps, "tokens_large": large.tokens,
                 "tokens_small": small.tokens, "flopcounter_equals_analytic": first["ec"]["flops_match_analytic"]},
    )  # fmt: skip
    claims = [_also(c1, _ok(fwd >= 5 and flops_eq <= 0.01))]
    q = [r["quant"] for r in runs]
    cos_v, cos_sp = judge([x["cosine"] for x in q], ">", 0.99, seeds=seeds)
    ratio = min(x["size_ratio"] for x in q)
    c2 = Claim.over_seeds(
        "int8 dynamic quantization keeps the model's outputs and quality at a quarter of the Linear weight bytes",
        "no paper figure; our bar: cosine > 0.99, bytes / >= 3.8, |delta bpc| <= 1%",
        [abs(x["rel_delta_bpc"]) for x in q], "<=", 0.01, seeds=seeds,
        rule="|bpc_int8 / bpc_fp32 - 1| <= 0.01, logits cosine > 0.99 (interval), Linear bytes fp32/int8 >= 3.8",
        unit="|relative delta bpc|", short="int8 dynamic keeps quality", digits=5,
        details={"per_seed": q, "cosine": cos_sp.to_dict(), "size_ratio": ratio},
    )  # fmt: skip
    claims.append(_also(c2, cos_v, _ok(ratio >= 3.8)))
    gap_l = [r["prune_large"]["wanda"] - r["prune_large"]["magnitude"] for r in runs]
    gap_s = [r["prune_small"]["wanda"] - r["prune_small"]["magnitude"] for r in runs]
    small_sp = spread(gap_s, seeds)
    claims.append(
        Claim.over_seeds(
            "at 50% unstructured sparsity without recovery, Wanda's activation-aware score prunes better than "
            f"magnitude (large model; small model: Wanda - magnitude {small_sp.text(3)})",
            "Wanda < magnitude (Sun et al. 2024, LLaMA 7B-65B, whose outlier activation features Wanda exploits)",
            gap_l,
            "<=",
            0.0,
            seeds=seeds,
            rule="bpc(Wanda) - bpc(magnitude) <= 0 on the large model, both at exactly 50% per layer, no recovery",
            unit="bits/char (Wanda - magnitude)",
            short="Wanda <= magnitude at 50%",
            details={
                "large": [r["prune_large"] for r in runs],
                "small": [r["prune_small"] for r in runs],
                "small_margin": small_sp.to_dict(),
            },
        )  # fmt: skip
    )
    fl, fs, q0, p0 = large.fwd_flops_per_token, small.fwd_flops_per_token, q[0], first["prune_large"]
    points = [("large", fl, large.val_bpc), ("small", fs, small.val_bpc), ("large int8", fl, q0["bpc_int8"]),
              ("large Wanda 50%", fl, p0["wanda"]), ("large magnitude 50%", fl, p0["magnitude"])]  # fmt: skip
    settings = {**st.to_dict(), "base_seed": base, "seeds": seeds, "budget_flops": first["ec"]["budget_flops"]}
    if full:
        task = first["task"]
        claims += sweep_claims(compute_sweep(task, seeds), st)
        kd = kd_vs_scratch(task, large.model)
        claims.append(
            Claim(
                "distillation from the large model vs training the small one from scratch",
                "KD helps at equal steps; at equal FLOPs it must pay the teacher's forwards",
                f"bpc KD {kd['bpc_kd_equal_steps']:.3f} (equal steps), {kd['bpc_kd_equal_flops']:.3f} (equal FLOPs) "
                f"vs scratch {kd['bpc_scratch']:.3f}",
                kd["bpc_kd_equal_steps"] <= kd["bpc_scratch"],
                rule="bpc(KD, equal steps) <= bpc(scratch), on the first seed only; equal-FLOPs result shown",
                unit="bits/char",
                short="KD vs scratch",
                details=kd,
            )
        )
        extra = full_extras(task, small.model)
        claims += extra_claims(extra)
        settings["pipeline"] = extra["pipeline"]
    plot = pareto_plot(points, out_dir)
    return ReproResult("downscaling", claims, settings=settings, artifacts=[str(plot)])
