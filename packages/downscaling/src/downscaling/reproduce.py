"""``icml25 reproduce downscaling``: the position paper's central argument measured at tiny scale.

The paper (Sengupta, Goel, Chakraborty, ICML 2025) has no tables of its own; its argument rests on Chinchilla's
observation that at a fixed training budget the compute-optimal model is smaller than the largest affordable one
(Hoffmann et al. 2022), so that a downscaled model serves at a fraction of the cost. Quick mode (Tiny Shakespeare,
characters, Llama configs from scratch, context 64, seed 0):

1. equal training compute: a 4-layer and a 2-layer Llama trained with the same FlopCounterMode-counted training
   FLOPs; holds iff bpc_small <= bpc_large + 0.02 and forward FLOPs/token large/small >= 5;
2. int8 dynamic quantization (torch.ao) of the large model: logits cosine > 0.99, Linear bytes / >= 3.8,
   relative bpc change <= 1 %;
3. 50 % unstructured pruning without recovery: bpc(Wanda) <= bpc(magnitude).

``--full`` adds the compute sweep (3 budgets x 3 sizes, a fitted Chinchilla law, N*(C), the budget where the
largest model starts to win) and distillation vs training from scratch at equal steps and equal FLOPs.
"""

from __future__ import annotations

from pathlib import Path

from downscaling.experiments import (
    FULL,
    QUICK,
    Setup,
    build_task,
    compute_sweep,
    equal_compute,
    extra_claims,
    full_extras,
    kd_vs_scratch,
    pareto_plot,
    prune_compare,
    quant_check,
)
from icml25_shared.report import Claim, ReproResult

__all__ = ["reproduce"]


def reproduce(full: bool, out_dir: Path, *, download: bool = False, setup: Setup | None = None) -> ReproResult:
    """Run the experiments of the module docstring and judge the claims; ``setup`` overrides the mode's sizes."""
    task = build_task(setup or (FULL if full else QUICK), download=download)
    st = task.setup
    ec = equal_compute(task)
    large, small = ec["large"], ec["small"]
    flops_ratio = small.train_flops / large.train_flops
    c1 = small.val_bpc <= large.val_bpc + 0.02 and ec["fwd_ratio"] >= 5 and abs(flops_ratio - 1) <= 0.01
    claims = [
        Claim(
            "at equal training compute a downscaled model matches the larger one at a fraction of the inference cost",
            "no figure of its own; Chinchilla: N*(C) < largest affordable N",
            f"bpc small {small.val_bpc:.3f} vs large {large.val_bpc:.3f}; fwd FLOPs/token ratio {ec['fwd_ratio']:.2f}",
            c1,
            rule="bpc_small <= bpc_large + 0.02, FLOPs/token large/small >= 5, training FLOPs equal within 1%",
            unit="bits/char",
            short="small = large at equal compute",
            details={
                "bpc_large": large.val_bpc,
                "bpc_small": small.val_bpc,
                "fwd_flops_per_token_large": large.fwd_flops_per_token,
                "fwd_flops_per_token_small": small.fwd_flops_per_token,
                "train_flops_large": large.train_flops,
                "train_flops_small": small.train_flops,
                "train_flops_6nd_large": large.train_flops_6nd,
                "train_flops_6nd_small": small.train_flops_6nd,
                "tokens_large": large.tokens,
                "tokens_small": small.tokens,
                "steps_large": large.steps,
                "steps_small": small.steps,
                "flopcounter_equals_analytic": ec["flops_match_analytic"],
            },
        )  # fmt: skip
    ]
    q = quant_check(large.model, task)
    claims.append(
        Claim(
            "int8 dynamic quantization keeps the model's outputs and quality at a quarter of the Linear weight bytes",
            "cosine > 0.99, bytes / >= 3.8, delta bpc <= 1% (the issue's bar; no paper figure)",
            f"cosine {q['cosine']:.5f}, bytes / {q['size_ratio']:.2f}, delta bpc {100 * q['rel_delta_bpc']:+.3f}%",
            q["cosine"] > 0.99 and q["size_ratio"] >= 3.8 and abs(q["rel_delta_bpc"]) <= 0.01,
            rule="logits cosine > 0.99, Linear bytes fp32/int8 >= 3.8, |bpc_int8 / bpc_fp32 - 1| <= 0.01",
            short="int8 dynamic keeps quality",
            details=q,
        )
    )
    pc = prune_compare(large.model, task)
    claims.append(
        Claim(
            "at 50% unstructured sparsity without recovery, Wanda's activation-aware score prunes better than "
            "magnitude",
            "Wanda < magnitude (Sun et al. 2024, LLaMA; cited by the paper as a downscaling tool)",
            f"bpc Wanda {pc['wanda']:.3f} vs magnitude {pc['magnitude']:.3f} (dense {pc['dense']:.3f})",
            pc["wanda"] <= pc["magnitude"],
            rule="bpc(Wanda) <= bpc(magnitude), both at exactly 50% per layer, no recovery",
            unit="bits/char",
            short="Wanda <= magnitude at 50%",
            details=pc,
        )
    )
    fl, fs = large.fwd_flops_per_token, small.fwd_flops_per_token
    points = [("large", fl, large.val_bpc), ("small", fs, small.val_bpc), ("large int8", fl, q["bpc_int8"]),
              ("large Wanda 50%", fl, pc["wanda"]), ("large magnitude 50%", fl, pc["magnitude"])]  # fmt: skip
    settings = {**st.to_dict(), "budget_flops": ec["budget_flops"]}
    if full:
        sw = compute_sweep(task)
        sizes = [f"{s.layers}x{s.hidden}" for s in st.full_sizes]
        wins = [c for c in st.full_budgets if sw["best_size"][c] == sizes[-1]]
        claims.append(
            Claim(
                "the compute-optimal size grows with the budget; below some budget the largest model does not win",
                "N* ~ C^0.5 (Chinchilla, a = b = 0.5 approx.)",
                "best per budget: "
                + ", ".join(f"{c:.2g}: {sw['best_size'][c]}" for c in st.full_budgets)
                + f"; fitted alpha {sw['law']['alpha']:.2f}, beta {sw['law']['beta']:.2f}; largest wins from "
                + (f"{wins[0]:.2g}" if wins else "none of the budgets"),
                None,
                rule="shown: measured best size per budget and the fitted law",
                short="compute sweep + fitted law",
                details=sw,
            )  # fmt: skip
        )
        kd = kd_vs_scratch(task, large.model)
        claims.append(
            Claim(
                "distillation from the large model vs training the small one from scratch",
                "KD helps at equal steps; at equal FLOPs it must pay the teacher's forwards",
                f"bpc KD {kd['bpc_kd_equal_steps']:.3f} (equal steps), {kd['bpc_kd_equal_flops']:.3f} (equal FLOPs) "
                f"vs scratch {kd['bpc_scratch']:.3f}",
                kd["bpc_kd_equal_steps"] <= kd["bpc_scratch"],
                rule="bpc(KD, equal steps) <= bpc(scratch); equal-FLOPs result shown",
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
