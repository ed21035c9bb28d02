"""KNIFE (Pichler et al., ICML 2022): a learnable Gaussian-mixture density whose mean negative log-likelihood is
an upper bound on the differential entropy; LSMI uses it for the surprisal h(x) = -log p(x)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from icml25_shared.validate import check_choice, check_int, check_tensor

__all__ = ["KNIFE", "StackedKNIFE", "GaussianMixtureDensity"]


def _check_input(name: str, x: torch.Tensor, dim: int, dtype: torch.dtype) -> None:
    """x must be a (N, dim) tensor of the module's float dtype: a numpy array failed on ``-`` and a float64 tensor
    inside einsum ("expected scalar type Double but found Float")."""
    check_tensor(name, x, ndim=2)
    if x.shape[1] != dim:
        raise ValueError(f"{name} must have shape (N, {dim}), got {tuple(x.shape)}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have the module's dtype {dtype} (cast it, or the module), got {x.dtype}")


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
        _check_input("x", x, self.dim, self.means.dtype)
        t = torch.tanh(self.log_scales)  # log a, bounded
        z = (x[:, None, :] - self.means) * torch.exp(t)  # (N, K, d) = diag(a)(x - mu)
        lower = torch.tril(self.tri[0], diagonal=-1)  # (K, d, d), strictly lower
        az = z + torch.einsum("kij,nkj->nki", lower, z)  # (I + L) z without an (N, K, d, d) intermediate
        logits = -0.5 * az.pow(2).sum(-1) + t.sum(-1) + torch.log_softmax(self.weights, dim=-1)
        return torch.logsumexp(logits, dim=1) - 0.5 * self.dim * math.log(2 * math.pi)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Surprisal h(x) = -log p(x), shape (N,)."""
        return -self.logpdf(x)


class StackedKNIFE(nn.Module):
    """The two KNIFEs of LSMI (one per modality) as one batched module, as the three classifiers are one
    :class:`lsmi.estimator.StackedMLP`: one broadcast einsum per term instead of two.

    The parameters of KNIFE g (g = 0, 1; dimension d_g) sit in the first d_g entries of tensors padded to
    d_max = max(d_1, d_2); a fixed mask zeroes the padded coordinates of z = diag(a)(x - mu) and of (I + L) z and
    the padded log-scales, so each slice computes exactly :meth:`KNIFE.logpdf` and the padded parameters get zero
    gradients (hence zero Adam updates).
    """

    mask: torch.Tensor  # buffer (2, d_max): 1 on each KNIFE's own coordinates
    log_norm: torch.Tensor  # buffer (2,): (d_g / 2) log 2 pi

    def __init__(self, knife1: KNIFE, knife2: KNIFE) -> None:
        super().__init__()
        if knife1.n_kernels != knife2.n_kernels:
            raise ValueError(f"both KNIFEs need the same n_kernels, got {knife1.n_kernels} and {knife2.n_kernels}")
        self.dims = (knife1.dim, knife2.dim)
        self.n_kernels = knife1.n_kernels
        d, k = max(self.dims), self.n_kernels
        means, scales = torch.zeros(2, k, d), torch.zeros(2, k, d)
        tri, weights = torch.zeros(2, k, d, d), torch.zeros(2, k)
        mask = torch.zeros(2, d)
        with torch.no_grad():
            for g, kn in enumerate((knife1, knife2)):
                dg = kn.dim
                means[g, :, :dg] = kn.means
                scales[g, :, :dg] = kn.log_scales[0]
                tri[g, :, :dg, :dg] = kn.tri[0]
                weights[g] = kn.weights[0]
                mask[g, :dg] = 1.0
        self.means, self.log_scales = nn.Parameter(means), nn.Parameter(scales)
        self.tri, self.weights = nn.Parameter(tri), nn.Parameter(weights)
        self.register_buffer("mask", mask)
        self.register_buffer("log_norm", torch.tensor([0.5 * dg * math.log(2 * math.pi) for dg in self.dims]))

    def stack_inputs(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """(2, N, d_max): x1 and x2 zero-padded."""
        d = max(self.dims)
        return torch.stack([nn.functional.pad(x, (0, d - x.shape[1])) for x in (x1, x2)])

    def logpdf(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """log p1(x1) and log p2(x2), shape (2, N)."""
        for name, x, dg in (("x1", x1, self.dims[0]), ("x2", x2, self.dims[1])):
            _check_input(name, x, dg, self.means.dtype)
        if len(x1) != len(x2):
            raise ValueError(f"x1 and x2 must have the same number of rows, got {len(x1)} and {len(x2)}")
        x = self.stack_inputs(x1, x2)  # (2, N, d)
        mask = self.mask[:, None, :]  # (2, 1, d)
        t = torch.tanh(self.log_scales) * mask  # (2, K, d): log a, 0 on padding
        z = (x[:, :, None, :] - self.means[:, None]) * torch.exp(t)[:, None] * mask[:, :, None]  # (2, N, K, d)
        lower = torch.tril(self.tri, diagonal=-1)  # (2, K, d, d)
        az = z + torch.einsum("gkij,gnkj->gnki", lower, z) * mask[:, :, None]
        logits = -0.5 * az.pow(2).sum(-1) + (t.sum(-1) + torch.log_softmax(self.weights, dim=-1))[:, None]
        return torch.logsumexp(logits, dim=2) - self.log_norm[:, None]

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """Surprisals h1(x1), h2(x2), shape (2, N)."""
        return -self.logpdf(x1, x2)

    def knife_state(self, g: int) -> dict[str, torch.Tensor]:
        """The state dict of KNIFE g (its unpadded slices), for :meth:`KNIFE.load_state_dict`."""
        dg = self.dims[g]
        return {
            "means": self.means[g, :, :dg].detach().clone(),
            "log_scales": self.log_scales[g, None, :, :dg].detach().clone(),
            "tri": self.tri[g, None, :, :dg, :dg].detach().clone(),
            "weights": self.weights[g, None].detach().clone(),
        }

    def unstack(self) -> tuple[KNIFE, KNIFE]:
        """Two separate KNIFEs with this module's parameters."""
        out = []
        for g, dg in enumerate(self.dims):
            kn = KNIFE(dg, self.n_kernels)
            kn.load_state_dict(self.knife_state(g))
            out.append(kn)
        return out[0], out[1]


_COVARIANCES = ("full", "tied", "diag", "spherical")


class GaussianMixtureDensity(nn.Module):
    """A Gaussian mixture fitted by EM (scikit-learn's ``GaussianMixture``), evaluated in torch: the EM
    alternative to a KNIFE trained by SGD (``LSMIConfig(density="gmm")``). Same model family as KNIFE (a mixture
    of K Gaussians); maximum likelihood by EM instead of Adam on the same NLL.

        log p(x) = logsumexp_k [ log w_k + log|det P_k| - |P_k^T (x - mu_k)|^2 / 2 ] - (d/2) log 2 pi,

    with P_k the Cholesky factor of kernel k's precision (every covariance type stored as full (K, d, d)).
    """

    means: torch.Tensor  # buffer (K, d)
    prec_chol: torch.Tensor  # buffer (K, d, d)
    log_weights: torch.Tensor  # buffer (K,)
    converged_: bool  # set by fit: whether EM converged
    n_iter_: int  # set by fit: EM iterations run

    def __init__(self, dim: int, n_components: int = 5) -> None:
        super().__init__()
        self.dim = check_int("dim", dim, min=1)
        self.n_components = check_int("n_components", n_components, min=1)
        k, d = self.n_components, self.dim
        self.register_buffer("means", torch.zeros(k, d, dtype=torch.float64))
        self.register_buffer("prec_chol", torch.eye(d, dtype=torch.float64).expand(k, d, d).clone())
        self.register_buffer("log_weights", torch.full((k,), -math.log(k), dtype=torch.float64))

    @classmethod
    def fit(
        cls,
        x: torch.Tensor | np.ndarray,
        n_components: int = 5,
        covariance_type: str = "full",
        max_iter: int = 100,
        seed: int = 0,
    ) -> GaussianMixtureDensity:
        """EM fit of ``n_components`` Gaussians to x (N, d), a tensor or an array, with scikit-learn (imported here:
        an optional dependency, ``pip install scikit-learn``)."""
        try:
            from sklearn.mixture import GaussianMixture
        except ImportError as e:  # pragma: no cover - exercised by a test with sklearn hidden
            raise ImportError(
                "density='gmm' fits the mixtures with scikit-learn's GaussianMixture; install scikit-learn"
                " (pip install 'icml25-lsmi[baselines]')"
            ) from e
        n_components = check_int("n_components", n_components, min=1)
        covariance_type = check_choice("covariance_type", covariance_type, _COVARIANCES)
        max_iter = check_int("max_iter", max_iter, min=1)
        xn = x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
        if xn.ndim != 2:
            raise ValueError(f"x must have shape (N, d), got {xn.shape}")
        if len(xn) < n_components:
            raise ValueError(f"a {n_components}-component mixture needs at least {n_components} samples, got {len(xn)}")
        gm = GaussianMixture(n_components, covariance_type=covariance_type, max_iter=max_iter, random_state=seed)
        gm.fit(xn)
        out = cls(xn.shape[1], n_components)
        d = xn.shape[1]
        pc = torch.as_tensor(gm.precisions_cholesky_, dtype=torch.float64)
        if covariance_type == "full":
            full = pc
        elif covariance_type == "tied":
            full = pc.expand(n_components, d, d)
        elif covariance_type == "diag":
            full = torch.diag_embed(pc)
        else:  # spherical
            full = pc[:, None, None] * torch.eye(d, dtype=torch.float64)
        out.means.copy_(torch.as_tensor(gm.means_))
        out.prec_chol.copy_(full)
        out.log_weights.copy_(torch.as_tensor(gm.weights_).log())
        out.converged_, out.n_iter_ = bool(gm.converged_), int(gm.n_iter_)
        return out

    def logpdf(self, x: torch.Tensor) -> torch.Tensor:
        """log p(x) for x of shape (N, dim) (computed in float64, returned in x's dtype)."""
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"x must have shape (N, {self.dim}), got {tuple(x.shape)}")
        y = torch.einsum("nkd,kde->nke", x.double()[:, None, :] - self.means, self.prec_chol)  # (N, K, d)
        log_det = torch.diagonal(self.prec_chol, dim1=-2, dim2=-1).log().sum(-1)  # (K,)
        logits = -0.5 * y.pow(2).sum(-1) + log_det + self.log_weights
        out = torch.logsumexp(logits, dim=1) - 0.5 * self.dim * math.log(2 * math.pi)
        return out.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Surprisal h(x) = -log p(x), shape (N,)."""
        return -self.logpdf(x)
