import json
import math

import numpy as np
import pytest

from dp_ts_ucb import DPSE, DPTSUCB, UCB1, AdaPUCB, BernoulliBandit, MABAdapter, MTSGaussian, TSGaussian, simulate
from dp_ts_ucb.envs import TruncatedGaussianBandit
from dp_ts_ucb.experiments import chunk_seeds

MEANS_A = [0.75, 0.625, 0.5, 0.375, 0.25]


class CountingRng:
    """Wraps a Generator; counts the normals handed out."""

    def __init__(self, seed):
        self.g = np.random.default_rng(seed)
        self.bit_generator = self.g.bit_generator
        self.vectors = 0

    def standard_normal(self, size):
        self.vectors += 1
        return self.g.standard_normal(size)


def run(policy, env, rounds, log=None):
    for _ in range(rounds):
        a = policy.select()
        r = env.pull(a)
        policy.update(a, r)
        if log is not None:
            log.append((a, r))
    return policy


def test_budget_epochs_and_estimates():
    horizon, b0 = 3000, 2
    pol = DPTSUCB(n_arms=3, horizon=horizon, alpha=0.5, c0=0.5, init_pulls=b0, seed=1)
    pol.rng = CountingRng(1)
    opened = []  # (round at which the model went live, arm)
    orig_open = pol.ledger.open

    def spy(arm, epoch, n):
        opened.append((pol.t, arm))
        return orig_open(arm, epoch, n)

    pol.ledger.open = spy
    log = []
    run(pol, BernoulliBandit([0.7, 0.5, 0.45], seed=2), horizon, log)
    # one normal vector per round after the round-robin initial batches
    assert pol.rng.vectors == horizon - 3 * b0
    recs = pol.ledger.records
    for arm in range(3):
        arm_recs = [r for r in recs if r.arm == arm]
        sizes = [r.n for r in arm_recs]
        assert sizes == [b0 * 2**i for i in range(len(sizes))]  # b0, 2 b0, 4 b0, ...
        assert sum(sizes) + pol.buf_n[arm] == pol.counts[arm]  # every reward in exactly one batch
        rewards = [r for a, r in log if a == arm]
        last = sizes[-1]
        start = sum(sizes[:-1])
        assert pol.muhat[arm] == pytest.approx(np.mean(rewards[start : start + last]))
        # draws per model = min(phi, rounds it was live): none once the budget is spent (UCB phase)
        live_from = [t for t, a in opened if a == arm] + [horizon]
        for rec, t0, t1 in zip(arm_recs, live_from, live_from[1:]):
            assert rec.draws == min(pol.phi, t1 - max(t0, 3 * b0))  # no draws during the initial round robin
    assert sum(r.draws for r in recs) == pol.ledger.draws


def _mu_from_pull_log(arms, k, horizon, alpha, phi):
    """Ex-post GDP recomputed from the public pull sequence alone (b0 = 1), without the ledger: arm i's batches
    close at 1, 2, 4, ... of its pulls; each model of n rewards is read by one draw per round while it is live,
    at most phi; the transcript is max over models sqrt(draws / (n ln^a T))."""
    n, buf, draws, mus = [0] * k, [0] * k, [0] * k, []
    for t, a in enumerate(arms):
        if t >= k:  # no draws during the initial round robin
            draws = [min(phi, d + 1) if m > 0 else d for d, m in zip(draws, n)]
        buf[a] += 1
        if buf[a] == (1 if n[a] == 0 else 2 * n[a]):
            if n[a] > 0:
                mus.append(math.sqrt(draws[a] / (n[a] * math.log(horizon) ** alpha)))
            n[a], buf[a], draws[a] = buf[a], 0, 0
    mus += [math.sqrt(d / (m * math.log(horizon) ** alpha)) for d, m in zip(draws, n)]
    return max(mus)


def test_ledger_realized_vs_bound_and_monotone():
    for horizon, alpha in [(10**4, 1.0), (10**4, 0.5), (2000, 0.0), (5000, 0.75)]:
        pol = DPTSUCB(n_arms=4, horizon=horizon, alpha=alpha, seed=3)
        env = BernoulliBandit([0.6, 0.5, 0.4, 0.3], seed=4)
        trace, arms = [], []
        for _ in range(horizon):
            a = pol.select()
            pol.update(a, env.pull(a))
            trace.append(pol.ledger.mu_realized)
            arms.append(a)
        led = pol.ledger
        assert np.all(np.diff(trace) >= 0)
        recomputed = _mu_from_pull_log(arms, 4, horizon, alpha, pol.phi)
        assert led.mu_realized == pytest.approx(recomputed)
        assert led.mu_realized <= led.mu_bound + 1e-12 <= led.paper_bound + 1e-12
        assert led.epsilon(1e-5) > 0
        assert led.delta(led.epsilon(1e-5)) == pytest.approx(1e-5)


def test_phi_one_holds_a_single_sample_per_epoch():
    pol = DPTSUCB(n_arms=2, horizon=400, alpha=1.0, c0=1e-6, seed=0)  # phi = 1
    assert pol.phi == 1
    env = BernoulliBandit([0.6, 0.4], seed=1)
    run(pol, env, 2)
    held, held_epoch, kept = None, None, 0
    for _ in range(60):
        a = pol.select()
        assert np.all(pol.h == 0)
        assert a == int(np.argmax(pol.maxidx))  # the index is the held sample
        if held is not None:
            same = pol.epoch == held_epoch  # arms whose epoch did not change since the last round
            assert np.array_equal(pol.maxidx[same], held[same])  # their one sample is held, not redrawn
            kept += int(same.sum())
        held, held_epoch = pol.maxidx.copy(), pol.epoch.copy()
        pol.update(a, env.pull(a))
    assert kept > 60  # the check above ran on most arm-rounds
    assert all(r.draws <= 1 for r in pol.ledger.records)


@pytest.mark.parametrize(
    ("cls", "params", "env"),
    [
        (DPTSUCB, {"alpha": 0.5, "init_pulls": 2}, BernoulliBandit(MEANS_A)),
        (DPTSUCB, {"alpha": 1.0}, TruncatedGaussianBandit([0.6, 0.5, 0.45], sigma=0.2)),
        (MTSGaussian, {"b": 3, "c": 2.0}, BernoulliBandit(MEANS_A)),
        (TSGaussian, {}, BernoulliBandit(MEANS_A)),
        (UCB1, {}, BernoulliBandit(MEANS_A)),
        # small constants: several elimination epochs inside the horizon, the last one cut by it
        (DPSE, {"epsilon": 2.0, "c1": 0.5, "c2": 0.5}, BernoulliBandit([0.7, 0.6, 0.55])),
        (DPSE, {"epsilon": 2.0, "c1": 0.5, "c2": 0.5}, TruncatedGaussianBandit([0.6, 0.5, 0.45], sigma=0.2)),
        (AdaPUCB, {"epsilon": 2.0}, BernoulliBandit(MEANS_A)),
        (AdaPUCB, {"epsilon": 2.0}, TruncatedGaussianBandit([0.6, 0.5, 0.45], sigma=0.2)),
    ],
)
def test_streaming_equals_vectorised_one_run(cls, params, env):
    """One simulated run is the streaming policy's run: the same arm and the same regret at every round."""
    horizon = 3000
    res = simulate(cls, params, env, horizon, n_runs=1, seed=11, return_arms=True, checkpoints=range(1, horizon + 1))
    ps, es, _ = chunk_seeds(11, 1)[0]
    pol = cls(n_arms=env.n_arms, horizon=horizon, seed=ps, **params)
    e = env.reseed(es)
    arms = []
    for _ in range(horizon):
        a = pol.select()
        arms.append(a)
        pol.update(a, e.pull(a))
    assert np.array_equal(res.arms[0], arms), cls.name
    assert len(set(arms[-100:])) < env.n_arms or cls is UCB1  # the run gets past its exploration phase
    assert res.draws[0] == pol.ledger.draws
    if np.isfinite(pol.ledger.mu_realized):
        assert res.mu_realized[0] == pytest.approx(pol.ledger.mu_realized)
    assert np.array_equal(res.pulls[0], np.bincount(arms, minlength=env.n_arms))
    assert res.regret_at[0] == pytest.approx(np.cumsum(env.gaps[arms]))  # the whole curve, not only R(T)
    assert res.regret[0] == pytest.approx(sum(env.gaps[a] for a in arms))


def test_mts_b0_c1_is_ts_draw_for_draw():
    env_a, env_b = BernoulliBandit(MEANS_A, seed=5), BernoulliBandit(MEANS_A, seed=5)
    ts, mts = TSGaussian(5, 2000, seed=9), MTSGaussian(5, 2000, b=0, c=1.0, seed=9)
    for _ in range(2000):
        a, b = ts.select(), mts.select()
        assert a == b
        ts.update(a, env_a.pull(a))
        mts.update(b, env_b.pull(b))
    assert ts.ledger.mu_realized == mts.ledger.mu_realized
    assert ts.ledger.mu_bound == pytest.approx(math.sqrt(2000 / 2))


def test_matched_mts():
    c = MTSGaussian.matched(1.042, 10**4, 300)
    pol = MTSGaussian(5, 10**4, b=300, c=c)
    assert pol.ledger.mu_bound == pytest.approx(1.042)
    with pytest.raises(ValueError, match="c=.* < 1"):
        MTSGaussian.matched(100.0, 10**4, 300)


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (DPTSUCB, {"alpha": 0.7}),
        (TSGaussian, {}),
        (MTSGaussian, {"b": 2, "c": 3.0}),
        (UCB1, {}),
        (DPSE, {"epsilon": 2.0}),
        (AdaPUCB, {"epsilon": 2.0}),
    ],
)
def test_determinism_and_state_round_trip(cls, params):
    def fresh():
        return cls(n_arms=3, horizon=1500, seed=21, **params), BernoulliBandit([0.6, 0.5, 0.2], seed=22)

    (p1, e1), (p2, e2) = fresh(), fresh()
    log1, log2 = [], []
    run(p1, e1, 700, log1)
    run(p2, e2, 700, log2)
    assert log1 == log2
    state = json.loads(json.dumps(p1.to_state()))
    restored = cls.from_state(state)
    log_a, log_b = [], []
    run(p1, e1, 800, log_a)
    run(restored, e2, 800, log_b)
    assert log_a == log_b
    assert restored.ledger.draws == p1.ledger.draws
    if np.isfinite(p1.ledger.mu_realized):
        assert restored.ledger.mu_realized == p1.ledger.mu_realized


def test_bad_input():
    with pytest.raises(ValueError, match="alpha"):
        DPTSUCB(3, 100, alpha=1.5)
    with pytest.raises(ValueError, match="c0"):
        DPTSUCB(3, 100, c0=0.0)
    with pytest.raises(ValueError, match="horizon"):
        DPTSUCB(3, 5, init_pulls=2)
    with pytest.raises(ValueError, match="n_arms"):
        DPTSUCB(1, 100)
    pol = DPTSUCB(2, 3, seed=0)
    with pytest.raises(ValueError, match="without a pending"):
        pol.update(0, 1.0)
    a = pol.select()
    with pytest.raises(ValueError, match="reward"):
        pol.update(a, float("nan"))
    with pytest.raises(ValueError, match="reward"):
        pol.update(a, 1.5)
    with pytest.raises(ValueError, match="arm"):
        pol.update(7, 1.0)
    pol.update(a, 1.0)
    for _ in range(2):
        pol.update(pol.select(), 0.0)
    with pytest.raises(ValueError, match="horizon"):
        pol.select()
    with pytest.raises(ValueError, match="epsilon"):
        DPSE(3, 100, epsilon=0.0)
    with pytest.raises(ValueError, match="epsilon"):
        AdaPUCB(3, 100, epsilon=-1.0)
    with pytest.raises(ValueError, match="means"):
        BernoulliBandit([0.5, 1.2])
    with pytest.raises(ValueError, match="means"):
        BernoulliBandit([0.5, float("nan")])
    with pytest.raises(ValueError, match="c1"):
        DPSE(3, 100, c1=0.0, c2=0.0)  # R_e = 0: the epoch would never end
    with pytest.raises(ValueError, match="alpha"):
        DPTSUCB(3, 100, alpha=True)
    pol = DPTSUCB(2, 10, seed=0)
    with pytest.raises(ValueError, match="reward"):
        pol.update(pol.select(), "0.5")
    with pytest.raises(ValueError, match="b must be a non-negative int"):
        MTSGaussian.matched(1.0, 1000, -5)
    with pytest.raises(ValueError, match="horizon must be an int >= 2, got -10"):
        MTSGaussian.matched(1.0, -10, 3)


def test_simulate_refuses_unknown_params():
    env = BernoulliBandit([0.6, 0.4])
    with pytest.raises(ValueError, match="'foo'.*DPTSUCB.*'alpha', 'c0', 'init_pulls'"):
        simulate(DPTSUCB, {"foo": 1}, env, 100, n_runs=1)
    with pytest.raises(ValueError, match="'seed'"):
        simulate(UCB1, {"seed": 3}, env, 100, n_runs=1)


@pytest.mark.parametrize("cls", [DPTSUCB, MTSGaussian, UCB1])
def test_state_is_strict_json(cls):
    pol = cls(n_arms=3, horizon=100, seed=0)
    env = BernoulliBandit([0.6, 0.5, 0.2], seed=1)
    for rounds in (1, 10):  # after one round DP-TS-UCB's max index is still -inf (no sample drawn yet)
        run(pol, env, rounds)
        text = json.dumps(pol.to_state(), allow_nan=False)
        restored = cls.from_state(json.loads(text))
        for f in cls._state_fields:
            assert np.array_equal(getattr(restored, f), getattr(pol, f))


def test_mab_adapter_on_policy():
    mab = MABAdapter(["a", "b", "c"], DPTSUCB, horizon=200, alpha=1.0, seed=0)
    env = BernoulliBandit([0.2, 0.8, 0.5], seed=1)
    for _ in range(200):
        d = mab.predict()
        mab.partial_fit([d], [env.pull(["a", "b", "c"].index(d))])
    assert mab.policy.counts.argmax() == 1
    mab2 = MABAdapter(["a", "b", "c"], DPTSUCB, horizon=200, alpha=1.0, seed=0)
    first = mab2.predict()
    other = next(x for x in "abc" if x != first)
    with pytest.raises(ValueError, match="pending prediction"):
        mab2.partial_fit([other], [1.0])


@pytest.mark.parametrize("cls", [DPTSUCB, UCB1, DPSE])
def test_from_state_names_a_missing_entry(cls):
    pol = cls(n_arms=3, horizon=200, seed=0)
    run(pol, BernoulliBandit([0.6, 0.5, 0.2], seed=1), 20)
    state = json.loads(json.dumps(pol.to_state()))
    for path in (("rng",), ("params", "horizon"), ("ledger", "kind"), ("fields", cls._state_fields[0])):
        broken = json.loads(json.dumps(state))
        node = broken
        for k in path[:-1]:
            node = node[k]
        del node[path[-1]]
        with pytest.raises(ValueError, match=rf"is missing \['{path[-1]}'\]"):  # was a bare KeyError
            cls.from_state(broken)


def test_from_state_refuses_a_hand_edited_horizon_or_counts():
    pol = DPTSUCB(n_arms=3, horizon=1000, seed=0)
    run(pol, BernoulliBandit([0.6, 0.5, 0.2], seed=1), 50)
    state = json.loads(json.dumps(pol.to_state()))
    edited = json.loads(json.dumps(state))
    edited["params"]["horizon"] = 5000  # the privacy bound was computed for T = 1000
    with pytest.raises(ValueError, match="state is inconsistent: the ledger's mu_bound"):
        DPTSUCB.from_state(edited)
    edited = json.loads(json.dumps(state))
    edited["t"] = 49
    with pytest.raises(ValueError, match="summing to t=49"):
        DPTSUCB.from_state(edited)
    edited = json.loads(json.dumps(state))
    edited["params"]["n_arms"] = 4
    with pytest.raises(ValueError, match="counts"):
        DPTSUCB.from_state(edited)
    assert DPTSUCB.from_state(state).t == 50  # the untouched state still loads
