"""The paper's experiment at CPU scale: a tiny LLaMA trained on character-level Tiny Shakespeare.

The paper (Sec. 5.1) pre-trains LLaMA 60M-1.3B on C4 in GaLore's benchmark; this module keeps that protocol --
same initialisation and same batches for every optimizer, linear warm-up over 10% of the steps then cosine decay
to 10% of the peak, validation loss at fixed windows -- on a model and data set that train in seconds on a CPU:

>>> from swan.experiments import QUICK, RunSpec, Task, train_tiny_llama
>>> task = Task.build(QUICK)  # doctest: +SKIP
>>> run = train_tiny_llama(RunSpec("SWAN lr=3e-3", "swan", 3e-3), task)  # doctest: +SKIP
>>> run.val_loss[-1]  # doctest: +SKIP

Also here: the two measures the reproduction judges (tokens to reach a target loss, the closed form of the
optimizer-state bytes) and the analytic memory of the paper's LLaMA-1.3B (Sec. 5.3).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from icml25_shared.progress import track
from icml25_shared.report import save_figure, subplots
from icml25_shared.seed import seed_everything
from icml25_shared.text import CharCorpus
from icml25_shared.training import optimizer_state_bytes, warmup_cosine
from icml25_shared.validate import check_choice
from swan.optimizer import SWAN, param_groups

__all__ = [
    "FULL",
    "LLAMA_1B3",
    "QUICK",
    "RunResult",
    "RunSpec",
    "Setup",
    "Task",
    "expected_state_bytes",
    "llama_memory_bytes",
    "lr_sweep",
    "plot_val_loss",
    "swan_variants",
    "tiny_llama_config",
    "tokens_to_reach",
    "train_tiny_llama",
]

logger = logging.getLogger(__name__)

#: LLaMA-1.3B of GaLore's benchmark, the paper's largest model (hidden 2048, MLP 5461, 24 layers, T5 vocabulary)
LLAMA_1B3 = {"vocab": 32000, "hidden": 2048, "intermediate": 5461, "layers": 24}

OptimizerName = Literal["adamw", "swan", "muon"]


@dataclass(frozen=True)
class Setup:
    """Model and training sizes of one experiment; :data:`QUICK` and :data:`FULL` are the reproduction's."""

    hidden_size: int = 64
    """Width of the tiny LLaMA (4 heads)."""
    num_hidden_layers: int = 2
    """Decoder blocks, 7 hidden matrices each (q/k/v/o, gate/up/down)."""
    intermediate_size: int = 176
    """MLP width."""
    seq_len: int = 64
    """Characters per training window; also the model's ``max_position_embeddings``."""
    batch_size: int = 16
    """Windows per step (tokens per step = ``batch_size * seq_len``)."""
    steps: int = 300
    """Optimizer steps; the validation loss is evaluated at step 0 and every 10% of them."""
    val_batches: int = 8
    """Fixed validation batches, evenly spaced over the validation split."""
    seed: int = 0
    """Seeds the initialisation and the training windows (the same for every optimizer)."""

    @property
    def eval_every(self) -> int:
        """Steps between validation evaluations: 10% of training (at least 1)."""
        return max(1, self.steps // 10)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        """The fields plus ``eval_every`` and ``tokens_per_step`` (recorded in the reproduction's settings)."""
        return {**asdict(self), "eval_every": self.eval_every, "tokens_per_step": self.tokens_per_step}


QUICK = Setup()
FULL = Setup(hidden_size=128, num_hidden_layers=4, intermediate_size=352, seq_len=128, steps=1500, val_batches=16)


def tiny_llama_config(
    hidden_size: int = 64, num_hidden_layers: int = 2, intermediate_size: int = 176, max_position_embeddings: int = 64
) -> Any:
    """A ``transformers.LlamaConfig`` for the 65 characters of Tiny Shakespeare (4 heads, untied head): 108,992
    parameters at the defaults, 100,352 of them in the 14 hidden matrices."""
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
class Task:
    """What every run of one experiment shares: the corpus, the initial model and the validation windows."""

    setup: Setup
    corpus: CharCorpus
    init_model: nn.Module
    val_batches: list[tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def build(cls, setup: Setup = QUICK, *, download: bool = False) -> Task:
        """Load Tiny Shakespeare (``download`` is passed to :mod:`icml25_shared.data`) and initialise the model
        with ``setup.seed``."""
        from transformers import LlamaForCausalLM

        corpus = CharCorpus.tinyshakespeare(download=download)
        seed_everything(setup.seed)
        config = tiny_llama_config(setup.hidden_size, setup.num_hidden_layers, setup.intermediate_size, setup.seq_len)
        model = LlamaForCausalLM(config)
        val = corpus.fixed_batches("val", setup.val_batches, setup.batch_size, setup.seq_len)
        return cls(setup, corpus, model, val)


@dataclass
class RunSpec:
    """One training run: ``lr`` for the hidden matrices (every parameter for AdamW), ``other_lr`` for embeddings,
    head and norms (``None``: ``lr``); ``swan_kwargs`` go to :class:`swan.SWAN`."""

    name: str
    optimizer: OptimizerName
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

    def summary(self) -> dict[str, Any]:
        """The validation curve, wall time and state bytes (recorded in the reproduction's settings)."""
        return {k: getattr(self, k) for k in ("steps", "val_loss", "seconds", "state_bytes")}


class _Chain:
    """Several optimizers stepped as one (torch's Muon on the matrices, AdamW on the rest)."""

    def __init__(self, *opts: torch.optim.Optimizer) -> None:
        self.opts = opts

    def zero_grad(self) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=True)

    def step(self) -> None:
        for o in self.opts:
            o.step()


def _build_optimizer(model: nn.Module, spec: RunSpec, total_steps: int) -> tuple[_Chain, list[Any]]:
    """(stepper, [schedulers]) for ``spec``; every optimizer gets the same warm-up + cosine schedule."""
    check_choice("optimizer", spec.optimizer, ("adamw", "swan", "muon"))
    factor = warmup_cosine(total_steps, warmup=0.1, final=0.1)
    other_lr = spec.lr if spec.other_lr is None else spec.other_lr
    if spec.optimizer == "adamw":
        opts = [torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.999), weight_decay=0.0)]
    elif spec.optimizer == "swan":
        opts = [SWAN(param_groups(model, lr=spec.lr, adamw_lr=other_lr), **spec.swan_kwargs)]
    else:  # torch's Muon defaults otherwise: Nesterov momentum 0.95, quintic iteration, 5 steps
        groups = param_groups(model, lr=spec.lr, adamw_lr=other_lr)
        muon = torch.optim.Muon(groups[0]["params"], lr=spec.lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
        opts = [muon, torch.optim.AdamW(groups[1]["params"], lr=other_lr, weight_decay=0.0)]
    return _Chain(*opts), [torch.optim.lr_scheduler.LambdaLR(o, factor) for o in opts]


def _lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def _val_loss(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    model.eval()
    total = sum(_lm_loss(model, x, y).item() for x, y in batches)
    model.train()
    return total / len(batches)


def train_tiny_llama(spec: RunSpec, task: Task) -> RunResult:
    """Train a copy of ``task.init_model`` with ``spec`` on windows drawn from a generator seeded with
    ``task.setup.seed`` (the same batches for every spec); validation loss at step 0 and every 10% of training."""
    st = task.setup
    model = copy.deepcopy(task.init_model)
    model.train()
    stepper, scheds = _build_optimizer(model, spec, st.steps)
    gen = torch.Generator().manual_seed(st.seed)
    eval_steps, val, train = [0], [_val_loss(model, task.val_batches)], []
    t0 = time.perf_counter()
    for step in track(range(1, st.steps + 1), spec.name, total=st.steps):
        x, y = task.corpus.get_batch("train", st.batch_size, st.seq_len, gen)
        loss = _lm_loss(model, x, y)
        stepper.zero_grad()
        loss.backward()
        stepper.step()
        for s in scheds:
            s.step()
        train.append(loss.item())
        if step % st.eval_every == 0 or step == st.steps:
            eval_steps.append(step)
            val.append(_val_loss(model, task.val_batches))
    seconds = time.perf_counter() - t0
    state = sum(optimizer_state_bytes(o) for o in stepper.opts)
    logger.info("%s: final val %.4f in %.1fs", spec.name, val[-1], seconds)
    return RunResult(spec, eval_steps, val, train, state, seconds)


def lr_sweep(task: Task, optimizer: OptimizerName, lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2)) -> list[RunResult]:
    """One run per learning rate (SWAN and Muon use the same lr on the AdamW side)."""
    names = {"adamw": "AdamW", "swan": "SWAN", "muon": "Muon"}
    return [train_tiny_llama(RunSpec(f"{names[optimizer]} lr={lr:g}", optimizer, lr), task) for lr in lrs]


def swan_variants(task: Task, lr: float) -> dict[str, RunResult]:
    """The paper's ablation (Sec. 5.2: GradNorm only, GradWhitening only) plus β = 0.5 and NSDS, at ``lr``."""
    variants = {
        "GradNorm only": ("SWAN GradNorm only", {"whiten": False}),
        "GradWhitening only": ("SWAN GradWhitening only", {"normalize": False}),
        "beta 0.5": ("SWAN beta=0.5", {"ns_beta": 0.5}),
        "NSDS": ("SWAN NSDS", {"whitening": "nsds"}),
    }
    return {
        key: train_tiny_llama(RunSpec(f"{name} lr={lr:g}", "swan", lr, swan_kwargs=kw), task)
        for key, (name, kw) in variants.items()
    }


def tokens_to_reach(steps: list[int], losses: list[float], target: float) -> float:
    """The first (fractional) step at which the piecewise-linear curve ``(steps, losses)`` reaches ``target``;
    ``inf`` if it never does."""
    if losses[0] <= target:
        return float(steps[0])
    for (s0, l0), (s1, l1) in zip(zip(steps, losses), zip(steps[1:], losses[1:])):
        if l1 <= target:
            return s0 + (s1 - s0) * (l0 - target) / (l0 - l1)
    return math.inf


def expected_state_bytes(model: nn.Module, optimizer: Literal["adamw", "swan"]) -> int:
    """Closed form of the state bytes: AdamW keeps 2 moments per parameter plus a 4-byte ``step`` per tensor; SWAN
    keeps the same only for its AdamW group (embeddings, head, norms) and nothing for the hidden matrices."""
    check_choice("optimizer", optimizer, ("adamw", "swan"))
    params = list(model.parameters()) if optimizer == "adamw" else param_groups(model)[-1]["params"]
    return sum(2 * p.numel() * p.element_size() + 4 for p in params)


def llama_memory_bytes(vocab: int, hidden: int, intermediate: int, layers: int) -> dict[str, float]:
    """Weights + gradients (bf16) + optimizer states (fp32) of a LLaMA, before activations, for Adam and SWAN
    (SWAN keeps Adam states only for the embeddings, the head and the norms; paper Sec. 5.3)."""
    matrices = layers * (4 * hidden * hidden + 3 * hidden * intermediate)
    other = 2 * vocab * hidden + (2 * layers + 1) * hidden
    total = matrices + other
    adam = total * (2 + 2) + total * 8
    swan = total * (2 + 2) + other * 8
    return {"parameters": total, "adam_bytes": adam, "swan_bytes": swan, "ratio": swan / adam}


def plot_val_loss(runs: list[RunResult], task: Task, target: float, out_dir: Path, name: str, title: str) -> Path:
    """Validation loss against training tokens, one line per run, AdamW's final loss dashed; saved as PNG."""
    fig, ax = subplots()
    for r in runs:
        ax.plot([s * task.setup.tokens_per_step for s in r.steps], r.val_loss, marker="o", ms=3, label=r.spec.name)
    ax.axhline(target, color="grey", ls="--", lw=1, label=f"AdamW final {target:.3f}")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title(title)
    finals = [v for r in runs for v in r.val_loss[1:]]
    ax.set_ylim(min(finals) - 0.05, min(max(finals), target + 1.0))
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir, name)
