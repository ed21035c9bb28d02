"""The paper's pre-training comparison at CPU scale: a tiny LLaMA on character-level Tiny Shakespeare.

The paper pre-trains LLaMA 60M-1B on C4 in GaLore's protocol; this module keeps the protocol -- same
initialisation and batches for every optimizer, linear warm-up over 10% of the steps then cosine decay to 10%,
validation loss on fixed windows, ρ = 0.25 -- on a model that trains in seconds on a CPU, and runs the peers as
their users would: ``torch.optim.AdamW`` and ``galore_torch.GaLoreAdamW`` (one group per matrix shape, rank
``round(ρ·min(m, n))``, GaLore's scale α = 0.25).

>>> from frugal.experiments import QUICK, RunSpec, Task, train_tiny_llama
>>> task = Task.build(QUICK)  # doctest: +SKIP
>>> run = train_tiny_llama(RunSpec("FRUGAL-SVD", "frugal", 1e-2, {"selector": "svd"}), task)  # doctest: +SKIP

Also here: optimizer-state bytes that also look inside galore-torch's projector objects, their closed forms, and
the analytic memory of GaLore's LLaMA-130M and 1B configurations.
"""

from __future__ import annotations

import copy
import logging
import multiprocessing as mp
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import torch
from torch import nn

from frugal.memory import adamw_bytes, llama_matrix_shapes, model_state_bytes
from frugal.optimizer import FRUGAL, param_groups
from icml25_shared.charlm import CharLMSetup, CharLMTask, tiny_llama_config, train_char_lm
from icml25_shared.charlm import plot_val_loss as plot_lm_curves
from icml25_shared.device import torch_threads, worker_count
from icml25_shared.parts import Parts
from icml25_shared.training import warmup_cosine
from icml25_shared.validate import check_choice

__all__ = [
    "FULL",
    "LLAMA_1B",
    "LLAMA_130M",
    "QUICK",
    "RunResult",
    "RunSpec",
    "Setup",
    "Task",
    "expected_bytes",
    "FULL_LRS",
    "extra_specs",
    "full_runs",
    "main_spec",
    "galore_groups",
    "llama_memory_table",
    "plot_val_loss",
    "run_many",
    "state_bytes",
    "tiny_llama_config",
    "train_tiny_llama",
]

logger = logging.getLogger(__name__)

#: GaLore's LLaMA configurations (T5 vocabulary), used by the paper's pre-training table
LLAMA_130M = {"vocab": 32000, "hidden": 768, "intermediate": 2048, "layers": 12}
LLAMA_1B = {"vocab": 32000, "hidden": 2048, "intermediate": 5461, "layers": 24}

OptimizerName = Literal["adamw", "galore", "frugal"]


@dataclass(frozen=True)
class Setup(CharLMSetup):
    """Model and training sizes (:class:`icml25_shared.charlm.CharLMSetup`'s fields) plus FRUGAL's and GaLore's
    refresh interval and density; :data:`QUICK` and :data:`FULL` are the reproduction's."""

    update_gap: int = 50
    """T: steps between subspace refreshes (FRUGAL and GaLore)."""
    density: float = 0.25
    """ρ: FRUGAL's density and GaLore's rank fraction."""


# quick: 3 seeds x 3 optimizers in <= 60 CPU-s on one thread, so 100 steps (T = 20: five refreshes, as 300 / 50
# gave six before the seeds were added)
QUICK = Setup(steps=100, update_gap=20)
# --full: twice the width (rank 32 instead of 16), 3.5x the steps, 5 seeds; sized to about 800 CPU-s on one
# thread (38 runs of about 21 CPU-s: the lr sweep on the first seed, then 7 runs per seed)
FULL = Setup(
    hidden_size=128, num_hidden_layers=2, intermediate_size=352, seq_len=64, steps=350, update_gap=50, val_batches=16
)
#: ``--full``'s learning-rate grids (swept on the first seed; every seed then uses each optimizer's best)
FULL_LRS: dict[str, tuple[float, ...]] = {"AdamW": (3e-3, 1e-2), "GaLore": (1e-2, 3e-2), "FRUGAL-SVD": (3e-3, 1e-2)}


class Task(CharLMTask):
    """What every run shares: corpus, initial model, validation windows (:class:`icml25_shared.charlm.CharLMTask`)."""

    setup: Setup

    @classmethod
    def build(cls, setup: Setup = QUICK, *, download: bool = False) -> Task:  # type: ignore[override]
        """Tiny Shakespeare (``download`` goes to :mod:`icml25_shared.data`) and a model seeded with ``setup.seed``."""
        return super().build(setup, download=download)  # type: ignore[return-value]


@dataclass
class RunSpec:
    """One run: ``optimizer`` at ``lr``; ``kwargs`` go to :class:`frugal.FRUGAL` (or override GaLore's ``scale``);
    ``state_free_head`` puts the LM head in a projectable group of density 0 (the paper's module ablation)."""

    name: str
    optimizer: OptimizerName
    lr: float
    kwargs: dict[str, Any] = field(default_factory=dict)
    state_free_head: bool = False

    @property
    def slug(self) -> str:
        """The name as a file-name-safe key (letters, digits and ``_.=-``), for :class:`icml25_shared.parts.Parts`."""
        return re.sub(r"[^A-Za-z0-9_.=-]+", "-", self.name).strip("-")


@dataclass
class RunResult:
    """Validation curve, training losses, optimizer-state bytes (all tensors, and those with >= 1 dimension)."""

    spec: RunSpec
    steps: list[int]
    val_loss: list[float]
    train_loss: list[float]
    state_bytes: int
    state_bytes_nd: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-shaped copy (a finished part of ``--full``); :meth:`from_dict` inverts it."""
        return {**asdict(self), "spec": asdict(self.spec)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        """The run stored by :meth:`to_dict`."""
        return cls(**{**d, "spec": RunSpec(**d["spec"])})


def _tensors_deep(obj: Any, seen: set[int]) -> list[torch.Tensor]:
    """Tensors inside dicts, lists, tuples and plain objects (galore-torch keeps its projector as an object)."""
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors_deep(v, seen)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors_deep(v, seen)]
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, nn.Module)):
        return [t for v in vars(obj).values() for t in _tensors_deep(v, seen)]
    return []


def state_bytes(optimizer: torch.optim.Optimizer, *, min_dim: int = 0) -> int:
    """Bytes of every tensor reachable from ``optimizer.state`` (projector objects included), each storage once."""
    keys: set[tuple[int, int]] = set()
    for t in _tensors_deep(list(optimizer.state.values()), set()):
        if t.dim() >= min_dim:
            keys.add((t.data_ptr(), t.numel() * t.element_size()))
    return sum(size for _, size in keys)


def galore_groups(model: nn.Module, density: float, update_gap: int, scale: float = 0.25) -> list[dict[str, Any]]:
    """galore-torch groups for the same projectable matrices as FRUGAL: one group per shape (GaLore takes one rank
    per group), rank ``round(ρ·min(m, n))``, plus a plain group for the rest."""
    regular, proj = param_groups(model)
    by_shape: dict[tuple[int, ...], list[nn.Parameter]] = {}
    for p in proj["params"]:
        by_shape.setdefault(tuple(p.shape), []).append(p)
    groups = [{"params": regular["params"]}]
    for shape, ps in by_shape.items():
        rank = int(round(density * min(shape)))
        groups.append({"params": ps, "rank": rank, "update_proj_gap": update_gap, "scale": scale, "proj_type": "std"})
    return groups


def _build_optimizer(model: nn.Module, spec: RunSpec, setup: Setup) -> torch.optim.Optimizer:
    check_choice("optimizer", spec.optimizer, ("adamw", "galore", "frugal"))
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
    if spec.optimizer == "galore":
        from galore_torch import GaLoreAdamW

        groups = galore_groups(model, setup.density, setup.update_gap, spec.kwargs.get("scale", 0.25))
        # GaLoreAdamW takes parameter groups (its rank keys live there); its annotation says parameters only
        return GaLoreAdamW(cast(Any, groups), lr=spec.lr, weight_decay=0.0, no_deprecation_warning=True)
    # no weight decay, as the AdamW and GaLore runs above (FRUGAL's own default is AdamW's 0.01)
    kwargs = {"density": setup.density, "update_gap": setup.update_gap, "weight_decay": 0.0, **spec.kwargs}
    if not spec.state_free_head:
        return FRUGAL(param_groups(model), lr=spec.lr, **kwargs)
    head = cast(Any, model).get_output_embeddings().weight  # a transformers PreTrainedModel
    regular, proj = param_groups(model, state_full_modules=("embed_tokens", "norm"))
    proj["params"] = [p for p in proj["params"] if p is not head]
    head_group = {"params": [head], "projectable": True, "density": 0.0}
    return FRUGAL([regular, proj, head_group], lr=spec.lr, **kwargs)


def train_tiny_llama(spec: RunSpec, task: Task) -> RunResult:
    """Train a copy of ``task.init_model`` with ``spec`` on windows from a generator seeded with
    ``task.setup.seed`` (the same batches for every spec); validation at step 0 and every 10% of training."""
    st = task.setup
    model = copy.deepcopy(task.init_model)
    opt = _build_optimizer(model, spec, st)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(st.steps, warmup=0.1, final=0.1))
    curve = train_char_lm(model, task, [opt], [sched], name=spec.name)
    logger.info("%s: final val %.4f in %.1fs", spec.name, curve.val_loss[-1], curve.seconds)
    return RunResult(
        spec,
        curve.steps,
        curve.val_loss,
        curve.train_loss,
        state_bytes(opt),
        state_bytes(opt, min_dim=1),
        curve.seconds,
    )


_TASK: Task | None = None  # the task a forked worker trains on (inherited, not pickled)


def _run_in_worker(spec: RunSpec) -> RunResult:
    with torch_threads(1):
        return train_tiny_llama(spec, _TASK)  # type: ignore[arg-type]


def run_many(
    specs: list[RunSpec], task: Task, workers: int | None = None, *, parts: Parts | None = None, prefix: str = ""
) -> list[RunResult]:
    """``train_tiny_llama`` for every spec, in order; independent runs fan out to ``workers`` forked processes
    (default :func:`icml25_shared.device.worker_count`, which the ``icml25`` command sets), one torch thread each.

    With ``parts``, each run is the part ``prefix + spec.slug``: a run finished before (same fingerprint) is loaded,
    not trained again, and each new run is stored as soon as it finishes, so a killed sweep loses at most the runs
    in progress."""
    names = [prefix + s.slug for s in specs]
    found: dict[int, RunResult] = {}
    if parts is not None:
        for i, name in enumerate(names):
            stored = parts.load(name)
            if stored is not None:
                found[i] = RunResult.from_dict(stored)
                parts.reused.append(name)
    todo = [i for i in range(len(specs)) if i not in found]

    def keep(i: int, r: RunResult) -> None:
        if parts is not None:
            parts.save(names[i], r.to_dict())
            parts.computed.append(names[i])
            r = RunResult.from_dict(parts.load(names[i]))  # as a resumed run would see it
        found[i] = r

    global _TASK
    n = min(len(todo), worker_count() if workers is None else workers)
    if n <= 1 or "fork" not in mp.get_all_start_methods():
        for i in todo:
            keep(i, train_tiny_llama(specs[i], task))
    else:
        _TASK = task
        try:
            with mp.get_context("fork").Pool(n) as pool:
                for i, r in zip(todo, pool.imap(_run_in_worker, [specs[i] for i in todo], chunksize=1), strict=True):
                    keep(i, r)
        finally:
            _TASK = None
    return [found[i] for i in range(len(specs))]


def _final(r: RunResult) -> float:
    return r.val_loss[-1]


def main_spec(kind: str, lr: float) -> RunSpec:
    """The run of ``kind`` (``"AdamW"``, ``"GaLore"`` or ``"FRUGAL-SVD"``) at ``lr``."""
    check_choice("kind", kind, tuple(FULL_LRS))
    names: dict[str, OptimizerName] = {"AdamW": "adamw", "GaLore": "galore", "FRUGAL-SVD": "frugal"}
    optimizer = names[kind]
    return RunSpec(f"{kind} lr={lr:g}", optimizer, lr, {"selector": "svd"} if kind == "FRUGAL-SVD" else {})


def extra_specs(lr: float) -> dict[str, RunSpec]:
    """``--full``'s extras at FRUGAL's lr: the block selector with and without the state-free update (FRUGAL vs
    BAdam), ρ = 0, and ρ = 0 with a state-free LM head (the paper's module ablation)."""
    svd0 = {"density": 0.0, "selector": "svd"}
    return {
        "block": RunSpec(f"FRUGAL-block lr={lr:g}", "frugal", lr, {"selector": "block"}),
        "badam": RunSpec(f"block, no state-free (BAdam) lr={lr:g}", "frugal", lr, {"state_free": "none"}),
        "rho0": RunSpec(f"rho=0 lr={lr:g}", "frugal", lr, svd0),
        "head": RunSpec(f"rho=0, lm_head state-free lr={lr:g}", "frugal", lr, svd0, True),
    }


def full_runs(
    tasks: list[Task], parts: Parts | None = None
) -> tuple[list[dict[str, RunResult]], dict[str, float], list[list[RunResult]]]:
    """``--full``: the lr grids of :data:`FULL_LRS` on the first task (seed), the best lr of each optimizer by
    final validation loss, then on every task AdamW, GaLore and FRUGAL-SVD at those lrs plus :func:`extra_specs`
    at FRUGAL's. Returns per task the runs by key (``AdamW``, ``GaLore``, ``FRUGAL-SVD``, ``block``, ``badam``,
    ``rho0``, ``head``), the chosen lrs, and per task every run (the first task's sweep included)."""
    first = tasks[0]
    sweep = [main_spec(k, lr) for k, lrs in FULL_LRS.items() for lr in lrs]
    swept = run_many(sweep, first, parts=parts, prefix=f"seed{first.setup.seed}_")
    best = {k: min((r for r in swept if r.spec.name.startswith(k + " ")), key=_final) for k in FULL_LRS}
    best_lr = {k: r.spec.lr for k, r in best.items()}
    by_task, every = [], []
    for t, task in enumerate(tasks):
        specs = ({} if t == 0 else {k: main_spec(k, best_lr[k]) for k in FULL_LRS}) | extra_specs(best_lr["FRUGAL-SVD"])
        runs = dict(zip(specs, run_many(list(specs.values()), task, parts=parts, prefix=f"seed{task.setup.seed}_")))
        by_task.append(best | runs if t == 0 else runs)
        every.append((swept if t == 0 else []) + list(runs.values()))
    return by_task, best_lr, every


def expected_bytes(setup: Setup, optimizer: str, *, selector: str = "svd", active: list[bool] | None = None) -> int:
    """Closed form of the state bytes of each run on the tiny LLaMA of ``setup``: ``"adamw"`` (two moments and an
    fp32 ``step`` per tensor), ``"galore"`` (moments of the projected gradients plus projectors, Python-int steps)
    and ``"frugal"`` (the same plus an fp32 ``step`` per tensor, :func:`frugal.memory.model_state_bytes`)."""
    proj, other = llama_matrix_shapes(65, setup.hidden_size, setup.intermediate_size, setup.num_hidden_layers)
    if optimizer == "adamw":
        return sum(adamw_bytes(_numel(s)) for s in [*proj, *other])
    step = 0 if optimizer == "galore" else 4
    return model_state_bytes(proj, other, selector=selector, density=setup.density, active=active, step_bytes=step)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def llama_memory_table(density: float = 0.25) -> dict[str, dict[str, float]]:
    """Optimizer-state GB (fp32 states) of GaLore's LLaMA-130M and 1B: AdamW, GaLore, FRUGAL-SVD and FRUGAL-block
    (``round(7L·ρ)`` active matrices; the state varies with which are active, the largest case is shown)."""
    table = {}
    for name, cfg in (("LLaMA-130M", LLAMA_130M), ("LLaMA-1B", LLAMA_1B)):
        proj, other = llama_matrix_shapes(**cfg)
        n_active = int(round(len(proj) * density))
        largest = sorted(range(len(proj)), key=lambda i: -_numel(proj[i]))[:n_active]
        active = [i in largest for i in range(len(proj))]
        adamw = sum(adamw_bytes(_numel(s), step_bytes=0) for s in [*proj, *other])
        kw = {"density": density, "step_bytes": 0}
        row = {
            "AdamW": adamw,
            "GaLore": model_state_bytes(proj, other, selector="svd", **kw),
            "FRUGAL-SVD": model_state_bytes(proj, other, selector="svd", **kw),
            "FRUGAL-block": model_state_bytes(proj, other, selector="block", active=active, **kw),
        }
        table[name] = {k: v / 1e9 for k, v in row.items()}
    return table


def plot_val_loss(runs: list[RunResult], task: Task, out_dir: Path, name: str, title: str) -> Path:
    """Validation loss against training tokens, one line per run; saved as PNG."""
    curves = [(r.spec.name, r.steps, r.val_loss) for r in runs]
    return plot_lm_curves(curves, task.setup.tokens_per_step, out_dir, name, title)
