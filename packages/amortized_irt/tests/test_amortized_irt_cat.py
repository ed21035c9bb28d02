"""Adaptive test: the selection rule, SE monotonicity, order invariance of the final estimate, the vectorised run
against the ask/tell loop, the simulation table, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amortized_irt import AdaptiveTest, ItemBank, Stop
from amortized_irt import functional as irtF


def _bank(m=120, seed=0, twopl=False):
    rng = np.random.default_rng(seed)
    b = rng.normal(0, 1.5, m)
    return {"b": b, "a": rng.uniform(0.5, 2.0, m)} if twopl else {"b": b}


def test_rasch_max_info_is_closest_difficulty():
    bank = _bank()
    test = AdaptiveTest(bank)
    rng = np.random.default_rng(1)
    for _ in range(15):
        j = test.next_item()
        left = np.setdiff1d(np.arange(120), test.asked)
        assert j == left[np.argmin(np.abs(bank["b"][left] - test.theta))]
        test.update(j, bool(rng.random() < 0.5))


def test_twopl_max_info_is_argmax_information():
    bank = _bank(twopl=True)
    test = AdaptiveTest(bank)
    rng = np.random.default_rng(2)
    for _ in range(10):
        j = test.next_item()
        info = irtF.item_information(torch.tensor(test.theta), torch.as_tensor(bank["a"]), torch.as_tensor(bank["b"]))
        info[test.asked] = -1
        assert j == int(torch.argmax(info))
        test.update(j, bool(rng.random() < 0.5))


def test_se_non_increasing_under_max_info_eap():
    # Rasch bank; under 2PL a surprising answer to a highly discriminating item can widen the posterior
    test = AdaptiveTest(_bank())
    responses = test.draw_responses(np.linspace(-2.5, 2.5, 8), seed=3)
    run = test.run_batch(responses, n_items=60)
    assert (np.diff(run.se, axis=1) <= 1e-12).all()


def test_full_bank_final_theta_independent_of_order():
    bank = _bank(m=80)
    responses = AdaptiveTest(bank).draw_responses(np.array([-0.5, 0.3, 1.5]), seed=4)
    cat = AdaptiveTest(bank, "max_info").run_batch(responses, n_items=80)
    rnd = AdaptiveTest(bank, "random").run_batch(responses, n_items=80)
    assert not np.array_equal(cat.items, rnd.items)
    np.testing.assert_allclose(cat.theta[:, -1], rnd.theta[:, -1], atol=1e-10)
    np.testing.assert_allclose(cat.se[:, -1], rnd.se[:, -1], atol=1e-10)


@pytest.mark.parametrize("estimator", ["eap", "map", "mle"])
def test_vectorised_run_equals_ask_tell_loop(estimator):
    bank = _bank(twopl=True)
    test = AdaptiveTest(bank, estimator=estimator)
    responses = test.draw_responses(np.linspace(-2, 2, 6), seed=5)
    run = test.run_batch(responses, n_items=25)
    for i in range(6):
        test.reset()
        for t in range(25):
            j = test.next_item()
            assert j == run.items[i, t]
            theta, se = test.update(j, responses[i, j])
            assert abs(theta - run.theta[i, t + 1]) < 1e-9 and abs(se - run.se[i, t + 1]) < 1e-9


def test_simulate_table_and_cat_beats_random():
    bank = _bank(m=200, seed=6)
    thetas = np.random.default_rng(7).normal(0, 1, 80)
    cat = AdaptiveTest(bank).simulate(thetas, n_splits=2, seed=0, part=0)
    rnd = AdaptiveTest(bank, "random").simulate(thetas, n_splits=2, seed=0, part=1)
    assert list(cat.columns) == ["split", "step", "rmse", "bias", "sem", "reliability"]
    assert len(cat) == 2 * 201
    assert cat.reliability.between(0, 1).all()
    c, r = (df.groupby("step").reliability.mean().to_numpy() for df in (cat, rnd))
    assert c[30] > r[30]
    assert c[0] == 0.0  # EAP at the prior mean for everyone: no spread yet


def test_stop_rules():
    test = AdaptiveTest(_bank(), stop=Stop(max_items=100, se=0.5))
    rng = np.random.default_rng(8)
    while not test.done:
        test.update(test.next_item(), bool(rng.random() < 0.5))
    assert test.se <= 0.5 and len(test.asked) < 100
    test = AdaptiveTest(_bank(), stop=Stop(reliability=0.8))
    while not test.done:
        test.update(test.next_item(), bool(rng.random() < 0.5))
    assert 1 - test.se**2 >= 0.8


def test_selectors_and_marginalize_run():
    bank = _bank()
    for sel in ("randomesque", "kl"):
        run = AdaptiveTest(bank, sel).run_batch(AdaptiveTest(bank).draw_responses(np.zeros(3)), n_items=10)
        assert all(len(set(row)) == 10 for row in run.items)
    var = np.full(120, 0.5)
    sure = AdaptiveTest({**bank, "var": np.zeros(120)}, item_uncertainty="marginalize")
    plain = AdaptiveTest(bank)
    for k, y in ((plain.next_item(), 1), (None, 0)):
        if k is None:
            break
        assert sure.update(k, y) == plain.update(k, y)  # zero variance: marginalising changes nothing
    unsure = AdaptiveTest({**bank, "var": var}, item_uncertainty="marginalize")
    th_unsure, _ = unsure.update(plain.asked[0], 1)
    assert abs(th_unsure) < abs(plain.theta)  # uncertain items move θ̂ less


def test_paper_protocol():
    bank = _bank()
    test = AdaptiveTest.paper_protocol(bank)
    assert test.estimator == "mle" and test.first_item == int(np.argmin(np.abs(bank["b"])))
    assert test.next_item() == test.first_item


def test_bad_input():
    bank = _bank(m=5)
    with pytest.raises(ValueError, match="selector must be one of"):
        AdaptiveTest(bank, selector="urry")
    with pytest.raises(ValueError, match="estimator must be one of"):
        AdaptiveTest(bank, estimator="wle")
    test = AdaptiveTest(bank)
    test.update(2, 1)
    with pytest.raises(ValueError, match="item 2 was already asked"):
        test.update(2, 0)
    with pytest.raises(ValueError, match="item must be"):
        test.update(7, 0)
    with pytest.raises(ValueError, match="correct must be"):
        test.update(1, 0.5)
    for j in (0, 1, 3, 4):
        test.update(j, 0)
    with pytest.raises(RuntimeError, match="exhausted"):
        test.next_item()
    with pytest.raises(ValueError, match=r"bank.c must lie in \[0, 1\), got 1"):
        ItemBank(np.zeros(3), c=np.array([0.1, 1.0, 0.2]))
    with pytest.raises(ValueError, match="needs predictive variances"):
        AdaptiveTest(bank, item_uncertainty="marginalize")
    assert AdaptiveTest(bank).update(np.int64(1), np.True_)[0] > 0  # numpy scalars accepted
