"""Multiply-accumulate (MAC) counts of the graph layers: what the paper's "fewer operations" (GMACs in Table III)
counts. Per layer, ``ρ_w · f_in · f_out · n`` for the (pruned) transform, ``f_prop · (m_l − n)`` for the aggregated
non-loop messages and ``n · f_out`` for the self-loop and bias terms; 1 FLOP ≈ 2 MACs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from icml25_shared.validate import check_choice, check_float

__all__ = ["LayerOps", "layer_macs", "count_macs", "Convention", "CONVENTIONS"]

Convention = Literal["exact", "official"]
CONVENTIONS: tuple[str, ...] = get_args(Convention)


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


def layer_macs(op: LayerOps, convention: Convention = "exact") -> int:
    """``ρ_w · f_in · f_out · n + f_prop · (m_l − n) + n · f_out``; ``"official"`` uses ``f_in`` as ``f_prop``."""
    check_choice("convention", convention, CONVENTIONS)
    check_float("weight_density", op.weight_density, min=0.0, max=1.0)
    f_prop = op.f_in if convention == "official" else op.f_prop
    transform = op.weight_density * op.f_in * op.f_out * op.num_nodes
    return round(transform) + f_prop * op.edges_nonloop + op.num_nodes * op.f_out


def count_macs(layers: Sequence[LayerOps], convention: Convention = "exact") -> int:
    """Total MACs of a stack of layers (1 FLOP ≈ 2 MACs; theoretical counts, not wall-clock)."""
    return sum(layer_macs(op, convention) for op in layers)
