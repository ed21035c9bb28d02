"""``icml25 reproduce swan``: SWAN vs AdamW on a tiny LLaMA, character-level Tiny Shakespeare (spec §6).

Quick mode (under a minute on 2 CPU cores) checks, on the same initialisation and the same batches:

1. token efficiency -- the paper's "same perplexity with half the tokens": tokens SWAN needs to first reach
   AdamW's final validation loss (linear interpolation between evaluations) over AdamW's tokens; holds if <= 0.8;
2. optimizer state -- bytes of every tensor reachable from ``optimizer.state`` equal the closed form (no bytes
   for the hidden matrices);
3. the analytic weights + gradients + states memory of the paper's LLaMA-1.3B, Adam vs SWAN (shown).

``--full`` uses a 4-layer model for 1,500 steps, sweeps the learning rates of AdamW, SWAN and torch's Muon, and
runs the paper's §5.2 ablation (GradNorm only / whitening only / both), β = 0.5 and NSDS.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from icml25_shared.progress import track
from icml25_shared.report import Claim, ReproResult, results_dir, save_figure, subplots
from icml25_shared.seed import seed_everything
from icml25_shared.text import CharCorpus
from icml25_shared.training import count_parameters, optimizer_state_bytes, warmup_cosine
from swan.optimizer import SWAN, param_groups

__all__ = [
    "RunSpec",
    "RunResult",
    "tiny_llama_config",
    "train_run",
    "tokens_to_reach",
    "expected_state_bytes",
    "llama_memory_bytes",
    "reproduce",
]

logger = logging.getLogger(__name__)

# LLaMA-1.3B of the GaLore benchmark the paper reports in (hidden 2048, MLP 5461, 24 layers, T5 vocabulary 32k)
LLAMA_1B3 = {"vocab": 32000, "hidden": 2048, "intermediate": 5461, "layers": 24}


def tiny_llama_config(
    hidden_size: int = 64, num_hidden_layers: int = 2, intermediate_size: int = 176, max_position_embeddings: int = 64
) -> Any:
    """The spec's tiny ``transformers.LlamaConfig`` (65 characters, 4 heads, untied head): 108,992 parameters at
    the defaults, 100,352 of them in the 14 hidden matrices."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=65,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
    )


@dataclass
class RunSpec:
    """One training run: ``optimizer`` in ``{"adamw", "swan", "muon"}``; ``lr`` for the matrices (all parameters
    for AdamW), ``other_lr`` for embeddings/head/norms; ``swan_kwargs`` go to :class:`swan.SWAN`."""

    name: str
    optimizer: str
    lr: float
    other_lr: float | None = None
    swan_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    """Validation curve (``steps``, ``val_loss``), training losses, optimizer-state bytes and wall time."""

    spec: RunSpec
    steps: list[int]
    val_loss: list[float]
    train_loss: list[float]
    state_bytes: int
    seconds: float


class _Pair:
    """Two optimizers stepped together (torch's Muon on the matrices, AdamW on the rest)."""

    def __init__(self, *opts: torch.optim.Optimizer) -> None:
        self.opts = opts

    def zero_grad(self) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=True)

    def step(self) -> None:
        for o in self.opts:
            o.step()


def _build_optimizer(model: nn.Module, spec: RunSpec, total_steps: int) -> tuple[Any, list[Any], list[Any]]:
    """(stepper, [optimizers], [schedulers]) for ``spec``; every optimizer gets the same warm-up + cosine."""
    factor = warmup_cosine(total_steps, warmup=0.1, final=0.1)
    other_lr = spec.lr if spec.other_lr is None else spec.other_lr
    if spec.optimizer == "adamw":
        opts = [torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.999), weight_decay=0.0)]
    elif spec.optimizer == "swan":
        opts = [SWAN(param_groups(model, lr=spec.lr, adamw_lr=other_lr), **spec.swan_kwargs)]
    elif spec.optimizer == "muon":
        groups = param_groups(model, lr=spec.lr, adamw_lr=other_lr)
        muon = torch.optim.Muon(
            groups[0]["params"], lr=spec.lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw"
        )  # torch's defaults otherwise: momentum 0.95 (Nesterov), quintic, 5 steps
        opts = [muon, torch.optim.AdamW(groups[1]["params"], lr=other_lr, weight_decay=0.0)]
    else:
        raise ValueError(f"optimizer must be 'adamw', 'swan' or 'muon', got {spec.optimizer!r}")
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, factor) for o in opts]
    return _Pair(*opts), opts, scheds


@torch.no_grad()
def _val_loss(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    model.eval()
    total = 0.0
    for x, y in batches:
        logits = model(input_ids=x).logits
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    model.train()
    return total / len(batches)


def train_run(
    spec: RunSpec,
    init_model: nn.Module,
    corpus: CharCorpus,
    *,
    steps: int,
    batch_size: int,
    seq_len: int,
    seed: int,
    eval_every: int,
    val_batches: list[tuple[torch.Tensor, torch.Tensor]],
) -> RunResult:
    """Train a copy of ``init_model`` with ``spec`` on seeded training windows (the same for every spec with the
    same ``seed``); evaluate the validation loss at step 0 and every ``eval_every`` steps."""
    model = copy.deepcopy(init_model)
    model.train()
    stepper, opts, scheds = _build_optimizer(model, spec, steps)
    gen = torch.Generator().manual_seed(seed)
    eval_steps, val, train = [0], [_val_loss(model, val_batches)], []
    t0 = time.perf_counter()
    for step in track(range(1, steps + 1), f"{spec.name}", total=steps):
        x, y = corpus.get_batch("train", batch_size, seq_len, gen)
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        stepper.zero_grad()
        loss.backward()
        stepper.step()
        for s in scheds:
            s.step()
        train.append(loss.item())
        if step % eval_every == 0 or step == steps:
            eval_steps.append(step)
            val.append(_val_loss(model, val_batches))
    seconds = time.perf_counter() - t0
    state = sum(optimizer_state_bytes(o) for o in opts)
    return RunResult(spec, eval_steps, val, train, state, seconds)


def tokens_to_reach(steps: list[int], losses: list[float], target: float) -> float:
    """The first (fractional) step at which the piecewise-linear curve ``(steps, losses)`` reaches ``target``;
    ``inf`` if it never does."""
    if losses[0] <= target:
        return float(steps[0])
    for (s0, l0), (s1, l1) in zip(zip(steps, losses), zip(steps[1:], losses[1:])):
        if l1 <= target:
            return s0 + (s1 - s0) * (l0 - target) / (l0 - l1)
    return math.inf


def expected_state_bytes(model: nn.Module, optimizer: str) -> int:
    """Closed form of the state bytes: AdamW keeps 2 moments per parameter plus a 4-byte ``step`` per tensor; SWAN
    keeps the same only for its AdamW group (embeddings, head, norms) and nothing for the hidden matrices."""
    params = list(model.parameters()) if optimizer == "adamw" else param_groups(model)[-1]["params"]
    return sum(2 * p.numel() * p.element_size() + 4 for p in params)


def llama_memory_bytes(vocab: int, hidden: int, intermediate: int, layers: int) -> dict[str, float]:
    """Weights + gradients (bf16) + optimizer states (fp32) of a LLaMA, before activations, for Adam and SWAN
    (SWAN keeps Adam states only for the embeddings, the head and the norms)."""
    matrices = layers * (4 * hidden * hidden + 3 * hidden * intermediate)
    other = 2 * vocab * hidden + (2 * layers + 1) * hidden
    total = matrices + other
    adam = total * (2 + 2) + total * 8
    swan = total * (2 + 2) + other * 8
    return {"parameters": total, "adam_bytes": adam, "swan_bytes": swan, "ratio": swan / adam}


def _plot(runs: list[RunResult], tokens_per_step: int, target: float, out_dir: Path, name: str, title: str) -> Path:
    fig, ax = subplots()
    for r in runs:
        ax.plot([s * tokens_per_step for s in r.steps], r.val_loss, marker="o", ms=3, label=r.spec.name)
    ax.axhline(target, color="grey", ls="--", lw=1, label=f"AdamW final {target:.3f}")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title(title)
    finals = [v for r in runs for v in r.val_loss[1:]]
    ax.set_ylim(min(finals) - 0.05, min(max(finals), target + 1.0))
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir, name)


def _settings(full: bool) -> dict[str, Any]:
    if full:
        return {
            "model": {"hidden_size": 128, "num_hidden_layers": 4, "intermediate_size": 352, "max_pos": 128},
            "steps": 1500,
            "batch_size": 16,
            "seq_len": 128,
            "eval_every": 150,
            "val_batches": 16,
        }
    return {
        "model": {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 176, "max_pos": 64},
        "steps": 300,
        "batch_size": 16,
        "seq_len": 64,
        "eval_every": 30,
        "val_batches": 8,
    }


def reproduce(
    full: bool = False,
    out_dir: Path | None = None,
    *,
    seed: int = 0,
    steps: int | None = None,
    val_batches: int | None = None,
) -> ReproResult:
    """Run the reproduction (see the module docstring). ``steps`` and ``val_batches`` shorten the runs (tests);
    with ``steps`` set, the validation loss is evaluated every ``max(1, steps // 10)`` steps."""
    t_start = time.perf_counter()
    out_dir = Path(out_dir) if out_dir is not None else results_dir("swan")
    st = _settings(full)
    if steps is not None:
        st["steps"] = steps
        st["eval_every"] = max(1, steps // 10)
    if val_batches is not None:
        st["val_batches"] = val_batches
    mc = st["model"]
    corpus = CharCorpus.tinyshakespeare()
    seed_everything(seed)
    from transformers import LlamaForCausalLM

    config = tiny_llama_config(mc["hidden_size"], mc["num_hidden_layers"], mc["intermediate_size"], mc["max_pos"])
    init_model = LlamaForCausalLM(config)
    val_batches = corpus.fixed_batches("val", st["val_batches"], st["batch_size"], st["seq_len"])
    common = {
        "corpus": corpus,
        "steps": st["steps"],
        "batch_size": st["batch_size"],
        "seq_len": st["seq_len"],
        "seed": seed,
        "eval_every": st["eval_every"],
        "val_batches": val_batches,
    }
    tokens_per_step = st["batch_size"] * st["seq_len"]

    def run(spec: RunSpec) -> RunResult:
        r = train_run(spec, init_model, **common)
        logger.info("%s: final val %.4f in %.1fs", spec.name, r.val_loss[-1], r.seconds)
        return r

    if full:
        lrs = (1e-3, 3e-3, 1e-2)
        sweep = {
            "adamw": [run(RunSpec(f"AdamW lr={lr:g}", "adamw", lr)) for lr in lrs],
            "swan": [run(RunSpec(f"SWAN lr={lr:g}", "swan", lr)) for lr in lrs],
            "muon": [run(RunSpec(f"Muon lr={lr:g}", "muon", lr)) for lr in lrs],
        }
        best = {k: min(v, key=lambda r: r.val_loss[-1]) for k, v in sweep.items()}
        adamw, swan = best["adamw"], best["swan"]
        lr_s = swan.spec.lr
        extra = {
            "GradNorm only": run(
                RunSpec(f"SWAN GradNorm only lr={lr_s:g}", "swan", lr_s, swan_kwargs={"whiten": False})
            ),
            "GradWhitening only": run(
                RunSpec(f"SWAN GradWhitening only lr={lr_s:g}", "swan", lr_s, swan_kwargs={"normalize": False})
            ),
            "beta 0.5": run(RunSpec(f"SWAN beta=0.5 lr={lr_s:g}", "swan", lr_s, swan_kwargs={"ns_beta": 0.5})),
            "NSDS": run(RunSpec(f"SWAN NSDS lr={lr_s:g}", "swan", lr_s, swan_kwargs={"whitening": "nsds"})),
        }
        plotted = [*best.values(), *extra.values()]
    else:
        adamw = run(RunSpec("AdamW lr=1e-2", "adamw", 1e-2))
        swan = run(RunSpec("SWAN lr=3e-3", "swan", 3e-3, other_lr=3e-3))
        sweep, extra, plotted = {}, {}, [adamw, swan]

    target = adamw.val_loss[-1]
    crossing = tokens_to_reach(swan.steps, swan.val_loss, target)
    ratio = crossing / adamw.steps[-1]
    artifacts = [
        str(_plot(plotted, tokens_per_step, target, out_dir, "val_loss_vs_tokens", "Tiny Shakespeare, tiny LLaMA"))
    ]
    claims = [
        Claim(
            "SWAN reaches AdamW's final validation loss with at most 80% of AdamW's tokens",
            0.5,
            ratio,
            bool(ratio <= 0.8),
            rule="tokens(SWAN to AdamW's final val loss) / tokens(AdamW) <= 0.8; paper 0.5 at LLaMA-350M/1.3B on C4",
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
    expected_adamw = expected_state_bytes(init_model, "adamw")
    expected_swan = expected_state_bytes(init_model, "swan")
    holds_bytes = adamw.state_bytes == expected_adamw and swan.state_bytes == expected_swan
    claims.append(
        Claim(
            "no optimizer state on the hidden matrices: SWAN/AdamW state bytes equal the closed form",
            expected_swan / expected_adamw,
            swan.state_bytes / adamw.state_bytes,
            holds_bytes,
            rule="measured bytes (all tensors in optimizer.state) == 2*4*P_other + 4*T_other vs 2*4*P + 4*T",
            details={
                "swan_state_bytes": swan.state_bytes,
                "adamw_state_bytes": adamw.state_bytes,
                "expected_swan": expected_swan,
                "expected_adamw": expected_adamw,
                "parameters": count_parameters(init_model),
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
            details={"adam_GB": mem["adam_bytes"] / 1e9, "swan_GB": mem["swan_bytes"] / 1e9, **mem},
        )
    )
    claims.append(
        Claim(
            "final validation loss, SWAN vs AdamW (nats/char)",
            None,
            f"{swan.val_loss[-1]:.3f} vs {adamw.val_loss[-1]:.3f}",
            None,
            rule="shown: same init, same batches, warm-up 10% + cosine to 10%",
        )
    )
    if full:
        claims.append(
            Claim(
                "ablation (paper §5.2): both operators beat either alone",
                "both < GradNorm only, both < GradWhitening only",
                ", ".join(f"{k} {r.val_loss[-1]:.3f}" for k, r in {"both": swan, **extra}.items()),
                bool(
                    swan.val_loss[-1] < extra["GradNorm only"].val_loss[-1]
                    and swan.val_loss[-1] < extra["GradWhitening only"].val_loss[-1]
                ),
                rule="final validation loss at SWAN's best lr",
            )
        )
        claims.append(
            Claim(
                "peer: torch.optim.Muon (best lr) final validation loss",
                None,
                f"Muon {best['muon'].val_loss[-1]:.3f}, SWAN {swan.val_loss[-1]:.3f}, AdamW {target:.3f}",
                None,
                rule="shown: lr sweep {1e-3, 3e-3, 1e-2} for each",
            )
        )
    runs = [r for rs in sweep.values() for r in rs] + list(extra.values()) if full else plotted
    settings = {
        **st,
        "seed": seed,
        "tokens_per_step": tokens_per_step,
        "parameters": count_parameters(init_model),
        "optimizer_defaults": {"ns_steps": 10, "ns_beta": 0.8, "whitening": "newton_schulz"},
        "runs": {
            r.spec.name: {"steps": r.steps, "val_loss": r.val_loss, "seconds": r.seconds, "state_bytes": r.state_bytes}
            for r in runs
        },
    }
    result = ReproResult(
        "swan",
        claims,
        mode="full" if full else "quick",
        settings=settings,
        artifacts=artifacts,
    )
    result.runtime_s = time.perf_counter() - t_start
    return result
