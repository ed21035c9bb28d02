"""Hyper-parameters of Unifews for iterative GNNs (the graph threshold δa of paper eq. 9, the weight
threshold δw of eq. 14, the diffusion exponent r of T), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from icml25_shared.validate import check_bool, check_choice, check_float

__all__ = ["UnifewsConfig", "Threshold", "Scheme", "THRESHOLDS", "SCHEMES"]

Threshold = Literal["relative", "absolute"]
Scheme = Literal["prune_all", "prune_inc", "keep"]
THRESHOLDS: tuple[str, ...] = get_args(Threshold)
SCHEMES: tuple[str, ...] = get_args(Scheme)


@dataclass
class UnifewsConfig:
    """Every Unifews hyper-parameter of an iterative GNN, with the official code's defaults."""

    delta_a: float = 0.5
    """Graph (edge) threshold δa >= 0 (paper eq. 9). With ``threshold="relative"`` an edge is dropped when its
    message norm is below ``delta_a`` times the mean message norm of the layer; with ``"absolute"`` when it is below
    ``delta_a`` itself. ``0`` keeps every edge, ``inf`` keeps only self-loops."""
    delta_w: float = 0.5
    """Weight threshold δw >= 0 (paper eq. 14). ``"relative"`` uses the official scale-free rule
    ``θ_j = δw · (‖H‖_F / f_in) / ‖H[:, j]‖``; ``"absolute"`` the paper's ``θ_j = δw / ‖H[:, j]‖``. Both are clamped
    at ``0.999 · max|W|`` so the largest weight always survives. ``0`` keeps every weight."""
    threshold: Threshold = "relative"
    """``"relative"`` (official code, default) or ``"absolute"`` (paper), for both rules."""
    r: float = 0.5
    """Normalisation exponent of ``T = D^{-(1-r)} Ā D^{-r}``; 0.5 is the symmetric GCN normalisation."""
    edge_prune_inc: bool = False
    """During the second half of training also prune edges incrementally (``keep_e ← keep_e ∧ new``); not in the
    official code, off by default."""
    eval_lock: bool = True
    """Evaluate with the official protocol (stored masks, messages into the evaluated nodes restored); ``False`` is
    strict pruned inference."""
    eps: float = 1e-12
    """Floor of the column norms in the weight rule."""

    def __post_init__(self) -> None:
        self.delta_a = check_float("delta_a", self.delta_a, min=0.0, allow_inf=True)
        self.delta_w = check_float("delta_w", self.delta_w, min=0.0)
        check_choice("threshold", self.threshold, THRESHOLDS)
        self.r = check_float("r", self.r, min=0.0, max=1.0)
        check_bool("edge_prune_inc", self.edge_prune_inc)
        check_bool("eval_lock", self.eval_lock)
        self.eps = check_float("eps", self.eps, min=0.0, min_open=True)
