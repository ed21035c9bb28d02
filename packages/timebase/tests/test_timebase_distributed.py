"""Data-parallel training story (spec 8): DDP with 2 gloo processes averages gradients to the single-process ones."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from timebase import TimeBase, TimeBaseConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, x: torch.Tensor, y: torch.Tensor, state: dict, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.set_num_threads(1)
        model = TimeBase(TimeBaseConfig(96, 48, basis_num=3, orth_weight=0.1))
        model.load_state_dict(state)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        half = len(x) // 2
        xs, ys = x[rank * half : (rank + 1) * half], y[rank * half : (rank + 1) * half]
        pred, aux = ddp(xs, return_aux=True)
        loss = torch.nn.functional.mse_loss(pred, ys) + 0.1 * aux.orth_loss
        loss.backward()
        out[rank] = {k: p.grad.clone() for k, p in model.named_parameters()}
    finally:
        dist.destroy_process_group()


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
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_worker, args=(_free_port(), x, y, model.state_dict(), out), nprocs=2, join=True)
    for rank in (0, 1):
        for k, g in ref.items():
            assert float((out[rank][k] - g).abs().max()) < 1e-5, (rank, k)
