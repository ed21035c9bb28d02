"""A tiny LLaMA trained on character-level Tiny Shakespeare: the CPU-scale language-model task of the optimizer and
architecture packages (swan, frugal, mohd, downscaling).

The papers pre-train LLaMA 60M-1.3B on C4 in GaLore's protocol; this keeps the protocol -- the same initialisation
and the same training windows for every method, validation loss on fixed windows at step 0 and every 10% of
training -- on a model and data set that train in seconds on one CPU thread::

    task = CharLMTask.build(CharLMSetup(steps=300))
    model = copy.deepcopy(task.init_model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    curve = train_char_lm(model, task, [opt], [LambdaLR(opt, warmup_cosine(300, warmup=0.1, final=0.1))])
    curve.val_loss[-1], tokens_to_reach(curve.steps, curve.val_loss, target=2.1)

Packages add their own fields by subclassing :class:`CharLMSetup` (a frozen dataclass) and their own optimizers;
nothing here is specific to one paper. Needs torch (``icml25-shared[torch]``) and, for the LLaMA, transformers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from icml25_shared.progress import track
from icml25_shared.report import save_figure, subplots
from icml25_shared.seed import seed_everything
from icml25_shared.text import CharCorpus
from icml25_shared.validate import check_int

__all__ = [
    "CharLMSetup",
    "CharLMTask",
    "LMCurve",
    "tiny_llama_config",
    "lm_loss",
    "val_loss",
    "train_char_lm",
    "tokens_to_reach",
    "plot_val_loss",
    "tiny_llama_with_grads",
    "LlamaMatrixStack",
]


@dataclass(frozen=True)
class CharLMSetup:
    """Model and training sizes of one experiment (subclass it to add a method's own fields)."""

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
    """Seeds the initialisation and the training windows (the same for every method)."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_hidden_layers", "intermediate_size", "seq_len", "batch_size", "steps"):
            check_int(name, getattr(self, name), min=1)
        check_int("val_batches", self.val_batches, min=1)
        check_int("seed", self.seed, min=0)

    @property
    def eval_every(self) -> int:
        """Steps between validation evaluations: 10% of training (at least 1)."""
        return max(1, self.steps // 10)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        """The fields plus ``eval_every`` and ``tokens_per_step`` (for a reproduction's settings)."""
        return {**asdict(self), "eval_every": self.eval_every, "tokens_per_step": self.tokens_per_step}


def tiny_llama_config(
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    intermediate_size: int = 176,
    max_position_embeddings: int = 64,
    *,
    vocab_size: int = 65,
    num_attention_heads: int = 4,
) -> Any:
    """A ``transformers.LlamaConfig`` for Tiny Shakespeare's 65 characters (4 heads, untied head): 108,992
    parameters at the defaults, 100,352 of them in the 14 hidden matrices."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
    )


@dataclass
class CharLMTask:
    """What every run of one experiment shares: the corpus, the initial model and the validation windows."""

    setup: CharLMSetup
    corpus: CharCorpus
    init_model: nn.Module
    val_batches: list[tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def build(cls, setup: CharLMSetup | None = None, *, download: bool = False, model: Any = None) -> CharLMTask:
        """Load Tiny Shakespeare (``download`` goes to :mod:`icml25_shared.data`) and initialise the model with
        ``setup.seed``: ``model(setup)`` when given (another architecture), else a tiny ``LlamaForCausalLM``."""
        setup = setup or CharLMSetup()
        corpus = CharCorpus.tinyshakespeare(download=download)
        seed_everything(setup.seed)
        if model is None:
            from transformers import LlamaForCausalLM

            cfg = tiny_llama_config(setup.hidden_size, setup.num_hidden_layers, setup.intermediate_size, setup.seq_len)
            init = LlamaForCausalLM(cfg)
        else:
            init = model(setup)
        val = corpus.fixed_batches("val", setup.val_batches, setup.batch_size, setup.seq_len)
        return cls(setup, corpus, init, val)


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-character cross-entropy (nats) of a causal LM returning ``.logits``."""
    logits = model(input_ids=x).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def val_loss(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Mean :func:`lm_loss` over ``batches`` in eval mode, without gradients (the model is put back in train mode)."""
    model.eval()
    with torch.no_grad():
        total = sum(lm_loss(model, x, y).item() for x, y in batches)
    model.train()
    return total / len(batches)


@dataclass
class LMCurve:
    """Validation losses at ``steps`` (step 0 first), every training loss, and the training wall time."""

    steps: list[int]
    val_loss: list[float]
    train_loss: list[float]
    seconds: float


def train_char_lm(
    model: nn.Module,
    task: CharLMTask,
    optimizers: Sequence[Any],
    schedulers: Sequence[Any] = (),
    *,
    name: str = "training",
    loss_fn: Any = None,
) -> LMCurve:
    """Train ``model`` in place for ``task.setup.steps`` steps on windows drawn from a generator seeded with
    ``task.setup.seed`` (the same windows for every method); each step zeroes every optimizer's gradients, backs
    the loss up, steps every optimizer, then every scheduler. ``loss_fn(model, x, y)`` defaults to
    :func:`lm_loss` (an architecture with an auxiliary loss passes its own)."""
    st = task.setup
    loss_fn = loss_fn or lm_loss
    model.train()
    gen = torch.Generator().manual_seed(st.seed)
    eval_steps, val, train = [0], [val_loss(model, task.val_batches)], []
    t0 = time.perf_counter()
    for step in track(range(1, st.steps + 1), name, total=st.steps):
        x, y = task.corpus.get_batch("train", st.batch_size, st.seq_len, gen)
        loss = loss_fn(model, x, y)
        for o in optimizers:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in optimizers:
            o.step()
        for s in schedulers:
            s.step()
        train.append(loss.item())
        if step % st.eval_every == 0 or step == st.steps:
            eval_steps.append(step)
            val.append(val_loss(model, task.val_batches))
    return LMCurve(eval_steps, val, train, time.perf_counter() - t0)


def tokens_to_reach(steps: Sequence[int], losses: Sequence[float], target: float) -> float:
    """The first (fractional) step at which the piecewise-linear curve ``(steps, losses)`` reaches ``target``;
    ``inf`` if it never does."""
    if losses[0] <= target:
        return float(steps[0])
    for (s0, l0), (s1, l1) in zip(zip(steps, losses), zip(steps[1:], losses[1:])):
        if l1 <= target:
            return s0 + (s1 - s0) * (l0 - target) / (l0 - l1)
    return math.inf


def plot_val_loss(
    curves: Sequence[tuple[str, Sequence[int], Sequence[float]]],
    tokens_per_step: int,
    out_dir: str | Path,
    name: str,
    title: str,
    *,
    target: float | None = None,
    target_label: str = "target",
) -> Path:
    """Validation loss against training tokens, one line per ``(label, steps, val_loss)``, an optional dashed
    target; saved as ``out_dir/name.png``."""
    fig, ax = subplots()
    for label, steps, losses in curves:
        ax.plot([s * tokens_per_step for s in steps], losses, marker="o", ms=3, label=label)
    finals = [v for _, _, losses in curves for v in losses[1:]]
    top = min(max(finals), min(finals) + 1.5)
    if target is not None:
        ax.axhline(target, color="grey", ls="--", lw=1, label=f"{target_label} {target:.3f}")
        top = min(top, target + 1.0)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title(title)
    ax.set_ylim(min(finals) - 0.05, top)
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir, name)


def tiny_llama_with_grads(device: Any = None, *, seed: int = 0) -> nn.Module:
    """The default tiny LLaMA (:func:`tiny_llama_config`) with the gradients of one random 16 x 64 batch: a fixed
    model for timing optimizer steps."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_llama_config()).to(device)
    x = torch.randint(0, 65, (16, 64), device=device)
    logits = model(input_ids=x).logits
    torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 65), x[:, 1:].reshape(-1)).backward()
    return model


class LlamaMatrixStack(nn.Module):
    """The 7 hidden matrices (q/k/v/o 512 x 512, gate/up 1376 x 512, down 512 x 1376) of ``layers`` LLaMA-60M
    blocks, random weights (std 0.02) and random gradients: optimizer-step timing at a realistic size."""

    def __init__(self, layers: int, device: Any = None, *, seed: int = 0) -> None:
        super().__init__()
        check_int("layers", layers, min=1)
        g = torch.Generator().manual_seed(seed)
        shapes = [(512, 512)] * 4 + [(1376, 512)] * 2 + [(512, 1376)]
        self.mats = nn.ParameterList(
            nn.Parameter(torch.randn(s, generator=g).mul_(0.02).to(device)) for _ in range(layers) for s in shapes
        )
        for p in self.mats:
            p.grad = torch.randn(p.shape, generator=g).to(device)
