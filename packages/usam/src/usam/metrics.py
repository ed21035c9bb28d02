r"""Evaluation of uncertainty scores (Sec. 4.2, Fig. 5 and the Pearson table).

Correction curve: sort the samples by a priority (an uncertainty, a predicted gap, or −confidence), replace the
*base* IoU of the top fraction r by the *refined* IoU (a larger model, more prompts, the best-of-3 mask, or the GT),
and plot the mean IoU against r. The oracle sorts by the true gain; a random order gives, in expectation, the straight
line :math:`\bar b + r \, \bar g`.

Relative AUC (our exact definition; the paper plots r ∈ [0, 0.5] and does not spell out its normalisation): the
trapezoid area :math:`A` of the curve over :math:`r_i = i/N`, :math:`i = 0 … \lfloor r_{max} N \rfloor`, and

.. math::
    \text{relAUC} = \frac{A - A_{rand}}{A_{orc} - A_{rand}} \ (\text{"random"}), \quad
    \frac{A - r_{max} \bar b}{A_{orc} - r_{max} \bar b} \ (\text{"base"}), \quad \frac{A}{A_{orc}} \ (\text{"raw"}).

All three are increasing affine maps of A, so they order methods alike. AURC / E-AURC are the selective-prediction
areas of risk 1 − IoU against coverage.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from icml25_shared.validate import check_array, check_choice, check_float

__all__ = [
    "aurc",
    "correction_curve",
    "e_aurc",
    "oracle_curve",
    "pearson",
    "random_curve",
    "relative_auc",
    "spearman",
]


def _vectors(**named: Any) -> list[np.ndarray]:
    out = [check_array(k, v, ndim=1, dtype="numeric", finite=True).astype(np.float64) for k, v in named.items()]
    n = {k: len(v) for k, v in zip(named, out)}
    if len(set(n.values())) != 1:
        raise ValueError(f"inputs must have the same length, got {n}")
    if out[0].size == 0:
        raise ValueError(f"inputs must not be empty, got N = 0 ({', '.join(named)})")
    return out


def pearson(x: Any, y: Any) -> float:
    """Pearson correlation of two 1-D samples (NaN when one is constant)."""
    x, y = _vectors(x=x, y=y)
    xc, yc = x - x.mean(), y - y.mean()
    den = np.sqrt((xc**2).sum() * (yc**2).sum())
    return float((xc * yc).sum() / den) if den > 0 else float("nan")


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..N with ties given their average rank."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i : j + 1]] = 0.5 * (i + j) + 1.0
        i = j + 1
    return ranks


def spearman(x: Any, y: Any) -> float:
    """Spearman rank correlation (Pearson of average ranks)."""
    x, y = _vectors(x=x, y=y)
    return pearson(_ranks(x), _ranks(y))


def correction_curve(base: Any, refined: Any, priority: Any, r_max: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(r, mean IoU) with the ``i`` highest-priority samples corrected, r_i = i/N for i = 0 … ⌊r_max N⌋.

    Samples with equal priority are corrected in an unknown order, so each tied group contributes its mean gain
    per sample (the expected curve over the orders of the tie): the input order of the rows never matters, and a
    constant priority gives the random curve.
    """
    base, refined, priority = _vectors(base=base, refined=refined, priority=priority)
    r_max = check_float("r_max", r_max, min=0.0, max=1.0, min_open=True)
    n = len(base)
    k = int(np.floor(r_max * n + 1e-9))
    order = np.argsort(-priority, kind="stable")
    gain = (refined - base)[order]
    sorted_priority = priority[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_priority[1:] != sorted_priority[:-1]]))
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    gain = (np.bincount(group, weights=gain) / np.bincount(group))[group]
    curve = base.mean() + np.concatenate([[0.0], np.cumsum(gain[:k])]) / n
    return np.arange(k + 1) / n, curve


def oracle_curve(base: Any, refined: Any, r_max: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The correction curve of the true gain as priority (the best possible order)."""
    b, rf = _vectors(base=base, refined=refined)
    return correction_curve(b, rf, rf - b, r_max)


def random_curve(base: Any, refined: Any, r_max: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The expected curve of a uniformly random order: base mean + r · mean gain (closed form)."""
    b, rf = _vectors(base=base, refined=refined)
    r_max = check_float("r_max", r_max, min=0.0, max=1.0, min_open=True)
    r = np.arange(int(np.floor(r_max * len(b) + 1e-9)) + 1) / len(b)
    return r, b.mean() + r * (rf - b).mean()


def _area(r: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum(0.5 * (y[1:] + y[:-1]) * np.diff(r)))


def relative_auc(
    base: Any,
    refined: Any,
    priority: Any,
    *,
    normalise: Literal["random", "base", "raw"] = "random",
    r_max: float = 0.5,
) -> float:
    """Relative area under the correction curve up to ``r_max`` (module docstring): oracle 1, random ≈ 0."""
    check_choice("normalise", normalise, ("random", "base", "raw"))
    r_max = check_float("r_max", r_max, min=0.0, max=1.0, min_open=True)
    b, rf, pr = _vectors(base=base, refined=refined, priority=priority)
    area = _area(*correction_curve(b, rf, pr, r_max))
    oracle = _area(*oracle_curve(b, rf, r_max))
    if normalise == "random":
        ref = _area(*random_curve(b, rf, r_max))
    elif normalise == "base":
        r = correction_curve(b, rf, pr, r_max)[0]
        ref = float(r[-1]) * b.mean()
    else:
        ref = 0.0
    if not abs(oracle - ref) > 1e-12:
        raise ValueError(
            f"relative_auc is undefined: the oracle gains nothing over the {normalise!r} reference "
            f"(oracle area {oracle:.6g}, reference {ref:.6g}); is refined == base, or r_max·N < 1?"
        )
    return (area - ref) / (oracle - ref)


def aurc(risk: Any, confidence: Any) -> float:
    """Area under the risk–coverage curve: mean over k of the mean risk of the k most confident samples."""
    risk, confidence = _vectors(risk=risk, confidence=confidence)
    order = np.argsort(-confidence, kind="stable")
    cum = np.cumsum(risk[order]) / np.arange(1, len(risk) + 1)
    return float(cum.mean())


def e_aurc(risk: Any, confidence: Any) -> float:
    """Excess AURC: AURC minus that of the ideal order (ascending risk)."""
    risk_v, conf = _vectors(risk=risk, confidence=confidence)
    return aurc(risk_v, conf) - aurc(risk_v, -risk_v)
