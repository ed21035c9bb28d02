"""Metrics and data containers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from amortized_irt_testing import rasch_data

from amortized_irt import Rasch, ResponseMatrix
from amortized_irt.metrics import auc, ctt_correlation, empirical_reliability, items_to_reach


def test_ctt_correlation_is_one_on_perfect_input():
    Y, *_ = rasch_data(50, 10, seed=0)
    R = ResponseMatrix.from_dense(Y)
    assert abs(ctt_correlation(R.values, R) - 1.0) < 1e-12


def test_reliability_in_unit_interval():
    rng = np.random.default_rng(1)
    for _ in range(20):
        r = empirical_reliability(rng.normal(size=30), rng.uniform(0, 2, 30))
        assert 0.0 <= r <= 1.0
    assert empirical_reliability(np.zeros(5), np.ones(5)) == 0.0


def test_items_to_reach():
    assert items_to_reach(np.array([0.1, 0.5, 0.96, 0.97]), 0.95) == 2.0
    assert items_to_reach(np.array([0.1, 0.5]), 0.95) == 2.0  # never: cap + 1
    assert items_to_reach(np.array([1.0, 0.5, 0.3]), 0.4, above=False) == 2.0


def test_heldout_auc_orders_baselines():
    Y, *_ = rasch_data(300, 30, seed=2)
    R = ResponseMatrix.from_dense(Y)
    train, test = R.split_entries(0.2, seed=0)
    m = Rasch().fit(train)
    item_mean = np.bincount(train.cols, train.values, 30) / np.bincount(train.cols, minlength=30)
    a_item = auc(item_mean[test.cols], test.values)
    assert a_item >= 0.5
    assert m.score(test) > a_item
    assert m.score(test, "nll") < np.log(2)


def test_response_matrix_from_long_and_splits():
    df = pd.DataFrame(
        {"lm": ["a", "a", "b", "c"], "q": ["x", "y", "y", "x"], "ok": [1, 0, 1, 1], "s": ["m", "n", "n", "m"]}
    )
    R = ResponseMatrix.from_long(df, "lm", "q", "ok", scenario="s")
    assert R.shape == (3, 2) and R.nnz == 4 and list(R.scenario) == ["m", "n"]
    np.testing.assert_array_equal(R.to_dense(), [[1, 0], [np.nan, 1], [1, np.nan]])
    Y, *_ = rasch_data(100, 20, seed=3, density=0.5)
    R = ResponseMatrix.from_dense(Y)
    tr, te = R.split_entries(0.3, seed=1)
    assert tr.nnz + te.nnz == R.nnz and abs(te.nnz / R.nnz - 0.3) < 0.05
    a, b = R.split_items(0.25, seed=0)
    assert len(b) == 5 and len(np.intersect1d(a, b)) == 0
    with pytest.raises(ValueError, match="column 'nope'"):
        ResponseMatrix.from_long(df, "nope", "q", "ok")


def test_swedish_sat_loader():
    pytest.importorskip("irtorch", reason="the Swedish SAT sample ships in the optional irtorch wheel ([real])")
    from amortized_irt.datasets import swedish_sat

    Y, key = swedish_sat()
    assert Y.shape == (5000, 160) and len(key) == 160
    assert 0 < Y.shape[0] * Y.shape[1] - Y.nnz < 0.01 * Y.shape[0] * Y.shape[1]  # omitted answers stay missing
    Yw, _ = swedish_sat(omitted="wrong")
    assert Yw.nnz == 5000 * 160 and Yw.values.sum() == Y.values.sum()
    with pytest.raises(ValueError, match="omitted must be one of"):
        swedish_sat(omitted="skip")
