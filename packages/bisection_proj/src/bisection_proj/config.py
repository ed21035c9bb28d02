"""Validated hyper-parameters of bisection projection (paper Alg. 1) and of the interior-point network (IPNN).

Defaults follow the paper and the official code (``configuration/default_args.py``); where they differ the choice
is stated on the field.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = ["BisectionConfig", "IPNNConfig", "OnFailure", "GradMode", "NoiseKind", "ON_FAILURE", "GRAD_MODES"]

OnFailure = Literal["input", "ip", "raise"]
GradMode = Literal["none", "straight_through"]
NoiseKind = Literal["add", "mul"]
ON_FAILURE: tuple[str, ...] = get_args(OnFailure)
GRAD_MODES: tuple[str, ...] = get_args(GradMode)


@dataclass
class BisectionConfig:
    """Hyper-parameters of the bisection line searches between interior points and a prediction."""

    steps: int = 30
    """K, the *maximum* number of bisection steps (``corrTestMaxSteps``); 0 returns the interior point. Fewer are
    run when ``conv_tol`` is reached sooner: every row has converged after ``ceil(log(conv_tol) / log(max(ρ,
    1 - ρ)))`` steps (17 at ρ = 0.5, conv_tol = 1e-5), so ``steps=40`` runs 17 (see :attr:`effective_steps`;
    ``info.steps`` is the count run, ``info.max_steps`` this K). ``conv_tol=0`` runs all K."""
    ratio: float = 0.5
    """ρ ∈ (0, 1): the next trial point is ``(1 - ρ)·lo + ρ·hi``; 0.5 is plain bisection (paper), 0.9 tries points
    near the prediction first (toy script)."""
    tol: float = 1e-5
    """ε > 0: a point is feasible when its largest inequality violation is ``<= tol`` (``corrEps``)."""
    conv_tol: float = 1e-5
    """Per-row interval tolerance: a line search stops once ``hi - lo < conv_tol`` (0 runs all K steps)."""
    on_failure: OnFailure = "input"
    """What to return for a row where no candidate was verified feasible (all its interior points infeasible and
    no feasible point found on their segments): the unprojected prediction, the nearest interior point, or
    raise :class:`~bisection_proj.bisection.ProjectionFailure`. ``info.feasible`` is False either way."""

    def __post_init__(self) -> None:
        self.steps = check_int("steps", self.steps, min=0)
        self.ratio = check_float("ratio", self.ratio, min=0.0, max=1.0, min_open=True, max_open=True)
        self.tol = check_float("tol", self.tol, min=0.0, min_open=True)
        self.conv_tol = check_float("conv_tol", self.conv_tol, min=0.0, max=1.0, max_open=True)
        self.on_failure = check_choice("on_failure", self.on_failure, ON_FAILURE)

    @property
    def effective_steps(self) -> int:
        """Steps after which every row has converged: the interval shrinks at least by ``max(ρ, 1 - ρ)`` per step,
        so ``ceil(log(conv_tol) / log(max(ρ, 1 - ρ)))`` steps suffice (no host sync needed to stop early)."""
        if self.conv_tol <= 0:
            return self.steps
        shrink = max(self.ratio, 1.0 - self.ratio)
        need = math.ceil(math.log(self.conv_tol) / math.log(shrink) - 1e-9)
        return min(self.steps, max(need, 1))


@dataclass
class IPNNConfig:
    """Architecture of the interior-point network (``NoiseResNet`` of the official code; paper Sec. 4)."""

    theta_dim: int
    """Dimension of the problem parameter θ (network input)."""
    z_dim: int
    """Dimension d of the (partial) decision variable predicted for each interior point."""
    n_ip: int = 1
    """m, the number of interior points predicted per θ."""
    hidden: int | None = None
    """Width of the residual blocks; ``None`` means ``z_dim + 1`` (official real-problem setting; toys use 64)."""
    n_layers: int = 3
    """Number of residual blocks."""
    dropout: float = 0.1
    """Dropout after each residual block (training mode only)."""
    margin_init: float = 1e-3
    """γ0, the initial noise scale (margin) of the noise module."""
    learn_margin: bool = True
    """Learn log γ (``False``: ``fixed_margin``, γ stays at ``margin_init``)."""
    noise: NoiseKind = "add"
    """Training-time noise: ``out + γ·ε`` (default) or ``out·(1 + γ·ε)``, in logit space before the sigmoid."""
    sigmoid: bool = True
    """End with a sigmoid so that outputs lie in the normalised box [0, 1]^d (real problems); the 2-D toys use
    ``False`` with an identity ``scale``."""

    def __post_init__(self) -> None:
        self.theta_dim = check_int("theta_dim", self.theta_dim, min=1)
        self.z_dim = check_int("z_dim", self.z_dim, min=1)
        self.n_ip = check_int("n_ip", self.n_ip, min=1)
        self.hidden = check_int("hidden", self.hidden, min=1, allow_none=True)
        self.n_layers = check_int("n_layers", self.n_layers, min=0)
        self.dropout = check_float("dropout", self.dropout, min=0.0, max=1.0, max_open=True)
        self.margin_init = check_float("margin_init", self.margin_init, min=0.0, min_open=True)
        self.noise = check_choice("noise", self.noise, get_args(NoiseKind))
        self.learn_margin = check_bool("learn_margin", self.learn_margin)
        self.sigmoid = check_bool("sigmoid", self.sigmoid)

    @property
    def width(self) -> int:
        """The resolved hidden width."""
        return self.hidden if self.hidden is not None else self.z_dim + 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
