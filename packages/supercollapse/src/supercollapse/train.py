"""Training runs of the residual MLP on the Fourier task, logged in the Runs schema (paper Sec. 2 and Sec. 4).

``train_run`` trains one (width, seed, schedule) with Adam + μP on fresh samples every step and logs, at
``n_evals`` evenly spaced steps, the test loss, the applied LR, the intrinsic time τ and the noise trace
``Tr Cov(u_batch)``. ``train_sweep`` runs a list of specs, or this process's contiguous share of them under
``torch.distributed`` (or explicit ``rank``/``world_size``), and writes that share as one shard file;
``Runs.read(shard_dir)`` merges the shards.
"""

from __future__ import annotations

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

__all__ = ["RunSpec", "train_run", "train_sweep", "mse_half", "parameter_count"]

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


def _train(spec: RunSpec, task: FourierRegression, test_size: int, progress: bool | None) -> pd.DataFrame:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = ResidualMLP(spec.width, spec.depth, in_dim=task.dim, mlp_ratio=spec.mlp_ratio)
    by_lr: dict[float, list[torch.nn.Parameter]] = {}
    for g in adam_param_groups(model, spec.base_lr, spec.base_width, freeze_at=spec.freeze_at):
        by_lr.setdefault(g["lr"], []).extend(g["params"])  # one group per distinct μP rate: fewer kernel launches
    groups = [{"params": ps, "lr": lr} for lr, ps in by_lr.items()]
    opt = torch.optim.Adam(groups, betas=spec.betas, eps=spec.eps, foreach=True)
    sched = spec.schedule.as_lambda_lr(opt)
    T = spec.schedule.total_steps
    data_gen = torch.Generator().manual_seed(spec.seed)
    noise_gen = torch.Generator().manual_seed(10_000 + spec.seed)
    x_test, y_test = task.sample(test_size, torch.Generator().manual_seed(_TEST_SEED))
    evals = set(np.unique(np.round(np.linspace(T / spec.n_evals, T, spec.n_evals)).astype(int)).tolist())
    tracker = None
    if spec.estimator != "none":
        tracker = GradNoiseTracker(
            model, opt, mse_half, preconditioned=True, estimator=spec.estimator, reduction="mean"
        )
    p = sum(q.numel() for q in model.parameters())
    s_all = spec.schedule(np.arange(T + 1))
    tau_all = spec.base_lr * np.concatenate([[0.0], np.cumsum(s_all[:-1])])
    rows = []
    for t in track(range(1, T + 1), f"train {spec.run_id}", disable=None if progress is None else not progress):
        x, y = task.sample(spec.batch, data_gen)
        loss = mse_half(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if t in evals:
            with torch.no_grad():
                test = float(mse_half(model(x_test), y_test))
            trace = float("nan")
            if tracker is not None:
                trace = tracker.trace([task.sample(spec.batch, noise_gen) for _ in range(spec.eval_batches)])
            rows.append((t, test, s_all[t], tau_all[t], trace))
    f = pd.DataFrame(rows, columns=["step", "loss", "s", "tau", "noise_trace"])
    return pd.DataFrame(
        {"run_id": spec.run_id, "size": float(p), "seed": spec.seed, "schedule": spec.name, "step": f["step"],
         "compute": 6.0 * p * spec.batch * f["step"], "loss": f["loss"], "tokens": spec.batch * f["step"],
         "lr": spec.base_lr * f["s"], "tau": f["tau"], "noise_trace": f["noise_trace"], "width": spec.width}
    )  # fmt: skip


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
