"""``icml25 reproduce swan``: the paper's claims, checked on a tiny LLaMA and character-level Tiny Shakespeare.

Quick mode (about a minute on one CPU thread), AdamW and SWAN from the same initialisation on the same batches:

1. token efficiency -- "the same evaluation perplexity using half as many tokens" (abstract, Sec. 5.1): tokens
   SWAN needs to first reach AdamW's final validation loss over AdamW's tokens; holds if <= 0.8;
2. optimizer state -- bytes of every tensor reachable from ``optimizer.state`` equal the closed form (no bytes for
   the hidden matrices: SWAN keeps no state there);
3. the analytic weights + gradients + states memory of the paper's LLaMA-1.3B, Adam vs SWAN (shown; Sec. 5.3).

``--full`` trains a 4-layer model for 1,500 steps, sweeps the learning rates of AdamW, SWAN and torch's Muon and
runs the ablation of Sec. 5.2 (GradNorm only / GradWhitening only / both), β = 0.5 and NSDS.

Seeds: ``seed`` shifts the setup's seed (initialisation and training windows; seed 0 is the committed run). One
quick training pair costs ~35 CPU-s, so a run judges the token ratio on one seed (a one-point interval); its
spread across seeds is what ``icml25 sweep swan`` records (``seeds.json``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from icml25_shared.report import Claim, ReproResult
from icml25_shared.training import count_parameters
from icml25_shared.verdict import seed_list
from swan.experiments import (
    FULL,
    LLAMA_1B3,
    QUICK,
    RunSpec,
    Setup,
    Task,
    expected_state_bytes,
    llama_memory_bytes,
    lr_sweep,
    plot_val_loss,
    swan_variants,
    tokens_to_reach,
    train_tiny_llama,
)

__all__ = ["reproduce"]


def reproduce(
    full: bool, out_dir: Path, *, download: bool = False, seed: int = 0, setup: Setup | None = None
) -> ReproResult:
    """Run the experiments of the module docstring and judge the claims; ``setup`` overrides the mode's sizes
    (the tests run a few steps); ``seed`` is added to its seed (initialisation and batches)."""
    setup = setup or (FULL if full else QUICK)
    seeds = seed_list(seed, 1)  # one training pair per run (CPU budget); the sweep gives the spread
    setup = dataclasses.replace(setup, seed=setup.seed + seeds[0])
    task = Task.build(setup, download=download)
    if full:
        sweep = {opt: lr_sweep(task, opt) for opt in ("adamw", "swan", "muon")}
        best = {opt: min(runs, key=lambda r: r.val_loss[-1]) for opt, runs in sweep.items()}
        adamw, swan = best["adamw"], best["swan"]
        variants = swan_variants(task, swan.spec.lr)
        plotted = [*best.values(), *variants.values()]
        runs = [r for rs in sweep.values() for r in rs] + list(variants.values())
    else:
        adamw = train_tiny_llama(RunSpec("AdamW lr=1e-2", "adamw", 1e-2), task)
        swan = train_tiny_llama(RunSpec("SWAN lr=3e-3", "swan", 3e-3, other_lr=3e-3), task)
        plotted = runs = [adamw, swan]

    target = adamw.val_loss[-1]
    crossing = tokens_to_reach(swan.steps, swan.val_loss, target)
    ratio = crossing / adamw.steps[-1]
    plot = plot_val_loss(plotted, task, target, out_dir, "val_loss_vs_tokens", "Tiny Shakespeare, tiny LLaMA")
    claims = [
        Claim.over_seeds(
            "SWAN reaches AdamW's final validation loss with at most 80% of AdamW's tokens",
            0.5,
            [min(ratio, 1e9)],  # never reached: inf, judged as a huge ratio (the interval needs finite values)
            "<=",
            0.8,
            seeds=[setup.seed],
            rule="tokens(SWAN to AdamW's final val loss) / tokens(AdamW) <= 0.8 (our bar, looser than the paper's "
            "0.5 at LLaMA-350M/1.3B on C4, for a 300-step CPU run)",
            short="tokens to AdamW's loss",
            details={
                "adamw_final_val_loss": target,
                "swan_final_val_loss": swan.val_loss[-1],
                "swan_crossing_step": crossing,
                "adamw_lr": adamw.spec.lr,
                "swan_lr": swan.spec.lr,
            },
        )
    ]
    # exact optimizer-state bytes of the two runs just trained, against the closed form
    expected_adamw = expected_state_bytes(task.init_model, "adamw")
    expected_swan = expected_state_bytes(task.init_model, "swan")
    claims.append(
        Claim(
            "no optimizer state on the hidden matrices: SWAN/AdamW state bytes equal the closed form",
            expected_swan / expected_adamw,
            swan.state_bytes / adamw.state_bytes,
            adamw.state_bytes == expected_adamw and swan.state_bytes == expected_swan,
            rule="measured bytes (all tensors in optimizer.state) == 2*4*P_other + 4*T_other vs 2*4*P + 4*T",
            short="state bytes SWAN/AdamW",
            details={
                "swan_state_bytes": swan.state_bytes,
                "adamw_state_bytes": adamw.state_bytes,
                "expected_swan": expected_swan,
                "expected_adamw": expected_adamw,
                "parameters": count_parameters(task.init_model),
            },
        )
    )
    mem = llama_memory_bytes(**LLAMA_1B3)
    claims.append(
        Claim(
            "LLaMA-1.3B weights+grads+optimizer-state memory, SWAN/Adam (analytic, before activations)",
            0.5,
            mem["ratio"],
            None,
            rule="bf16 weights and grads, fp32 Adam states; paper's 50% is measured end to end (with activations)",
            short="LLaMA-1.3B memory SWAN/Adam",
            details={"adam_GB": mem["adam_bytes"] / 1e9, "swan_GB": mem["swan_bytes"] / 1e9, **mem},
        )
    )
    claims.append(
        Claim(
            "final validation loss, SWAN vs AdamW (nats/char)",
            None,
            f"{swan.val_loss[-1]:.3f} vs {target:.3f}",
            None,
            rule="shown: same init, same batches, warm-up 10% + cosine to 10%",
            short="final val loss SWAN vs AdamW",
        )
    )
    if full:
        gn, gw = variants["GradNorm only"].val_loss[-1], variants["GradWhitening only"].val_loss[-1]
        claims.append(
            Claim(
                "ablation (paper Sec. 5.2): both operators beat either alone",
                "both < GradNorm only, both < GradWhitening only",
                ", ".join(f"{k} {r.val_loss[-1]:.3f}" for k, r in {"both": swan, **variants}.items()),
                bool(swan.val_loss[-1] < gn and swan.val_loss[-1] < gw),
                rule="final validation loss at SWAN's best lr",
                short="ablation: both operators needed",
            )
        )
        claims.append(
            Claim(
                "peer: torch.optim.Muon (best lr) final validation loss",
                None,
                f"Muon {best['muon'].val_loss[-1]:.3f}, SWAN {swan.val_loss[-1]:.3f}, AdamW {target:.3f}",
                None,
                rule="shown: lr sweep {1e-3, 3e-3, 1e-2} for each",
                short="peer: Muon final val loss",
            )
        )
    settings = {
        **task.setup.to_dict(),
        "parameters": count_parameters(task.init_model),
        "optimizer_defaults": {"ns_steps": 10, "ns_beta": 0.8, "whitening": "newton_schulz"},
        "runs": {r.spec.name: r.summary() for r in runs},
    }
    return ReproResult("swan", claims, settings=settings, artifacts=[str(plot)])
