"""The LR-annealing scaling law of Tissue et al. (2024), the schedule-aware baseline of the noise model.

    L(s) = L0 + A · S1(s)^−α − C · S2(s),
    S1(s) = Σ_{i≤s} η_i                       (forward area)
    S2(s) = Σ_{i≤s} m_i,  m_i = λ m_{i−1} + (η_{i−1} − η_i)   (momentum-smoothed annealing area)

with η the LR normalised by its peak and λ the decay factor (0.999 in their paper). Four parameters (L0, A, α, C)
are fitted by least squares on the curves of the fitting schedules.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import least_squares

from icml25_shared.validate import check_array, check_float

__all__ = ["AnnealingLaw"]


def _areas(lr: np.ndarray, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """S1 and S2 after each step 1..n for the per-step LR sequence ``lr`` (step i uses lr[i − 1])."""
    s1 = np.cumsum(lr)
    drop = np.concatenate([[0.0], lr[:-1] - lr[1:]])
    m = np.empty_like(lr)
    acc = 0.0
    for i, d in enumerate(drop):
        acc = decay * acc + d
        m[i] = acc
    return s1, np.cumsum(m)


class AnnealingLaw:
    """Tissue et al.'s annealing law. ``fit`` takes curves ``(lr_per_step, steps, loss)``: the LR of every step
    (normalised by the peak internally) and the loss after the given steps (1-based step counts)."""

    def __init__(self, decay: float = 0.999) -> None:
        self.decay = check_float("decay", decay, min=0.0, max=1.0)
        self.params: np.ndarray | None = None
        self.peak: float | None = None

    def _features(self, lr: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lr = check_array("lr", lr, ndim=1, dtype="numeric", finite=True, nonempty=True).astype(np.float64)
        steps = check_array("steps", steps, ndim=1, dtype="numeric", finite=True, nonempty=True)
        if not np.all(np.mod(steps, 1) == 0):
            raise ValueError(f"steps must hold integer step counts, got {steps[np.mod(steps, 1) != 0][:5].tolist()}")
        steps = steps.astype(np.int64)
        if steps.min() < 1 or steps.max() > len(lr):
            raise ValueError(f"steps must lie in [1, {len(lr)}] (the length of lr), got [{steps.min()}, {steps.max()}]")
        s1, s2 = _areas(lr / self.peak, self.decay)
        return s1[steps - 1], s2[steps - 1]

    @staticmethod
    def _law(theta: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
        l0, a, alpha, c = theta
        return l0 + a * s1 ** (-alpha) - c * s2

    def fit(self, curves: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> AnnealingLaw:
        """Least-squares fit of (L0, A, α, C ≥ 0) on every point of ``curves``."""
        if not curves:
            raise ValueError("curves must hold at least one (lr, steps, loss) triple")
        self.peak = max(float(np.max(c[0])) for c in curves)
        if not self.peak > 0:
            raise ValueError(f"the curves' learning rates must reach a positive peak, got a maximum of {self.peak}")
        for k, (_, st, loss) in enumerate(curves):
            if len(st) != len(loss):
                raise ValueError(f"curves[{k}] has {len(st)} steps but {len(loss)} losses; give one loss per step")
        feats = [self._features(lr, st) for lr, st, _ in curves]
        s1 = np.concatenate([f[0] for f in feats])
        s2 = np.concatenate([f[1] for f in feats])
        y = np.concatenate([check_array("loss", c[2], ndim=1, finite=True) for c in curves]).astype(np.float64)
        best = None
        for alpha0 in (0.2, 0.5, 1.0):
            x0 = np.array([max(0.5 * y.min(), 0.0), max(y.max() - 0.5 * y.min(), 1e-6), alpha0, 0.0])
            res = least_squares(
                lambda th: self._law(th, s1, s2) - y, x0, bounds=([0, 0, 0, 0], [np.inf] * 4), method="trf"
            )
            if best is None or res.cost < best.cost:
                best = res
        self.params = best.x
        return self

    def predict(self, lr: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Predicted loss after ``steps`` for the per-step LR sequence ``lr``."""
        if self.params is None:
            raise ValueError("call fit first")
        return self._law(self.params, *self._features(lr, steps))
