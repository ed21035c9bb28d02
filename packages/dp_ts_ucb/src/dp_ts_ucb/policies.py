"""DP-TS-UCB and its peers as streaming policies sharing one interface.

``select() -> arm`` then ``update(arm, reward)``, once per round, for exactly ``horizon`` rounds; ``ledger`` holds
the privacy accounting; ``to_state()`` / ``from_state()`` give a JSON-safe checkpoint including the RNG state.
These classes are the readable reference; :mod:`dp_ts_ucb.sim` runs the same algorithms vectorised over runs and
is tested to give the identical pull sequence.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np

from dp_ts_ucb.config import DPTSUCBConfig, check_int
from dp_ts_ucb.privacy import (
    GDPLedger,
    NonPrivateLedger,
    PureDPLedger,
    dp_ts_ucb_mu_bound,
    paper_mu_bound,
    sampling_budget,
)

__all__ = ["BanditPolicy", "DPTSUCB", "UCB1", "TSGaussian", "MTSGaussian", "DPSE", "AdaPUCB", "make_rng"]


def make_rng(seed: Any) -> np.random.Generator:
    """A numpy Generator from an int, a SeedSequence, a Generator or None."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and not isinstance(seed, (int, np.integer, np.random.SeedSequence)):
        raise ValueError(f"seed must be None, an int, a SeedSequence or a Generator, got {seed!r}")
    return np.random.default_rng(seed)


def _check_reward(reward: Any) -> float:
    try:
        r = float(reward)
    except (TypeError, ValueError):
        raise ValueError(f"reward must be a number in [0, 1], got {reward!r}") from None
    if not (0.0 <= r <= 1.0):  # also rejects NaN
        raise ValueError(f"reward must be in [0, 1], got {reward!r}")
    return r


class BanditPolicy:
    """Shared bookkeeping: round counter, pending selection, counts, state round trip."""

    name: ClassVar[str] = "policy"
    #: fields (beyond n_arms, horizon) that define the policy, in constructor order
    _params: ClassVar[tuple[str, ...]] = ()
    #: array/scalar attributes saved by to_state
    _state_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, n_arms: int, horizon: int, seed: Any = None) -> None:
        self.n_arms = check_int("n_arms", n_arms, 2)
        self.horizon = check_int("horizon", horizon, 2)
        self.rng = make_rng(seed)
        self.t = 0  # completed rounds
        self._pending: int | None = None
        self.counts = np.zeros(self.n_arms, dtype=np.int64)

    # -- interface -------------------------------------------------------------------------------------------
    def select(self) -> int:
        """The arm to pull this round."""
        if self._pending is not None:
            raise ValueError(f"select() called twice without update(); arm {self._pending} is pending")
        if self.t >= self.horizon:
            raise ValueError(f"select() past the horizon T={self.horizon}: the privacy guarantee covers T rounds")
        arm = int(self._select())
        self._pending = arm
        return arm

    def update(self, arm: int, reward: float) -> None:
        """Feed back the reward of the pending ``arm`` (must follow ``select``)."""
        if self._pending is None:
            raise ValueError("update() without a pending select()")
        arm = self._check_arm(arm)
        if arm != self._pending:
            raise ValueError(f"arm must be the selected arm {self._pending}, got {arm}")
        r = _check_reward(reward)
        self._pending = None
        self.counts[arm] += 1
        self.t += 1
        self._update(arm, r)

    def _check_arm(self, arm: Any) -> int:
        if isinstance(arm, bool) or not isinstance(arm, (int, np.integer)) or not 0 <= arm < self.n_arms:
            raise ValueError(f"arm must be an int in [0, {self.n_arms}), got {arm!r}")
        return int(arm)

    def _select(self) -> int:
        raise NotImplementedError

    def _update(self, arm: int, reward: float) -> None:
        raise NotImplementedError

    ledger: Any

    # -- checkpoints -----------------------------------------------------------------------------------------
    def to_state(self) -> dict:
        """JSON-safe state: parameters, counters, arrays, ledger and the RNG's bit-generator state."""

        def enc(v: Any) -> Any:
            return {"__nd__": v.tolist(), "dtype": str(v.dtype)} if isinstance(v, np.ndarray) else v

        state = {
            "policy": type(self).__name__,
            "params": {"n_arms": self.n_arms, "horizon": self.horizon, **{p: getattr(self, p) for p in self._params}},
            "t": self.t,
            "pending": self._pending,
            "counts": enc(self.counts),
            "fields": {f: enc(getattr(self, f)) for f in self._state_fields},
            "ledger": self.ledger.to_state(),
            "rng": self.rng.bit_generator.state,
        }
        json.dumps(state)  # fail here, not at the caller's save, if anything is not JSON-safe
        return state

    @classmethod
    def from_state(cls, state: dict) -> BanditPolicy:
        """Rebuild a policy from :meth:`to_state`; it continues exactly as the original would."""
        if state.get("policy") != cls.__name__:
            raise ValueError(f"state is of policy {state.get('policy')!r}, not {cls.__name__}")

        def dec(v: Any) -> Any:
            if isinstance(v, dict) and "__nd__" in v:
                return np.asarray(v["__nd__"], dtype=v["dtype"])
            return v

        pol = cls(**state["params"])
        pol.t, pol._pending, pol.counts = state["t"], state["pending"], dec(state["counts"])
        for f, v in state["fields"].items():
            setattr(pol, f, dec(v))
        kind = state["ledger"]["kind"]
        pol.ledger = {"gdp": GDPLedger, "pure": PureDPLedger, "none": NonPrivateLedger}[kind].from_state(
            state["ledger"]
        )
        pol._after_load()
        pol.rng.bit_generator.state = state["rng"]
        return pol

    def _after_load(self) -> None:
        """Re-link derived objects after from_state."""


class DPTSUCB(BanditPolicy):
    """DP-TS-UCB(alpha, T, c0): Gaussian Thompson samples with a per-epoch budget, then the max as a UCB index.

    Per arm: the model is N(mu_hat, ln^alpha T / n) from the arm's last completed batch (size n); while the
    budget h > 0 the index is a fresh sample (recorded in the ledger); afterwards it is the max of the phi samples
    drawn (post-processing, free). A batch closes at twice the current model's size, starting a new epoch.
    RNG contract: one ``standard_normal(K)`` per round after the initial round-robin pulls.
    """

    name = "DP-TS-UCB"
    _params = ("alpha", "c0", "init_pulls")
    _state_fields = ("muhat", "n", "h", "maxidx", "buf_sum", "buf_n", "epoch", "_rec_idx")

    def __init__(
        self, n_arms: int, horizon: int, alpha: float = 1.0, c0: float = 1.0, init_pulls: int = 1, seed: Any = None
    ) -> None:
        cfg = DPTSUCBConfig(n_arms, horizon, alpha, c0, init_pulls, seed)
        super().__init__(cfg.n_arms, cfg.horizon, seed)
        self.config = cfg
        self.alpha, self.c0, self.init_pulls = cfg.alpha, cfg.c0, cfg.init_pulls
        self.phi = int(sampling_budget(self.horizon, self.alpha, self.c0))
        self.var_scale = math.log(self.horizon) ** self.alpha  # ln^alpha T
        k = self.n_arms
        self.muhat = np.zeros(k)
        self.n = np.zeros(k, dtype=np.int64)  # size of the current model's batch (0: still initialising)
        self.h = np.zeros(k, dtype=np.int64)
        self.maxidx = np.full(k, -np.inf)
        self.buf_sum = np.zeros(k)
        self.buf_n = np.zeros(k, dtype=np.int64)
        self.epoch = np.full(k, -1, dtype=np.int64)
        self._rec_idx = np.full(k, -1, dtype=np.int64)
        self.ledger = GDPLedger(
            dp_ts_ucb_mu_bound(self.horizon, self.alpha, self.c0, self.init_pulls),
            paper_mu_bound(self.horizon, self.alpha, self.c0),
        )

    @property
    def initialising(self) -> bool:
        return self.t < self.n_arms * self.init_pulls

    def _select(self) -> int:
        if self.initialising:
            return self.t % self.n_arms  # round robin, b0 pulls each
        z = self.rng.standard_normal(self.n_arms)
        idx = np.empty(self.n_arms)
        for i in range(self.n_arms):
            if self.h[i] > 0:
                theta = self.muhat[i] + math.sqrt(self.var_scale / self.n[i]) * z[i]
                self.h[i] -= 1
                self.maxidx[i] = max(self.maxidx[i], theta)
                idx[i] = theta
                # one draw from a batch of n: sensitivity 1/n, sigma sqrt(ln^a T / n) -> mu = 1/sqrt(n ln^a T)
                self.ledger.draw(self.ledger.records[self._rec_idx[i]], 1.0 / math.sqrt(self.n[i] * self.var_scale))
            else:
                idx[i] = self.maxidx[i]
        return int(np.argmax(idx))  # ties: lowest index

    def _update(self, arm: int, reward: float) -> None:
        self.buf_sum[arm] += reward
        self.buf_n[arm] += 1
        target = self.init_pulls if self.n[arm] == 0 else 2 * self.n[arm]
        if self.buf_n[arm] == target:
            self.muhat[arm] = self.buf_sum[arm] / self.buf_n[arm]
            self.n[arm] = self.buf_n[arm]
            self.buf_sum[arm], self.buf_n[arm] = 0.0, 0
            self.h[arm], self.maxidx[arm] = self.phi, -np.inf
            self.epoch[arm] += 1
            self.ledger.open(arm, int(self.epoch[arm]), int(self.n[arm]))
            self._rec_idx[arm] = len(self.ledger.records) - 1


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
        self.b = check_int("b", b, 0)
        if not (isinstance(c, (int, float, np.floating)) and math.isfinite(c) and c > 0):
            raise ValueError(f"c must be a positive finite number, got {c!r}")
        self.c = float(c)
        if self.horizon < self.n_arms * self.b:
            raise ValueError(f"horizon must be >= n_arms * b = {self.n_arms * self.b}, got {self.horizon}")
        self.sums = np.zeros(self.n_arms)
        self._rec_idx = np.full(self.n_arms, -1, dtype=np.int64)
        self.ledger = GDPLedger(math.sqrt(self.horizon / (self.c * (max(self.b, 1) + 1))))

    @classmethod
    def matched(cls, mu: float, horizon: int, b: int) -> float:
        """The variance scale c giving a-priori ``mu``-GDP over ``horizon``: c = T / (mu^2 (max(b, 1) + 1))."""
        if not (math.isfinite(mu) and mu > 0):
            raise ValueError(f"mu must be positive and finite, got {mu!r}")
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


def _check_epsilon(epsilon: Any) -> float:
    if not (isinstance(epsilon, (int, float, np.floating)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    return float(epsilon)


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
        self.epsilon = _check_epsilon(epsilon)
        self.c1, self.c2 = float(c1), float(c2)
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
        """R_e for epoch ``e`` with ``n_active`` arms."""
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
        self.epsilon = _check_epsilon(epsilon)
        if not beta > 0:
            raise ValueError(f"beta must be positive, got {beta!r}")
        self.beta = float(beta)
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
