"""Configuration dataclasses: :class:`IRTConfig` (the paper's calibration) and :class:`Stop` (the
stopping rule of the paper's adaptive test)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = ["IRTConfig", "Stop", "MODELS", "METHODS"]

MODELS = ("rasch", "2pl", "3pl")
METHODS = ("em", "jml", "expected_ll", "gh_adam")


@dataclass
class IRTConfig:
    """Hyper-parameters of an IRT calibration.

    The defaults are the paper's model, P(y = 1) = σ(θ − b) with θ ~ N(0, 1), fitted by marginal maximum likelihood
    with the Bock–Aitkin EM algorithm on a Gauss–Hermite grid.
    """

    model: Literal["rasch", "2pl", "3pl"] = "rasch"
    """Response model: Rasch σ(θ − b), 2PL σ(a(θ − b)), 3PL c + (1 − c) σ(a(θ − b))."""
    method: Literal["em", "jml", "expected_ll", "gh_adam"] = "em"
    """``"em"``: Bock–Aitkin marginal ML (default); ``"jml"``: joint ML by alternating Newton (inconsistent for a
    fixed number of items; an initialiser); ``"expected_ll"``: the official code's objective, the mean log-likelihood
    under S = 150 abilities drawn once from the prior (a Jensen lower bound on the marginal likelihood; it shrinks
    |b|), minimised by L-BFGS; ``"gh_adam"``: the Gauss–Hermite marginal likelihood optimised by Adam."""
    n_quad: int = 41
    """Number of Gauss–Hermite nodes of the E-step (>= 5)."""
    prior_sd: float = 1.0
    """σ_θ of the ability prior N(0, σ_θ²); identifies the scale of the Rasch model."""
    estimate_prior_sd: bool = False
    """mirt-style Rasch: σ_θ is updated in closed form from the posterior second moment each EM iteration."""
    max_iter: int = 500
    """Maximum number of EM iterations (or optimiser steps)."""
    tol: float = 1e-4
    """Convergence criterion on the parameters: stop (``converged_ = True``) as soon as no item parameter (b, and
    log a, logit c for 2PL/3PL; σ_θ under ``estimate_prior_sd``) changed by ``tol`` or more in the last EM
    iteration (``"jml"``, ``"gh_adam"``: the last step). EM converges linearly, so the remaining distance to the
    optimum is about change / (1 − rate): on the Swedish SAT verbal half (rate ≈ 0.93) the default 1e-4 ends
    within 0.0015 of the ``tol=1e-12`` solution. A criterion relative to |log-likelihood| would stop EM far from
    the optimum on large data sets, where the log-likelihood is large and EM still gains per iteration.
    ``max_iter`` reached first: ``converged_ = False``. ``n_iter_`` and ``final_change_`` report both."""
    b_bound: float = 8.0
    """EM keeps every difficulty in [−b_bound, b_bound]. An item answered correctly (or wrongly) by every taker has
    an infinite marginal-ML difficulty: unbounded, EM keeps moving it outwards (on the reproduction's HELM-shaped
    matrix, 500 iterations without meeting ``tol``) until p rounds to 1 at a meaningless value.
    Such items end at the bound (``at_bound_`` flags them): with σ_θ = 1, every taker within 3 σ_θ of the mean
    answers an item at −8 right (at +8 wrong) with probability ≥ σ(5) = 0.993."""
    log_a_prior_sd: float | None = 0.5
    """Standard deviation of the N(0, s²) prior on log a (2PL/3PL only; ``None``: no prior)."""
    c_prior: tuple[float, float] | None = (5.0, 17.0)
    """Beta(α, β) prior on the 3PL guessing parameter c (``None``: no prior)."""
    m_steps: int = 3
    """Newton steps per item in each M-step (each with step halving, so every EM iteration is monotone)."""
    seed: int | None = None
    """Seed of the stochastic methods (``"expected_ll"``'s nuisance abilities); EM itself is deterministic."""

    def __post_init__(self) -> None:
        check_choice("model", self.model, MODELS)
        check_choice("method", self.method, METHODS)
        self.n_quad = check_int("n_quad", self.n_quad, min=5)
        self.prior_sd = check_float("prior_sd", self.prior_sd, min=0.0, min_open=True)
        self.estimate_prior_sd = check_bool("estimate_prior_sd", self.estimate_prior_sd)
        self.max_iter = check_int("max_iter", self.max_iter, min=1)
        self.b_bound = check_float("b_bound", self.b_bound, min=0.0, min_open=True)
        self.tol = check_float("tol", self.tol, min=0.0, min_open=True)
        self.log_a_prior_sd = check_float(
            "log_a_prior_sd", self.log_a_prior_sd, min=0.0, min_open=True, allow_none=True
        )
        if self.c_prior is not None:
            if len(self.c_prior) != 2:
                raise ValueError(f"c_prior must be a pair (alpha, beta) or None, got {self.c_prior!r}")
            self.c_prior = tuple(
                check_float(f"c_prior[{k}]", v, min=0.0, min_open=True) for k, v in enumerate(self.c_prior)
            )  # type: ignore[assignment]
        self.m_steps = check_int("m_steps", self.m_steps, min=1)
        self.seed = check_int("seed", self.seed, allow_none=True)
        if self.estimate_prior_sd and self.model != "rasch":
            raise ValueError(
                f"estimate_prior_sd=True needs model='rasch' (a fixes the scale), got model={self.model!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict."""
        d = asdict(self)
        d["c_prior"] = list(self.c_prior) if self.c_prior is not None else None
        return d


@dataclass
class Stop:
    """When one taker's adaptive test ends: after ``max_items`` items, or as soon as SE(θ̂) ≤ ``se``, or as soon as
    the per-taker reliability 1 − SE²/σ_θ² ≥ ``reliability`` (any rule that is set ends the test)."""

    max_items: int = 400
    """Hard cap on the number of items (the paper caps at min(400, bank size))."""
    se: float | None = None
    """Target standard error of θ̂ (``None``: not used)."""
    reliability: float | None = None
    """Target per-taker reliability 1 − SE²/σ_θ² in (0, 1) (``None``: not used)."""

    def __post_init__(self) -> None:
        self.max_items = check_int("max_items", self.max_items, min=1)
        self.se = check_float("se", self.se, min=0.0, min_open=True, allow_none=True)
        self.reliability = check_float(
            "reliability", self.reliability, min=0.0, max=1.0, min_open=True, max_open=True, allow_none=True
        )
