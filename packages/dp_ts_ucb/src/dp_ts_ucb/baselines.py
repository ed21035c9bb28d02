"""The peers of DP-TS-UCB, on the same streaming interface (:class:`dp_ts_ucb.policies.BanditPolicy`).

- :class:`UCB1` (Auer et al. 2002), non-private;
- :class:`TSGaussian` (Agrawal & Goyal 2017) and :class:`MTSGaussian` (Ou, Avella Medina & Cummings 2024), the
  Thompson-sampling family the paper improves on, with their GDP accounting;
- :class:`DPSE` (Sajed & Sheffet 2019) and :class:`AdaPUCB` (Azize & Basu 2022), pure ε-DP.

:mod:`dp_ts_ucb.experiments` simulates each of them vectorised over runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dp_ts_ucb.policies import BanditPolicy
from dp_ts_ucb.privacy import GDPLedger, NonPrivateLedger, PureDPLedger
from icml25_shared.validate import check_float, check_int

__all__ = ["UCB1", "TSGaussian", "MTSGaussian", "DPSE", "AdaPUCB"]


class UCB1(BanditPolicy):
    """UCB1 (Auer et al. 2002): one pull of each arm, then mu_hat + sqrt(2 ln t / n). Not private."""

    name = "UCB1"
    _state_fields = ("sums",)

    def __init__(self, n_arms: int, horizon: int, seed: Any = None) -> None:
        super().__init__(n_arms, horizon, seed)
        self.sums = np.zeros(self.n_arms)
        self.ledger = NonPrivateLedger()

    def _select(self) -> int:
        if self.t < self.n_arms:
            return self.t
        idx = self.sums / self.counts + np.sqrt(2.0 * math.log(self.t + 1) / self.counts)
        return int(np.argmax(idx))

    def _update(self, arm: int, reward: float) -> None:
        self.sums[arm] += reward


class MTSGaussian(BanditPolicy):
    """Modified Gaussian TS (Ou, Avella Medina & Cummings 2024): ``b`` round-robin pre-pulls of each arm, then
    theta_i ~ N(S_i / (n_i + 1), c / (n_i + 1)) for every arm every round (prior N(0, 1) when c = 1).

    GDP: a reward of arm i moves every later posterior mean of arm i by <= 1/(n_i + 1), so each later draw costs
    1/sqrt(c (n_i + 1)); the first observation of an arm reads every later draw. A-priori bound
    sqrt(T / (c (max(b, 1) + 1))).
    """

    name = "M-TS-Gaussian"
    _params = ("b", "c")
    _state_fields = ("sums", "_rec_idx")

    def __init__(self, n_arms: int, horizon: int, b: int = 0, c: float = 1.0, seed: Any = None) -> None:
        super().__init__(n_arms, horizon, seed)
        self.b: int = check_int("b", b, min=0)  # type: ignore[assignment]
        self.c: float = check_float("c", c, min=0.0, min_open=True)  # type: ignore[assignment]
        if self.horizon < self.n_arms * self.b:
            raise ValueError(f"horizon must be >= n_arms * b = {self.n_arms * self.b}, got {self.horizon}")
        self.sums = np.zeros(self.n_arms)
        self._rec_idx = np.full(self.n_arms, -1, dtype=np.int64)
        self.ledger = GDPLedger(math.sqrt(self.horizon / (self.c * (max(self.b, 1) + 1))))

    @classmethod
    def matched(cls, mu: float, horizon: int, b: int) -> float:
        """The variance scale c giving a-priori ``mu``-GDP over ``horizon``: c = T / (mu^2 (max(b, 1) + 1))."""
        mu = check_float("mu", mu, min=0.0, min_open=True)  # type: ignore[assignment]
        horizon = check_int("horizon", horizon, min=2)  # type: ignore[assignment]
        b = check_int("b", b, min=0)  # type: ignore[assignment]
        c = horizon / (mu * mu * (max(b, 1) + 1))
        if c < 1:
            raise ValueError(f"matching mu={mu} at T={horizon}, b={b} needs c={c:.4g} < 1 (less noise than TS)")
        return c

    def _select(self) -> int:
        if self.t < self.n_arms * self.b:
            return self.t % self.n_arms
        z = self.rng.standard_normal(self.n_arms)
        denom = self.counts + 1.0
        theta = self.sums / denom + np.sqrt(self.c / denom) * z
        for i in range(self.n_arms):
            if self.counts[i] > 0:
                self.ledger.draw(self.ledger.records[self._rec_idx[i]], 1.0 / math.sqrt(self.c * denom[i]))
            else:
                self.ledger.draws += 1
        return int(np.argmax(theta))

    def _update(self, arm: int, reward: float) -> None:
        self.sums[arm] += reward
        if self._rec_idx[arm] < 0:
            self.ledger.open(arm, 0, 1)
            self._rec_idx[arm] = len(self.ledger.records) - 1


class TSGaussian(MTSGaussian):
    """Gaussian Thompson sampling (Agrawal & Goyal 2017): M-TS-Gaussian with b = 0, c = 1."""

    name = "TS-Gaussian"
    _params = ()

    def __init__(self, n_arms: int, horizon: int, seed: Any = None) -> None:
        super().__init__(n_arms, horizon, b=0, c=1.0, seed=seed)


class DPSE(BanditPolicy):
    """DP successive elimination (Sajed & Sheffet 2019), pure epsilon-DP.

    Epoch e: Delta_e = 2^-e; every active arm is pulled R_e = ceil(max(c1 ln(8|S|e^2/beta)/Delta_e^2,
    c2 ln(4|S|e^2/beta)/(eps Delta_e))) times (round robin) on fresh rewards; its noisy mean is the epoch mean plus
    Laplace(1/(eps R_e)); arms below max - Delta_e are eliminated. beta = 1/T.
    """

    name = "DP-SE"
    _params = ("epsilon", "c1", "c2")
    _state_fields = ("active", "epoch_e", "r_e", "ep_sums", "ep_counts", "_order_pos")

    def __init__(
        self, n_arms: int, horizon: int, epsilon: float = 1.0, c1: float = 32.0, c2: float = 8.0, seed: Any = None
    ) -> None:
        super().__init__(n_arms, horizon, seed)
        self.epsilon: float = check_float("epsilon", epsilon, min=0.0, min_open=True)  # type: ignore[assignment]
        self.c1: float = check_float("c1", c1, min=0.0, min_open=True)  # type: ignore[assignment]
        self.c2: float = check_float("c2", c2, min=0.0, min_open=True)  # type: ignore[assignment]
        self.beta = 1.0 / self.horizon
        self.active = np.ones(self.n_arms, dtype=bool)
        self.epoch_e = 0
        self.ep_sums = np.zeros(self.n_arms)
        self.ep_counts = np.zeros(self.n_arms, dtype=np.int64)
        self._order_pos = 0
        self.r_e = 0
        self._start_epoch()
        self.ledger = PureDPLedger(self.epsilon)

    def epoch_pulls(self, e: int, n_active: int) -> int:
        """R_e for epoch ``e`` (>= 1) with ``n_active`` arms."""
        e = check_int("e", e, min=1)  # type: ignore[assignment]
        n_active = check_int("n_active", n_active, min=1)  # type: ignore[assignment]
        d = 2.0**-e
        a = self.c1 * math.log(8 * n_active * e * e / self.beta) / d**2
        b = self.c2 * math.log(4 * n_active * e * e / self.beta) / (self.epsilon * d)
        return math.ceil(max(a, b))

    def _start_epoch(self) -> None:
        self.epoch_e += 1
        self.r_e = self.epoch_pulls(self.epoch_e, int(self.active.sum()))
        self.ep_sums[:] = 0.0
        self.ep_counts[:] = 0
        self._order_pos = 0

    def _select(self) -> int:
        arms = np.flatnonzero(self.active)
        return int(arms[self._order_pos % len(arms)])

    def _update(self, arm: int, reward: float) -> None:
        arms = np.flatnonzero(self.active)
        if len(arms) == 1:
            return  # a single survivor is pulled until the horizon
        self.ep_sums[arm] += reward
        self.ep_counts[arm] += 1
        self._order_pos += 1
        if self._order_pos == self.r_e * len(arms):
            noisy = self.ep_sums[arms] / self.r_e + self.rng.laplace(0.0, 1.0 / (self.epsilon * self.r_e), len(arms))
            keep = noisy >= noisy.max() - 2.0**-self.epoch_e
            self.active[arms[~keep]] = False
            self._start_epoch()

    def _after_load(self) -> None:
        self.active = self.active.astype(bool)


class AdaPUCB(BanditPolicy):
    """AdaP-UCB (Azize & Basu 2022), pure epsilon-DP: arm-dependent doubling episodes.

    Each arm is played once; then at each episode start the arm maximising
    mu_tilde + sqrt(beta ln t / (2 n_last)) + beta ln t / (eps n_last) is played until its pull count doubles;
    mu_tilde is the mean of its last episode plus Laplace(1 / (eps n_last)).
    """

    name = "AdaP-UCB"
    _params = ("epsilon", "beta")
    _state_fields = ("mu_tilde", "n_last", "cur_arm", "cur_left", "cur_sum", "cur_len")

    def __init__(self, n_arms: int, horizon: int, epsilon: float = 1.0, beta: float = 3.1, seed: Any = None) -> None:
        super().__init__(n_arms, horizon, seed)
        self.epsilon: float = check_float("epsilon", epsilon, min=0.0, min_open=True)  # type: ignore[assignment]
        self.beta: float = check_float("beta", beta, min=0.0, min_open=True)  # type: ignore[assignment]
        self.mu_tilde = np.zeros(self.n_arms)
        self.n_last = np.zeros(self.n_arms, dtype=np.int64)
        self.cur_arm, self.cur_left, self.cur_sum, self.cur_len = -1, 0, 0.0, 0
        self.ledger = PureDPLedger(self.epsilon)

    def _select(self) -> int:
        if self.cur_left == 0:
            if self.t < self.n_arms:
                arm, length = self.t, 1
            else:
                lt = math.log(self.t + 1)
                idx = (
                    self.mu_tilde
                    + np.sqrt(self.beta * lt / (2 * self.n_last))
                    + self.beta * lt / (self.epsilon * self.n_last)
                )
                arm = int(np.argmax(idx))
                length = int(self.counts[arm])  # play until the count doubles
            self.cur_arm, self.cur_left, self.cur_sum, self.cur_len = arm, length, 0.0, length
        return int(self.cur_arm)

    def _update(self, arm: int, reward: float) -> None:
        self.cur_sum += reward
        self.cur_left -= 1
        if self.cur_left == 0:
            n = self.cur_len
            self.mu_tilde[arm] = self.cur_sum / n + self.rng.laplace(0.0, 1.0 / (self.epsilon * n))
            self.n_last[arm] = n

    def _after_load(self) -> None:
        self.cur_arm, self.cur_left, self.cur_len = int(self.cur_arm), int(self.cur_left), int(self.cur_len)
