"""Parity with the peer libraries on the same input: girth's MML/conditional Rasch and 2PL, catsim's
maximum-information adaptive test with its numerical-search MLE."""

from __future__ import annotations

import numpy as np
import pytest
from amortized_irt_testing import rasch_data

from amortized_irt import AdaptiveTest, Rasch, TwoPL

girth = pytest.importorskip("girth")


def test_rasch_matches_girth_rasch_mml():
    Y, *_ = rasch_data(1000, 30, seed=0)
    ours = Rasch().fit(Y).difficulty_
    theirs = girth.rasch_mml(Y.T.astype(int), discrimination=1)["Difficulty"]
    assert np.corrcoef(ours, theirs)[0, 1] > 0.999
    assert np.abs(ours - theirs).max() < 0.06


def test_twopl_matches_girth_twopl_mml():
    rng = np.random.default_rng(1)
    Y, *_ = rasch_data(1000, 25, seed=1, a=rng.uniform(0.5, 2.0, 25))
    ours = TwoPL(log_a_prior_sd=None).fit(Y)
    theirs = girth.twopl_mml(Y.T.astype(int))
    assert np.corrcoef(ours.discrimination_, theirs["Discrimination"])[0, 1] > 0.99
    assert np.corrcoef(ours.difficulty_, theirs["Difficulty"])[0, 1] > 0.99


def test_rasch_matches_girth_conditional_ml():
    Y, *_ = rasch_data(1500, 20, seed=2)
    ours = Rasch().fit(Y).difficulty_
    theirs = girth.rasch_conditional(Y.T.astype(int))["Difficulty"]
    np.testing.assert_allclose(ours - ours.mean(), theirs - theirs.mean(), atol=0.05)


def test_twopl_recovers_discrimination_at_n2000():
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 2.0, 30)
    Y, _, b, _ = rasch_data(2000, 30, seed=3, a=a)
    m = TwoPL().fit(Y)
    assert np.corrcoef(m.discrimination_, a)[0, 1] > 0.9
    assert np.corrcoef(m.difficulty_, b)[0, 1] > 0.95


def test_cat_matches_catsim_max_info():
    pytest.importorskip("catsim")
    from catsim.estimation import NumericalSearchEstimator
    from catsim.item_bank import ItemBank as CatsimBank
    from catsim.selection import MaxInfoSelector

    rng = np.random.default_rng(4)
    m = 200
    a, b = rng.uniform(0.7, 1.8, m), rng.normal(0, 1.2, m)
    bank = CatsimBank(np.column_stack([a, b, np.zeros(m), np.ones(m)]))
    selector, estimator = MaxInfoSelector(), NumericalSearchEstimator()
    for taker in range(3):
        responses = rng.random(m) < 1 / (1 + np.exp(-a * (0.4 * taker - b)))
        ours = AdaptiveTest({"a": a, "b": b}, estimator="mle")
        asked, resp, theta = [], [], 0.0
        for _ in range(10):
            j = selector.select(item_bank=bank, administered_items=asked, est_theta=theta)
            asked.append(int(j))
            resp.append(bool(responses[j]))
            theta = estimator.estimate(item_bank=bank, administered_items=asked, response_vector=resp, est_theta=theta)
            k = ours.next_item()
            assert k == j
            t_ours, _ = ours.update(k, bool(responses[k]))
            assert abs(t_ours - theta) < 1e-4
