"""Evaluation measures of the paper: held-out AUC, the classical-test-theory (CTT) correlation, the empirical
reliability of an adaptive test, and the number of items a test needs to reach a target."""

from __future__ import annotations

from typing import Any

import numpy as np

from amortized_irt.data import ResponseMatrix
from icml25_shared.metrics import auroc
from icml25_shared.validate import check_array, check_float

__all__ = ["auc", "ctt_correlation", "empirical_reliability", "items_to_reach"]


def auc(scores: Any, labels: Any) -> float:
    """Area under the ROC curve of predicted probabilities against 0/1 responses (ties count one half)."""
    return auroc(scores, labels)


def ctt_correlation(pred: Any, Y: ResponseMatrix) -> float:
    """Pearson correlation over takers of the mean predicted score and the mean observed score (the paper's CTT
    agreement); ``pred`` holds one probability per observed entry of ``Y`` (its entry order)."""
    pred = check_array("pred", pred, shape=(Y.nnz,), dtype="numeric", finite=True).astype(np.float64)
    counts = np.bincount(Y.rows, minlength=Y.n_takers)
    keep = counts > 0
    mp = np.bincount(Y.rows, weights=pred, minlength=Y.n_takers)[keep] / counts[keep]
    mo = np.bincount(Y.rows, weights=Y.values, minlength=Y.n_takers)[keep] / counts[keep]
    if len(mp) < 2 or np.std(mp) == 0 or np.std(mo) == 0:
        raise ValueError("ctt_correlation needs at least two takers with differing scores")
    return float(np.corrcoef(mp, mo)[0, 1])


def empirical_reliability(theta: Any, se: Any) -> float:
    """mirt's ``empirical_rxx``: ρ = Var(θ̂) / (Var(θ̂) + mean SE²), in [0, 1] (0 when all θ̂ are equal)."""
    theta = check_array("theta", theta, ndim=1, dtype="numeric", finite=True, nonempty=True).astype(np.float64)
    se = check_array("se", se, shape=theta.shape, dtype="numeric", finite=True).astype(np.float64)
    v = float(np.var(theta))
    denom = v + float(np.mean(se**2))
    return 0.0 if denom == 0 else v / denom


def items_to_reach(curve: Any, target: float, *, above: bool = True, cap: int | None = None) -> float:
    """The first step (number of items, ``curve[k]`` measured after k items) at which ``curve`` reaches ``target``
    (≥ when ``above``, ≤ otherwise); ``cap`` (default: the curve length − 1) plus one when it never does."""
    curve = check_array("curve", curve, ndim=1, dtype="numeric", nonempty=True).astype(np.float64)
    target = check_float("target", target)
    hit = curve >= target if above else curve <= target
    idx = np.flatnonzero(hit)
    if len(idx):
        return float(idx[0])
    return float((len(curve) - 1 if cap is None else cap) + 1)
