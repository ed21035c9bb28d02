"""Feature-sharded decoupled precompute over ``torch.distributed``: the entry-wise propagation (paper Algorithm 1 with
per-feature thresholds) treats every feature column independently, so each rank propagates a block of columns
(:func:`icml25_shared.distributed.shard_bounds`) and the blocks are all-gathered
(:func:`icml25_shared.distributed.all_gather_uneven`)."""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor

from icml25_shared.distributed import all_gather_uneven, shard_bounds
from unifews.prop import PropStats, unifews_propagate

__all__ = ["sharded_propagate"]


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
    start, stop = shard_bounds(f, rank, world)
    local, stats = unifews_propagate(
        x[:, start:stop], edge_index, hops, delta_a, generator=seed, column_offset=start, **kwargs
    )
    return all_gather_uneven(local, f, dim=1, group=group), stats
