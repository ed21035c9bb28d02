"""The streaming policy interface and DP-TS-UCB itself (the paper's Alg. 1).

``select() -> arm`` then ``update(arm, reward)``, once per round, for exactly ``horizon`` rounds; ``ledger`` holds
the privacy accounting; ``to_state()`` / ``from_state()`` give a JSON-safe checkpoint including the RNG state.
The peers (UCB1, (M-)TS-Gaussian, DP-SE, AdaP-UCB) share the interface in :mod:`dp_ts_ucb.baselines`. These
classes are the readable reference; :mod:`dp_ts_ucb.experiments` runs the same algorithms vectorised over runs
and is tested to give the identical pull sequence.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np

from dp_ts_ucb.config import DPTSUCBConfig
from dp_ts_ucb.privacy import (
    GDPLedger,
    NonPrivateLedger,
    PureDPLedger,
    dp_ts_ucb_mu_bound,
    paper_mu_bound,
    sampling_budget,
)
from icml25_shared.validate import check_float, check_int

__all__ = ["BanditPolicy", "DPTSUCB", "make_rng"]


def make_rng(seed: Any) -> np.random.Generator:
    """A numpy Generator from an int, a SeedSequence, a Generator or None."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and not isinstance(seed, (int, np.integer, np.random.SeedSequence)):
        raise ValueError(f"seed must be None, an int, a SeedSequence or a Generator, got {seed!r}")
    return np.random.default_rng(seed)


def _json_floats(x: Any) -> Any:
    """Non-finite floats as the strings "inf", "-inf", "nan" (strict JSON has no such numbers), recursively."""
    if isinstance(x, list):
        return [_json_floats(v) for v in x]
    return repr(x) if isinstance(x, float) and not math.isfinite(x) else x


def _unjson_floats(x: Any) -> Any:
    """Inverse of :func:`_json_floats`."""
    if isinstance(x, list):
        return [_unjson_floats(v) for v in x]
    return float(x) if isinstance(x, str) else x


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
"""numpy's bit generators, by the name their ``state`` carries."""


def _enc_rng_state(x: Any) -> Any:
    """A bit generator's state with its arrays (MT19937's key, Philox's counter) as JSON-safe lists, recursively."""
    if isinstance(x, dict):
        return {k: _enc_rng_state(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return {"__nd__": x.tolist(), "dtype": str(x.dtype)}
    return x


def _dec_rng_state(x: Any) -> Any:
    """Inverse of :func:`_enc_rng_state`."""
    if isinstance(x, dict) and "__nd__" in x:
        return np.asarray(x["__nd__"], dtype=x["dtype"])
    if isinstance(x, dict):
        return {k: _dec_rng_state(v) for k, v in x.items()}
    return x


def _rng_from_state(state: Any) -> np.random.Generator:
    """A Generator on the bit generator named in ``state`` (a saved ``bit_generator.state``), set to it."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in _BIT_GENERATORS:
        raise ValueError(f"state['rng'] must be a numpy bit generator state of one of {_BIT_GENERATORS}, got {name!r}")
    rng = np.random.Generator(getattr(np.random, name)())
    try:
        rng.bit_generator.state = _dec_rng_state(state)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"state['rng'] is not a valid {name} state: {e!r}") from e
    return rng


def _require(d: Any, keys: tuple[str, ...], where: str) -> None:
    """Raise ``ValueError`` naming the first of ``keys`` missing from the mapping ``d``."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a dict, got {type(d).__name__}")
    missing = [k for k in keys if k not in d]
    if missing:
        raise ValueError(f"{where} is missing {missing} (not a complete to_state() checkpoint)")


def _check_reward(reward: Any) -> float:
    """A reward in [0, 1] as a float; a 0/1 bool reward (``rng.random() < p``) counts as 0.0/1.0."""
    if isinstance(reward, (bool, np.bool_)):
        return float(reward)
    return check_float("reward", reward, min=0.0, max=1.0)  # type: ignore[return-value]


class BanditPolicy:
    """Shared bookkeeping: round counter, pending selection, counts, state round trip."""

    name: ClassVar[str] = "policy"
    #: fields (beyond n_arms, horizon) that define the policy, in constructor order
    _params: ClassVar[tuple[str, ...]] = ()
    #: array/scalar attributes saved by to_state
    _state_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, n_arms: int, horizon: int, seed: Any = None) -> None:
        self.n_arms: int = check_int("n_arms", n_arms, min=2)  # type: ignore[assignment]
        self.horizon: int = check_int("horizon", horizon, min=2)  # type: ignore[assignment]
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
        return check_int("arm", arm, min=0, max=self.n_arms - 1)  # type: ignore[return-value]

    def _select(self) -> int:
        raise NotImplementedError

    def _update(self, arm: int, reward: float) -> None:
        raise NotImplementedError

    ledger: Any

    # -- checkpoints -----------------------------------------------------------------------------------------
    def to_state(self) -> dict:
        """JSON-safe state: parameters, counters, arrays, ledger and the RNG's bit-generator state."""

        def enc(v: Any) -> Any:
            return {"__nd__": _json_floats(v.tolist()), "dtype": str(v.dtype)} if isinstance(v, np.ndarray) else v

        state = {
            "policy": type(self).__name__,
            "params": {"n_arms": self.n_arms, "horizon": self.horizon, **{p: getattr(self, p) for p in self._params}},
            "t": self.t,
            "pending": self._pending,
            "counts": enc(self.counts),
            "fields": {f: enc(getattr(self, f)) for f in self._state_fields},
            "ledger": self.ledger.to_state(),
            "rng": _enc_rng_state(self.rng.bit_generator.state),
        }
        json.dumps(
            state, allow_nan=False
        )  # strict JSON; fail here, not at the caller's save, if anything is not JSON-safe
        return state

    @classmethod
    def from_state(cls, state: dict) -> BanditPolicy:
        """Rebuild a policy from :meth:`to_state`; it continues exactly as the original would.

        The state is checked before use: a missing entry raises ``ValueError`` naming it, and so does a state
        whose parts disagree (e.g. a hand-edited ``horizon``: the ledger's privacy bound, computed from the saved
        parameters, must be the one these parameters give; counters, arrays and the pending arm must fit)."""
        if not isinstance(state, dict):
            raise ValueError(f"state must be a dict from to_state(), got {type(state).__name__}")
        if state.get("policy") != cls.__name__:
            raise ValueError(f"state is of policy {state.get('policy')!r}, not {cls.__name__}")
        _require(state, ("params", "t", "pending", "counts", "fields", "ledger", "rng"), "state")
        _require(state["params"], ("n_arms", "horizon", *cls._params), "state['params']")
        _require(state["fields"], cls._state_fields, "state['fields']")
        _require(state["ledger"], ("kind",), "state['ledger']")
        ledgers = {"gdp": GDPLedger, "pure": PureDPLedger, "none": NonPrivateLedger}
        kind = state["ledger"]["kind"]
        if kind not in ledgers:
            raise ValueError(f"state['ledger']['kind'] must be one of {sorted(ledgers)}, got {kind!r}")

        def dec(v: Any) -> Any:
            if isinstance(v, dict) and "__nd__" in v:
                return np.asarray(_unjson_floats(v["__nd__"]), dtype=v["dtype"])
            return v

        pol = cls(**state["params"])
        fresh_ledger = pol.ledger.to_state()  # what these parameters give, before any round
        shapes = {f: np.shape(getattr(pol, f)) for f in cls._state_fields}
        pol.t, pol._pending, pol.counts = state["t"], state["pending"], dec(state["counts"])
        for f in cls._state_fields:
            setattr(pol, f, dec(state["fields"][f]))
        _require(state["ledger"], tuple(fresh_ledger), "state['ledger']")
        try:
            pol.ledger = ledgers[kind].from_state(state["ledger"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"state['ledger'] is malformed for kind {kind!r}: {e!r}") from e
        pol._check_loaded(fresh_ledger, state["ledger"], shapes)
        pol._after_load()
        pol.rng = _rng_from_state(state["rng"])  # the saved bit generator (a Generator seed may be any of numpy's)
        return pol

    def _check_loaded(self, fresh: dict, saved: dict, shapes: dict[str, tuple[int, ...]]) -> None:
        """Consistency of a loaded state (see :meth:`from_state`)."""
        if not isinstance(self.t, int) or not 0 <= self.t <= self.horizon:
            raise ValueError(f"state['t'] must be an int in [0, horizon={self.horizon}], got {self.t!r}")
        counts = np.asarray(self.counts)
        if counts.shape != (self.n_arms,) or (counts < 0).any() or int(counts.sum()) != self.t:
            raise ValueError(
                f"state['counts'] must be {self.n_arms} non-negative pull counts summing to t={self.t}, got "
                f"{counts.tolist()}"
            )
        if self._pending is not None:
            self._pending = check_int("state['pending']", self._pending, min=0, max=self.n_arms - 1)  # type: ignore[assignment]
        for f, shape in shapes.items():
            if np.shape(getattr(self, f)) != shape:
                raise ValueError(
                    f"state['fields'][{f!r}] has shape {np.shape(getattr(self, f))}, expected {shape} for "
                    f"n_arms={self.n_arms}"
                )
        for k, v in fresh.items():
            if k in ("records", "draws"):
                continue
            if saved[k] != v and not (
                isinstance(v, float) and isinstance(saved[k], float) and v != v and saved[k] != saved[k]
            ):
                raise ValueError(
                    f"state is inconsistent: the ledger's {k} = {saved[k]!r} is not the {v!r} that its parameters "
                    f"{ ({'n_arms': self.n_arms, 'horizon': self.horizon}) } give (was the state edited by hand?)"
                )

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
