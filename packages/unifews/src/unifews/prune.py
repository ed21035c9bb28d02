"""The Unifews weight rule (paper eq. 14) as a ``torch.nn.utils.prune`` method."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils import prune

from icml25_shared.validate import check_choice, check_float
from unifews.config import THRESHOLDS, Threshold
from unifews.functional import weight_mask

__all__ = ["InputNormThreshold", "input_norm_threshold"]


class InputNormThreshold(prune.BasePruningMethod):
    """Unstructured pruning of a ``(f_out, f_in)`` weight by the norm of the input columns it multiplies.

    ``M[o, j] = |W[o, j]| >= θ_j``, ``θ_j = min(δw · s / max(‖H[:, j]‖₂, eps), 0.999 · max|W|)`` with
    ``s = ‖H‖_F / f_in`` (``threshold="relative"``, official) or ``s = 1`` (``"absolute"``, paper). ``inputs``
    is a batch ``H`` of the layer's inputs (``[n, f_in]``). The mask is combined with earlier masks as usual.
    """

    PRUNING_TYPE = "unstructured"

    def __init__(self, delta_w: float, inputs: Tensor, threshold: Threshold = "relative", eps: float = 1e-12) -> None:
        self.delta_w = check_float("delta_w", delta_w, min=0.0)
        self.threshold = check_choice("threshold", threshold, THRESHOLDS)
        if not isinstance(inputs, Tensor) or inputs.dim() != 2:
            raise ValueError(f"inputs must be a 2-D tensor [n, f_in], got {getattr(inputs, 'shape', inputs)}")
        self.inputs = inputs.detach()
        self.eps = eps

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        if t.dim() != 2 or t.size(1) != self.inputs.size(1):
            raise ValueError(
                f"InputNormThreshold needs a (f_out, f_in={self.inputs.size(1)}) weight, got {tuple(t.shape)}"
            )
        mask = weight_mask(t, self.inputs, self.delta_w, self.threshold, eps=self.eps)
        return default_mask * mask.to(default_mask.dtype)

    @classmethod
    def apply(  # type: ignore[override]
        cls,
        module: nn.Module,
        name: str,
        delta_w: float,
        inputs: Tensor,
        threshold: Threshold = "relative",
        eps: float = 1e-12,
    ):
        return super().apply(module, name, delta_w=delta_w, inputs=inputs, threshold=threshold, eps=eps)


def input_norm_threshold(
    module: nn.Module, name: str, delta_w: float, inputs: Tensor, threshold: Threshold = "relative"
) -> nn.Module:
    """Prune ``module.<name>`` in place with :class:`InputNormThreshold` (like ``prune.l1_unstructured``)."""
    with torch.no_grad():
        InputNormThreshold.apply(module, name, delta_w, inputs, threshold)
    return module
