"""Swap spikingjelly ``LIFNode``s and ``ParametricLIFNode``s for :class:`FPTLIFNode`s (training) and back (streaming
deployment), in place."""

from __future__ import annotations

import copy
import logging
import warnings
from typing import Any, Literal

from spikingjelly.activation_based import neuron
from torch import nn

from fpt_snn.neuron import FPTLIFNode

__all__ = ["convert_lif_to_fpt", "convert_fpt_to_lif"]

log = logging.getLogger(__name__)


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def _check_lif(name: str, m: nn.Module) -> None:
    kind = type(m).__name__
    where = f"{kind} {name!r}" if name else f"the {kind}"
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
    if isinstance(m, neuron.LIFNode) and (not isinstance(m.tau, (int, float)) or m.tau <= 1.0):
        raise ValueError(f"{where} has tau={m.tau!r}; FPT needs a fixed tau > 1")


def _convertible(name: str, m: nn.Module) -> bool:
    """LIFNode and ParametricLIFNode are converted; their subclasses have other dynamics and are refused."""
    if type(m) in (neuron.LIFNode, neuron.ParametricLIFNode):
        return True
    if isinstance(m, (neuron.LIFNode, neuron.ParametricLIFNode)):
        raise ValueError(f"{name!r} is a {type(m).__name__}, a subclass with dynamics FPT does not model")
    return False


def convert_lif_to_fpt(
    model: nn.Module, T: int | None = None, K: int | Literal["auto"] = 3, **fpt_kwargs: Any
) -> nn.Module:
    """Replace every spikingjelly ``LIFNode`` and ``ParametricLIFNode`` in ``model`` by an :class:`FPTLIFNode` with
    the same τ (bit for bit), θ, ``decay_input``, ``detach_reset``, ``store_v_seq`` and surrogate function (a copy
    of each node's own), in place; other layers and their weights are untouched.

    A ``ParametricLIFNode`` (learnable 1/τ = sigmoid(w)) becomes a ``learnable_decay`` node with λ = sigmoid(-w),
    i.e. ``decay_logit = -w`` (its gradient flows on; :meth:`FPTLIFNode.to_lif` gives the ``ParametricLIFNode``
    back with the same ``w``). Only soft-reset (``v_reset=None``), multi-step nodes are converted; a hard-reset node
    (spikingjelly's default ``v_reset=0.0``) raises ``ValueError`` naming it, and so do subclasses of either class.
    Everything is checked before anything is replaced. ``T`` (optional: ``None`` accepts any length) and
    ``fpt_kwargs`` go to :class:`FPTLIFNode` (``mode``, ``output``, ``alpha_schedule``, ...).

    Other spikingjelly neurons (``IFNode``: no leak, λ = 1, which FPT's Λ with λ < 1 does not cover;
    ``QIFNode``, ``IzhikevichNode``, ...) are left as they are, with a ``UserWarning`` naming each.

    Returns ``model`` (also when ``model`` is itself a neuron: then the new node is returned).
    """
    found = [(n, m) for n, m in model.named_modules() if _convertible(n, m)]
    kept = [
        f"{type(m).__name__} {n!r}" if n else f"the {type(m).__name__}"
        for n, m in model.named_modules()
        if isinstance(m, neuron.BaseNode) and not isinstance(m, (neuron.LIFNode, neuron.ParametricLIFNode))
    ]
    if kept:
        warnings.warn(
            "convert_lif_to_fpt converts LIFNode and ParametricLIFNode only; left unconverted: "
            + ", ".join(kept)
            + " (FPT models the leaky soft-reset LIF; an IFNode has no leak)",
            UserWarning,
            stacklevel=2,
        )
    for name, m in found:  # validate everything before changing anything
        _check_lif(name, m)
    for name, node in found:
        # spikingjelly is untyped: nn.Module.__getattr__ would type every attribute below as Tensor | Module
        m: Any = node
        plif = isinstance(m, neuron.ParametricLIFNode)
        new = FPTLIFNode(
            tau=2.0 if plif else float(m.tau),
            decay_input=bool(m.decay_input),
            v_threshold=float(m.v_threshold),
            surrogate_function=copy.deepcopy(m.surrogate_function),
            detach_reset=bool(m.detach_reset),
            store_v_seq=bool(m.store_v_seq),
            T=T,
            K=K,
            learnable_decay=plif,
            **fpt_kwargs,
        )
        if plif:  # λ = 1 - sigmoid(w) = sigmoid(-w): negation is exact, in w's own dtype and device
            new.decay_logit = nn.Parameter(-m.w.detach().clone(), requires_grad=m.w.requires_grad)
        new.train(m.training)
        if not name:
            return new
        _replace(model, name, new)
    log.debug("convert_lif_to_fpt: replaced %d LIF node(s)", len(found))
    return model


def convert_fpt_to_lif(model: nn.Module) -> nn.Module:
    """Replace every :class:`FPTLIFNode` by the sequential spikingjelly neuron it approximates (in place; see
    :meth:`FPTLIFNode.to_lif`), for exact streaming inference (``set_step_mode(net, 's')`` then works).
    Learnable-kernel nodes are refused."""
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
