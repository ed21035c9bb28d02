r"""Entropy of SAM's per-pixel foreground probabilities (Sec. 3.1, the Monte-Carlo estimators of the paper).

Every map is first clipped to :math:`[\epsilon, 1-\epsilon]` with :math:`\epsilon = 10^{-6}`, as the released code does,
so that a pixel with :math:`p \in \{0, 1\}` has the finite entropy :math:`h(\epsilon)`.

.. math::
    h(p) = -p \log_2 p - (1-p) \log_2 (1-p), \qquad
    H(p) = \frac{\sum_{px} p \, h(p)}{\sum_{px} p}

:math:`H` is the foreground-weighted mean binary entropy of a map (in bits); the MC estimators are :math:`H` of the
(weighted) mean of several maps: :math:`H_A = H(\sum_j w_j p_j)` with :math:`w_j = s_j / \sum s` (SamScores), and
:math:`H_\Theta, H_{XP}, H_T, H_Y` the same over models, prompts, augmentations and all of them (see ``usam.mc``).
"""

from __future__ import annotations

import torch

from icml25_shared.validate import check_float, check_tensor

__all__ = [
    "EPS",
    "bald",
    "binary_entropy",
    "check_probabilities",
    "mask_entropy",
    "mixture_entropy",
    "pixel_entropy",
    "probabilities",
]

EPS = 1e-6


def probabilities(logits: torch.Tensor) -> torch.Tensor:
    """Foreground probabilities ``sigmoid(logits)`` of SAM's mask logits, in float32 (finite logits required)."""
    check_tensor("logits", logits, dtype="floating", finite=True)
    return torch.sigmoid(logits.float())


def check_probabilities(name: str, p: torch.Tensor) -> torch.Tensor:
    """``p`` unchanged when it is a finite floating tensor of probabilities in [0, 1]; else a clear error (mask
    logits, NaN and infinities would otherwise be clipped silently into a meaningless entropy)."""
    check_tensor(name, p, dtype="floating", finite=True)
    if p.numel() and (p.min() < 0 or p.max() > 1):
        raise ValueError(
            f"{name} must be probabilities in [0, 1], got values in [{float(p.min()):.4g}, {float(p.max()):.4g}] "
            "(mask logits? convert them with usam.entropy.probabilities)"
        )
    return p


def binary_entropy(p: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Per-pixel binary entropy h(p) in bits, with p clipped to [eps, 1 − eps]."""
    check_probabilities("p", p)
    eps = check_float("eps", eps, min=0.0, max=0.5, min_open=True, max_open=True)
    p = p.clamp(eps, 1.0 - eps)
    return -(p * torch.log2(p) + (1.0 - p) * torch.log2(1.0 - p))


def mask_entropy(p: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """H(p) = Σ p h(p) / Σ p over the last two axes (foreground-weighted mean entropy, bits); shape ``p.shape[:-2]``.

    A background-only map (p ≈ 0 everywhere) stays finite: its weights are the clipped ε.
    """
    check_probabilities("p", p)
    if p.ndim < 2:
        raise ValueError(f"p must have at least 2 dimensions (…, H, W), got shape {tuple(p.shape)}")
    pc = p.float().clamp(eps, 1.0 - eps)
    h = binary_entropy(pc, eps)
    return (pc * h).sum((-2, -1)) / pc.sum((-2, -1))


def pixel_entropy(p: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The unweighted mean of h(p) over the last two axes (concave in p, unlike :func:`mask_entropy`)."""
    check_probabilities("p", p)
    return binary_entropy(p.float(), eps).mean((-2, -1))


def _mixture(probs: torch.Tensor, weights: torch.Tensor | None, dim: int) -> torch.Tensor:
    check_probabilities("probs", probs)
    if weights is None:
        return probs.float().mean(dim).clamp(0.0, 1.0)
    check_tensor("weights", weights, dtype="floating", finite=True)
    dim = dim % probs.ndim
    if weights.shape != probs.shape[: dim + 1]:
        raise ValueError(
            f"weights must have shape {tuple(probs.shape[: dim + 1])} (probs up to dim), got {tuple(weights.shape)}"
        )
    if (weights < 0).any():
        raise ValueError("weights must be non-negative")
    total = weights.sum(-1, keepdim=True)
    if (total <= 0).any():
        raise ValueError("weights must not sum to zero along dim")
    w = (weights / total).float()
    w = w.reshape(*w.shape, *([1] * (probs.ndim - dim - 1)))
    return (w * probs.float()).sum(dim).clamp(0.0, 1.0)  # rounding may leave the mean 1 ulp above 1


def mixture_entropy(
    probs: torch.Tensor, weights: torch.Tensor | None = None, dim: int = 0, eps: float = EPS
) -> torch.Tensor:
    """H of the weighted mean map over ``dim`` (the MC estimators of Sec. 3.1).

    ``weights`` (shape ``probs.shape[:dim + 1]``) are normalised along ``dim``; ``None`` is the uniform mean.
    ``H_A`` is ``mixture_entropy(sigmoid(masks), iou_scores, dim=-3)`` for masks (…, 3, H, W).
    """
    return mask_entropy(_mixture(probs, weights, dim), eps)


def bald(probs: torch.Tensor, weights: torch.Tensor | None = None, dim: int = 0, eps: float = EPS) -> torch.Tensor:
    """Mutual information (BALD) between the pixel label and the MC variable, averaged over pixels (≥ 0).

    h(E p) − E h(p) per pixel (concavity of h makes it non-negative), then the mean over the last two axes.
    """
    mean_p = _mixture(probs, weights, dim)
    h = binary_entropy(probs.float(), eps)
    mean_h = _mixture(h, weights, dim)
    return (binary_entropy(mean_p, eps) - mean_h).mean((-2, -1))
