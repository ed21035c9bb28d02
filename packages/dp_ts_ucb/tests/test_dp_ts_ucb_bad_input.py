"""Hostile-but-realistic use: conservative conversions, a front end that survives a refused reward, and inputs
that used to crash deep in numpy or answer silently."""

import json
import math

import numpy as np
import pytest

from dp_ts_ucb import DPSE, DPTSUCB, UCB1, BernoulliBandit, MABAdapter, simulate
from dp_ts_ucb.envs import TruncatedGaussianBandit
from dp_ts_ucb.privacy import PureDPLedger, gdp_delta, gdp_epsilon


@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8, 1e-12])
def test_gdp_epsilon_never_understates_the_privacy_loss(delta):
    # the returned epsilon must satisfy its own definition: delta(epsilon) <= delta (the root finder used to stop
    # on either side of the root, a hair below the true epsilon in about 40 % of these cases) and be the smallest
    # such epsilon up to a relative 1e-9
    for mu in np.geomspace(0.01, 200, 40):
        eps = gdp_epsilon(mu=float(mu), delta=delta)
        assert gdp_delta(mu=float(mu), epsilon=eps) <= delta, (mu, delta, eps)
        if eps > 0:
            assert gdp_delta(mu=float(mu), epsilon=eps * (1 - 1e-9)) > delta, (mu, delta, eps)


def test_ledgers_refuse_nan_and_negative_arguments():
    led = PureDPLedger(1.0)
    assert led.delta(0.5) == pytest.approx((math.e - math.exp(0.5)) / (1 + math.e))
    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError, match="epsilon must be a float >= 0.0"):
            led.delta(bad)  # nan used to come back as delta = nan, -1 as a number
    ucb = UCB1(2, 10).ledger
    assert ucb.epsilon(1e-5) == math.inf and ucb.delta(3.0) == 1.0
    with pytest.raises(ValueError, match="delta must be a float in"):
        ucb.epsilon(-3.0)
    with pytest.raises(ValueError, match="e must be a positive int, got 0"):
        DPSE(3, 100).epoch_pulls(0, 3)  # was a bare "math domain error"


def _loop(mab, env, rounds):
    arms = []
    for _ in range(rounds):
        d = mab.predict()
        arms.append(d)
        mab.partial_fit([d], [env.pull(mab.arms.index(d))])
    return arms


def test_mab_adapter_survives_a_refused_reward():
    env_a, env_b = BernoulliBandit([0.3, 0.7, 0.5], seed=1), BernoulliBandit([0.3, 0.7, 0.5], seed=1)
    ref = MABAdapter(["a", "b", "c"], DPTSUCB, horizon=300, seed=0)
    mab = MABAdapter(["a", "b", "c"], DPTSUCB, horizon=300, seed=0)
    d = mab.predict()
    for bad in (1.5, "x", float("nan")):
        with pytest.raises(ValueError, match="reward"):
            mab.partial_fit([d], [bad])
        assert mab.predict() == d  # the prediction is still pending (it was dropped: every call then raised)
    with pytest.raises(ValueError, match="reward"):
        mab.partial_fit([d, "b"], [1.0, 2.0])  # a bad reward later in the batch: nothing fed back
    assert mab.policy.t == 0
    assert _loop(mab, env_a, 300) == _loop(ref, env_b, 300)  # the same run as one that never saw the bad rewards


def test_mab_adapter_checks_its_arguments():
    with pytest.raises(ValueError, match="policy_cls must be a BanditPolicy subclass"):
        MABAdapter(["a", "b"], dict, horizon=10)  # was accepted: dict(n_arms=2, horizon=10)
    with pytest.raises(ValueError, match="n_arms is len"):
        MABAdapter(["a", "b"], DPTSUCB, n_arms=3, horizon=10)
    mab = MABAdapter(["a", "b"], DPTSUCB, horizon=10, seed=0)
    with pytest.raises(ValueError, match="contexts must be None"):
        mab.predict(contexts=[[1.0]])
    with pytest.raises(ValueError, match="unknown arm"):
        mab.partial_fit([["a"]], [1.0])  # unhashable: was a TypeError
    first = mab.predict()
    mab.partial_fit([first], [1.0])
    before = mab.policy
    with pytest.raises(ValueError, match="reward"):
        mab.fit([mab.arms[0]], [7.0])
    assert mab.policy is before and mab.policy.t == 1  # fit kept the learner it could not replace


def test_simulate_takes_numpy_scalars_and_refuses_bad_arguments():
    env = BernoulliBandit([0.7, 0.5, 0.3])
    ref = simulate(DPTSUCB, {"alpha": 0.5, "init_pulls": 2}, env, 600, 3, seed=4)
    res = simulate(DPTSUCB, {"alpha": np.float64(0.5), "init_pulls": np.int64(2)}, env, np.int64(600), np.int64(3), 4)
    assert np.array_equal(res.regret, ref.regret)
    assert res.params == {"alpha": 0.5, "init_pulls": 2} and type(res.params["init_pulls"]) is int
    json.dumps(res.to_dict())  # numpy scalars in params used to make the result unserialisable
    assert np.array_equal(simulate(UCB1, {}, env, 100, 1, checkpoints=[50.0, 100]).checkpoints, [50, 100])
    bad_cps = (([10.5], "whole rounds"), ([float("nan")], "finite"), ([], "whole rounds"), ([0], "whole rounds in"))
    for cps, match in bad_cps:
        with pytest.raises(ValueError, match=f"checkpoints must be {match}"):
            simulate(UCB1, {}, env, 100, 1, checkpoints=cps)  # 10.5 used to become round 10, nan a bare error
    with pytest.raises(ValueError, match="env must be a bandit environment"):
        simulate(UCB1, {}, [0.7, 0.5], 100, 1)  # was an AttributeError
    with pytest.raises(ValueError, match="seed must be None, a non-negative int"):
        simulate(UCB1, {}, env, 100, 1, seed=np.random.default_rng(0))  # was a TypeError inside SeedSequence
    with pytest.raises(ValueError, match="return_arms must be a bool"):
        simulate(UCB1, {}, env, 100, 1, return_arms="yes")


@pytest.mark.parametrize("env_cls", [BernoulliBandit, TruncatedGaussianBandit])
def test_pull_refuses_an_arm_out_of_range(env_cls):
    a, b = env_cls([0.2, 0.9], seed=3), env_cls([0.2, 0.9], seed=3)
    assert [a.pull(np.int64(1)) for _ in range(5)] == [b.pull(1) for _ in range(5)]
    for bad in (-1, 2, 1.5):
        with pytest.raises(ValueError, match="arm must be an int in \\[0, 1\\]"):
            a.pull(bad)  # -1 used to pull the last arm silently


@pytest.mark.parametrize("bit_generator", [np.random.MT19937, np.random.Philox, np.random.SFC64])
def test_state_round_trip_with_any_numpy_bit_generator(bit_generator):
    # a Generator seed on another bit generator: to_state raised "ndarray is not JSON serializable"
    # and from_state rebuilt a PCG64 only; the restored policy must continue exactly as the original
    pol = DPTSUCB(3, 600, alpha=0.5, seed=np.random.Generator(bit_generator(5)))
    env = BernoulliBandit([0.6, 0.5, 0.2], seed=6)
    for _ in range(200):
        a = pol.select()
        pol.update(a, env.pull(a))
    restored = DPTSUCB.from_state(json.loads(json.dumps(pol.to_state())))
    assert type(restored.rng.bit_generator) is bit_generator
    env_b = BernoulliBandit([0.6, 0.5, 0.2], seed=7)
    env_a = BernoulliBandit([0.6, 0.5, 0.2], seed=7)
    arms_a, arms_b = [], []
    for p, e, log in ((pol, env_a, arms_a), (restored, env_b, arms_b)):
        while p.t < p.horizon:
            a = p.select()
            p.update(a, e.pull(a))
            log.append(a)
    assert arms_a == arms_b and restored.ledger.draws == pol.ledger.draws
    state = pol.to_state()
    state["rng"]["bit_generator"] = "Nope"
    with pytest.raises(ValueError, match="state\\['rng'\\] must be a numpy bit generator state"):
        DPTSUCB.from_state(state)
