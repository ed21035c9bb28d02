"""Validated hyper-parameters of bisection projection (paper Alg. 1) and of the interior-point network (IPNN).

Defaults follow the paper and the official code (``configuration/default_args.py``); where they differ the choice
is stated on the field.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["BisectionConfig", "IPNNConfig", "ON_FAILURE", "GRAD_MODES", "check_positive_int"]

ON_FAILURE = ("input", "ip", "raise")
GRAD_MODES = ("none", "straight_through")


def check_positive_int(name: str, value: Any, *, allow_zero: bool = False) -> int:
    """``value`` as an int, or a ``ValueError`` naming ``name`` and the value received."""
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value >= 1)
    if not ok:
        kind = "a non-negative int" if allow_zero else "a positive int"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return int(value)


def _check_float(name: str, value: Any, lo: float, hi: float, *, lo_open: bool, hi_open: bool) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a float, got {value!r}") from None
    left = v > lo if lo_open else v >= lo
    right = v < hi if hi_open else v <= hi
    if not (math.isfinite(v) or (math.isinf(hi) and v == hi and not hi_open)) or not (left and right):
        interval = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")
    return v


@dataclass
class BisectionConfig:
    """Hyper-parameters of the bisection line searches between interior points and a prediction."""

    steps: int = 30
    """K, the maximum number of bisection steps (``corrTestMaxSteps``); 0 returns the interior point."""
    ratio: float = 0.5
    """ρ ∈ (0, 1): the next trial point is ``(1 - ρ)·lo + ρ·hi``; 0.5 is plain bisection (paper), 0.9 tries points
    near the prediction first (toy script)."""
    tol: float = 1e-5
    """ε > 0: a point is feasible when its largest inequality violation is ``<= tol`` (``corrEps``)."""
    conv_tol: float = 1e-5
    """Per-row interval tolerance: a line search stops once ``hi - lo < conv_tol`` (0 runs all K steps)."""
    on_failure: Literal["input", "ip", "raise"] = "input"
    """What to return for a row where no candidate was verified feasible (all its interior points infeasible and
    no feasible point found on their segments): the unprojected prediction, the nearest interior point, or
    raise :class:`~bisection_proj.bisection.ProjectionFailure`. ``info.feasible`` is False either way."""

    def __post_init__(self) -> None:
        self.steps = check_positive_int("steps", self.steps, allow_zero=True)
        self.ratio = _check_float("ratio", self.ratio, 0.0, 1.0, lo_open=True, hi_open=True)
        self.tol = _check_float("tol", self.tol, 0.0, math.inf, lo_open=True, hi_open=True)
        self.conv_tol = _check_float("conv_tol", self.conv_tol, 0.0, 1.0, lo_open=False, hi_open=True)
        if self.on_failure not in ON_FAILURE:
            raise ValueError(f"on_failure must be one of {ON_FAILURE}, got {self.on_failure!r}")

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
    """Architecture of the interior-point network (``NoiseResNet`` of the official code, paper §4)."""

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
    noise: Literal["add", "mul"] = "add"
    """Training-time noise: ``out + γ·ε`` (default) or ``out·(1 + γ·ε)``, in logit space before the sigmoid."""
    sigmoid: bool = True
    """End with a sigmoid so that outputs lie in the normalised box [0, 1]^d (real problems); the 2-D toys use
    ``False`` with an identity ``scale``."""

    def __post_init__(self) -> None:
        self.theta_dim = check_positive_int("theta_dim", self.theta_dim)
        self.z_dim = check_positive_int("z_dim", self.z_dim)
        self.n_ip = check_positive_int("n_ip", self.n_ip)
        if self.hidden is not None:
            self.hidden = check_positive_int("hidden", self.hidden)
        self.n_layers = check_positive_int("n_layers", self.n_layers, allow_zero=True)
        self.dropout = _check_float("dropout", self.dropout, 0.0, 1.0, lo_open=False, hi_open=True)
        self.margin_init = _check_float("margin_init", self.margin_init, 0.0, math.inf, lo_open=True, hi_open=True)
        if self.noise not in ("add", "mul"):
            raise ValueError(f"noise must be 'add' or 'mul', got {self.noise!r}")
        self.learn_margin = bool(self.learn_margin)
        self.sigmoid = bool(self.sigmoid)

    @property
    def width(self) -> int:
        """The resolved hidden width."""
        return self.hidden if self.hidden is not None else self.z_dim + 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
