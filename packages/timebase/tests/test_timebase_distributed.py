"""Data-parallel training: DDP with 2 gloo processes averages gradients to the single-process ones."""

from __future__ import annotations

import pytest
import torch

from icml25_shared.distributed import launch
from timebase import TimeBase, TimeBaseConfig


def _worker(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, state: dict) -> dict[str, torch.Tensor]:
    model = TimeBase(TimeBaseConfig(96, 48, basis_num=3, orth_weight=0.1))
    model.load_state_dict(state)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    half = len(x) // world
    xs, ys = x[rank * half : (rank + 1) * half], y[rank * half : (rank + 1) * half]
    pred, aux = ddp(xs, return_aux=True)
    loss = torch.nn.functional.mse_loss(pred, ys) + 0.1 * aux.orth_loss
    loss.backward()
    return {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.slow
def test_ddp_gradients_equal_single_process() -> None:
    torch.manual_seed(0)
    model = TimeBase(TimeBaseConfig(96, 48, basis_num=3, orth_weight=0.1))
    x, y = torch.randn(8, 96, 3), torch.randn(8, 48, 3)
    # single process, same global batch: the mean over halves of per-half means equals the global mean
    # (equal halves); the orthogonality loss is a mean over (sample, channel) groups, so it averages the same way
    loss, _ = model.training_loss(x, y)
    loss.backward()
    ref = {k: p.grad.clone() for k, p in model.named_parameters()}
    out = launch(_worker, 2, args=(x, y, model.state_dict()))
    for rank in (0, 1):
        for k, g in ref.items():
            assert float((out[rank][k] - g).abs().max()) < 1e-5, (rank, k)
