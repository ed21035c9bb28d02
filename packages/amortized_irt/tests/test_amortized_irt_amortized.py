"""Amortized difficulty: the joint fit reduces to the plain fit when every item is free, recovers the content
weights, and the GP's predictive intervals are calibrated."""

from __future__ import annotations

import numpy as np
import pytest
from amortized_irt_testing import rasch_data

from amortized_irt import AmortizedDifficulty, HashingFeaturizer, Rasch, ResponseMatrix
from amortized_irt.datasets import template_items


def _content_data(n=300, m=150, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, d))
    w = rng.normal(0, 0.8, d)
    b = X @ w + 0.3 + 0.2 * rng.standard_normal(m)
    theta = rng.standard_normal(n)
    Y = (rng.random((n, m)) < 1 / (1 + np.exp(-(theta[:, None] - b)))).astype(float)
    Y[rng.random((n, m)) > 0.6] = np.nan
    return X, ResponseMatrix.from_dense(Y), b, w


def test_joint_with_all_items_free_equals_plain_fit():
    Y, *_ = rasch_data(300, 15, seed=1, density=0.8)
    R = ResponseMatrix.from_dense(Y)
    X = np.zeros((15, 3))  # w = 0: content carries nothing
    am = AmortizedDifficulty().fit(X, R, free=np.ones(15, dtype=bool))
    plain = Rasch().fit(R)
    assert np.array_equal(am.difficulty_, plain.difficulty_)
    assert np.array_equal(am.loglik_trace_, plain.loglik_trace_)


def test_joint_linear_recovers_content_weights_and_is_monotone():
    X, R, b, w = _content_data()
    am = AmortizedDifficulty(ridge=1e-3).fit(X, R)
    assert np.corrcoef(am.coef_, w)[0, 1] > 0.98
    assert np.diff(am.loglik_trace_).min() >= -1e-9
    two = AmortizedDifficulty(mode="two_stage").fit(X, R)
    assert np.corrcoef(two.predict(X), b)[0, 1] > 0.95
    X_new = np.random.default_rng(5).standard_normal((40, 4))
    assert np.corrcoef(am.predict(X_new), X_new @ w)[0, 1] > 0.98


def test_gp_predictive_intervals_cover():
    rng = np.random.default_rng(2)
    d, n, n_test, noise = 3, 300, 400, 0.3
    w = rng.normal(0, 1, d)
    X, Xt = rng.standard_normal((n, d)), rng.standard_normal((n_test, d))
    y, yt = X @ w + noise * rng.standard_normal(n), Xt @ w + noise * rng.standard_normal(n_test)
    gp = AmortizedDifficulty(regressor="gp", mode="two_stage")
    gp.n_features_in_ = d
    gp._fit_regressor(X, y, np.ones(n), np.full(n, 1e-4))  # observed targets with negligible noise
    mu, var = gp.predict(Xt, return_var=True)
    cover = np.mean(np.abs(yt - mu) <= 1.96 * np.sqrt(var))
    assert 0.9 <= cover <= 0.99


def test_mlp_and_gp_joint_fit_run_and_predict():
    X, R, b, _ = _content_data(n=200, m=80, seed=3)
    for reg in ("mlp", "gp"):
        am = AmortizedDifficulty(regressor=reg, alternations=1, gp_steps=30).fit(X, R)
        assert np.corrcoef(am.predict(X), b)[0, 1] > 0.8, reg
    official = AmortizedDifficulty(regressor="mlp", mode="two_stage", official_mlp=True, hidden=(8, 8)).fit(X, R)
    assert sum(type(m).__name__ == "ELU" for m in official.net_) == 1


def test_hashing_featurizer_on_template_text():
    texts, b, _ = template_items(800, seed=4)
    feat = HashingFeaturizer()
    F1 = feat(texts)
    assert F1.shape == (800, 64)
    np.testing.assert_array_equal(HashingFeaturizer()(texts), F1)  # deterministic
    Xa = np.hstack([F1, np.ones((800, 1))])
    coef = np.linalg.lstsq(Xa, b, rcond=None)[0]
    assert np.corrcoef(Xa @ coef, b)[0, 1] > 0.8  # content predicts difficulty


def test_bad_input():
    X, R, _, _ = _content_data(n=50, m=20, seed=4)
    with pytest.raises(ValueError, match="one row per item"):
        AmortizedDifficulty().fit(X[:10], R)
    with pytest.raises(ValueError, match="regressor must be one of"):
        AmortizedDifficulty(regressor="forest")
    with pytest.raises(RuntimeError, match="not fitted"):
        AmortizedDifficulty().predict(X)
    am = AmortizedDifficulty().fit(X, R)
    with pytest.raises(ValueError, match="columns"):
        am.predict(X[:, :2])
