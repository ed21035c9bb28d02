"""Synthetic tasks of the paper's CPU-scale experiments (Sec. 2 and App.).

- :class:`FourierRegression`: power-law regression ("MLP on Fourier features"): ``x ~ U[−½, ½]^d`` and
  ``y = Σ_{n<M} w_n √2 cos(2π k_n·x + φ_n)`` with integer frequencies ``k_n = round(r_n · unit direction)`` of
  Pareto-tailed radius ``r_n = (1 − U)^(−1/tail)``, weights ``w ~ N(0, 1)/‖w‖`` and phases φ ∈ {0, π/2}. The target
  has unit variance; the loss is ½(f − y)².
- :class:`PLRF`: power-law random features (Paquette et al. 2024): data ``x_j ~ N(0, j^−2α)`` in v dimensions,
  target ``y = Σ_j j^−β x_j``, model ``f(x) = θᵀ W x`` with a fixed random ``W ∈ R^{d×v}``; the population loss
  ``½ (Wᵀθ − b)ᵀ H (Wᵀθ − b)`` is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from icml25_shared.validate import check_float, check_int

__all__ = ["FourierRegression", "PLRF"]


@dataclass
class FourierRegression:
    """The Fourier power-law regression task (see the module docstring). ``sample`` draws fresh data each call
    (online training, no repetition), reproducibly from a ``torch.Generator``."""

    dim: int = 8
    modes: int = 10_000
    tail: float = 2.0
    seed: int = 42
    k: torch.Tensor = field(init=False, repr=False)
    w: torch.Tensor = field(init=False, repr=False)
    phase: torch.Tensor = field(init=False, repr=False)
    _cast: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.dim = check_int("dim", self.dim, min=1)
        self.modes = check_int("modes", self.modes, min=1)
        self.tail = check_float("tail", self.tail, min=0, min_open=True)
        self.seed = check_int("seed", self.seed)
        g = torch.Generator().manual_seed(self.seed)
        direction = torch.randn(self.modes, self.dim, generator=g, dtype=torch.float64)
        direction /= direction.norm(dim=1, keepdim=True)
        r = (1.0 - torch.rand(self.modes, 1, generator=g, dtype=torch.float64)) ** (-1.0 / self.tail)
        self.k = torch.round(r * direction)
        w = torch.randn(self.modes, generator=g, dtype=torch.float64)
        self.w = w / w.norm()
        self.phase = (torch.rand(self.modes, generator=g) < 0.5).to(torch.float64) * (torch.pi / 2)

    def target(self, x: torch.Tensor) -> torch.Tensor:
        """y(x) for x of shape (n, dim), computed in x's dtype; returns (n, 1)."""
        if x.dtype not in self._cast:  # the constants in x's dtype, cast once (this runs every training step)
            self._cast[x.dtype] = tuple(t.to(x.dtype) for t in (self.k, self.phase, self.w * 2**0.5))
        k, phase, w = self._cast[x.dtype]
        return (torch.cos(2 * torch.pi * (x @ k.T) + phase) @ w).unsqueeze(1)

    def sample(self, n: int, generator: torch.Generator, dtype: torch.dtype = torch.float32):
        """(x, y) with x ~ U[−½, ½]^dim of shape (n, dim) and y of shape (n, 1), in ``dtype``."""
        x = (torch.rand(n, self.dim, generator=generator, dtype=torch.float64) - 0.5).to(dtype)
        return x, self.target(x)


@dataclass
class PLRF:
    """Power-law random features (see the module docstring), in numpy; ``v`` data dimensions."""

    alpha: float = 0.6
    beta: float = 0.52
    v: int = 4000
    seed: int = 0

    def __post_init__(self) -> None:
        self.alpha = check_float("alpha", self.alpha, min=0, min_open=True)
        self.beta = check_float("beta", self.beta, min=0, min_open=True)
        self.v = check_int("v", self.v, min=1)
        j = np.arange(1, self.v + 1, dtype=np.float64)
        self.h = j ** (-2 * self.alpha)  # data covariance H = diag(j^−2α)
        self.b = j ** (-self.beta)

    def features(self, d: int, seed: int | None = None) -> np.ndarray:
        """The random feature matrix W ∈ R^{d×v} with N(0, 1/d) entries."""
        d = check_int("d", d, min=1)
        rng = np.random.default_rng(self.seed if seed is None else seed)
        return rng.standard_normal((d, self.v)) / np.sqrt(d)

    def loss(self, theta: np.ndarray, W: np.ndarray) -> float:
        """Population loss ½ (Wᵀθ − b)ᵀ H (Wᵀθ − b)."""
        r = W.T @ theta - self.b
        return float(0.5 * np.sum(self.h * r * r))

    def gd_loss(self, d: int, steps: np.ndarray, lr: float = 1.0, seed: int | None = None) -> np.ndarray:
        """Exact population loss after ``steps`` steps of full-batch gradient descent from θ = 0 (the infinite-batch
        limit of one-pass SGD), for any step counts at once.

        With ``K = W H Wᵀ`` (d×d, eigenpairs λ_i, q_i) and the minimiser θ* = K⁻¹ W H b, the loss is quadratic in
        θ − θ*, and GD contracts each eigen-direction by (1 − lr·λ_i) per step:
        ``L_k = L(θ*) + ½ Σ_i λ_i (1 − lr·λ_i)^{2k} (q_iᵀθ*)²``. Needs ``lr·λ_max < 2`` (raised otherwise).
        """
        d = check_int("d", d, min=1, max=self.v)
        lr = check_float("lr", lr, min=0, min_open=True)
        k = np.asarray(steps, dtype=np.float64)
        if k.ndim != 1 or not np.all(np.isfinite(k)) or (k < 0).any():
            raise ValueError("steps must be a 1-d array of non-negative step counts")
        W = self.features(d, seed)
        lam, Q = np.linalg.eigh((W * self.h) @ W.T)
        if lr * lam[-1] >= 2:
            raise ValueError(f"lr = {lr:g} diverges: lr·λ_max = {lr * lam[-1]:.3g} must be < 2")
        theta_star = Q @ ((Q.T @ (W @ (self.h * self.b))) / lam)
        c2 = (Q.T @ theta_star) ** 2
        decay = np.abs(1.0 - lr * lam)[None, :] ** (2.0 * k[:, None])
        return self.loss(theta_star, W) + 0.5 * (decay * (lam * c2)[None, :]).sum(axis=1)

    def sgd(
        self, d: int, steps: int, lr: float, batch: int = 1, seed: int = 0, n_evals: int = 30
    ) -> tuple[np.ndarray, np.ndarray]:
        """One-pass SGD on fresh samples from θ = 0; returns (logged steps, population losses)."""
        W = self.features(d)
        rng = np.random.default_rng(seed)
        theta = np.zeros(d)
        evals = set(np.unique(np.geomspace(1, steps, n_evals).astype(int)).tolist())
        out_t, out_l = [], []
        sd = np.sqrt(self.h)
        for t in range(1, steps + 1):
            x = rng.standard_normal((batch, self.v)) * sd
            feats = x @ W.T
            resid = feats @ theta - x @ self.b
            theta -= lr * feats.T @ resid / batch
            if t in evals:
                out_t.append(t)
                out_l.append(self.loss(theta, W))
        return np.array(out_t), np.array(out_l)
