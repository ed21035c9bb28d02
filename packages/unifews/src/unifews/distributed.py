"""Feature-sharded decoupled precompute over ``torch.distributed`` (spec 3.7: the propagation is column-separable)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from .prop import PropStats, unifews_propagate

__all__ = ["column_block", "sharded_propagate", "sharded_ddp_demo"]


def column_block(num_columns: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of the contiguous column block of ``rank`` (blocks differ in width by at most one)."""
    base, extra = divmod(num_columns, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def sharded_propagate(
    x: Tensor, edge_index: Tensor, hops: int = 20, delta_a: float = 0.0, *, seed: int = 0, group=None, **kwargs
) -> tuple[Tensor, PropStats]:
    """Each rank propagates its block of columns (uniforms keyed by the global column, so the result does not depend
    on the number of ranks) and the blocks are all-gathered: every rank returns the full ``[n, f]`` output, equal to
    one :func:`~unifews.prop.unifews_propagate` call with ``generator=seed``. Stats are those of the local block."""
    if not dist.is_available() or not dist.is_initialized():
        return unifews_propagate(x, edge_index, hops, delta_a, generator=seed, **kwargs)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    f = x.size(1)
    start, stop = column_block(f, rank, world)
    local, stats = unifews_propagate(
        x[:, start:stop], edge_index, hops, delta_a, generator=seed, column_offset=start, **kwargs
    )
    width = -(-f // world)
    padded = local.new_zeros(x.size(0), width)
    padded[:, : stop - start] = local
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded.contiguous(), group=group)
    blocks = [p[:, : b - a] for p, (a, b) in zip(parts, (column_block(f, r, world) for r in range(world)))]
    return torch.cat(blocks, dim=1), stats


def sharded_ddp_demo(rank: int, world: int, port: int, x: Tensor, edge_index: Tensor, out_dir: str) -> None:
    """A ``torch.multiprocessing.spawn`` target: gloo group on 127.0.0.1, sharded precompute (4 hops, δa = 0.5,
    seed 11), then 3 DDP steps of the MLP head on the rank's half of the rows; saves ``p{rank}.pt`` (features)
    and ``m{rank}.pt`` (head weights) in ``out_dir``. Used by the tests; a template for multi-process runs."""
    import os

    from torch.nn.parallel import DistributedDataParallel

    from .train import MLP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        p, _ = sharded_propagate(x, edge_index, 4, 0.5, seed=11)
        torch.save(p, os.path.join(out_dir, f"p{rank}.pt"))
        torch.manual_seed(0)
        model = DistributedDataParallel(MLP(x.size(1), 8, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        y = torch.arange(x.size(0)) % 3
        half = x.size(0) // world
        rows = slice(rank * half, (rank + 1) * half)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(p[rows]), y[rows]).backward()
            opt.step()
        torch.save(model.module.state_dict(), os.path.join(out_dir, f"m{rank}.pt"))
    finally:
        dist.destroy_process_group()
