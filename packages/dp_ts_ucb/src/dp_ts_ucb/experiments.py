"""Monte-Carlo regret experiments, vectorised over runs, and the instances the reproduction runs them on.

:func:`simulate` runs any policy many times on a bandit; :func:`run_instance` runs DP-TS-UCB and every peer on one
instance, with M-TS-Gaussian matched to DP-TS-UCB(α = 1)'s a-priori GDP (:func:`matched_mts`) and the ε-DP peers
to its ε at δ = 1e-5; :func:`plot_regret` and :func:`plot_privacy_regret` draw the results.

Runs are cut into fixed chunks of ``CHUNK`` runs (independent of ``n_jobs``); chunk c draws its policy and
environment randomness from the two children of ``SeedSequence(seed).spawn(n_chunks)[c]``. ``n_jobs > 1`` only
distributes chunks over joblib (loky) processes, so results are bit-for-bit those of ``n_jobs = 1``.

Index policies (DP-TS-UCB, (M-)TS-Gaussian, UCB1) run as array programs over the (runs, arms) state, honouring
the streaming RNG contract (one ``standard_normal(K)`` per round per run, one environment draw per pull): with one
run the pull sequence equals the streaming policy's. Epoch-structured peers (DP-SE, AdaP-UCB) simulate whole
epochs at once, in the streaming policy's pull order (DP-SE's round robin over the active arms, AdaP-UCB's
episodes), drawing one environment sample per pull, so they too reproduce the streaming pull sequence. Other
``BanditPolicy`` subclasses run their streaming loop.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from dp_ts_ucb.baselines import DPSE, UCB1, AdaPUCB, MTSGaussian, TSGaussian
from dp_ts_ucb.envs import BernoulliBandit
from dp_ts_ucb.policies import DPTSUCB, BanditPolicy
from dp_ts_ucb.privacy import dp_ts_ucb_mu_bound, gdp_epsilon
from icml25_shared.report import save_figure, subplots
from icml25_shared.validate import check_array, check_bool, check_int

__all__ = [
    "simulate",
    "SimResult",
    "chunk_seeds",
    "CHUNK",
    "INSTANCES",
    "B_GRID",
    "DELTA",
    "InstanceResult",
    "matched_mts",
    "run_instance",
    "instance_to_dict",
    "instance_from_dict",
    "plot_regret",
    "plot_privacy_regret",
    "plot_normalised_regret",
]

CHUNK = 25
_BLOCK = 2048  # rounds of randomness drawn at once (same stream as per-round draws)


@dataclass
class SimResult:
    """Outcome of :func:`simulate`; arrays have one row per run."""

    policy: str
    params: dict
    horizon: int
    regret: np.ndarray  # (n_runs,) pseudo-regret at the horizon
    checkpoints: np.ndarray  # (n_checkpoints,) rounds
    regret_at: np.ndarray  # (n_runs, n_checkpoints)
    pulls: np.ndarray  # (n_runs, K)
    draws: np.ndarray  # (n_runs,) Gaussian draws (privacy-relevant samples)
    mu_bound: float
    mu_realized: np.ndarray  # (n_runs,) ex-post GDP (nan for pure-DP peers)
    epsilon_dp: float | None = None
    arms: np.ndarray | None = field(default=None, repr=False)  # (n_runs, T) pull sequences when requested

    @property
    def n_runs(self) -> int:
        return len(self.regret)

    @property
    def regret_mean(self) -> float:
        return float(self.regret.mean())

    @property
    def regret_se(self) -> float:
        return float(self.regret.std(ddof=1) / math.sqrt(self.n_runs)) if self.n_runs > 1 else 0.0

    @property
    def regret_curve(self) -> np.ndarray:
        """Mean regret at each checkpoint."""
        return self.regret_at.mean(axis=0)

    @property
    def regret_curve_se(self) -> np.ndarray:
        n = self.n_runs
        return self.regret_at.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(len(self.checkpoints))

    def epsilon(self, delta: float = 1e-5) -> float:
        """epsilon at ``delta`` of the a-priori guarantee (the pure-DP epsilon for epsilon-DP peers)."""
        if self.epsilon_dp is not None:
            return self.epsilon_dp
        return gdp_epsilon(mu=self.mu_bound, delta=delta) if math.isfinite(self.mu_bound) else math.inf

    def to_dict(self) -> dict:
        return {
            "policy": self.policy,
            "params": self.params,
            "horizon": self.horizon,
            "n_runs": self.n_runs,
            "regret_mean": self.regret_mean,
            "regret_se": self.regret_se,
            "checkpoints": self.checkpoints.tolist(),
            "regret_curve": self.regret_curve.tolist(),
            "mu_bound": self.mu_bound,
            "mu_realized_max": float(np.nanmax(self.mu_realized)) if np.any(np.isfinite(self.mu_realized)) else None,
            "draws_mean": float(self.draws.mean()),
            "epsilon_1e-5": self.epsilon(1e-5),
        }


def chunk_seeds(seed: Any, n_runs: int) -> list[tuple[np.random.SeedSequence, np.random.SeedSequence, int]]:
    """(policy seed, environment seed, runs) of each chunk."""
    n_chunks = math.ceil(n_runs / CHUNK)
    out = []
    for c, child in enumerate(np.random.SeedSequence(seed).spawn(n_chunks)):
        pol, env = child.spawn(2)
        out.append((pol, env, min(CHUNK, n_runs - c * CHUNK)))
    return out


class _Tracker:
    """Regret at checkpoints and pull counts for R runs."""

    def __init__(self, r: int, k: int, horizon: int, gaps: np.ndarray, checkpoints: np.ndarray, keep_arms: bool):
        self.rows = np.arange(r)
        self.gaps = gaps
        self.regret = np.zeros(r)
        self.pulls = np.zeros((r, k), dtype=np.int64)
        self.cps = checkpoints
        self.at = np.zeros((r, len(checkpoints)))
        self._next = 0
        self.arms = np.zeros((r, horizon), dtype=np.int16) if keep_arms else None

    def step(self, t: int, a: np.ndarray) -> None:
        """Record the pulls ``a`` (R,) of round ``t`` (0-based)."""
        self.regret += self.gaps[a]
        self.pulls[self.rows, a] += 1
        if self.arms is not None:
            self.arms[:, t] = a
        while self._next < len(self.cps) and self.cps[self._next] == t + 1:
            self.at[:, self._next] = self.regret
            self._next += 1

    def block(self, run: int, t0: int, arm: int, length: int) -> None:
        """Record ``length`` pulls of ``arm`` in rounds t0 .. t0+length-1 of one run (block simulators)."""
        i0, i1 = np.searchsorted(self.cps, (t0, t0 + length), side="right")  # checkpoints in (t0, t0 + length]
        self.at[run, i0:i1] = self.regret[run] + self.gaps[arm] * (self.cps[i0:i1] - t0)
        self.regret[run] += self.gaps[arm] * length
        self.pulls[run, arm] += length
        if self.arms is not None:
            self.arms[run, t0 : t0 + length] = arm

    def sequence(self, run: int, t0: int, arms: np.ndarray) -> None:
        """Record the pulls ``arms`` (one per round) in rounds t0 .. t0+len(arms)-1 of one run."""
        cum = np.cumsum(self.gaps[arms])
        i0, i1 = np.searchsorted(self.cps, (t0, t0 + len(arms)), side="right")
        self.at[run, i0:i1] = self.regret[run] + cum[self.cps[i0:i1] - t0 - 1]
        self.regret[run] += cum[-1]
        self.pulls[run] += np.bincount(arms, minlength=self.pulls.shape[1])
        if self.arms is not None:
            self.arms[run, t0 : t0 + len(arms)] = arms


def _rewards(env: BernoulliBandit, arms: np.ndarray, env_rng: np.random.Generator) -> np.ndarray:
    """Rewards of the pulls ``arms`` (one per round), drawing the environment's randomness exactly as that many
    ``env.pull`` calls do (so a simulated run and the streaming policy see the same rewards)."""
    return env.rewards_from_uniforms(arms, env.draw_noise(env_rng, len(arms)))


class _Noise:
    """Blocks of policy normals (B, R, K) and environment noise (B, R), consumed round by round."""

    def __init__(
        self, env: BernoulliBandit, pol_rng: np.random.Generator | None, env_rng: np.random.Generator, r: int, k: int
    ):
        self.env, self.pol_rng, self.env_rng, self.r, self.k = env, pol_rng, env_rng, r, k
        self._z: np.ndarray = np.empty((0, r, k))
        self._u: np.ndarray = np.empty((0, r))
        self._iz = self._iu = _BLOCK

    def z(self) -> np.ndarray:
        if self._iz == _BLOCK:
            if self.pol_rng is None:
                raise RuntimeError("this noise source was built without a policy generator (pol_rng=None)")
            self._z, self._iz = self.pol_rng.standard_normal((_BLOCK, self.r, self.k)), 0
        self._iz += 1
        return self._z[self._iz - 1]

    def u(self) -> np.ndarray:
        if self._iu == _BLOCK:
            self._u, self._iu = self.env.draw_noise(self.env_rng, (_BLOCK, self.r)), 0
        self._iu += 1
        return self._u[self._iu - 1]


def _run_dptsucb(pol: DPTSUCB, env, horizon, r, pol_rng, env_rng, tr: _Tracker):
    k, b0, phi, v = pol.n_arms, pol.init_pulls, pol.phi, pol.var_scale
    rows = tr.rows
    noise = _Noise(env, pol_rng, env_rng, r, k)
    muhat, n = np.zeros((r, k)), np.zeros((r, k), dtype=np.int64)
    bsum, bn = np.zeros((r, k)), np.zeros((r, k), dtype=np.int64)
    h = np.zeros((r, k), dtype=np.int64)
    mx = np.full((r, k), -np.inf)
    scale = np.zeros((r, k))
    mu_sq, mu_real_sq = np.zeros((r, k)), np.zeros(r)
    draws = np.zeros(r, dtype=np.int64)

    def close(rr: np.ndarray, aa: np.ndarray) -> None:
        np.maximum.at(mu_real_sq, rr, mu_sq[rr, aa])
        muhat[rr, aa] = bsum[rr, aa] / bn[rr, aa]
        n[rr, aa] = bn[rr, aa]
        scale[rr, aa] = np.sqrt(v / n[rr, aa])
        bsum[rr, aa], bn[rr, aa] = 0.0, 0
        h[rr, aa], mx[rr, aa], mu_sq[rr, aa] = phi, -np.inf, 0.0

    for t in range(k * b0):  # round-robin initial batches
        a = np.full(r, t % k)
        rew = env.rewards_from_uniforms(a, noise.u())
        bsum[rows, a] += rew
        bn[rows, a] += 1
        tr.step(t, a)
    close(np.repeat(rows, k), np.tile(np.arange(k), r))
    inv_nv = 1.0 / (n * v)
    for t in range(k * b0, horizon):
        z = noise.z()
        act = h > 0
        theta = muhat + scale * z
        idx = np.where(act, theta, mx)
        np.maximum(mx, theta, out=mx, where=act)
        mu_sq += act * inv_nv  # one draw from a batch of n costs mu^2 = 1 / (n ln^a T)
        h -= act
        draws += act.sum(axis=1)
        a = idx.argmax(axis=1)
        rew = env.rewards_from_uniforms(a, noise.u())
        bsum[rows, a] += rew
        bn[rows, a] += 1
        tr.step(t, a)
        full = bn[rows, a] == 2 * n[rows, a]
        if full.any():
            rr, aa = rows[full], a[full]
            close(rr, aa)
            inv_nv[rr, aa] = 1.0 / (n[rr, aa] * v)
    mu_real_sq = np.maximum(mu_real_sq, mu_sq.max(axis=1))
    return draws, np.sqrt(mu_real_sq)


def _run_mts(pol: MTSGaussian, env, horizon, r, pol_rng, env_rng, tr: _Tracker):
    k, b, c = pol.n_arms, pol.b, pol.c
    rows = tr.rows
    noise = _Noise(env, pol_rng, env_rng, r, k)
    sums, cnt = np.zeros((r, k)), np.zeros((r, k))
    mu_sq = np.zeros((r, k))
    draws = np.zeros(r, dtype=np.int64)
    for t in range(horizon):
        if t < k * b:
            a = np.full(r, t % k)
        else:
            z = noise.z()
            denom = cnt + 1.0
            a = (sums / denom + np.sqrt(c / denom) * z).argmax(axis=1)
            mu_sq += (cnt > 0) / (c * denom)  # each draw after an arm's first reward costs 1/(c (n+1))
            draws += k
        rew = env.rewards_from_uniforms(a, noise.u())
        sums[rows, a] += rew
        cnt[rows, a] += 1
        tr.step(t, a)
    return draws, np.sqrt(mu_sq.max(axis=1))


def _run_ucb1(pol: UCB1, env, horizon, r, pol_rng, env_rng, tr: _Tracker):
    k = pol.n_arms
    rows = tr.rows
    noise = _Noise(env, None, env_rng, r, k)
    sums, cnt = np.zeros((r, k)), np.zeros((r, k))
    for t in range(horizon):
        a = np.full(r, t) if t < k else (sums / cnt + np.sqrt(2.0 * math.log(t + 1) / cnt)).argmax(axis=1)
        rew = env.rewards_from_uniforms(a, noise.u())
        sums[rows, a] += rew
        cnt[rows, a] += 1
        tr.step(t, a)
    return np.zeros(r, dtype=np.int64), np.full(r, np.inf)


def _run_dpse(pol: DPSE, env, horizon, r, pol_rng, env_rng, tr: _Tracker):
    for run in range(r):
        active = np.arange(pol.n_arms)
        t, e = 0, 0
        while t < horizon:
            m = len(active)
            if m == 1:  # a single survivor is pulled until the horizon (its rewards are never read)
                tr.block(run, t, int(active[0]), horizon - t)
                break
            e += 1
            r_e = pol.epoch_pulls(e, m)
            length = min(r_e * m, horizon - t)  # the horizon may cut the epoch
            arms = active[np.arange(length) % m]  # R_e round-robin passes over the active arms
            rewards = _rewards(env, arms, env_rng)
            tr.sequence(run, t, arms)
            t += length
            if length < r_e * m:
                break
            sums = np.cumsum(rewards.reshape(r_e, m), axis=0)[-1]  # summed in pull order, as the policy does
            noisy = sums / r_e + pol_rng.laplace(0.0, 1.0 / (pol.epsilon * r_e), m)
            active = active[noisy >= noisy.max() - 2.0**-e]
    return np.zeros(r, dtype=np.int64), np.full(r, np.nan)


def _run_adapucb(pol: AdaPUCB, env, horizon, r, pol_rng, env_rng, tr: _Tracker):
    k, eps, beta = pol.n_arms, pol.epsilon, pol.beta
    for run in range(r):
        counts = np.zeros(k, dtype=np.int64)
        mu_t, n_last = np.zeros(k), np.zeros(k)
        t = 0
        while t < horizon:
            if t < k:
                arm, length = t, 1
            else:
                lt = math.log(t + 1)
                arm = int(np.argmax(mu_t + np.sqrt(beta * lt / (2 * n_last)) + beta * lt / (eps * n_last)))
                length = int(counts[arm])
            take = min(length, horizon - t)
            s = np.cumsum(_rewards(env, np.full(take, arm), env_rng))[-1]  # summed in pull order
            tr.block(run, t, arm, take)
            counts[arm] += take
            t += take
            if take == length:
                mu_t[arm] = s / take + pol_rng.laplace(0.0, 1.0 / (eps * take))
                n_last[arm] = take
    return np.zeros(r, dtype=np.int64), np.full(r, np.nan)


def _run_streaming(pol_cls, params, env, horizon, r, pol_seed, env_seed, tr: _Tracker):
    draws, mus = np.zeros(r, dtype=np.int64), np.zeros(r)
    for run, (ps, es) in enumerate(zip(pol_seed.spawn(r), env_seed.spawn(r))):
        pol = pol_cls(n_arms=env.n_arms, horizon=horizon, seed=ps, **params)
        e = env.reseed(es)
        for t in range(horizon):
            a = pol.select()
            pol.update(a, e.pull(a))
            tr.block(run, t, a, 1)
        draws[run], mus[run] = pol.ledger.draws, pol.ledger.mu_realized
    return draws, mus


_KERNELS = {
    DPTSUCB: _run_dptsucb,
    MTSGaussian: _run_mts,
    TSGaussian: _run_mts,
    UCB1: _run_ucb1,
    DPSE: _run_dpse,
    AdaPUCB: _run_adapucb,
}


def _run_chunk(pol_cls, params, env, horizon, pol_seed, env_seed, r, checkpoints, keep_arms):
    tr = _Tracker(r, env.n_arms, horizon, env.gaps, checkpoints, keep_arms)
    kernel = _KERNELS.get(pol_cls)
    if kernel is None:
        draws, mus = _run_streaming(pol_cls, params, env, horizon, r, pol_seed, env_seed, tr)
    else:
        pol = pol_cls(n_arms=env.n_arms, horizon=horizon, **params)  # validates params, holds the formulas
        draws, mus = kernel(pol, env, horizon, r, np.random.default_rng(pol_seed), np.random.default_rng(env_seed), tr)
    return tr.regret, tr.at, tr.pulls, draws, mus, tr.arms


def _check_params(policy_cls: type[BanditPolicy], params: dict) -> None:
    """Refuse keys ``policy_cls`` does not take (``seed`` included: ``simulate`` seeds every run itself)."""
    sig = inspect.signature(policy_cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values()):
        return
    allowed = [n for n in sig if n not in ("self", "n_arms", "horizon", "seed")]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"params has key(s) {', '.join(map(repr, unknown))} that {policy_cls.__name__} does not take; "
            f"expected some of {', '.join(map(repr, allowed)) or 'none'} (seed is simulate's own argument)"
        )


_ENV_API = ("n_arms", "gaps", "reseed", "pull", "rewards_from_uniforms", "draw_noise")
"""What :func:`simulate` uses of an environment (:class:`~dp_ts_ucb.envs.BernoulliBandit`'s interface)."""


def simulate(
    policy_cls: type[BanditPolicy],
    params: dict | None,
    env: BernoulliBandit,
    horizon: int,
    n_runs: int,
    seed: Any = 0,
    n_jobs: int = 1,
    checkpoints: Sequence[int] | np.ndarray | None = None,
    return_arms: bool = False,
) -> SimResult:
    """Run ``n_runs`` independent runs of ``policy_cls(**params)`` on ``env`` for ``horizon`` rounds.

    ``checkpoints`` (rounds, default 20 evenly spaced) get the regret curve; ``return_arms`` keeps the pull
    sequences (n_runs, T). ``n_jobs > 1`` needs joblib (extra ``parallel``) and returns identical results.
    """
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"params must be a dict of keyword arguments of policy_cls (or None), got {params!r}")
    params = dict(params or {})
    if not (isinstance(policy_cls, type) and issubclass(policy_cls, BanditPolicy)):
        raise ValueError(f"policy_cls must be a BanditPolicy subclass, got {policy_cls!r}")
    missing = [a for a in _ENV_API if not hasattr(env, a)]
    if missing:
        raise ValueError(
            f"env must be a bandit environment like BernoulliBandit or TruncatedGaussianBandit, got "
            f"{type(env).__name__} without {', '.join(missing)}"
        )
    horizon = check_int("horizon", horizon, min=2)
    n_runs = check_int("n_runs", n_runs, min=1)
    n_jobs = check_int("n_jobs", n_jobs, min=1)
    return_arms = check_bool("return_arms", return_arms)
    if not (seed is None or isinstance(seed, np.random.SeedSequence)):
        try:
            np.random.SeedSequence(seed)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"seed must be None, a non-negative int, a sequence of them or a SeedSequence (every run gets its "
                f"own child), got {seed!r}"
            ) from e
    _check_params(policy_cls, params)
    probe = policy_cls(n_arms=env.n_arms, horizon=horizon, **params)  # validates everything once
    # numpy scalars as the Python numbers the policy validated them to, so the result's params are JSON-ready
    params = {k: v.item() if isinstance(v, np.generic) else v for k, v in params.items()}
    if checkpoints is None:
        checkpoints = np.unique(np.linspace(horizon / 20, horizon, 20).astype(np.int64))
    assert checkpoints is not None
    raw = np.asarray(check_array("checkpoints", checkpoints, ndim=1, dtype="numeric", finite=True))
    if raw.size == 0 or np.any(raw != np.round(raw)) or raw.min() < 1 or raw.max() > horizon:
        raise ValueError(f"checkpoints must be whole rounds in [1, horizon={horizon}], got {raw.tolist()}")
    cps = np.unique(raw.astype(np.int64))
    jobs = [(policy_cls, params, env, horizon, ps, es, r, cps, return_arms) for ps, es, r in chunk_seeds(seed, n_runs)]
    if n_jobs == 1 or len(jobs) == 1:
        outs = [_run_chunk(*j) for j in jobs]
    else:
        from joblib import Parallel, delayed

        outs = cast(list, Parallel(n_jobs=n_jobs, backend="loky")(delayed(_run_chunk)(*j) for j in jobs))
    cat = [np.concatenate([cast(np.ndarray, o[i]) for o in outs]) for i in range(5)]
    eps = getattr(probe.ledger, "epsilon_dp", None)
    return SimResult(
        policy=probe.name,
        params=params,
        horizon=horizon,
        regret=cat[0],
        checkpoints=cps,
        regret_at=cat[1],
        pulls=cat[2],
        draws=cat[3],
        mu_bound=float(probe.ledger.mu_bound),
        mu_realized=cat[4],
        epsilon_dp=eps,
        arms=np.concatenate([cast(np.ndarray, o[5]) for o in outs]) if return_arms else None,
    )


# ---- the reproduction's instances and experiments -----------------------------------------------------------
INSTANCES = {
    "A": [0.75, 0.625, 0.5, 0.375, 0.25],
    "B": [0.9] + [0.8] * 9,
    "C": [0.5, 0.45],
}
"""Bernoulli instances (arm means): A, five evenly spaced arms; B, one best arm among nine at gap 0.1; C, two arms
at gap 0.05. The paper's appendix instances are not reproduced exactly; these are ours."""
B_GRID = (1, 10, 30, 100, 300, 1000)
"""Pre-pull counts b tried for M-TS-Gaussian at matched privacy (the best regret is kept)."""
DELTA = 1e-5
"""δ at which GDP is converted to ε for the pure ε-DP peers and the plots."""


def matched_mts(
    env: BernoulliBandit, horizon: int, mu: float, n_runs: int, seed: Any, n_jobs: int, checkpoints: np.ndarray
) -> tuple[int, SimResult, dict[int, float]]:
    """M-TS-Gaussian at a-priori ``mu``-GDP: for each b of :data:`B_GRID` that can match ``mu`` (c ≥ 1), the
    variance scale c = T / (mu² (b + 1)); returns (best b, its result, regret by b)."""
    best: tuple[int, SimResult] | None = None
    by_b: dict[int, float] = {}
    for b in B_GRID:
        if horizon < b * env.n_arms:
            continue
        try:
            c = MTSGaussian.matched(mu, horizon, b)
        except ValueError:
            continue
        r = simulate(MTSGaussian, {"b": b, "c": c}, env, horizon, n_runs, seed, n_jobs, checkpoints)
        by_b[b] = r.regret_mean
        if best is None or r.regret_mean < best[1].regret_mean:
            best = (b, r)
    if best is None:
        raise ValueError(f"no b in {B_GRID} can match mu={mu} at T={horizon}")
    return best[0], best[1], by_b


@dataclass
class InstanceResult:
    """Every policy's :class:`SimResult` on one instance (keyed by label) and the matched-privacy comparison."""

    results: dict[str, SimResult]
    mu: float
    """DP-TS-UCB(α = 1)'s a-priori GDP, the privacy level every peer is matched to."""
    epsilon: float
    """ε at :data:`DELTA` of ``mu`` (the budget of the pure ε-DP peers)."""
    mts_b: int
    mts: SimResult
    mts_by_b: dict[int, float]

    @property
    def ratio(self) -> float:
        """Regret of DP-TS-UCB(α = 1) over the best matched M-TS-Gaussian."""
        return self.results["DP-TS-UCB a=1"].regret_mean / self.mts.regret_mean


def run_instance(
    means: list[float], horizon: int, n_runs: int, alphas: tuple[float, ...], seed: Any = 0, n_jobs: int = 1
) -> InstanceResult:
    """DP-TS-UCB for each α in ``alphas`` (which must include 1), M-TS-Gaussian matched to DP-TS-UCB(α = 1)'s GDP,
    non-private TS-Gaussian, and AdaP-UCB / DP-SE at the matched ε, on the Bernoulli instance ``means``."""
    env = BernoulliBandit(means)
    cps = np.unique(np.geomspace(100, horizon, 25).astype(np.int64))
    out: dict[str, SimResult] = {}
    for a in alphas:
        out[f"DP-TS-UCB a={a:g}"] = simulate(DPTSUCB, {"alpha": a}, env, horizon, n_runs, seed, n_jobs, cps)
    mu = dp_ts_ucb_mu_bound(horizon, 1.0)
    eps = gdp_epsilon(mu=mu, delta=DELTA)
    b, mts, by_b = matched_mts(env, horizon, mu, n_runs, seed, n_jobs, cps)
    out[f"M-TS-Gaussian b={b} (mu={mu:.3f})"] = mts
    out["TS-Gaussian (non-private)"] = simulate(TSGaussian, {}, env, horizon, n_runs, seed, n_jobs, cps)
    out[f"AdaP-UCB eps={eps:.2f}"] = simulate(AdaPUCB, {"epsilon": eps}, env, horizon, n_runs, seed, n_jobs, cps)
    out[f"DP-SE eps={eps:.2f}"] = simulate(DPSE, {"epsilon": eps}, env, horizon, n_runs, seed, n_jobs, cps)
    return InstanceResult(out, mu, eps, b, mts, by_b)


def _sim_to_dict(r: SimResult) -> dict[str, Any]:
    return {
        "policy": r.policy,
        "params": r.params,
        "horizon": r.horizon,
        **{k: getattr(r, k).tolist() for k in ("regret", "checkpoints", "regret_at", "pulls", "draws", "mu_realized")},
        "mu_bound": r.mu_bound,
        "epsilon_dp": r.epsilon_dp,
    }


def _sim_from_dict(d: dict[str, Any]) -> SimResult:
    # JSON keeps ints and floats apart, so each array comes back with its kind
    arrays = {k: np.asarray(d[k]) for k in ("regret", "checkpoints", "regret_at", "pulls", "draws", "mu_realized")}
    return SimResult(
        policy=d["policy"],
        params=dict(d["params"]),
        horizon=int(d["horizon"]),
        mu_bound=float(d["mu_bound"]),
        epsilon_dp=None if d["epsilon_dp"] is None else float(d["epsilon_dp"]),
        **arrays,
    )


def instance_to_dict(inst: InstanceResult) -> dict[str, Any]:
    """Every array of an :class:`InstanceResult` as JSON-ready lists (for a resumable run's stored parts)."""
    mts_label = next(k for k, r in inst.results.items() if r is inst.mts)
    return {
        "results": {k: _sim_to_dict(r) for k, r in inst.results.items()},
        "mu": inst.mu,
        "epsilon": inst.epsilon,
        "mts_b": inst.mts_b,
        "mts_label": mts_label,
        "mts_by_b": {str(b): v for b, v in inst.mts_by_b.items()},
    }


def instance_from_dict(d: dict[str, Any]) -> InstanceResult:
    """The :class:`InstanceResult` that :func:`instance_to_dict` wrote."""
    results = {k: _sim_from_dict(v) for k, v in d["results"].items()}
    by_b = {int(b): float(v) for b, v in d["mts_by_b"].items()}
    return InstanceResult(results, float(d["mu"]), float(d["epsilon"]), int(d["mts_b"]), results[d["mts_label"]], by_b)


def plot_regret(results: dict[str, SimResult], out_dir: Path, tag: str) -> Path:
    """Mean regret curves (± 2 standard errors) on a log time axis."""
    fig, ax = subplots()
    for label, r in results.items():
        ax.plot(r.checkpoints, r.regret_curve, label=label)
        ax.fill_between(
            r.checkpoints, r.regret_curve - 2 * r.regret_curve_se, r.regret_curve + 2 * r.regret_curve_se, alpha=0.2
        )
    ax.set(xscale="log", xlabel="round t", ylabel="pseudo-regret R(t)", title=f"regret ({tag})")
    ax.legend(fontsize=7)
    return save_figure(fig, out_dir, f"regret_curves_{tag}")


def plot_privacy_regret(results: dict[str, SimResult], out_dir: Path, tag: str) -> Path:
    """Regret at T against ε at :data:`DELTA` (a-priori), one point per private policy."""
    fig, ax = subplots()
    for label, r in results.items():
        e = r.epsilon(DELTA)
        if math.isfinite(e):
            ax.errorbar(e, r.regret_mean, yerr=2 * r.regret_se, fmt="o", label=label)
    ax.set(
        xscale="log",
        xlabel="epsilon at delta=1e-5 (a-priori)",
        ylabel="regret at T",
        title=f"privacy-regret frontier ({tag})",
    )
    ax.legend(fontsize=7)
    return save_figure(fig, out_dir, f"privacy_regret_{tag}")


def plot_normalised_regret(results: dict[str, SimResult], alphas: tuple[float, ...], out_dir: Path, tag: str) -> Path:
    """DP-TS-UCB's R(t) / ln^(1+α) t: flat when the regret is O(ln^(1+α) T) (the paper's Theorem 4.2)."""
    fig, ax = subplots()
    for a in alphas:
        r = results[f"DP-TS-UCB a={a:g}"]
        ax.plot(r.checkpoints, r.regret_curve / np.log(r.checkpoints) ** (1 + a), label=f"a={a:g}")
    ax.set(xscale="log", xlabel="t", ylabel="R(t) / ln^(1+a) t", title=f"normalised regret ({tag})")
    ax.legend()
    return save_figure(fig, out_dir, f"normalised_regret_{tag}")
