"""Learning-rate schedules of the paper (Sec. 2 and Sec. 4, Fig. 4) and the intrinsic time τ.

A schedule is the LR factor ``s(t) = η(t)/η_peak``. With progress through the decay phase
``u = clip((t/T − (1 − f)) / f, 0, 1)`` (``f = decay_frac``: f = 1 decays over the whole run, f = 0.2 is
warmup-stable-decay-like)::

    const        1
    linear       1 − u
    cosine       ½ (1 + cos πu)
    multicosine  ½ (1 + cos 3πu)
    quadratic    1 − u²
    power        (1 − u)²
    exp          10^−u

An optional linear warmup multiplies s by ``min(1, (t + 1)/w)`` (so step 0 already has a non-zero rate and the
warmup ends at step w − 1). The intrinsic time of Sec. 4 is ``τ(t) = Σ_{k<t} η_peak·s(k)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from icml25_shared.validate import ArgumentTypeError, check_choice, check_float, check_int

__all__ = ["SCHEDULES", "Schedule", "schedule_factor", "tau"]

SCHEDULES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "const": lambda u: np.ones_like(u),
    "linear": lambda u: 1.0 - u,
    "cosine": lambda u: 0.5 * (1.0 + np.cos(np.pi * u)),
    "multicosine": lambda u: 0.5 * (1.0 + np.cos(3.0 * np.pi * u)),
    "quadratic": lambda u: 1.0 - u**2,
    "power": lambda u: (1.0 - u) ** 2,
    "exp": lambda u: 10.0 ** (-u),
}


def schedule_factor(
    name: str, step: np.ndarray | int, total_steps: int, decay_frac: float = 1.0, warmup: int = 0
) -> np.ndarray:
    """s(t) for integer or array ``step`` (see the module docstring)."""
    return Schedule(name, total_steps, decay_frac, warmup)(step)


@dataclass(frozen=True)
class Schedule:
    """An LR factor schedule ``s(t)`` over ``total_steps`` steps; call it on steps, or attach it to an optimizer
    with :meth:`as_lambda_lr`."""

    name: str
    total_steps: int
    decay_frac: float = 1.0
    warmup: int = 0

    def __post_init__(self) -> None:
        check_choice("name", self.name, tuple(SCHEDULES))
        object.__setattr__(self, "total_steps", check_int("total_steps", self.total_steps, min=1))
        object.__setattr__(
            self, "decay_frac", check_float("decay_frac", self.decay_frac, min=0.0, max=1.0, min_open=True)
        )
        object.__setattr__(
            self, "warmup", check_int("warmup", self.warmup, min=0, max=self.total_steps)
        )  # a warmup longer than the run would never reach the peak LR

    @property
    def label(self) -> str:
        """A short name: ``linear``, ``linear@0.2`` (decay over the last 20 %), ``+w100`` for warmup."""
        lab = self.name if self.decay_frac == 1.0 or self.name == "const" else f"{self.name}@{self.decay_frac:g}"
        return lab + (f"+w{self.warmup}" if self.warmup else "")

    def __call__(self, step: np.ndarray | int) -> np.ndarray:
        """s(t) at steps in [0, total_steps]; a step outside raises (the schedule is not defined there)."""
        t = np.asarray(_numeric_steps(step), dtype=np.float64)
        if t.size and not (np.all(np.isfinite(t)) and t.min() >= 0 and t.max() <= self.total_steps):
            bad = t[~(np.isfinite(t) & (t >= 0) & (t <= self.total_steps))]
            raise ValueError(
                f"step must lie in [0, total_steps={self.total_steps}], got {bad.ravel()[:5].tolist()}"
                + (" ..." if bad.size > 5 else "")
            )
        u = np.clip((t / self.total_steps - (1.0 - self.decay_frac)) / self.decay_frac, 0.0, 1.0)
        s = SCHEDULES[self.name](u)
        if self.warmup:
            s = s * np.minimum(1.0, (t + 1.0) / self.warmup)
        return s

    def tau(self, step: np.ndarray | int, eta_peak: float = 1.0) -> np.ndarray:
        """Intrinsic time τ(t) = Σ_{k<t} η_peak·s(k) (Sec. 4); τ(0) = 0."""
        return tau(self, step, eta_peak)

    def as_lambda_lr(self, optimizer, last_epoch: int = -1):
        """A ``torch.optim.lr_scheduler.LambdaLR`` applying ``lr = base_lr · s(t)`` to every group, stepped once
        per optimizer step."""
        from torch.optim.lr_scheduler import LambdaLR

        # s(t) tabulated once for t ≤ T (one numpy call per step cost a few % of a tiny model's step)
        table = self(np.arange(self.total_steps + 1)).tolist()

        def factor(t: int) -> float:
            if not 0 <= t < len(table):
                raise ValueError(
                    f"the LR scheduler was stepped to step {t}, outside the schedule's [0, total_steps="
                    f"{self.total_steps}]; make the Schedule as long as the training run"
                )
            return table[t]

        return LambdaLR(optimizer, factor, last_epoch=last_epoch)


def _numeric_steps(step: object) -> np.ndarray:
    """``step`` as an int or float array; anything else (strings, booleans, objects) raises naming it."""
    t = np.asarray(step)
    if t.dtype.kind not in "iuf":
        raise ArgumentTypeError(f"step must be an int or float step count (or an array of them), got {step!r}")
    return t


def tau(schedule: Schedule, step: np.ndarray | int, eta_peak: float = 1.0) -> np.ndarray:
    """τ(t) = Σ_{k<t} η_peak·s(k) at the given integer steps (paper Sec. 4, "intrinsic time")."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    eta_peak = check_float("eta_peak", eta_peak, min=0.0)
    t = _numeric_steps(step)
    if t.size and (t.min() < 0 or not np.all(np.mod(t, 1) == 0)):
        raise ValueError("step must hold non-negative integers")
    n = int(t.max()) if t.size else 0
    cum = np.concatenate([[0.0], np.cumsum(schedule(np.arange(n)))])
    return eta_peak * cum[t.astype(np.int64)]
