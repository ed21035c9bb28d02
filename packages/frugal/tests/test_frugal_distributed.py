"""DDP with 2 gloo processes on loopback: with the same seed (and rank 0's SVD projectors broadcast at each
refresh) both ranks hold identical parameters after 2·T steps, equal to one process on the whole batch."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn

from frugal import FRUGAL, param_groups
from icml25_shared.distributed import launch

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or sys.platform != "linux", reason="needs torch.distributed and fork"),
    pytest.mark.slow,  # two processes, DDP and gloo set-up: over 10 s on 2 cores
]

T, WORLD = 3, 2
SELECTORS = ("svd", "random", "columns", "block")


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(8, 16)
        self.mlp = nn.Linear(16, 12)
        self.lm_head = nn.Linear(12, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.tanh(self.mlp(torch.tanh(self.attn(x)))))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return _Net().double()


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2 * T, 16, 8, generator=g, dtype=torch.float64)
    return x, torch.randn(2 * T, 16, 4, generator=g, dtype=torch.float64)


def _train(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor, selector: str) -> list[torch.Tensor]:
    core = getattr(model, "module", model)
    opt = FRUGAL(param_groups(core), lr=1e-2, density=0.5, update_gap=T, selector=selector, block_order="random")
    for x, y in zip(xs, ys):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _worker(rank: int, world: int) -> dict[str, list[torch.Tensor]]:
    xs, ys = _data()
    half = slice(rank * 8, (rank + 1) * 8)
    return {s: _train(nn.parallel.DistributedDataParallel(_model()), xs[:, half], ys[:, half], s) for s in SELECTORS}


def test_ddp_two_gloo_ranks_match_single_process():
    out = launch(_worker, WORLD, timeout=900)
    xs, ys = _data()
    for s in SELECTORS:
        single = _train(_model(), xs, ys, s)
        for a, b, ref in zip(out[0][s], out[1][s], single):
            assert torch.equal(a, b), s  # identical on both ranks
            torch.testing.assert_close(a, ref, atol=1e-6, rtol=0, msg=s)
