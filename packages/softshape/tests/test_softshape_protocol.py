"""The paper's protocol helpers: stratified disjoint folds, NaN filling without leakage, z-normalisation."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin

from softshape.experiments import cv_protocol, fill_nan_train_means, protocol_folds, standard_split, znormalize


class Recorder(ClassifierMixin, BaseEstimator):
    """Remembers what it was fitted on; predicts the majority class."""

    fitted: list = []  # shared on purpose: clones record into the same list

    def fit(self, X, y):
        Recorder.fitted.append((np.array(X), np.array(y)))
        vals, counts = np.unique(y, return_counts=True)
        self.majority_ = vals[np.argmax(counts)]
        return self

    def predict(self, X):
        return np.full(len(X), self.majority_)


def test_folds_are_stratified_disjoint_and_cover():
    y = np.array([0] * 50 + [1] * 30 + [2] * 20)
    folds = protocol_folds(y, 5, 42)
    tests = [te for _, te in folds]
    assert sorted(np.concatenate(tests).tolist()) == list(range(100))
    for tr, te in folds:
        assert not set(tr) & set(te)
        assert np.bincount(y[te]).tolist() == [10, 6, 4]
    # the paper's seed makes the split repeatable
    for (a, b), (c, d) in zip(folds, protocol_folds(y, 5, 42)):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


def test_nan_fill_uses_train_statistics_only():
    rng = np.random.default_rng(0)
    Xtr = rng.normal(size=(20, 1, 6))
    Xte = rng.normal(loc=100.0, size=(5, 1, 6))
    Xtr[3, 0, 2] = np.nan
    Xte[:, 0, 2] = np.nan
    Xtr[:, 0, 5] = np.nan  # an all-NaN training column
    Xte[:, 0, 5] = np.nan
    ftr, fte = fill_nan_train_means(Xtr, Xte)
    train_mean = np.nanmean(Xtr[:, 0, 2])
    np.testing.assert_allclose(fte[:, 0, 2], train_mean)
    np.testing.assert_allclose(ftr[3, 0, 2], train_mean)
    assert np.all(fte[:, 0, 5] == 1e-6) and np.all(ftr[:, 0, 5] == 1e-6)
    # changing the test data does not change how anything is filled
    Xte2 = Xte * 3
    _, fte2 = fill_nan_train_means(Xtr, Xte2)
    np.testing.assert_allclose(fte2[:, 0, 2], train_mean)


def test_znormalize():
    rng = np.random.default_rng(1)
    X = rng.normal(3, 5, size=(4, 2, 30))
    X[0, 1] = 7.0  # constant series: std 0 -> divided by 1
    Z = znormalize(X)
    np.testing.assert_allclose(Z[1:].mean(-1), 0, atol=1e-6)
    np.testing.assert_allclose(Z[1:].std(-1), 1, atol=1e-5)
    np.testing.assert_array_equal(Z[0, 1], 0.0)


def test_cv_protocol_merges_and_fits_on_outer_train_only():
    rng = np.random.default_rng(2)
    Xtr, ytr = rng.normal(size=(30, 1, 10)), np.array([0, 1] * 15)
    Xte, yte = rng.normal(size=(20, 1, 10)), np.array([0, 0, 1, 1] * 5)
    Recorder.fitted = []
    res = cv_protocol(Xtr, ytr, Xte, yte, Recorder(), n_folds=5, folds=[0, 2])
    assert res.folds == [0, 2] and len(res.accuracies) == 2
    assert len(Recorder.fitted) == 2
    for Xf, yf in Recorder.fitted:
        assert Xf.shape == (40, 1, 10)  # 80 % of the 50 merged cases
        assert np.bincount(yf).tolist() == [20, 20]
        np.testing.assert_allclose(Xf.mean(-1), 0, atol=1e-5)  # z-normalised
    assert all(0.0 <= a <= 1.0 for a in res.accuracies)
    with pytest.raises(ValueError, match="folds"):
        cv_protocol(Xtr, ytr, Xte, yte, Recorder(), folds=[7])
    single = standard_split(Xtr, ytr, Xte, yte, Recorder())
    assert single.accuracies == [0.5]
