"""KNIFE (Pichler et al., ICML 2022): a learnable Gaussian-mixture density whose mean negative log-likelihood is
an upper bound on the differential entropy; LSMI uses it for the surprisal h(x) = -log p(x)."""

from __future__ import annotations

import math

import torch
from torch import nn

from icml25_shared.validate import check_int

__all__ = ["KNIFE"]


class KNIFE(nn.Module):
    """Mixture of ``n_kernels`` full-covariance Gaussians in ``dim`` dimensions.

    Kernel k has mean mu_k, precision factor A_k = (I + L_k) diag(a_k) with L_k strictly lower triangular and
    a_k = exp(tanh(s_k)) in (e^-1, e) per dimension, so log|det A_k| = sum_j log a_kj:
        log p(x) = -(d/2) log 2 pi + logsumexp_k [ -|A_k (x - mu_k)|^2 / 2 + sum_j log a_kj + log softmax(w)_k ].
    """

    def __init__(self, dim: int, n_kernels: int = 5) -> None:
        super().__init__()
        dim = check_int("dim", dim, min=1)
        n_kernels = check_int("n_kernels", n_kernels, min=1)
        self.dim, self.n_kernels = dim, n_kernels
        self.means = nn.Parameter(torch.randn(n_kernels, dim))
        self.log_scales = nn.Parameter(torch.randn(1, n_kernels, dim))
        self.tri = nn.Parameter(torch.randn(1, n_kernels, dim, dim))
        self.weights = nn.Parameter(torch.ones(1, n_kernels))

    def logpdf(self, x: torch.Tensor) -> torch.Tensor:
        """log p(x) for x of shape (N, dim)."""
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"x must have shape (N, {self.dim}), got {tuple(x.shape)}")
        t = torch.tanh(self.log_scales)  # log a, bounded
        z = (x[:, None, :] - self.means) * torch.exp(t)  # (N, K, d) = diag(a)(x - mu)
        lower = torch.tril(self.tri[0], diagonal=-1)  # (K, d, d), strictly lower
        az = z + torch.einsum("kij,nkj->nki", lower, z)  # (I + L) z without an (N, K, d, d) intermediate
        logits = -0.5 * az.pow(2).sum(-1) + t.sum(-1) + torch.log_softmax(self.weights, dim=-1)
        return torch.logsumexp(logits, dim=1) - 0.5 * self.dim * math.log(2 * math.pi)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Surprisal h(x) = -log p(x), shape (N,)."""
        return -self.logpdf(x)
