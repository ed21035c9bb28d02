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
import dataclasses
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from icml25_shared.charlm import CharLMSetup, CharLMTask, tiny_llama_config, tokens_to_reach, train_char_lm
from icml25_shared.charlm import plot_val_loss as plot_lm_curves
from icml25_shared.parts import Parts
from icml25_shared.training import optimizer_state_bytes, warmup_cosine
from icml25_shared.validate import check_choice
from swan.optimizer import SWAN, param_groups

__all__ = [
    "FULL",
    "FULL_LRS",
    "LLAMA_1B3",
    "QUICK",
    "RunResult",
    "RunSpec",
    "Runs",
    "Setup",
    "ablation_specs",
    "Task",
    "expected_state_bytes",
    "llama_memory_bytes",
    "lr_specs",
    "plot_val_loss",
    "tiny_llama_config",
    "tokens_to_reach",
    "train_tiny_llama",
]

logger = logging.getLogger(__name__)

#: LLaMA-1.3B of GaLore's benchmark, the paper's largest model (hidden 2048, MLP 5461, 24 layers, T5 vocabulary)
LLAMA_1B3 = {"vocab": 32000, "hidden": 2048, "intermediate": 5461, "layers": 24}

OptimizerName = Literal["adamw", "swan", "muon"]


class Setup(CharLMSetup):
    """Model and training sizes of one experiment (:class:`icml25_shared.charlm.CharLMSetup`'s fields);
    :data:`QUICK` and :data:`FULL` are the reproduction's."""


QUICK = Setup()
#: ``--full``: 3 blocks of width 96 (MLP 256, the LLaMA ratio 8/3), 400 steps of 16 x 64 characters (410K tokens)
FULL = Setup(hidden_size=96, num_hidden_layers=3, intermediate_size=256, seq_len=64, steps=400, val_batches=16)
#: learning rates ``--full`` sweeps on its first seed (SWAN and Muon use the same lr on their AdamW side)
FULL_LRS: dict[OptimizerName, tuple[float, ...]] = {
    "adamw": (1e-3, 3e-3, 1e-2, 3e-2),
    "swan": (1e-3, 3e-3, 1e-2, 3e-2),
    "muon": (3e-3, 1e-2, 3e-2),
}


class Task(CharLMTask):
    """What every run shares: corpus, initial model, validation windows (:class:`icml25_shared.charlm.CharLMTask`)."""

    @classmethod
    def build(cls, setup: Setup = QUICK, *, download: bool = False) -> Task:  # type: ignore[override]
        """Load Tiny Shakespeare (``download`` is passed to :mod:`icml25_shared.data`) and initialise the tiny LLaMA
        with ``setup.seed``."""
        return super().build(setup, download=download)  # type: ignore[return-value]


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
    """Validation curve (``steps``, ``val_loss``), training losses, optimizer-state bytes, wall time and the task's
    seed."""

    spec: RunSpec
    steps: list[int]
    val_loss: list[float]
    train_loss: list[float]
    state_bytes: int
    seconds: float
    seed: int = 0

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


def train_tiny_llama(spec: RunSpec, task: Task) -> RunResult:
    """Train a copy of ``task.init_model`` with ``spec`` on windows drawn from a generator seeded with
    ``task.setup.seed`` (the same batches for every spec); validation loss at step 0 and every 10% of training."""
    model = copy.deepcopy(task.init_model)
    stepper, scheds = _build_optimizer(model, spec, task.setup.steps)
    curve = train_char_lm(model, task, stepper.opts, scheds, name=spec.name)
    state = sum(optimizer_state_bytes(o) for o in stepper.opts)
    logger.info("%s: final val %.4f in %.1fs", spec.name, curve.val_loss[-1], curve.seconds)
    return RunResult(spec, curve.steps, curve.val_loss, curve.train_loss, state, curve.seconds, task.setup.seed)


def lr_specs(optimizer: OptimizerName, lrs: tuple[float, ...]) -> list[RunSpec]:
    """One run per learning rate, named ``"<Optimizer> lr=<lr>"``."""
    names = {"adamw": "AdamW", "swan": "SWAN", "muon": "Muon"}
    return [RunSpec(f"{names[optimizer]} lr={lr:g}", optimizer, lr) for lr in lrs]


def ablation_specs(lr: float) -> dict[str, RunSpec]:
    """The paper's ablation (Sec. 5.2) at ``lr``: GradNorm only (no whitening), GradWhitening only (no GradNorm)."""
    return {
        "GradNorm only": RunSpec(f"SWAN GradNorm only lr={lr:g}", "swan", lr, swan_kwargs={"whiten": False}),
        "GradWhitening only": RunSpec(
            f"SWAN GradWhitening only lr={lr:g}", "swan", lr, swan_kwargs={"normalize": False}
        ),
    }


class Runs:
    """Training runs of one :class:`Setup` on several seeds; with ``parts`` every (run, seed) is stored when it
    finishes and reused by a later call (a killed ``--full`` resumes where it stopped).

    Args:
        setup: the sizes; its ``seed`` is replaced by the seed of each run.
        parts: where finished runs are stored (:class:`icml25_shared.parts.Parts`), or ``None`` to keep nothing.
        download: passed to :mod:`icml25_shared.data` when Tiny Shakespeare is not on the machine.
    """

    def __init__(self, setup: Setup, *, parts: Parts | None = None, download: bool = False) -> None:
        self.setup, self.parts, self.download = setup, parts, download
        self._tasks: dict[int, Task] = {}
        self._done: dict[str, RunResult] = {}

    def task(self, seed: int) -> Task:
        """The task of ``setup`` with ``seed`` (initial model and training windows), built once."""
        if seed not in self._tasks:
            self._tasks[seed] = Task.build(dataclasses.replace(self.setup, seed=seed), download=self.download)
        return self._tasks[seed]

    def run(self, spec: RunSpec, seed: int) -> RunResult:
        """``spec`` trained on the task of ``seed``.

        Args:
            spec: optimizer, learning rates and SWAN options.
            seed: the task's seed (initial model and training windows).

        Returns:
            The run: loaded from its part when it finished before under the same sizes, else trained (and stored).
        """

        def train() -> dict[str, Any]:
            r = train_tiny_llama(spec, self.task(seed))
            return {k: getattr(r, k) for k in ("steps", "val_loss", "train_loss", "state_bytes", "seconds")}

        name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{spec.name}_seed{seed}")
        if name not in self._done:  # asked twice in one call (the best lr's pair on the first seed): trained once
            found = self.parts.run(name, train) if self.parts is not None else train()
            self._done[name] = RunResult(spec, **found, seed=seed)
        return self._done[name]


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
    curves = [(r.spec.name, r.steps, r.val_loss) for r in runs]
    return plot_lm_curves(
        curves, task.setup.tokens_per_step, out_dir, name, title, target=target, target_label="AdamW final"
    )
