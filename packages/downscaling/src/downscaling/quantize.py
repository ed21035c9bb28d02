"""Quantization through the host libraries (no kernels of our own):

========================  ================================================================================
scheme, backend           what runs
========================  ================================================================================
int8_dynamic, torch.ao    ``torch.ao.quantization.quantize_dynamic`` on ``nn.Linear`` (int8 weights per
                          tensor, activations quantized per batch; CPU engines fbgemm/x86/qnnpack/onednn)
int8_dynamic, torchao     ``torchao.quantization.quantize_`` with ``Int8DynamicActivationInt8WeightConfig``
int8_weight, torchao      ``quantize_`` with ``Int8WeightOnlyConfig`` (int8 per row, float activations)
int4_weight, torchao      ``quantize_`` with ``Int4WeightOnlyConfig`` (CUDA, bfloat16 models only)
int8_weight, quanto       optimum-quanto ``quantize(model, weights=qint8)`` + ``freeze`` (extra ``[quanto]``)
int4_weight, quanto       optimum-quanto with ``qint4``
========================  ================================================================================

Weight memory ≈ bits / 8 per weight plus scales (Dettmers et al. 2022, Sec. 2). Any other combination raises a
``ValueError`` listing the supported ones.
"""

from __future__ import annotations

import copy
import functools
import warnings
from typing import Any, Literal, NamedTuple, cast

import torch
from torch import nn

from downscaling.profiling import (
    PER_TENSOR_QPARAMS_BYTES,
    _is_linear_layer,
    _linear_layer_bytes,
    _module_weights,
    _tensor_bytes,
    linear_weight_bytes,
)
from icml25_shared.validate import check_choice

__all__ = ["QuantizeResult", "SUPPORTED", "quantize", "supported_schemes"]

Scheme = Literal["int8_dynamic", "int8_weight", "int4_weight"]
Backend = Literal["torch.ao", "torchao", "quanto"]
SUPPORTED: tuple[tuple[str, str], ...] = (
    ("int8_dynamic", "torch.ao"),
    ("int8_dynamic", "torchao"),
    ("int8_weight", "torchao"),
    ("int4_weight", "torchao"),
    ("int8_weight", "quanto"),
    ("int4_weight", "quanto"),
)


class QuantizeResult(NamedTuple):
    """The quantized copy and a record (scheme, backend, Linear weight bytes before and after)."""

    model: nn.Module
    record: dict[str, Any]


class _Scan(NamedTuple):
    """What ``quantize`` reads from its input, in one walk over the modules (each field is the figure the named call
    would give)."""

    has_linear: bool  # any(isinstance(m, nn.Linear) for m in model.modules())
    device: torch.device  # the first parameter's device (cpu without parameters)
    dtype: torch.dtype  # the first floating-point parameter's dtype (float32 without one)
    linear_bytes: int  # linear_weight_bytes(model)
    biases: dict[str, torch.Tensor | None]  # each nn.Linear's bias, by module name


def _scan(model: nn.Module) -> _Scan:
    device: torch.device | None = None
    dtype: torch.dtype | None = None
    total = 0
    biases: dict[str, torch.Tensor | None] = {}
    for name, m in model.named_modules():  # the order (and deduplication) of model.modules() / parameters()
        if dtype is None:
            for p in m._parameters.values():
                if p is not None:
                    device = p.device if device is None else device
                    if p.is_floating_point():
                        dtype = p.dtype
                        break
        if isinstance(m, nn.Linear):
            biases[name] = cast(torch.Tensor | None, m.bias)
            total += _linear_layer_bytes(m)
        elif _is_linear_layer(m):
            total += _linear_layer_bytes(m)
    return _Scan(bool(biases), device or torch.device("cpu"), dtype or torch.float32, total, biases)


@functools.cache
def _has_quanto() -> bool:
    import importlib.util

    return importlib.util.find_spec("optimum") is not None and importlib.util.find_spec("optimum.quanto") is not None


def supported_schemes(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> list[tuple[str, str]]:
    """The (scheme, backend) pairs that run here for a model on ``device`` in ``dtype``.

    Args:
        device: where the model lives.
        dtype: the model's floating-point dtype.

    Returns:
        The subset of :data:`SUPPORTED` that runs here.
    """
    dev = torch.device(device)
    return [(scheme, backend) for scheme, backend in SUPPORTED if _runs_here(scheme, backend, dev, dtype)]


def _runs_here(scheme: str, backend: str, dev: torch.device, dtype: torch.dtype) -> bool:
    if backend == "torch.ao" and (
        dev.type != "cpu" or torch.backends.quantized.engine == "none" or dtype != torch.float32
    ):  # quantize_dynamic's int8 Linear takes float32 activations only
        return False
    if scheme == "int4_weight" and backend == "torchao" and (dev.type != "cuda" or dtype != torch.bfloat16):
        return False
    return not (backend == "quanto" and not _has_quanto())


def _torch_ao_linear_bytes(q: nn.Module, original: nn.Module, biases: dict[str, torch.Tensor | None]) -> int:
    """``linear_weight_bytes(q)`` for a ``quantize_dynamic`` result without unpacking its packed int8 weights
    (unpacking copies every weight; it cost 10 % of ``quantize``'s time). ``quantize_dynamic``'s default qint8
    weight observer is per-tensor symmetric: int8 data, one scale and one zero point; the bias stays float32, read
    from the original layer of the same name (``biases``, from :func:`_scan`; looked up in ``original`` for a name
    it lacks). Tested equal to the unpacking count."""
    total = 0
    for name, m in q.named_modules():
        if type(m).__module__.startswith("torch.ao.nn.quantized") and type(m).__name__ == "Linear":
            qlin: Any = m  # torch.ao quantized Linear: in/out_features are ints
            bias = biases[name] if name in biases else cast(nn.Linear, original.get_submodule(name)).bias
            total += qlin.out_features * qlin.in_features + PER_TENSOR_QPARAMS_BYTES
            total += 4 * bias.numel() if bias is not None else 0
        elif isinstance(m, nn.Linear):
            total += sum(_tensor_bytes(t) for t in _module_weights(m))
    return total


def quantize(model: nn.Module, scheme: Scheme = "int8_dynamic", backend: Backend = "torch.ao") -> QuantizeResult:
    """Quantize the Linear layers of a copy of ``model`` (module docstring); the input is not modified.

    Args:
        model: a model with ``nn.Linear`` layers.
        scheme: ``"int8_dynamic"``, ``"int8_weight"`` or ``"int4_weight"``.
        backend: ``"torch.ao"``, ``"torchao"`` or ``"quanto"``.

    Returns:
        The quantized copy and a record (scheme, backend, Linear weight bytes before and after, their ratio).

    Raises:
        ValueError: a pair that does not run for this model here (the message lists those that do), or a model
            without ``nn.Linear``.
        TypeError: ``model`` is not a ``torch.nn.Module``.
    """
    scheme = check_choice("scheme", scheme, ("int8_dynamic", "int8_weight", "int4_weight"))
    backend = check_choice("backend", backend, ("torch.ao", "torchao", "quanto"))
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    scan = _scan(model)  # one walk: the checks below and the bytes before
    if not scan.has_linear:
        found = sorted({type(m).__name__ for m in model.modules() if not list(m.children())})
        raise ValueError(f"model has no nn.Linear to quantize; leaf layer types found: {found}")
    dev, dtype = scan.device, scan.dtype
    if (scheme, backend) == ("int4_weight", "torchao") and (dev.type != "cuda" or dtype != torch.bfloat16):
        here = supported_schemes(dev, dtype)
        raise ValueError(
            f"scheme='int4_weight' with backend='torchao' needs a bfloat16 model on CUDA (torchao's int4 weight-only "
            f"kernels: tinygemm / tile-packed), got a {dtype} model on {dev.type}; for int4 weights on this device "
            f"use backend='quanto'; supported here: {here}"
        )
    if backend == "torch.ao" and dtype != torch.float32:
        here = supported_schemes(dev, dtype)
        raise ValueError(
            f"backend='torch.ao' quantizes float32 models only (quantize_dynamic's int8 Linear takes float32 "
            f"activations), got a {dtype} model; call model.float() first or pick one of the pairs supported here: "
            f"{here}"
        )
    if (scheme, backend) not in SUPPORTED or not _runs_here(scheme, backend, dev, dtype):  # not in supported_schemes
        here = supported_schemes(dev, dtype)
        raise ValueError(
            f"scheme={scheme!r} with backend={backend!r} is not supported for a {dtype} model on {dev.type} "
            f"(quantized engine {torch.backends.quantized.engine!r}); supported here: {here}"
        )
    before = scan.linear_bytes
    q = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*deprecated.*")
        if backend == "torch.ao":
            from torch.ao.quantization import quantize_dynamic

            q = quantize_dynamic(q, {nn.Linear}, dtype=torch.qint8, inplace=True)  # our copy; it calls eval()
        elif backend == "torchao":
            q.eval()
            import torchao.quantization as tq

            cfg = {
                "int8_dynamic": tq.Int8DynamicActivationInt8WeightConfig,
                "int8_weight": tq.Int8WeightOnlyConfig,
                "int4_weight": tq.Int4WeightOnlyConfig,
            }[scheme]()
            tq.quantize_(q, cfg)
        else:
            from optimum import quanto

            q.eval()
            quanto.quantize(q, weights=quanto.qint8 if scheme == "int8_weight" else quanto.qint4)
            quanto.freeze(q)
    after = _torch_ao_linear_bytes(q, model, scan.biases) if backend == "torch.ao" else linear_weight_bytes(q)
    record = {"scheme": scheme, "backend": backend, "linear_bytes_before": before, "linear_bytes_after": after}
    record["size_ratio"] = before / after if after else float("inf")
    return QuantizeResult(q, record)
