"""Two gloo processes on loopback: the tracker's all-reduced trace and a sharded sweep equal one process."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from icml25_shared.distributed import launch
from supercollapse import GradNoiseTracker, Runs, Schedule
from supercollapse.models import ResidualMLP
from supercollapse.tasks import FourierRegression
from supercollapse.train import RunSpec, mse_half, train_sweep

TASK = FourierRegression(modes=100)


def _model_and_batches():
    torch.manual_seed(0)
    model = ResidualMLP(8, 2).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = TASK.sample(32, g, dtype=torch.float64)
    opt.zero_grad()
    mse_half(model(x), y).backward()
    opt.step()
    batches = [TASK.sample(16, g, dtype=torch.float64) for _ in range(4)]
    return model, opt, batches


def _traces(rank: int, world: int) -> dict[str, float]:
    model, opt, batches = _model_and_batches()
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
        half = 16 // world
        batches = [(x[rank * half : (rank + 1) * half], y[rank * half : (rank + 1) * half]) for x, y in batches]
    return {e: GradNoiseTracker(model, opt, mse_half, estimator=e).trace(batches) for e in ("per_example", "batches")}


def test_ddp_tracker_equals_single_process():
    single = _traces(0, 1)
    for out in launch(_traces, 2):
        for est, value in out.items():
            assert value == pytest.approx(single[est], rel=1e-6)


SPECS = [
    RunSpec(8, seed, Schedule(name, 20), batch=8, n_evals=2, eval_batches=2)
    for seed in (0, 1)
    for name in ("const", "linear")
]


def _sweep(rank: int, world: int, shard_dir: str) -> int:
    return len(train_sweep(SPECS, TASK, shard_dir=shard_dir, fmt="csv"))


def test_sharded_sweep_equals_one_process(tmp_path):
    one = Runs.from_frame(train_sweep(SPECS, TASK, rank=0, world_size=1))
    sizes = launch(_sweep, 2, args=(str(tmp_path),))
    assert sizes == [len(one) // 2, len(one) // 2]
    merged = Runs.read(tmp_path)
    pd.testing.assert_frame_equal(merged.frame, one.frame)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-0000-of-0002.csv", "shard-0001-of-0002.csv"]
