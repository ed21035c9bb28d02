"""Correction curves, relative AUC, correlations and AURC against hand computations and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from usam.metrics import aurc, correction_curve, e_aurc, oracle_curve, pearson, random_curve, relative_auc, spearman


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.8, 300)
    refined = np.clip(base + rng.normal(0.1, 0.15, 300), 0, 1)
    return base, refined


def test_oracle_is_one_and_reversed_is_negative(data):
    base, refined = data
    gain = refined - base
    for norm in ("random", "base", "raw"):
        assert relative_auc(base, refined, gain, normalise=norm) == pytest.approx(1.0)
    assert relative_auc(base, refined, -gain) < 0


def test_random_priority_averages_to_zero(data):
    base, refined = data
    rng = np.random.default_rng(1)
    vals = [relative_auc(base, refined, rng.permutation(len(base)).astype(float)) for _ in range(200)]
    assert abs(np.mean(vals)) < 0.05


def test_hand_computed_five_sample_curve():
    base = np.array([0.5, 0.2, 0.9, 0.4, 0.6])
    refined = np.array([0.7, 0.8, 0.9, 0.4, 0.5])
    priority = np.array([0.1, 0.9, 0.5, 0.3, 0.7])  # order: 1, 4, 2, 3, 0; gains 0.6, -0.1, 0, 0, 0.2
    r, curve = correction_curve(base, refined, priority)
    assert np.allclose(r, [0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert np.allclose(curve, [0.52, 0.64, 0.62, 0.62, 0.62, 0.66])
    r, curve = correction_curve(base, refined, priority, r_max=0.5)  # i = 0, 1, 2
    area = 0.2 * (0.52 + 0.64) / 2 + 0.2 * (0.64 + 0.62) / 2
    oracle = 0.2 * (0.52 + 0.64) / 2 + 0.2 * (0.64 + 0.68) / 2  # gains sorted 0.6, 0.2
    rand = 0.2 * (0.52 + 0.548) / 2 + 0.2 * (0.548 + 0.576) / 2  # mean gain 0.14
    assert np.allclose(oracle_curve(base, refined, 0.5)[1], [0.52, 0.64, 0.68])
    assert np.allclose(random_curve(base, refined, 0.5)[1], [0.52, 0.548, 0.576])
    want = (area - rand) / (oracle - rand)
    assert relative_auc(base, refined, priority) == pytest.approx(want)
    assert relative_auc(base, refined, priority, normalise="raw") == pytest.approx(area / oracle)
    assert relative_auc(base, refined, priority, normalise="base") == pytest.approx(
        (area - 0.4 * 0.52) / (oracle - 0.4 * 0.52)
    )


def test_correlations_match_scipy(data):
    base, refined = data
    x = np.round(base * 10) / 10  # ties
    assert pearson(base, refined) == pytest.approx(stats.pearsonr(base, refined)[0])
    assert spearman(x, refined) == pytest.approx(stats.spearmanr(x, refined)[0])


def test_aurc_brute_force_and_excess(data):
    base, _ = data
    risk = 1 - base
    conf = np.random.default_rng(2).random(len(base))
    order = np.argsort(-conf)
    want = np.mean([risk[order[: k + 1]].mean() for k in range(len(risk))])
    assert aurc(risk, conf) == pytest.approx(want)
    assert e_aurc(risk, -risk) == pytest.approx(0.0, abs=1e-12)
    assert e_aurc(risk, conf) > 0


def test_bad_input():
    with pytest.raises(ValueError, match="same length"):
        relative_auc([0.1, 0.2], [0.3, 0.4, 0.5], [1, 2])
    with pytest.raises(ValueError, match="N = 0"):
        relative_auc([], [], [])
    with pytest.raises(ValueError, match="r_max"):
        relative_auc([0.1, 0.2], [0.3, 0.4], [1, 2], r_max=0.0)
    with pytest.raises(ValueError, match="r_max"):
        relative_auc([0.1, 0.2], [0.3, 0.4], [1, 2], r_max=1.5)
    with pytest.raises(ValueError, match="oracle gains nothing"):
        relative_auc([0.5, 0.5], [0.5, 0.5], [1, 2])
    with pytest.raises(ValueError, match="normalise"):
        relative_auc([0.1, 0.2], [0.3, 0.4], [1, 2], normalise="max")
    with pytest.raises(ValueError, match="finite"):
        pearson([0.1, float("nan")], [0.1, 0.2])


def test_relative_auc_averages_over_ties_whatever_the_row_order():
    base = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    refined = base + np.array([0.6, 0.5, 0.4, 0.3, 0.2, 0.1])  # rows already sorted by gain
    flat = np.zeros(6)
    assert relative_auc(base, refined, flat) == pytest.approx(0.0, abs=1e-12)  # a constant priority is random
    assert relative_auc(base[::-1], refined[::-1], flat) == pytest.approx(0.0, abs=1e-12)
    # two tied groups: the curve uses each group's mean gain, so row order inside a group does not matter
    pr = np.array([1, 1, 1, 0, 0, 0])
    perm = np.array([2, 0, 1, 5, 3, 4])
    r, y = correction_curve(base, refined, pr)
    assert np.allclose(y, correction_curve(base[perm], refined[perm], pr[perm])[1])
    assert y[1] - y[0] == pytest.approx(0.5 / 6)  # mean gain of the first group, 0.5, over N = 6
