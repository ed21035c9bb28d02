"""Agreement of a gradient estimate with the true cut-layer gradient."""

from __future__ import annotations

import torch

__all__ = ["gradient_agreement"]


def gradient_agreement(estimate: torch.Tensor, true: torch.Tensor) -> tuple[float, float]:
    """(NMSE, cosine) of ``estimate`` against ``true`` over all entries:
    NMSE = ‖ĝ − g‖² / ‖g‖², cosine = ⟨ĝ, g⟩ / (‖ĝ‖ ‖g‖) (both flattened over the batch)."""
    if estimate.shape != true.shape:
        raise ValueError(
            f"estimate and true must have the same shape, got {tuple(estimate.shape)} and {tuple(true.shape)}"
        )
    e, g = estimate.detach().double().flatten(), true.detach().double().flatten()
    if e.numel() == 0:
        raise ValueError("gradient_agreement of empty tensors is undefined")
    gn = g.norm()
    if gn == 0:
        raise ValueError("the true gradient is zero: NMSE is undefined")
    nmse = float(((e - g) ** 2).sum() / gn**2)
    en = e.norm()
    cos = float((e @ g) / (en * gn)) if en > 0 else 0.0
    return nmse, cos
