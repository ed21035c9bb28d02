"""The mixture RSD samples from (eq. (1)-(3)), its optimality, and the weighting functions."""

from __future__ import annotations

import numpy as np
import pytest
from rsd_testing import TOK, SamplingBackend

from rsd import CallablePRM, RewardGuidedDecoder, RSDConfig, weighting
from rsd.functional import expected_reward, mixture_distribution, optimal_weights, rejection_probability

CHI2_DF7_P1E3 = 24.321886  # upper 1e-3 quantile of chi^2 with 7 degrees of freedom


def _random_problem(rng, k=8):
    pm, pt = rng.dirichlet(np.ones(k)), rng.dirichlet(np.ones(k))
    return pm, pt, rng.random(k)


@pytest.mark.parametrize("w", [weighting.binary(0.6), weighting.clip(0.5), weighting.sigmoid(0.4, 0.2)])
def test_mixture_normalised_and_expected_reward_closed_form(w):
    rng = np.random.default_rng(0)
    for _ in range(200):
        pm, pt, r = _random_problem(rng)
        p = mixture_distribution(pm, pt, r, w)
        assert abs(p.sum() - 1.0) < 1e-12 and np.all(p >= 0)
        om = np.array([w(x) for x in r])
        rm = float(pt @ r)
        assert expected_reward(pm, pt, r, w) == pytest.approx(rm + float(pm @ (om * (r - rm))), abs=1e-12)
        assert rejection_probability(pm, r, w) == pytest.approx(1 - float(pm @ om), abs=1e-15)


def test_binary_threshold_is_optimal_at_equal_target_call_rate():
    rng = np.random.default_rng(1)
    for _ in range(1000):
        pm, pt, r = _random_problem(rng)
        soft = rng.random(8) ** rng.uniform(0.2, 3)  # a random soft ω, one value per outcome
        nu = rejection_probability(pm, r, soft)
        best = optimal_weights(pm, r, nu)
        assert rejection_probability(pm, r, best) == pytest.approx(nu, abs=1e-12)
        assert expected_reward(pm, pt, r, soft) <= expected_reward(pm, pt, r, best) + 1e-12
    # the optimum is a threshold: every accepted outcome has a reward >= every rejected one
    w = optimal_weights(pm, r, 0.5)
    assert r[w > 0].min() >= r[w < 1].max()


def _sampling_run(w, n=20_000):
    pm = np.array([0.05, 0.2, 0.1, 0.15, 0.1, 0.2, 0.05, 0.15])
    pt = np.array([0.3, 0.05, 0.2, 0.05, 0.1, 0.05, 0.2, 0.05])
    rewards = np.array([0.1, 0.9, 0.5, 0.75, 0.3, 0.95, 0.65, 0.2])
    outcomes = TOK.encode("01234567", add_special_tokens=False)
    reward_of = {str(i): float(rewards[i]) for i in range(8)}
    prm = CallablePRM(lambda prompt, steps: [reward_of[s] for s in steps], name="table")
    dec = RewardGuidedDecoder(
        SamplingBackend(pm, outcomes), SamplingBackend(pt, outcomes), prm, RSDConfig(weighting=w, seed=3)
    )
    outs = dec.generate(["Q:1\n"] * n)
    emitted = np.bincount([int(o.steps[0].text) for o in outs], minlength=8)
    rejected = sum(o.steps[0].source == "target" for o in outs)
    return emitted, rejected, mixture_distribution(pm, pt, rewards, w), rejection_probability(pm, rewards, w)


@pytest.mark.parametrize("w", [weighting.binary(0.7), weighting.sigmoid(0.6, 0.15)])
def test_decoder_samples_the_mixture(w):
    n = 20_000
    emitted, rejected, p, nu = _sampling_run(w, n)
    chi2 = float((((emitted - n * p) ** 2) / (n * p)).sum())
    assert chi2 < CHI2_DF7_P1E3, (emitted, n * p)
    assert abs(rejected / n - nu) < 3 * np.sqrt(nu * (1 - nu) / n)
    # the χ² check can fail: the draft's own law is far from the mixture
    pm = np.array([0.05, 0.2, 0.1, 0.15, 0.1, 0.2, 0.05, 0.15])
    assert float((((emitted - n * pm) ** 2) / (n * pm)).sum()) > 10 * CHI2_DF7_P1E3


def test_weightings():
    assert weighting.binary(0.7)(0.7) == 1.0 and weighting.binary(0.7)(0.6999) == 0.0
    assert weighting.clip(0.5)(0.25) == 0.5 and weighting.clip(0.5)(0.9) == 1.0
    s = weighting.sigmoid(0.5, 0.1)
    assert s(0.5) == 0.5 and s(0.6) == pytest.approx(1 / (1 + np.exp(-1)))
    assert weighting.get("clip", delta=0.4).delta == 0.4
    assert weighting.binary(1.5, allow_always_target=True)(1.0) == 0.0
    with pytest.raises(ValueError, match="delta"):
        weighting.binary(1.01)
    with pytest.raises(ValueError, match="delta"):
        weighting.binary(-0.1)
    with pytest.raises(ValueError, match="binary"):
        weighting.get("threshold")
    with pytest.raises(ValueError, match="binary"):
        RSDConfig(weighting="hard")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        weighting.custom(lambda r: 2 * r)(0.9)
