"""Operation accounting (spec 3.8): what the paper's "fewer operations" counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .config import check_choice

__all__ = ["LayerOps", "layer_macs", "count_macs", "CONVENTIONS"]

CONVENTIONS = ("exact", "official")


@dataclass(frozen=True)
class LayerOps:
    """What one iterative layer executed.

    Attributes:
        num_nodes: n (one bias add per node and output channel).
        f_in, f_out: the layer's transform sizes.
        weight_density: ρ_w, fraction of kept weights.
        edges_nonloop: aggregated non-loop edges (``m_l − n`` when every node has a loop).
        f_prop: width of the propagated matrix (``f_out`` for GCN, which transforms first; ``f_in`` for SAGE).
    """

    num_nodes: int
    f_in: int
    f_out: int
    weight_density: float
    edges_nonloop: int
    f_prop: int


def layer_macs(op: LayerOps, convention: str = "exact") -> int:
    """``ρ_w · f_in · f_out · n + f_prop · (m_l − n) + n · f_out``; ``"official"`` uses ``f_in`` as ``f_prop``."""
    check_choice("convention", convention, CONVENTIONS)
    if not 0.0 <= op.weight_density <= 1.0:
        raise ValueError(f"weight_density must lie in [0, 1], got {op.weight_density!r}")
    f_prop = op.f_in if convention == "official" else op.f_prop
    transform = op.weight_density * op.f_in * op.f_out * op.num_nodes
    return round(transform) + f_prop * op.edges_nonloop + op.num_nodes * op.f_out


def count_macs(layers: Sequence[LayerOps], convention: str = "exact") -> int:
    """Total MACs of a stack of layers (1 FLOP ≈ 2 MACs; theoretical counts, not wall-clock)."""
    return sum(layer_macs(op, convention) for op in layers)
