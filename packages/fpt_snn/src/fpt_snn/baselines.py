"""The peers FPT is compared with: the sequential LIF trained by BPTT, and spikingjelly's parallel spiking neuron.

:class:`LIFSequential` is the baseline the paper's accuracy and time comparisons are made against: the soft-reset
LIF stepped one time step after the other, with spikingjelly's default sigmoid surrogate gradient (α = 4), trained
by backpropagation through time. :func:`psn_factory` gives spikingjelly's ``PSN`` (the parallel neuron that FPT
contains as its K = 1, learnable-kernel case) when spikingjelly is installed.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from fpt_snn.functional import lif_reference

__all__ = ["LIFSequential", "psn_factory"]


class LIFSequential(nn.Module):
    """The sequential soft-reset LIF trained with BPTT and spikingjelly's sigmoid surrogate (α = 4)."""

    def __init__(self, tau: float = 2.0, decay: float | None = None) -> None:
        super().__init__()
        self.tau, self.decay = tau, decay

    def forward(self, x_seq: Tensor) -> Tensor:
        return lif_reference(x_seq, tau=self.tau, decay=self.decay)  # type: ignore[return-value]


def psn_factory(T: int) -> Callable[[], nn.Module] | None:
    """A constructor of spikingjelly's ``PSN(T)``, or ``None`` when spikingjelly is not installed."""
    try:
        from spikingjelly.activation_based import neuron
    except ImportError:
        return None
    return lambda: neuron.PSN(T)
