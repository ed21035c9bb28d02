"""``DPTSUCBConfig``: the hyper-parameters of DP-TS-UCB (the paper's Alg. 1), validated in one place.

Every choice the paper's statements leave open (c0, the first batch size b0) is a parameter; see the README's
"Choices" table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from icml25_shared.validate import check_float, check_int

__all__ = ["DPTSUCBConfig"]


@dataclass
class DPTSUCBConfig:
    """Hyper-parameters of DP-TS-UCB(α, T, c0)."""

    n_arms: int
    """Number of arms K (>= 2)."""
    horizon: int
    """The known horizon T; the privacy guarantee covers exactly T rounds."""
    alpha: float = 1.0
    """Privacy/regret trade-off α ∈ [0, 1]: 1 gives O(1)-GDP, 0 gives Õ(T^0.25)-GDP with better regret."""
    c0: float = 1.0
    """Constant of the sampling budget φ = ⌈c0 T^{0.5(1−α)} ln^{0.5(3−α)} T⌉ (> 0)."""
    init_pulls: int = 1
    """b0, the size of every arm's first batch (batches then double: b0, 2 b0, 4 b0, ...)."""
    seed: Any = None
    """Seed of the policy's own generator (int, SeedSequence, Generator or None)."""

    def __post_init__(self) -> None:
        self.n_arms = check_int("n_arms", self.n_arms, min=2)  # type: ignore[assignment]
        self.init_pulls = check_int("init_pulls", self.init_pulls, min=1)  # type: ignore[assignment]
        self.horizon = check_int("horizon", self.horizon, min=2)  # type: ignore[assignment]
        if self.horizon < self.n_arms * self.init_pulls:
            raise ValueError(
                f"horizon must be >= n_arms * init_pulls = {self.n_arms * self.init_pulls}, got {self.horizon}"
            )
        self.alpha = check_float("alpha", self.alpha, min=0.0, max=1.0)  # type: ignore[assignment]
        self.c0 = check_float("c0", self.c0, min=0.0, min_open=True)  # type: ignore[assignment]

    def to_dict(self) -> dict:
        """The hyper-parameters without the seed."""
        d = asdict(self)
        d.pop("seed")
        return d
