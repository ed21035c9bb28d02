"""Data-parallel use (spec §12): projection is independent per row, so each rank projects a contiguous shard of
the batch and the results are all-gathered; IPNN / solver training use ``DistributedDataParallel`` (pass the
wrapped module to :func:`~bisection_proj.ipnn.train_ipnn`, with each rank's own θ)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from bisection_proj.bisection import BisectionInfo, BisectionProjector

__all__ = ["shard_bounds", "all_gather_rows", "project_sharded"]


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """[start, stop) of rank's contiguous shard of n rows (the first n % world ranks get one more)."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def all_gather_rows(t: Tensor, n: int) -> Tensor:
    """Concatenate every rank's shard (rows of ``t``) in rank order into n rows, padding uneven shards."""
    world = dist.get_world_size()
    size = -(-n // world)
    pad = t.new_zeros((size, *t.shape[1:]))
    pad[: t.shape[0]] = t
    parts = [torch.empty_like(pad) for _ in range(world)]
    dist.all_gather(parts, pad)
    rows = [parts[r][: shard_bounds(n, r, world)[1] - shard_bounds(n, r, world)[0]] for r in range(world)]
    return torch.cat(rows)


def project_sharded(
    projector: BisectionProjector, theta: Tensor, z_pred: Tensor, ip: Tensor
) -> tuple[Tensor, BisectionInfo]:
    """Every rank passes the whole batch; each projects its shard and all receive the full result (the same as
    one process projecting everything). Without an initialised process group this is ``projector(...)``."""
    if not (dist.is_available() and dist.is_initialized()):
        return projector(theta, z_pred, ip)
    n = theta.shape[0]
    lo, hi = shard_bounds(n, dist.get_rank(), dist.get_world_size())
    y, info = projector(theta[lo:hi], z_pred[lo:hi], ip[lo:hi])
    steps = torch.tensor([info.steps], dtype=torch.long)
    dist.all_reduce(steps, op=dist.ReduceOp.MAX)
    gathered = BisectionInfo(
        feasible=all_gather_rows(info.feasible.to(torch.uint8), n).bool(),
        alpha=all_gather_rows(info.alpha, n),
        ip_index=all_gather_rows(info.ip_index, n),
        steps=int(steps),
        violation=all_gather_rows(info.violation, n),
        projected=all_gather_rows(info.projected.to(torch.uint8), n).bool(),
        z=all_gather_rows(info.z, n),
    )
    return all_gather_rows(y, n), gathered
