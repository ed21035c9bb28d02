"""``icml25 reproduce bslora``: BSLoRA matches LoRA with about half its trainable parameters.

The paper (abstract) reports 44.59 % of LoRA's parameters and +0.33 points on commonsense reasoning, +2.08 on MMLU
(LLaMA 7B-13B). At CPU scale (:mod:`bslora.experiments`: a tiny Llama, string tasks with exact answers) a 0.3-point
gain cannot be resolved, so the claim judged is parity at about half the parameters:

1. SS(2,4,16) trains at most 0.55 of LoRA-8's parameters (exactly 0.500 at these shapes);
2. its mean exact match is at least LoRA-8's minus a margin (0.03 quick, 0.01 full) on the tasks where LoRA-8
   lands in 30-95 % (neither floor nor ceiling); shown beside it: SS vs LoRA-4 at an equal budget.

Quick: sort, three fine-tuning seeds, LoRA-8 vs SS. Full: 3 seeds x 3 tasks (reverse, sort, addition), LoRA-4,
LoRA-2, KE, GT and peft LoRA-8; exact parameter ratios at LLaMA-7B/8B/13B shapes; mixed-batch serving of the task
adapters.

Seeds: the pre-trained base is a fixed fixture (pre-training seed 0, as a downloaded checkpoint would be: with
other pre-training seeds the tiny base did not always form the positional routing in 300 steps, and reverse then
stays at 0 % for every method); the fine-tuning seeds are ``seed_list(seed, 3)``, each calibrating its own step
count on its LoRA-8 run. Claim 2 is judged on the t-interval of its per-seed figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np

from bslora.config import BSLoRAConfig
from bslora.counting import count_bslora_parameters, count_lora_parameters
from bslora.experiments import (
    CALIB_TARGET,
    base_config,
    bytes_per_adapter,
    llama_shapes,
    method_configs,
    mixed_batch_error,
    paired_interval,
    plot_accuracy_vs_params,
    pretrain_base,
    protocol,
    run_cells,
)
from icml25_shared.report import Claim, ReproResult
from icml25_shared.verdict import seed_list

__all__ = ["reproduce"]

SS, L8, L4 = "BSLoRA SS(2,4,16)", "LoRA r=8", "LoRA r=4"


def reproduce(full: bool, out_dir: Path, *, download: bool = False, seed: int = 0) -> ReproResult:
    """Run the experiments of the module docstring and judge the claims (no real data: ``download`` is unused)."""
    seeds = seed_list(seed, 3)
    task_names = ["reverse", "sort", "add"] if full else ["sort"]
    methods = method_configs(full)
    base, base_info = pretrain_base(0, cache_dir=Path(out_dir) / "cache")  # the fixed pre-trained fixture
    base_state = {k: v.detach().clone() for k, v in base.state_dict().items()}
    # every fine-tuning seed calibrates its own step count on its LoRA-8 run (never on BSLoRA), so the interval
    # over seeds carries the calibration's variance too: a verdict that follows one seed's calibrated length is
    # inconclusive, not a verdict that flips between base seeds
    s0 = seeds[0]
    cells = run_cells([(base_state, tn, s, full, None, full and s == s0) for s in seeds for tn in task_names])
    steps = {f"{c['task']}/{c['seed']}": c["steps"] for c in cells}
    exact = {m: {(c["task"], c["seed"]): c["exact"][m] for c in cells} for m in methods}
    token = {m: {(c["task"], c["seed"]): c["token"][m] for c in cells} for m in methods}
    n_params = dict(cells[0]["params"])
    mean_acc = {m: float(np.mean(list(v.values()))) for m, v in exact.items()}
    ratio = n_params[SS] / n_params[L8]
    cfg = base_config()
    claims = [
        Claim(
            "BSLoRA SS(2,4,16) trainable parameters / LoRA r=8 (tiny Llama, q,k,v,up,down)",
            0.4459,
            ratio,
            ratio <= 0.55,
            rule="P_SS / P_LoRA8 <= 0.55 (exact here: 0.500)",
            short="params SS / LoRA-8",
            details={
                "P_SS": n_params[SS],
                "P_LoRA8": n_params[L8],
                "analytic_SS": count_bslora_parameters(cfg, BSLoRAConfig(2, 4, 16))["total"],
                "analytic_LoRA8": count_lora_parameters(cfg, 8),
            },
        )
    ]
    # the comparison means something only on tasks where LoRA-8 (seed 0) is neither at the floor nor at the ceiling
    in_band = {tn: exact[L8][(tn, s0)] for tn in task_names}
    judged = [tn for tn, a in in_band.items() if 0.3 <= a <= 0.95]
    keys = [k for k in exact[SS] if k[0] in judged]
    all_keys = list(exact[SS])
    margin = 0.01 if full else 0.03
    m8, lo8, hi8 = paired_interval([exact[SS][k] - exact[L8][k] for k in keys]) if keys else (float("nan"),) * 3
    acc_ss = float(np.mean([exact[SS][k] for k in keys])) if keys else float("nan")
    acc_l8 = float(np.mean([exact[L8][k] for k in keys])) if keys else float("nan")
    text = ("BSLoRA matches LoRA with about half its parameters: mean exact match SS - LoRA-8 "
            f"({', '.join(judged) or 'no task'}; per fine-tuning seed)")  # fmt: skip
    rule = (f"mean over the judged tasks of acc_SS - acc_LoRA8 >= -{margin}, the tasks where LoRA-8 (first seed) "
            "lands in 30-95 %")  # fmt: skip
    details = {
        "acc_SS": acc_ss,
        "acc_LoRA8": acc_l8,
        "judged_tasks": judged,
        "excluded_tasks": {tn: in_band[tn] for tn in task_names if tn not in judged},
        "paired_95ci_over_runs": [lo8, hi8],
        "per_run_SS_LoRA8": {f"{t}/seed{s}": [exact[SS][(t, s)], exact[L8][(t, s)]] for t, s in all_keys},
    }
    paper = "+0.33 (commonsense), +2.08 (MMLU) points"
    if keys:
        per_seed = [float(np.mean([exact[SS][(t, s)] - exact[L8][(t, s)] for t in judged])) for s in seeds]
        claims.append(Claim.over_seeds(text, paper, per_seed, ">=", -margin, seeds=seeds, rule=rule,
                                       short="exact match SS - LoRA-8", details=details))  # fmt: skip
    else:
        claims.append(Claim(text, paper, m8, None, rule=rule, short="exact match SS - LoRA-8", details=details,
                            verdict="skipped"))  # fmt: skip
    if L4 in exact:  # full mode
        m4, lo4, hi4 = paired_interval([exact[SS][k] - exact[L4][k] for k in all_keys])
        claims.append(
            Claim(
                "Equal budget: mean exact match SS - LoRA-4 (both 24,576 parameters)",
                None,
                m4,
                None,
                rule="shown",
                short="exact match SS - LoRA-4",
                details={"acc_SS": mean_acc[SS], "acc_LoRA4": mean_acc[L4], "paired_95ci": [lo4, hi4]},
            )
        )
    claims.append(
        Claim(
            "Calibration: LoRA r=8 exact match lands in 30-95 % on every task (first seed; min shown)",
            None,
            min(in_band.values()),
            len(judged) == len(task_names),
            rule=f"steps calibrated per task and seed on LoRA-8 (validation set, target {CALIB_TARGET}): {steps}",
            short="calibration: LoRA-8 in 30-95 %",
            details={"acc_LoRA8_first_seed": in_band, "steps": steps},
        )
    )
    if full:
        adapters = {c["task"]: c["ss_state"] for c in cells if "ss_state" in c}
        claims += _full_claims(exact, n_params, base_state, adapters)
    settings: dict[str, Any] = {
        "tasks": task_names,
        "seeds": seeds,
        "steps_per_task_seed": steps,
        **protocol(),
        "base": base_info,
        "trainable_params": n_params,
        "mean_exact_match": mean_acc,
        "mean_token_accuracy": {m: float(np.mean(list(v.values()))) for m, v in token.items()},
        "per_run_exact_match": {m: {f"{t}/seed{s}": v for (t, s), v in d.items()} for m, d in exact.items()},
    }
    plot = plot_accuracy_vs_params(n_params, mean_acc, f"{', '.join(task_names)}; {len(seeds)} seed(s)", out_dir)
    return ReproResult("bslora", claims, settings=settings, artifacts=[str(plot)])


def _full_claims(exact: dict, n_params: dict, base_state: dict, adapters: dict) -> list[Claim]:
    ss_cfg = cast(BSLoRAConfig, method_configs(True)[SS])
    # SS(2,4,16) / LoRA-8 from the closed-form counts at the paper's model shapes (all five targets)
    expected = {"LLaMA-7B": 0.476, "Llama-3-8B": 0.542, "LLaMA-13B": 0.472}
    claims = []
    for name, cfg in llama_shapes().items():
        r = count_bslora_parameters(cfg, BSLoRAConfig(2, 4, 16))["total"] / count_lora_parameters(cfg, 8)
        claims.append(
            Claim(f"SS(2,4,16) / LoRA-8 parameters on {name} shapes (meta device)", expected[name], r,
                  abs(r - expected[name]) < 5e-4, rule="equals the closed-form count's ratio (3 d.p.)",
                  short=f"params SS/LoRA-8 {name}")
        )  # fmt: skip
    extras = {"LoRA r=2": "LoRA-2", "BSLoRA KE(2,4,16) S=64": "KE", "BSLoRA GT(2,4,16) G=128": "GT",
              "peft LoRA r=8": "peft LoRA-8"}  # fmt: skip
    for extra, label in extras.items():
        if extra not in exact:  # peft not installed
            continue
        note = "; GT costs more than LoRA-8 at this size" if "GT" in extra else ""
        claims.append(
            Claim(f"{extra}: mean exact match (params {n_params[extra]:,d}{note})", None,
                  float(np.mean(list(exact[extra].values()))), None, rule="shown", short=f"{label} exact match")
        )  # fmt: skip
    err = mixed_batch_error(base_state, adapters, ss_cfg)
    claims.append(Claim("Mixed batch of the task adapters == each adapter alone (max |Δlogit|)", 0.0, err, err < 1e-4,
                        rule="max abs difference < 1e-4", short="mixed batch max |Δlogit|"))  # fmt: skip
    l8_cfg = cast(BSLoRAConfig, method_configs(True)[L8])
    slopes = {"SS(2,4,16)": bytes_per_adapter(ss_cfg), "LoRA-8": bytes_per_adapter(l8_cfg)}
    r_bytes = slopes["SS(2,4,16)"] / slopes["LoRA-8"]
    claims.append(
        Claim("Resident bytes per extra adapter in a serving model, SS(2,4,16) / LoRA-8 (fp32, measured)", 0.33,
              r_bytes, r_bytes <= 0.55,
              rule="<= 0.55 (exact here 0.500; the paper's 0.33 is a 7B serving plot, config unknown)",
              short="bytes/adapter SS / LoRA-8", details={"bytes_per_adapter": slopes})
    )  # fmt: skip
    return claims
