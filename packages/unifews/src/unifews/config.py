"""Hyper-parameters of Unifews (spec sections 3.2-3.5), validated on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["UnifewsConfig", "THRESHOLDS", "SCHEMES", "check_delta", "check_choice"]

THRESHOLDS = ("relative", "absolute")
SCHEMES = ("prune_all", "prune_inc", "keep")


def check_delta(name: str, value: float) -> float:
    """``value`` as a float, or a ``ValueError`` naming ``name`` when it is not a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a non-negative float, got {value!r} of type {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or value < 0 or math.isinf(value) and name != "delta_a":
        raise ValueError(f"{name} must be a finite float >= 0, got {value!r}")
    return value


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``, else a ``ValueError`` listing the allowed values."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


@dataclass
class UnifewsConfig:
    """Every Unifews hyper-parameter of an iterative GNN, with the official code's defaults.

    Attributes:
        delta_a: graph (edge) threshold δa >= 0. With ``threshold="relative"`` an edge is dropped when its message
            norm is below ``delta_a`` times the mean message norm of the layer; with ``"absolute"`` when it is below
            ``delta_a`` itself (paper eq. 9). ``0`` keeps every edge. ``inf`` keeps only self-loops.
        delta_w: weight threshold δw >= 0 (paper eq. 14). ``"relative"`` uses the official scale-free rule
            ``θ_j = δw · (‖H‖_F / f_in) / ‖H[:, j]‖``; ``"absolute"`` the paper's ``θ_j = δw / ‖H[:, j]‖``. Both
            are clamped at ``0.999 · max|W|`` so the largest weight always survives. ``0`` keeps every weight.
        threshold: ``"relative"`` (official code, default) or ``"absolute"`` (paper), for both rules.
        r: normalisation exponent of ``T = D^{-(1-r)} Ā D^{-r}``; 0.5 is the symmetric GCN normalisation.
        edge_prune_inc: during the second half of training also prune edges incrementally
            (``keep_e ← keep_e ∧ new``); not in the official code, off by default.
        eval_lock: evaluate with the official protocol (stored masks, messages into the evaluated nodes restored);
            ``False`` is strict pruned inference.
        eps: floor of the column norms in the weight rule.
    """

    delta_a: float = 0.5
    delta_w: float = 0.5
    threshold: str = "relative"
    r: float = 0.5
    edge_prune_inc: bool = False
    eval_lock: bool = True
    eps: float = 1e-12

    def __post_init__(self) -> None:
        self.delta_a = check_delta("delta_a", self.delta_a)
        self.delta_w = check_delta("delta_w", self.delta_w)
        check_choice("threshold", self.threshold, THRESHOLDS)
        if isinstance(self.r, bool) or not isinstance(self.r, (int, float)) or not 0.0 <= float(self.r) <= 1.0:
            raise ValueError(f"r must be a float in [0, 1], got {self.r!r}")
        self.r = float(self.r)
        if not isinstance(self.edge_prune_inc, bool):
            raise TypeError(f"edge_prune_inc must be a bool, got {self.edge_prune_inc!r}")
        if not isinstance(self.eval_lock, bool):
            raise TypeError(f"eval_lock must be a bool, got {self.eval_lock!r}")
        if not (isinstance(self.eps, float) and self.eps > 0):
            raise ValueError(f"eps must be a positive float, got {self.eps!r}")
