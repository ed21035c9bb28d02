"""``UnifewsPrecompute``: a PyG transform that replaces ``data.x`` by its Unifews propagation (SGC/APPNP)."""

from __future__ import annotations

import torch

from unifews import _pyg  # noqa: F401
from unifews.config import Threshold
from unifews.prop import Kind, Mode, PropStats, Push, unifews_propagate

from torch_geometric.data import Data  # isort: skip
from torch_geometric.transforms import BaseTransform  # isort: skip

__all__ = ["UnifewsPrecompute"]


class UnifewsPrecompute(BaseTransform):
    """Precompute decoupled features: ``data.x ← unifews_propagate(data.x, data.edge_index, ...)``.

    The statistics of the run are kept in ``self.last_stats`` (a :class:`~unifews.prop.PropStats`). Arguments are
    those of :func:`~unifews.prop.unifews_propagate`; ``seed`` seeds the random push.
    """

    def __init__(
        self,
        hops: int = 20,
        delta_a: float = 0.0,
        *,
        kind: Kind = "sgc",
        alpha: float = 0.1,
        r: float = 0.5,
        mode: Mode = "entry",
        push: Push = "random",
        threshold: Threshold = "absolute",
        seed: int = 0,
    ) -> None:
        self.kwargs = {"kind": kind, "alpha": alpha, "r": r, "mode": mode, "push": push, "threshold": threshold}
        self.hops, self.delta_a, self.seed = hops, delta_a, seed
        self.last_stats: PropStats | None = None

    def forward(self, data: Data) -> Data:
        x, ei = data.x, data.edge_index
        if not isinstance(x, torch.Tensor) or not isinstance(ei, torch.Tensor):
            raise ValueError("UnifewsPrecompute needs data.x and data.edge_index tensors")
        out, stats = unifews_propagate(
            x,
            ei,
            self.hops,
            self.delta_a,
            generator=torch.Generator().manual_seed(self.seed),
            **self.kwargs,
        )
        data.x = out
        self.last_stats = stats
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(hops={self.hops}, delta_a={self.delta_a}, {self.kwargs})"
