"""Stochastic bandit environments with rewards in [0, 1], each with its own generator (separate from the
policy's, so a policy's randomness never depends on the rewards' stream)."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25_shared.validate import check_array, check_float, check_int

__all__ = ["BernoulliBandit", "TruncatedGaussianBandit"]


def _check_means(means: Any) -> np.ndarray:
    m = np.asarray(check_array("means", means, ndim=1, dtype="numeric", finite=True), dtype=np.float64)
    if m.size < 2:
        raise ValueError(f"means must be a 1-D sequence of at least 2 arm means, got shape {m.shape}")
    if np.any((m < 0) | (m > 1)):
        raise ValueError(f"means must be in [0, 1], got {m.tolist()}")
    return m


class BernoulliBandit:
    """Arm i pays 1 with probability ``means[i]``, else 0. One uniform per pull from the environment's generator."""

    def __init__(self, means: Any, seed: Any = None) -> None:
        self.means = _check_means(means)
        self.rng = np.random.default_rng(seed)

    @property
    def n_arms(self) -> int:
        return len(self.means)

    @property
    def gaps(self) -> np.ndarray:
        """Delta_i = mu* - mu_i."""
        return self.means.max() - self.means

    def reseed(self, seed: Any) -> BernoulliBandit:
        """The same instance with a fresh generator."""
        return type(self)(self.means, seed)

    def _arm(self, arm: Any) -> int:
        """``arm`` as an index in [0, n_arms) (a negative index would silently pull another arm)."""
        if type(arm) is int and 0 <= arm < len(self.means):  # the fast path of the streaming loop
            return arm
        return check_int("arm", arm, min=0, max=len(self.means) - 1)  # type: ignore[return-value]

    def pull(self, arm: int) -> float:
        """One reward of ``arm``."""
        return float(self.rng.random() < self.means[self._arm(arm)])

    def rewards_from_uniforms(self, arms: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Vectorised ``pull``: rewards for ``arms`` given the uniforms ``u`` the generator produced."""
        return (u < self.means[arms]).astype(np.float64)

    def draw_noise(self, rng: np.random.Generator, size: Any) -> np.ndarray:
        """The raw randomness of ``size`` pulls, in the order ``pull`` consumes it."""
        return rng.random(size)

    def block_sum(self, arm: int, n: int, rng: np.random.Generator) -> float:
        """Sum of ``n`` fresh rewards of ``arm`` (a binomial draw)."""
        return float(rng.binomial(n, self.means[arm]))


class TruncatedGaussianBandit(BernoulliBandit):
    """Arm i pays N(means[i], sigma^2) clipped to [0, 1] (so its mean is not exactly means[i] near the edges;
    ``true_means`` gives the exact means of the clipped law)."""

    def __init__(self, means: Any, sigma: float = 0.1, seed: Any = None) -> None:
        super().__init__(means, seed)
        self.sigma: float = check_float("sigma", sigma, min=0.0, min_open=True)  # type: ignore[assignment]
        self.means = self.true_means()

    def reseed(self, seed: Any) -> TruncatedGaussianBandit:
        env = type(self).__new__(type(self))
        env.means, env.sigma, env.rng = self.means.copy(), self.sigma, np.random.default_rng(seed)
        env._loc = self._loc
        return env

    def true_means(self) -> np.ndarray:
        from scipy.stats import norm

        self._loc = self.means.copy()
        m, s = self._loc, self.sigma
        a, b = (0 - m) / s, (1 - m) / s
        # E[clip(X, 0, 1)] = P(X > 1) + E[X; 0 < X < 1]
        inside = m * (norm.cdf(b) - norm.cdf(a)) + s * (norm.pdf(a) - norm.pdf(b))
        return inside + (1 - norm.cdf(b))

    def pull(self, arm: int) -> float:
        """One reward of ``arm``."""
        return float(np.clip(self._loc[self._arm(arm)] + self.sigma * self.rng.standard_normal(), 0.0, 1.0))

    def rewards_from_uniforms(self, arms: np.ndarray, u: np.ndarray) -> np.ndarray:
        return np.clip(self._loc[arms] + self.sigma * u, 0.0, 1.0)

    def draw_noise(self, rng: np.random.Generator, size: Any) -> np.ndarray:
        return rng.standard_normal(size)

    def block_sum(self, arm: int, n: int, rng: np.random.Generator) -> float:
        return float(np.clip(self._loc[arm] + self.sigma * rng.standard_normal(n), 0.0, 1.0).sum())
