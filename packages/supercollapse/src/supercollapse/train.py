"""Training runs of the residual MLP on the Fourier task, logged in the Runs schema (paper Sec. 2 and Sec. 4).

``train_run`` trains one (width, seed, schedule) with Adam + μP on fresh samples every step and logs, at
``n_evals`` evenly spaced steps, the test loss, the applied LR, the intrinsic time τ and the noise trace
``Tr Cov(u_batch)``. ``train_sweep`` runs a list of specs, or this process's contiguous share of them under
``torch.distributed`` (or explicit ``rank``/``world_size``), and writes that share as one shard file;
``Runs.read(shard_dir)`` merges the shards.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch

from icml25_shared.device import torch_threads
from icml25_shared.distributed import shard_bounds
from icml25_shared.progress import track
from icml25_shared.validate import check_choice, check_float, check_int
from supercollapse.models import ResidualMLP
from supercollapse.mup import adam_param_groups
from supercollapse.noise import GradNoiseTracker
from supercollapse.schedules import Schedule
from supercollapse.tasks import FourierRegression

__all__ = ["RunSpec", "train_run", "train_family", "branch_point", "train_sweep", "mse_half", "parameter_count"]

_TEST_SEED = 1_000_003


def mse_half(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The task loss ½ (f − y)², averaged over the batch."""
    return 0.5 * (pred - y).pow(2).mean()


def parameter_count(width: int, depth: int, in_dim: int = 8, mlp_ratio: int = 4) -> int:
    """Parameters of ``ResidualMLP(width, depth)`` (the size p of the Runs schema)."""
    return in_dim * width + depth * 2 * mlp_ratio * width * width + width


@dataclass(frozen=True)
class RunSpec:
    """One training run. ``schedule`` carries the number of steps; ``label`` names the schedule in the frame
    (default: ``schedule.label``)."""

    width: int
    seed: int
    schedule: Schedule
    depth: int = 2
    mlp_ratio: int = 4
    batch: int = 128
    base_lr: float = 1e-3
    base_width: int = 128
    freeze_at: int | None = None
    """Freeze the μP ratio at this width (the paper's no-μP ablation uses 384); None: μP."""
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-20
    n_evals: int = 30
    eval_batches: int = 8
    estimator: Literal["batches", "per_example", "none"] = "per_example"
    label: str | None = None

    def __post_init__(self) -> None:
        check_int("width", self.width, min=1)
        check_int("seed", self.seed)
        if not isinstance(self.schedule, Schedule):
            raise TypeError(f"schedule must be a Schedule, got {type(self.schedule).__name__}")
        check_int("depth", self.depth, min=1)
        check_int("mlp_ratio", self.mlp_ratio, min=1)
        check_int("batch", self.batch, min=2)
        check_float("base_lr", self.base_lr, min=0, min_open=True)
        check_int("n_evals", self.n_evals, min=1, max=self.schedule.total_steps)
        check_int("eval_batches", self.eval_batches, min=2)
        check_choice("estimator", self.estimator, ("batches", "per_example", "none"))

    @property
    def name(self) -> str:
        return self.label or self.schedule.label

    @property
    def run_id(self) -> str:
        tag = "" if self.freeze_at is None else f"-fixed{self.freeze_at}"
        return f"D{self.width}-s{self.seed}-{self.name}{tag}"


def train_run(
    spec: RunSpec, task: FourierRegression | None = None, *, test_size: int = 2048, progress: bool | None = False
) -> pd.DataFrame:
    """Train one run and return its curve as a Runs-schema frame (plus a ``width`` column). Deterministic given
    ``spec.seed``; runs on one torch thread (restored afterwards)."""
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec must be a RunSpec, got {type(spec).__name__}")
    task = task if task is not None else FourierRegression(modes=1000)
    with torch_threads(1):
        return _train(spec, task, check_int("test_size", test_size, min=1), progress)


@dataclass
class _State:
    """One run in progress: after ``t`` optimizer steps (and the evaluation at step ``t``, if any)."""

    spec: RunSpec
    model: ResidualMLP
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    data_gen: torch.Generator
    noise_gen: torch.Generator
    tracker: GradNoiseTracker | None
    s_all: np.ndarray
    tau_all: np.ndarray
    evals: set[int]
    rows: list[tuple[int, float, float, float, float]]
    t: int = 0


def _eval_steps(spec: RunSpec) -> set[int]:
    T, n = spec.schedule.total_steps, spec.n_evals
    return set(np.unique(np.round(np.linspace(T / n, T, n)).astype(int)).tolist())


def _tracker(spec: RunSpec, model: ResidualMLP, opt: torch.optim.Optimizer) -> GradNoiseTracker | None:
    if spec.estimator == "none":
        return None
    return GradNoiseTracker(model, opt, mse_half, preconditioned=True, estimator=spec.estimator, reduction="mean")


def _schedule_arrays(spec: RunSpec) -> tuple[np.ndarray, np.ndarray]:
    s_all = spec.schedule(np.arange(spec.schedule.total_steps + 1))
    return s_all, spec.base_lr * np.concatenate([[0.0], np.cumsum(s_all[:-1])])


def _start(spec: RunSpec, task: FourierRegression) -> _State:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = ResidualMLP(spec.width, spec.depth, in_dim=task.dim, mlp_ratio=spec.mlp_ratio)
    by_lr: dict[float, list[torch.nn.Parameter]] = {}
    for g in adam_param_groups(model, spec.base_lr, spec.base_width, freeze_at=spec.freeze_at):
        by_lr.setdefault(g["lr"], []).extend(g["params"])  # one group per distinct μP rate: fewer kernel launches
    groups = [{"params": ps, "lr": lr} for lr, ps in by_lr.items()]
    opt = torch.optim.Adam(groups, betas=spec.betas, eps=spec.eps, foreach=True)
    s_all, tau_all = _schedule_arrays(spec)
    return _State(
        spec, model, opt, spec.schedule.as_lambda_lr(opt), torch.Generator().manual_seed(spec.seed),
        torch.Generator().manual_seed(10_000 + spec.seed), _tracker(spec, model, opt), s_all, tau_all,
        _eval_steps(spec), [],
    )  # fmt: skip


def _fork(st: _State, spec: RunSpec) -> _State:
    """A copy of ``st`` (model, Adam state, data and noise generators, the rows so far) that continues under
    ``spec``'s schedule from step ``st.t``."""
    model = copy.deepcopy(st.model)
    index = {id(p): i for i, p in enumerate(st.model.parameters())}
    new_params = list(model.parameters())
    groups = [{"params": [new_params[index[id(p)]] for p in g["params"]], "lr": g["lr"]} for g in st.opt.param_groups]
    opt = torch.optim.Adam(groups, betas=spec.betas, eps=spec.eps, foreach=True)
    # load_state_dict keeps same-device tensors as they are: deep-copy, or the branch would update the trunk's moments
    opt.load_state_dict(copy.deepcopy(st.opt.state_dict()))
    gens = []
    for g in (st.data_gen, st.noise_gen):
        c = torch.Generator()
        c.set_state(g.get_state())
        gens.append(c)
    s_all, tau_all = _schedule_arrays(spec)
    rows = [(t, loss, s_all[t], tau_all[t], tr) for t, loss, _, _, tr in st.rows]  # τ(t ≤ k) agree; s(k) may not
    sched = spec.schedule.as_lambda_lr(opt, last_epoch=st.t - 1)  # sets the LR of step st.t
    data_gen, noise_gen = gens
    return _State(spec, model, opt, sched, data_gen, noise_gen, _tracker(spec, model, opt), s_all, tau_all,
                  _eval_steps(spec), rows, st.t)  # fmt: skip


def _advance(st: _State, task: FourierRegression, test: tuple[torch.Tensor, torch.Tensor], until: int, bar) -> None:
    spec, model, opt = st.spec, st.model, st.opt
    for t in range(st.t + 1, until + 1):
        x, y = task.sample(spec.batch, st.data_gen)
        loss = mse_half(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        st.sched.step()
        if t in st.evals:
            with torch.no_grad():
                test_loss = float(mse_half(model(test[0]), test[1]))
            trace = float("nan")
            if st.tracker is not None:
                trace = st.tracker.trace([task.sample(spec.batch, st.noise_gen) for _ in range(spec.eval_batches)])
            st.rows.append((t, test_loss, st.s_all[t], st.tau_all[t], trace))
        if bar is not None:
            bar.update(1)
    st.t = max(st.t, until)


def _frame(st: _State) -> pd.DataFrame:
    spec = st.spec
    p = sum(q.numel() for q in st.model.parameters())
    f = pd.DataFrame(st.rows, columns=pd.Index(["step", "loss", "s", "tau", "noise_trace"]))
    return pd.DataFrame(
        {"run_id": spec.run_id, "size": float(p), "seed": spec.seed, "schedule": spec.name, "step": f["step"],
         "compute": 6.0 * p * spec.batch * f["step"], "loss": f["loss"], "tokens": spec.batch * f["step"],
         "lr": spec.base_lr * f["s"], "tau": f["tau"], "noise_trace": f["noise_trace"], "width": spec.width}
    )  # fmt: skip


def _test_set(task: FourierRegression, test_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return task.sample(test_size, torch.Generator().manual_seed(_TEST_SEED))


def _train(spec: RunSpec, task: FourierRegression, test_size: int, progress: bool | None) -> pd.DataFrame:
    st = _start(spec, task)
    T = spec.schedule.total_steps
    with track(None, f"train {spec.run_id}", total=T, disable=None if progress is None else not progress) as bar:
        _advance(st, task, _test_set(task, test_size), T, bar)
    return _frame(st)


_SHARED_FIELDS = ("width", "seed", "depth", "mlp_ratio", "batch", "base_lr", "base_width", "freeze_at", "betas",
                  "eps", "eval_batches", "estimator")  # fmt: skip


def branch_point(trunk: RunSpec, branch: RunSpec) -> int:
    """The number of steps ``branch`` shares with ``trunk``: the first step at which their LR factors differ (at
    most the shorter run's length). Raises ``ValueError`` when the two differ in anything but the schedule, the
    label and ``n_evals``, or when their evaluation steps differ before that point."""
    for name in _SHARED_FIELDS:
        if getattr(trunk, name) != getattr(branch, name):
            raise ValueError(
                f"a branch must match its trunk in {name}: trunk {getattr(trunk, name)!r}, branch "
                f"{branch.run_id!r} {getattr(branch, name)!r}"
            )
    n = min(trunk.schedule.total_steps, branch.schedule.total_steps)
    steps = np.arange(n)
    differ = np.flatnonzero(trunk.schedule(steps) != branch.schedule(steps))
    k = int(differ[0]) if differ.size else n
    before_t = sorted(t for t in _eval_steps(trunk) if t <= k)
    before_b = sorted(t for t in _eval_steps(branch) if t <= k)
    if before_t != before_b:
        raise ValueError(
            f"branch {branch.run_id!r} shares {k} steps with trunk {trunk.run_id!r} but evaluates at other steps "
            f"before it ({before_b[:5]}... vs {before_t[:5]}...): give both the same spacing T / n_evals"
        )
    return k


def train_family(
    trunk: RunSpec,
    branches: Sequence[RunSpec],
    task: FourierRegression | None = None,
    *,
    test_size: int = 2048,
    progress: bool | None = False,
) -> list[pd.DataFrame]:
    """Train ``trunk`` and every branch, sharing the steps a branch has in common with the trunk.

    A branch that differs from the trunk only in its schedule (and label and ``n_evals``) follows exactly the
    trunk's trajectory until its LR factor first differs (:func:`branch_point`; e.g. a warmup-stable-decay run
    until its decay starts, on a constant-LR trunk): it is forked there (model, Adam state, data and noise
    generators, logged rows) and trained on alone. Returns ``[trunk frame, *branch frames]``, each equal to
    :func:`train_run` of that spec (a test), at the cost of the trunk plus each branch's unshared steps.
    """
    if not isinstance(trunk, RunSpec) or not all(isinstance(b, RunSpec) for b in branches):
        raise TypeError("trunk and branches must be RunSpec instances")
    task = task if task is not None else FourierRegression(modes=1000)
    test_size = check_int("test_size", test_size, min=1)
    points = [branch_point(trunk, b) for b in branches]
    frames: list[pd.DataFrame | None] = [None] * len(branches)
    total = trunk.schedule.total_steps + sum(b.schedule.total_steps - k for b, k in zip(branches, points))
    with torch_threads(1), track(None, f"train {trunk.run_id} + {len(branches)} branches", total=total,
                                 disable=None if progress is None else not progress) as bar:  # fmt: skip
        test = _test_set(task, test_size)
        st = _start(trunk, task)
        for i in sorted(range(len(branches)), key=lambda j: points[j]):
            _advance(st, task, test, points[i], bar)
            br = _fork(st, branches[i])
            _advance(br, task, test, branches[i].schedule.total_steps, bar)
            frames[i] = _frame(br)
        _advance(st, task, test, trunk.schedule.total_steps, bar)
    return [_frame(st), *(f for f in frames if f is not None)]  # every branch ran


def train_sweep(
    specs: Sequence[RunSpec],
    task: FourierRegression | None = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    shard_dir: str | os.PathLike[str] | None = None,
    fmt: Literal["parquet", "csv"] = "parquet",
    progress: bool | None = False,
) -> pd.DataFrame:
    """Train this process's contiguous share of ``specs`` (all of them when not distributed).

    ``rank``/``world_size`` default to ``torch.distributed``'s when a process group is initialised, else 0 / 1.
    With ``shard_dir`` the share is written to ``shard_dir/shard-<rank>-of-<world>.<fmt>``; merge with
    ``Runs.read(shard_dir)``.
    """
    import torch.distributed as dist

    if rank is None or world_size is None:
        on = dist.is_available() and dist.is_initialized()
        rank = dist.get_rank() if on else 0
        world_size = dist.get_world_size() if on else 1
    world_size = check_int("world_size", world_size, min=1)
    rank = check_int("rank", rank, min=0, max=world_size - 1)
    fmt = check_choice("fmt", fmt, ("parquet", "csv"))
    lo, hi = shard_bounds(len(specs), rank, world_size)
    parts = [train_run(s, task, progress=progress) for s in list(specs)[lo:hi]]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if shard_dir is not None and parts:
        from supercollapse.runs import Runs

        path = Path(shard_dir) / f"shard-{rank:04d}-of-{world_size:04d}.{fmt}"
        Runs.from_frame(frame).save(path)
    return frame
