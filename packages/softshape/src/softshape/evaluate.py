"""The paper's evaluation protocol (spec 2.9) and the standard UCR train/test split, for any sklearn/aeon classifier.

The paper merges the UCR TRAIN and TEST files and runs a stratified 5-fold split (seed 42); inside each fold the
remainder is split 3:1 into train/validation (60/20/20 overall) and the test accuracy is read at the epoch of
minimum validation loss. Here the outer folds are made by :func:`cv_protocol`; the inner 3:1 split and the
min-val-loss selection happen inside :class:`~softshape.SoftShapeClassifier` (``validation_fraction=0.25``), while
peers without a validation step (MiniRocket) are fitted on the whole outer-train part. The merged protocol gives
higher accuracies than the standard split: never compare its numbers with published train/test numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import StratifiedKFold

from icml25_shared.metrics import accuracy

__all__ = ["znormalize", "fill_nan_train_means", "protocol_folds", "cv_protocol", "standard_split", "CVResult"]


def znormalize(X: np.ndarray) -> np.ndarray:
    """Z-normalise every series and channel over time (std 0 -> 1), as the paper's data loader does."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=-1, keepdims=True)
    std = X.std(axis=-1, keepdims=True)
    return ((X - mean) / np.where(std == 0, 1.0, std)).astype(np.float32)


def fill_nan_train_means(X_train: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Fill NaN in every array with the column (channel, time) means of ``X_train`` only (1e-6 where a column is
    all NaN): no statistic of the other arrays leaks into the filling."""
    X_train = np.asarray(X_train, dtype=np.float64)
    with np.errstate(all="ignore"):
        counts = (~np.isnan(X_train)).sum(axis=0)
        means = np.where(counts > 0, np.nansum(X_train, axis=0) / np.maximum(counts, 1), 1e-6)
    return tuple(np.where(np.isnan(a), means[None], a) for a in (X_train, *others))


def protocol_folds(y: np.ndarray, n_folds: int = 5, random_state: int = 42) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train+val, test) index pairs of the paper's outer StratifiedKFold(n_folds, shuffle, random_state)."""
    if n_folds < 2:
        raise ValueError(f"n_folds must be >= 2, got {n_folds}")
    skf = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=random_state)
    return [(tr, te) for tr, te in skf.split(np.zeros(len(y)), y)]


@dataclass
class CVResult:
    """Per-fold accuracies and fit times of one estimator under one protocol."""

    accuracies: list[float]
    fit_seconds: list[float]
    predict_seconds: list[float]
    folds: list[int] = field(default_factory=list)

    @property
    def mean_accuracy(self) -> float:
        return float(np.mean(self.accuracies))

    def to_dict(self) -> dict[str, Any]:
        return {
            "accuracies": self.accuracies,
            "mean_accuracy": self.mean_accuracy,
            "fit_seconds": self.fit_seconds,
            "predict_seconds": self.predict_seconds,
            "folds": self.folds,
        }


def _fit_score(estimator: Any, X_tr: np.ndarray, y_tr: np.ndarray, X_te: np.ndarray, y_te: np.ndarray) -> tuple:
    t0 = time.perf_counter()
    estimator.fit(X_tr, y_tr)
    t1 = time.perf_counter()
    pred = estimator.predict(X_te)
    t2 = time.perf_counter()
    return accuracy(np.asarray(pred), np.asarray(y_te)), t1 - t0, t2 - t1


def _prepare(X_tr: np.ndarray, X_te: np.ndarray, znorm: bool) -> tuple[np.ndarray, np.ndarray]:
    X_tr, X_te = np.asarray(X_tr, dtype=np.float64), np.asarray(X_te, dtype=np.float64)
    if np.isnan(X_tr).any() or np.isnan(X_te).any():
        X_tr, X_te = fill_nan_train_means(X_tr, X_te)
    if znorm:
        X_tr, X_te = znormalize(X_tr), znormalize(X_te)
    return X_tr.astype(np.float32), X_te.astype(np.float32)


def cv_protocol(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    estimator: Any,
    n_folds: int = 5,
    random_state: int = 42,
    *,
    folds: list[int] | None = None,
    znorm: bool = True,
    n_jobs: int | None = None,
) -> CVResult:
    """The paper's protocol: merge train and test, stratified ``n_folds``-fold (shuffle, ``random_state``), fit a
    clone of ``estimator`` on each outer-train part and report the test-fold accuracy.

    NaN are filled with the outer-train column means (no leakage) and every series is z-normalised. ``folds``
    restricts the run to some fold indices (quick mode); ``n_jobs`` fans the folds out with joblib.
    """
    X = np.concatenate([np.asarray(X_train), np.asarray(X_test)])
    y = np.concatenate([np.asarray(y_train), np.asarray(y_test)])
    pairs = protocol_folds(y, n_folds, random_state)
    chosen = list(range(n_folds)) if folds is None else list(folds)
    for f in chosen:
        if not 0 <= f < n_folds:
            raise ValueError(f"folds must hold indices in [0, {n_folds}), got {f}")

    def run(f: int) -> tuple:
        tr, te = pairs[f]
        X_tr, X_te = _prepare(X[tr], X[te], znorm)
        return _fit_score(clone(estimator), X_tr, y[tr], X_te, y[te])

    if n_jobs in (None, 1):
        outs = [run(f) for f in chosen]
    else:
        from joblib import Parallel, delayed

        outs = Parallel(n_jobs=n_jobs)(delayed(run)(f) for f in chosen)
    return CVResult([o[0] for o in outs], [o[1] for o in outs], [o[2] for o in outs], chosen)


def standard_split(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    estimator: Any,
    *,
    znorm: bool = True,
) -> CVResult:
    """Fit a clone of ``estimator`` on the standard TRAIN file and score it on TEST (same preprocessing)."""
    X_tr, X_te = _prepare(X_train, X_test, znorm)
    acc, fit_s, pred_s = _fit_score(clone(estimator), X_tr, np.asarray(y_train), X_te, np.asarray(y_test))
    return CVResult([acc], [fit_s], [pred_s], [0])
