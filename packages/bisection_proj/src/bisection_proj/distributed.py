"""Data-parallel projection: bisection projection is independent per row, so each rank projects a contiguous shard
of the batch and the results are all-gathered (:func:`icml25_shared.distributed.shard_bounds`,
:func:`icml25_shared.distributed.all_gather_uneven`). IPNN and solver training use ``DistributedDataParallel``:
pass the wrapped module to :func:`~bisection_proj.ipnn.train_ipnn`, with each rank's own θ."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from bisection_proj.bisection import BisectionInfo, BisectionProjector
from icml25_shared.distributed import all_gather_uneven, shard_bounds

__all__ = ["project_sharded"]


def _collective_device(data: Tensor) -> torch.device:
    """Where a collective's tensor must live: the current CUDA device under NCCL (which has no CPU tensors),
    else the data's device."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return data.device


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
    steps = torch.tensor([info.steps], dtype=torch.long, device=_collective_device(y))
    dist.all_reduce(steps, op=dist.ReduceOp.MAX)
    gathered = BisectionInfo(
        feasible=all_gather_uneven(info.feasible.to(torch.uint8), n).bool(),
        alpha=all_gather_uneven(info.alpha, n),
        ip_index=all_gather_uneven(info.ip_index, n),
        steps=int(steps),
        violation=all_gather_uneven(info.violation, n),
        projected=all_gather_uneven(info.projected.to(torch.uint8), n).bool(),
        z=all_gather_uneven(info.z, n),
        max_steps=info.max_steps,
    )
    return all_gather_uneven(y, n), gathered
