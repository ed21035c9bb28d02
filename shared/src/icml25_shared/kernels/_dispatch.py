"""What the three kernel modules share: the ``impl`` choice, the lazily built Triton kernels, launch helpers.

Triton is imported only here, and only when a Triton path is taken. ``triton.jit`` reads ``TRITON_INTERPRET`` when a
function is decorated, so the kernels are decorated on first use and cached per interpreter setting: a test that sets
``TRITON_INTERPRET=1`` before its first call gets the CPU interpreter, a CUDA run the compiled kernels.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
from types import SimpleNamespace
from typing import Any

import torch

from icml25_shared.validate import check_choice

__all__ = ["IMPLS", "triton_available", "interpreting", "use_triton", "kernels", "device_context", "TRITON_DTYPES"]

IMPLS = ("auto", "torch", "triton")
"""``"auto"``: the Triton kernel for CUDA tensors of a supported dtype, the torch reference otherwise;
``"torch"``: always the reference; ``"triton"``: always the kernel (CUDA, or CPU under ``TRITON_INTERPRET=1``)."""

TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""Floating dtypes the Triton kernels take (accumulation is always float32)."""


@functools.cache
def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (checked once, without importing it)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET`` set when this is called)."""
    if not triton_available():
        return False
    from triton import knobs

    return bool(knobs.runtime.interpret)


def use_triton(op: str, impl: str, tensors: list[torch.Tensor], *, why_not: str | None = None) -> bool:
    """Resolve ``impl`` for ``op`` over its input ``tensors``: True to run the Triton kernel.

    ``why_not`` is set by the caller when the shapes or dtypes do not qualify for the kernel (a reason in words);
    ``"auto"`` then takes the torch path and ``"triton"`` raises it.
    """
    check_choice("impl", impl, IMPLS)
    if impl == "torch":
        return False
    on_cuda = all(t.is_cuda for t in tensors)
    if impl == "auto":
        return on_cuda and why_not is None and triton_available()
    if not triton_available():
        raise RuntimeError(f"{op}: impl='triton' needs the triton package (pip install triton), which is not installed")
    if not on_cuda and not interpreting():
        devices = sorted({str(t.device) for t in tensors})
        raise ValueError(
            f"{op}: impl='triton' runs on CUDA tensors, or on CPU tensors under TRITON_INTERPRET=1; "
            f"got tensors on {', '.join(devices)}"
        )
    if why_not is not None:
        raise ValueError(f"{op}: impl='triton' cannot run here: {why_not}")
    return True


def dtype_reason(dtype: torch.dtype) -> str | None:
    """None when the Triton kernels take ``dtype``; else the reason in words."""
    if dtype in TRITON_DTYPES:
        return None
    return f"the Triton kernels take float32, float16 or bfloat16, got {dtype}"


def kernels(name: str) -> SimpleNamespace:
    """The jitted kernels of ``icml25_shared.kernels._<name>_triton``, built for the current interpreter setting."""
    return _build(name, interpreting())


@functools.cache
def _build(name: str, interpret: bool) -> SimpleNamespace:
    module = importlib.import_module(f"icml25_shared.kernels._{name}_triton")
    return module.build(interpret)


def device_context(t: torch.Tensor) -> Any:
    """``torch.cuda.device(t.device)`` for CUDA tensors (Triton launches on the current device), else a no-op."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def dot_precision(dtype: torch.dtype) -> str:
    """``tl.dot`` input precision matching torch's matmul: TF32 for float32 only when torch's float32 matmul
    precision is not ``"highest"`` (``torch.set_float32_matmul_precision``)."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"


@functools.cache
def sm_count(device_index: int) -> int:
    """Streaming multiprocessors of a CUDA device (sizes the grids of the scan)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def launch_options(**options: Any) -> dict[str, Any]:
    """Keyword options of a Triton kernel launch (read by Triton's launcher, not parameters of the kernel): floating-
    point fusion on, plus ``options`` (``num_warps``...)."""
    return {"enable_fp_fusion": True, **options}
