"""Device and dtype selection.

Used by every torch package (timebase, bslora, unifews, fsl_sage, fpt_snn, swan, ...): code runs on CUDA when
present, and ``ICML25_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``) overrides the automatic choice.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["get_device", "resolve_dtype", "default_float_dtype", "synchronize", "torch_threads", "worker_count"]

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float64": "float64",
    "fp64": "float64",
    "double": "float64",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


def get_device(prefer: str | torch.device | None = None) -> torch.device:
    """Return the device to run on.

    Order: ``prefer`` when given, then the ``ICML25_DEVICE`` environment variable, then CUDA, then Apple MPS,
    then CPU. Asking for a device that is not available raises a ``RuntimeError`` that says so.
    """
    import torch

    choice = prefer if prefer is not None else os.environ.get("ICML25_DEVICE") or None
    if choice is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(choice)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'cpu', 'cuda[:i]' or 'mps', got {choice!r}") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {choice!r} was requested but CUDA is not available on this machine")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise RuntimeError(f"device {choice!r} was requested but MPS is not available on this machine")
    return dev


def resolve_dtype(dtype: Any) -> torch.dtype:
    """Turn ``"bf16"``, ``"float32"``, ``torch.float16`` ... into a ``torch.dtype`` (clear error otherwise)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return getattr(torch, _DTYPES[dtype.lower()])
    raise ValueError(f"dtype must be a torch.dtype or one of {sorted(_DTYPES)}, got {dtype!r}")


def default_float_dtype(device: torch.device | str) -> torch.dtype:
    """The reduced-precision dtype worth using on ``device``: bf16 on CUDA with bf16 support, else float32."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued kernels on ``device`` (no-op on CPU); needed before reading a clock."""
    import torch

    dev = torch.device(device) if device is not None else None
    if (dev is None or dev.type == "cuda") and torch.cuda.is_available():
        torch.cuda.synchronize(dev)
    elif dev is not None and dev.type == "mps":
        torch.mps.synchronize()


@contextlib.contextmanager
def torch_threads(n: int | None = 1) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads and restore the previous count afterwards (also on error);
    ``n=None`` leaves torch's setting alone (an estimator's ``n_threads=None``).

    The packages' models are tiny: on a shared 2-core machine two OpenMP threads spin-wait far longer than they
    compute, so reproductions, benchmarks and test fits run on one thread. Usable as a decorator too.
    """
    import torch

    from icml25_shared.validate import check_int

    n = check_int("n", n, min=1, allow_none=True)  # numpy integers too (a validated hyper-parameter may be one)
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def worker_count(default: int | None = None) -> int:
    """How many worker processes a reproduction or benchmark may fan out to.

    ``ICML25_WORKERS`` when set (the ``icml25`` command sets it to cores // reproductions running at once, so
    that ``reproduce --all -j 2`` on 2 cores never runs four busy processes), else ``default``, else the usable
    cores. Always at least 1.
    """
    env = os.environ.get("ICML25_WORKERS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"ICML25_WORKERS must be a positive int, got {env!r}") from None
        if n < 1:
            raise ValueError(f"ICML25_WORKERS must be a positive int, got {env!r}")
        return n
    if default is not None:
        return max(1, int(default))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores)
