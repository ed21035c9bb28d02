"""Gaussian differential privacy (Dong, Roth & Su 2022), the paper's privacy accounting of DP-TS-UCB and the
privacy ledgers of the bandit policies.

One Thompson draw N(μ̂, ln^α T / n) from a batch of n rewards in [0, 1] is a Gaussian mechanism on μ̂ (sensitivity
1/n), so it is 1/√(n ln^α T)-GDP; the draws of one (arm, epoch) batch compose adaptively, the max of the samples
(the UCB phase) is post-processing, and a reward lives in one batch only, so the transcript is
max over batches √(m / (n ln^α T))-GDP with m ≤ φ draws — the paper's Theorem 4.4 (α = 1: O(1)-GDP).

Conventions: the (ε, δ) conversions take keyword arguments only (``gdp_delta(mu=0.5, epsilon=3.0)``): both
arguments are positive floats, so a swapped positional call would silently answer another question. A ledger
holds the a-priori guarantee (``mu_bound``), the value realised by the public pull log (``mu_realized``, an ex-post
diagnostic: quoting it as a guarantee would need a privacy filter), and converts to (epsilon, delta)-DP exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from scipy import optimize, special, stats

from icml25_shared.validate import check_array, check_float, check_int

__all__ = [
    "gaussian_mechanism_mu",
    "compose_gdp",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_tradeoff",
    "sampling_budget",
    "dp_ts_ucb_mu_bound",
    "paper_mu_bound",
    "GDPLedger",
    "PureDPLedger",
    "NonPrivateLedger",
    "LedgerRecord",
]


def gaussian_mechanism_mu(sensitivity: float, sigma: float) -> float:
    """GDP parameter of adding N(0, sigma^2) to a statistic of L2 sensitivity ``sensitivity``: sensitivity/sigma."""
    check_float("sensitivity", sensitivity, min=0.0, min_open=True)
    check_float("sigma", sigma, min=0.0, min_open=True)
    return sensitivity / sigma


def compose_gdp(mus: Iterable[float]) -> float:
    """Adaptive composition: mu_1, ..., mu_k-GDP mechanisms together are sqrt(sum mu_i^2)-GDP."""
    arr = np.asarray(check_array("mus", list(mus), ndim=1, finite=True), dtype=np.float64)
    if np.any(arr < 0):
        raise ValueError(f"every mu must be >= 0, got {arr.min()}")
    return float(np.sqrt(np.sum(arr**2)))


def gdp_delta(*, mu: float, epsilon: float) -> float:
    """The exact delta(epsilon) of a mu-GDP mechanism: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    (Dong, Roth & Su 2022, Corollary 2.13). Keyword arguments only."""
    mu = check_float("mu", mu, min=0.0, min_open=True)  # type: ignore[assignment]
    epsilon = check_float("epsilon", epsilon, min=0.0)  # type: ignore[assignment]
    a = special.log_ndtr(-epsilon / mu + mu / 2)
    b = epsilon + special.log_ndtr(-epsilon / mu - mu / 2)  # log(e^eps Phi(.)) without overflow
    if b >= a:
        return 0.0
    return float(math.exp(a) * -math.expm1(b - a))


def gdp_epsilon(*, mu: float, delta: float) -> float:
    """The smallest epsilon >= 0 with delta(epsilon) <= ``delta`` for a mu-GDP mechanism (bracketing root).
    Keyword arguments only."""
    mu = check_float("mu", mu, min=0.0, min_open=True)  # type: ignore[assignment]
    delta = check_float("delta", delta, min=0.0, max=1.0, min_open=True, max_open=True)  # type: ignore[assignment]
    if gdp_delta(mu=mu, epsilon=0.0) <= delta:
        return 0.0
    hi = max(1.0, mu)
    while gdp_delta(mu=mu, epsilon=hi) > delta:
        hi *= 2.0
    # scipy's stub types rtol as a numpy float and the result as a union with the full_output tuple form
    xtol = rtol = 1e-12
    root = optimize.brentq(
        lambda e: float(gdp_delta(mu=mu, epsilon=e)) - delta,
        0.0,
        hi,
        xtol=xtol,
        rtol=rtol,  # pyright: ignore[reportArgumentType]
    )
    # brentq lands within its tolerance on either side of the root; a point left of it has delta(epsilon) above
    # ``delta`` and would understate the privacy loss: step right until delta(epsilon) <= delta holds
    eps = float(cast(float, root))
    step = xtol + rtol * eps
    while gdp_delta(mu=mu, epsilon=eps) > delta:
        eps += step
        step *= 2.0
    return eps


def gdp_tradeoff(mu: float, alpha: float | np.ndarray) -> float | np.ndarray:
    """The trade-off curve G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu): least type-II error at type-I ``alpha``."""
    mu = check_float("mu", mu, min=0.0, min_open=True)  # type: ignore[assignment]
    if np.ndim(alpha) == 0:
        a = np.asarray(check_float("alpha", alpha, min=0.0, max=1.0))
    else:
        a = np.asarray(check_array("alpha", alpha, dtype="numeric", finite=True), dtype=np.float64)
        if np.any((a < 0) | (a > 1)):
            raise ValueError(f"alpha (type-I error) must lie in [0, 1], got values in [{a.min()}, {a.max()}]")
    out = stats.norm.cdf(stats.norm.ppf(1.0 - a) - mu)
    return float(out) if np.ndim(out) == 0 else out


def _check_budget_args(horizon: int, alpha: float, c0: float) -> None:
    # validated, not converted: the formulas below see the caller's numbers unchanged
    check_int("horizon", horizon, min=2)
    check_float("alpha", alpha, min=0.0, max=1.0)
    check_float("c0", c0, min=0.0, min_open=True)


def sampling_budget(horizon: int, alpha: float, c0: float = 1.0, *, rounded: bool = True) -> float | int:
    """phi = ceil(c0 T^{0.5(1-alpha)} ln^{0.5(3-alpha)} T): Gaussian draws allowed per (arm, epoch) (Alg. 1's
    sampling budget)."""
    _check_budget_args(horizon, alpha, c0)
    ln_t = math.log(horizon)
    phi = c0 * horizon ** (0.5 * (1 - alpha)) * ln_t ** (0.5 * (3 - alpha))
    return max(1, math.ceil(phi - 1e-9)) if rounded else phi


def dp_ts_ucb_mu_bound(horizon: int, alpha: float, c0: float = 1.0, init_pulls: int = 1) -> float:
    """A-priori GDP of DP-TS-UCB: sqrt(ceil(phi) / (b0 ln^alpha T)) (phi draws from a batch of at least b0)."""
    _check_budget_args(horizon, alpha, c0)
    check_int("init_pulls", init_pulls, min=1)
    phi = sampling_budget(horizon, alpha, c0)
    return math.sqrt(phi / (init_pulls * math.log(horizon) ** alpha))


def paper_mu_bound(horizon: int, alpha: float, c0: float = 1.0) -> float:
    """The paper's stated bound (Theorem 4.4): sqrt(2 c0 T^{0.5(1-alpha)} ln^{1.5(1-alpha)} T)."""
    _check_budget_args(horizon, alpha, c0)
    phi_real = sampling_budget(horizon, alpha, c0, rounded=False)
    return math.sqrt(2.0 * phi_real / math.log(horizon) ** alpha)


@dataclass
class LedgerRecord:
    """Privacy spent on one group of rewards (an (arm, epoch) batch, or all rewards of an arm for TS peers)."""

    arm: int
    epoch: int
    n: int
    draws: int = 0
    mu_sq: float = 0.0

    @property
    def mu(self) -> float:
        return math.sqrt(self.mu_sq)


@dataclass
class GDPLedger:
    """GDP accounting of a Gaussian-sampling policy.

    A changed reward is read only by the draws of the records it belongs to, so the transcript is
    ``max_records sqrt(sum of per-draw mu^2)``-GDP (adaptive composition inside a record, parallel composition
    across records). ``mu_bound`` is the a-priori guarantee; ``mu_realized`` the ex-post value of the log.
    """

    mu_bound: float
    paper_bound: float | None = None
    records: list[LedgerRecord] = field(default_factory=list)
    draws: int = 0
    _mu_sq_max: float = 0.0

    def open(self, arm: int, epoch: int, n: int) -> LedgerRecord:
        """Start a record (a new batch of ``n`` rewards of ``arm``)."""
        rec = LedgerRecord(int(arm), int(epoch), int(n))
        self.records.append(rec)
        return rec

    def draw(self, record: LedgerRecord, mu: float) -> None:
        """One Gaussian draw reading ``record``'s rewards, costing ``mu`` alone."""
        record.draws += 1
        record.mu_sq += mu * mu
        self.draws += 1
        if record.mu_sq > self._mu_sq_max:
            self._mu_sq_max = record.mu_sq

    @property
    def mu_realized(self) -> float:
        """Ex-post GDP of the transcript so far (a diagnostic, not a guarantee)."""
        return math.sqrt(self._mu_sq_max)

    def epsilon(self, delta: float) -> float:
        """epsilon at ``delta`` of the a-priori guarantee."""
        return gdp_epsilon(mu=self.mu_bound, delta=delta) if math.isfinite(self.mu_bound) else math.inf

    def delta(self, epsilon: float) -> float:
        """delta at ``epsilon`` of the a-priori guarantee."""
        return gdp_delta(mu=self.mu_bound, epsilon=epsilon) if math.isfinite(self.mu_bound) else 1.0

    def to_state(self) -> dict:
        return {
            "kind": "gdp",
            "mu_bound": self.mu_bound,
            "paper_bound": self.paper_bound,
            "draws": self.draws,
            "records": [[r.arm, r.epoch, r.n, r.draws, r.mu_sq] for r in self.records],
        }

    @classmethod
    def from_state(cls, s: dict) -> GDPLedger:
        led = cls(s["mu_bound"], s["paper_bound"], [LedgerRecord(*r) for r in s["records"]], s["draws"])
        led._mu_sq_max = max((r.mu_sq for r in led.records), default=0.0)
        return led


@dataclass
class PureDPLedger:
    """Ledger of a pure epsilon-DP policy: reports (epsilon, 0) through the GDP ledger's interface."""

    epsilon_dp: float
    draws: int = 0
    mu_bound: float = math.nan
    paper_bound: float | None = None

    @property
    def mu_realized(self) -> float:
        return math.nan

    def epsilon(self, delta: float) -> float:
        """epsilon-DP gives (epsilon, delta)-DP for every delta."""
        check_float("delta", delta, min=0.0, max=1.0, max_open=True)
        return self.epsilon_dp

    def delta(self, epsilon: float) -> float:
        """Tight delta(epsilon') of an epsilon-DP mechanism (randomised response attains it); epsilon' >= 0."""
        epsilon = check_float("epsilon", epsilon, min=0.0)  # type: ignore[assignment]
        if epsilon >= self.epsilon_dp:
            return 0.0
        e = self.epsilon_dp
        return (math.exp(e) - math.exp(epsilon)) / (1.0 + math.exp(e))

    def to_state(self) -> dict:
        return {"kind": "pure", "epsilon_dp": self.epsilon_dp, "draws": self.draws}

    @classmethod
    def from_state(cls, s: dict) -> PureDPLedger:
        return cls(s["epsilon_dp"], s["draws"])


@dataclass
class NonPrivateLedger:
    """Ledger of a deterministic non-private policy (UCB1): no finite guarantee."""

    draws: int = 0
    mu_bound: float = math.inf
    paper_bound: float | None = None
    mu_realized: float = math.inf

    def epsilon(self, delta: float) -> float:
        """No finite epsilon at any delta < 1."""
        check_float("delta", delta, min=0.0, max=1.0, max_open=True)
        return math.inf

    def delta(self, epsilon: float) -> float:
        """delta = 1 at every epsilon >= 0."""
        check_float("epsilon", epsilon, min=0.0)
        return 1.0

    def to_state(self) -> dict:
        return {"kind": "none", "draws": self.draws}

    @classmethod
    def from_state(cls, s: dict) -> NonPrivateLedger:
        return cls(s["draws"])
