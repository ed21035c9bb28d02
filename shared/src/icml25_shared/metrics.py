"""Metrics that two or more packages share. Inputs may be numpy arrays, torch tensors or lists.

- :func:`accuracy` -- unifews, eagles, fsl_sage, fpt_snn, softshape, lsmi, amortized_irt.
- :func:`mse`, :func:`mae` -- timebase, bisection_proj, supercollapse.
- :func:`auroc` -- usam, amortized_irt.
- :func:`expected_calibration_error` -- usam, amortized_irt.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["to_numpy", "accuracy", "mse", "mae", "auroc", "expected_calibration_error"]


def to_numpy(x: Any, dtype: Any = None) -> np.ndarray:
    """A numpy copy/view of ``x`` (torch tensors are detached and moved to CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


def _check_finite(name: str, a: np.ndarray) -> None:
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or inf")


def accuracy(pred: Any, target: Any) -> float:
    """Fraction of correct predictions. ``pred`` is labels of shape (n,) or scores of shape (n, n_classes)."""
    p, t = to_numpy(pred), to_numpy(target)
    if p.ndim == 2:
        _check_finite("pred", p)
        p = p.argmax(axis=1)
    if p.ndim != 1 or t.ndim != 1 or p.shape[0] != t.shape[0]:
        raise ValueError(f"pred must be (n,) or (n, C) and target (n,), got {p.shape} and {t.shape}")
    if p.shape[0] == 0:
        raise ValueError("accuracy of an empty set is undefined")
    return float(np.mean(p == t))


def _pair(pred: Any, target: Any) -> tuple[np.ndarray, np.ndarray]:
    p, t = to_numpy(pred, np.float64), to_numpy(target, np.float64)
    if p.shape != t.shape:
        raise ValueError(f"pred and target must have the same shape, got {p.shape} and {t.shape}")
    if p.size == 0:
        raise ValueError("pred and target are empty")
    _check_finite("pred", p)
    _check_finite("target", t)
    return p, t


def mse(pred: Any, target: Any) -> float:
    """Mean squared error over all entries."""
    p, t = _pair(pred, target)
    return float(np.mean((p - t) ** 2))


def mae(pred: Any, target: Any) -> float:
    """Mean absolute error over all entries."""
    p, t = _pair(pred, target)
    return float(np.mean(np.abs(p - t)))


def auroc(scores: Any, labels: Any) -> float:
    """Area under the ROC curve for binary ``labels`` (0/1, or bool): the Mann-Whitney statistic, ties counted
    one half (average ranks)."""
    s, y = to_numpy(scores, np.float64).ravel(), to_numpy(labels).ravel()
    if s.shape != y.shape:
        raise ValueError(f"scores and labels must have the same length, got {s.shape} and {y.shape}")
    _check_finite("scores", s)
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("labels must be binary (0/1)")
    y = y.astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUROC needs both classes, got {n_pos} positives and {n_neg} negatives")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    # average ranks over ties
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = 0.5 * (a + b - 1) + 1.0
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def expected_calibration_error(probs: Any, labels: Any, n_bins: int = 15) -> float:
    """ECE with ``n_bins`` equal-width confidence bins (Guo et al. 2017).

    ``probs`` is (n, C) class probabilities (confidence = max, prediction = argmax) or (n,) probabilities of the
    positive class of a binary problem (``labels`` 0/1).
    """
    p, y = to_numpy(probs, np.float64), to_numpy(labels)
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    _check_finite("probs", p)
    if p.ndim == 1:
        pred = (p >= 0.5).astype(np.int64)
        conf = np.where(pred == 1, p, 1.0 - p)
    elif p.ndim == 2:
        pred, conf = p.argmax(axis=1), p.max(axis=1)
    else:
        raise ValueError(f"probs must be (n,) or (n, C), got shape {p.shape}")
    if y.shape != pred.shape or y.size == 0:
        raise ValueError(f"labels must be (n,) with n = {pred.shape[0]} > 0, got {y.shape}")
    if np.any(p < 0) or np.any(p > 1):
        raise ValueError("probs must lie in [0, 1]")
    correct = (pred == y).astype(np.float64)
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        m = bins == b
        if m.any():
            ece += m.mean() * abs(correct[m].mean() - conf[m].mean())
    return float(ece)
