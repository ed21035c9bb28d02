"""DDP with 2 gloo processes on loopback: SWAN's weights equal a single process on the whole batch, and
``distributed_whitening`` (round-robin whitening + broadcast) changes nothing but who computes."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn

from icml25_shared.distributed import launch
from swan import SWAN, param_groups

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or sys.platform != "linux", reason="needs torch.distributed and fork"),
    pytest.mark.slow,  # two processes, DDP and gloo set-up: over 10 s on 2 cores
]

STEPS, WORLD = 5, 2


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, 4)).double()


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, 16, 8, generator=g, dtype=torch.float64), torch.randn(
        STEPS, 16, 4, generator=g, dtype=torch.float64
    )


def _train(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor, **kw: object) -> list[torch.Tensor]:
    opt = SWAN(param_groups(getattr(model, "module", model), lr=0.05, adamw_lr=0.01), **kw)
    for x, y in zip(xs, ys):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _worker(rank: int, world: int) -> dict[bool, list[torch.Tensor]]:
    xs, ys = _data()
    half = slice(rank * 8, (rank + 1) * 8)
    out = {}
    for flag in (False, True):
        ddp = nn.parallel.DistributedDataParallel(_model())
        out[flag] = _train(ddp, xs[:, half], ys[:, half], distributed_whitening=flag)
    return out


def test_ddp_two_gloo_ranks_match_single_process():
    out = launch(_worker, WORLD, timeout=900)  # generous: shared CI machines are slow to start gloo
    xs, ys = _data()
    single = _train(_model(), xs, ys)
    for flag in (False, True):
        for a, b in zip(out[0][flag], out[1][flag]):
            assert torch.equal(a, b), f"ranks disagree, distributed_whitening={flag}"  # bit for bit
        for a, ref in zip(out[0][flag], single):
            # float64; the all-reduce sums in another order, and β = 0.8 amplifies round-off a little
            torch.testing.assert_close(a, ref, rtol=1e-6, atol=1e-9, msg=f"distributed_whitening={flag}")
    for a, b in zip(out[0][True], out[0][False]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
