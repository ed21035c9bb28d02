"""Validated configuration of DP-TS-UCB (spec section 3.4: every open choice is a parameter)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["DPTSUCBConfig", "check_int"]


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int >= ``minimum``, or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


@dataclass
class DPTSUCBConfig:
    """Hyper-parameters of DP-TS-UCB(alpha, T, c0).

    Attributes:
        n_arms: number of arms K (>= 2).
        horizon: known horizon T; the privacy guarantee covers exactly T rounds.
        alpha: privacy/regret trade-off in [0, 1]; 1 gives O(1)-GDP, 0 gives O~(T^0.25)-GDP.
        c0: constant of the sampling budget phi = ceil(c0 T^{0.5(1-alpha)} ln^{0.5(3-alpha)} T).
        init_pulls: b0, size of the first batch of every arm (batches then double: b0, 2 b0, 4 b0, ...).
        seed: seed of the policy's own generator (int, SeedSequence, Generator or None).
    """

    n_arms: int
    horizon: int
    alpha: float = 1.0
    c0: float = 1.0
    init_pulls: int = 1
    seed: object = None

    def __post_init__(self) -> None:
        self.n_arms = check_int("n_arms", self.n_arms, 2)
        self.init_pulls = check_int("init_pulls", self.init_pulls, 1)
        self.horizon = check_int("horizon", self.horizon, 2)
        if self.horizon < self.n_arms * self.init_pulls:
            raise ValueError(
                f"horizon must be >= n_arms * init_pulls = {self.n_arms * self.init_pulls}, got {self.horizon}"
            )
        if not isinstance(self.alpha, (int, float, np.floating)) or not 0.0 <= float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha!r}")
        self.alpha = float(self.alpha)
        if not isinstance(self.c0, (int, float, np.floating)) or not (math.isfinite(self.c0) and self.c0 > 0):
            raise ValueError(f"c0 must be a positive finite number, got {self.c0!r}")
        self.c0 = float(self.c0)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("seed")
        return d
