"""Agreement of a gradient estimate with the true cut-layer gradient."""

from __future__ import annotations

import math

import torch

__all__ = ["agreement_from_sums", "agreement_sums", "gradient_agreement"]


def agreement_sums(estimate: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """The four float64 sums the agreement is made of, ``[Σ(ĝ − g)², Σ ĝ·g, Σ ĝ², Σ g²]`` over all entries; sums of
    several batches add up (:func:`agreement_from_sums` turns them into (NMSE, cosine))."""
    if estimate.shape != true.shape:
        raise ValueError(
            f"estimate and true must have the same shape, got {tuple(estimate.shape)} and {tuple(true.shape)}"
        )
    e, g = estimate.detach().double().flatten(), true.detach().double().flatten()
    return torch.stack([((e - g) ** 2).sum(), e @ g, e @ e, g @ g])


def agreement_from_sums(sums: torch.Tensor) -> tuple[float, float]:
    """(NMSE, cosine) from :func:`agreement_sums` (of one batch or summed over batches)."""
    sq, dot, ee, gg = (float(v) for v in sums)
    if gg == 0:
        raise ValueError("the true gradient is zero: NMSE is undefined")
    return sq / gg, (dot / math.sqrt(ee * gg) if ee > 0 else 0.0)


def gradient_agreement(estimate: torch.Tensor, true: torch.Tensor) -> tuple[float, float]:
    """(NMSE, cosine) of ``estimate`` against ``true`` over all entries:
    NMSE = ‖ĝ − g‖² / ‖g‖², cosine = ⟨ĝ, g⟩ / (‖ĝ‖ ‖g‖) (both flattened over the batch)."""
    if estimate.numel() == 0:
        raise ValueError("gradient_agreement of empty tensors is undefined")
    return agreement_from_sums(agreement_sums(estimate, true))
