"""Swap spikingjelly ``LIFNode``s for :class:`FPTLIFNode`s (training) and back (streaming deployment), in place."""

from __future__ import annotations

import logging
from typing import Any

from spikingjelly.activation_based import neuron
from torch import nn

from fpt_snn.neuron import FPTLIFNode

__all__ = ["convert_lif_to_fpt", "convert_fpt_to_lif"]

log = logging.getLogger(__name__)


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def _check_lif(name: str, m: neuron.LIFNode) -> None:
    where = f"LIFNode {name!r}" if name else "the LIFNode"
    if m.v_reset is not None:
        raise ValueError(
            f"{where} has a hard reset v_reset={m.v_reset!r}; FPT models only the soft reset "
            "(build it with v_reset=None)"
        )
    if m.step_mode != "m":
        raise ValueError(
            f"{where} has step_mode={m.step_mode!r}; FPT solves all time steps at once and needs a multi-step "
            "network (functional.set_step_mode(net, 'm'))"
        )
    if not isinstance(m.tau, (int, float)) or m.tau <= 1.0:
        raise ValueError(f"{where} has tau={m.tau!r}; FPT needs a fixed tau > 1")


def convert_lif_to_fpt(model: nn.Module, T: int, K: int | str = 3, **fpt_kwargs: Any) -> nn.Module:
    """Replace every spikingjelly ``LIFNode`` in ``model`` by an :class:`FPTLIFNode` with the same τ, θ,
    ``decay_input`` and ``detach_reset`` (in place; other layers and their weights are untouched).

    Only soft-reset (``v_reset=None``), multi-step LIF nodes are converted; a hard-reset node (spikingjelly's
    default ``v_reset=0.0``) raises ``ValueError`` naming it. Subclasses of ``LIFNode`` with other dynamics are
    refused too. ``fpt_kwargs`` go to :class:`FPTLIFNode` (``mode``, ``output``, ``alpha_schedule``, ...).

    Returns ``model`` (also when ``model`` is itself a ``LIFNode``: then the new node is returned).
    """
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, neuron.LIFNode)]
    for name, m in found:  # validate everything before changing anything
        if type(m) is not neuron.LIFNode:
            raise ValueError(f"{name!r} is a {type(m).__name__}, a LIFNode subclass FPT does not model")
        _check_lif(name, m)
    for name, m in found:
        new = FPTLIFNode(
            T,
            tau=float(m.tau),
            decay_input=bool(m.decay_input),
            v_threshold=float(m.v_threshold),
            K=K,
            detach_reset=bool(m.detach_reset),
            **fpt_kwargs,
        )
        new.train(m.training)
        if not name:
            return new
        _replace(model, name, new)
    log.debug("convert_lif_to_fpt: replaced %d LIFNode(s)", len(found))
    return model


def convert_fpt_to_lif(model: nn.Module) -> nn.Module:
    """Replace every :class:`FPTLIFNode` by the sequential spikingjelly ``LIFNode`` it approximates (in place),
    for exact streaming inference (``set_step_mode(net, 's')`` then works). Learnable-kernel nodes are refused."""
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, FPTLIFNode)]
    for name, m in found:
        if m.learnable_kernel:
            raise ValueError(f"FPTLIFNode {name!r} has a learnable kernel and is not a LIF neuron")
    for name, m in found:
        new = m.to_lif()
        new.train(m.training)
        if not name:
            return new
        _replace(model, name, new)
    return model
