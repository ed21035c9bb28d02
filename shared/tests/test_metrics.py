import numpy as np
import pytest
import torch

from icml25_shared import metrics


def test_accuracy_labels_and_scores():
    assert metrics.accuracy([0, 1, 2, 2], [0, 1, 1, 2]) == 0.75
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]])
    assert metrics.accuracy(logits, torch.tensor([0, 1, 1])) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="empty"):
        metrics.accuracy([], [])
    with pytest.raises(ValueError, match="shape|target"):
        metrics.accuracy([0, 1], [0])


def test_mse_mae():
    a, b = np.array([1.0, 2.0, 4.0]), np.array([1.0, 0.0, 1.0])
    assert metrics.mse(a, b) == pytest.approx((0 + 4 + 9) / 3)
    assert metrics.mae(torch.tensor(a), b) == pytest.approx(5 / 3)
    with pytest.raises(ValueError, match="NaN"):
        metrics.mse([np.nan], [0.0])
    with pytest.raises(ValueError, match="same shape"):
        metrics.mae([1.0, 2.0], [1.0])


def test_auroc_against_pair_counting():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 5, 200).astype(float)  # many ties
    y = rng.integers(0, 2, 200)
    pos, neg = s[y == 1], s[y == 0]
    brute = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    assert metrics.auroc(s, y) == pytest.approx(brute)
    assert metrics.auroc([0.1, 0.2, 0.9], [0, 0, 1]) == 1.0
    with pytest.raises(ValueError, match="both classes"):
        metrics.auroc([0.1, 0.2], [1, 1])


def test_ece():
    # perfectly calibrated in expectation: confidence 0.8, 80% correct
    probs = np.tile([0.8, 0.2], (10, 1))
    labels = np.array([0] * 8 + [1] * 2)
    assert metrics.expected_calibration_error(probs, labels) == pytest.approx(0.0)
    # always confident and always wrong: ECE = confidence
    assert metrics.expected_calibration_error(np.tile([0.9, 0.1], (5, 1)), np.ones(5, int)) == pytest.approx(0.9)
    # binary form equals the two-column form
    p1 = np.array([0.9, 0.3, 0.6, 0.2])
    y = np.array([1, 0, 0, 1])
    two = np.stack([1 - p1, p1], 1)
    assert metrics.expected_calibration_error(p1, y) == pytest.approx(metrics.expected_calibration_error(two, y))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        metrics.expected_calibration_error(np.array([[1.5, -0.5]]), [0])
