"""End-to-end memory of one training step, measured: parameters, gradients, optimizer state, activations, transient.

The paper's claim is about memory ("~50% reduction on total end-to-end memory compared to Adam", Sec. 1 and its
memory figure). :func:`memory_profile` measures it the way a user would see it, for any model, batch and optimizer:

- CUDA: the caching allocator's exact counters (``max_memory_allocated`` over one full step, everything included).
- CPU (Linux): the kernel's peak resident set over one step (``/proc/self/clear_refs`` resets it, ``VmHWM`` reads
  it) above the resident set before the step, with glibc told to serve every block over 64 KiB by ``mmap`` so
  freed buffers leave the resident set at once; parameters and optimizer state are resident before the step and
  are added as their exact tensor bytes. For numbers free of other code's leftovers, call it in a fresh process
  (the package's ``benchmarks/bench_swan_memory.py`` does).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from icml25_shared.bench import peak_memory
from icml25_shared.training import optimizer_state_bytes
from icml25_shared.validate import check_int

__all__ = ["MemoryProfile", "memory_profile"]

_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass(frozen=True)
class MemoryProfile:
    """Bytes of one training step (forward, backward, ``optimizer.step()``, ``zero_grad``).

    ``peak`` is the end-to-end high-water mark: ``parameters + state + step_peak`` on CPU (resident before the
    step, plus the step's own high-water mark above that), the allocator's peak on CUDA. ``activations`` is the
    part of the step's peak reached before ``optimizer.step()`` (activations and gradients), ``transient`` what
    ``optimizer.step()`` itself adds above the gradients.
    """

    parameters: int
    gradients: int
    state: int
    step_peak: int
    activations_and_gradients: int
    transient: int
    peak: int
    device: str
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _status(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise OSError(f"{key} not in /proc/self/status")


@functools.cache
def _glibc() -> Any:
    """The C library's ``malloc_trim``/``mallopt``, or None when it is not glibc (or not found)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


def _trim() -> None:
    """Give free heap memory back to the OS (glibc ``malloc_trim``), so the resident set is live memory only."""
    if _glibc() is not None:
        _glibc().malloc_trim(0)


def _mmap_big_blocks() -> bool:
    """Ask glibc to serve blocks over 64 KiB by mmap (returned to the OS when freed). False when not glibc."""
    return _glibc() is not None and bool(_glibc().mallopt(-3, 65536))  # M_MMAP_THRESHOLD


class _Peak:
    """Peak bytes of a region: the allocator on CUDA, the kernel's peak RSS on Linux, a sampler elsewhere."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.method = "cuda-allocator" if self.cuda else ("rss-hwm" if _CLEAR_REFS.exists() else "rss-sampled")

    def measure(self, fn: Callable[[], Any]) -> int:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            fn()
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.max_memory_allocated(self.device))
        if self.method == "rss-sampled":
            return peak_memory(fn)
        _trim()
        _CLEAR_REFS.write_text("5")
        base = _status("VmRSS")
        fn()
        return _status("VmHWM") - base


def _nbytes(tensors: Iterable[Tensor]) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def memory_profile(
    model: nn.Module,
    batch: Any,
    optimizer: torch.optim.Optimizer | Any,
    *,
    loss_fn: Callable[[nn.Module, Any], Tensor] | None = None,
    warmup: int = 1,
) -> MemoryProfile:
    """Measure one training step of ``model`` on ``batch`` with ``optimizer`` (after ``warmup`` unmeasured steps,
    which allocate the optimizer state and any lazily initialised kernels).

    Args:
        model: the module; its parameters' device is the device measured.
        batch: passed to ``loss_fn``.
        optimizer: any ``torch.optim.Optimizer`` over ``model``'s parameters (or an object with ``step``,
            ``zero_grad(set_to_none=...)`` and a ``state`` mapping, e.g. two optimizers stepped together).
        loss_fn: ``loss_fn(model, batch) -> scalar``; default ``model(**batch).loss`` for a dict (transformers
            models with ``labels``), else ``model(batch).loss``.
        warmup: unmeasured steps first (>= 1 so that the state exists when it is counted).

    Returns:
        A :class:`MemoryProfile`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not all(callable(getattr(optimizer, a, None)) for a in ("step", "zero_grad")) or not hasattr(optimizer, "state"):
        raise TypeError(
            "optimizer must be a torch.optim.Optimizer (or have step, zero_grad and state), "
            f"got {type(optimizer).__name__}"
        )
    warmup = check_int("warmup", warmup, min=1)
    params = list(model.parameters())
    if not params:
        raise ValueError("model has no parameters")
    device = params[0].device
    if loss_fn is None:
        loss_fn = lambda m, b: (m(**b) if isinstance(b, dict) else m(b)).loss  # noqa: E731
    if device.type == "cpu":
        _mmap_big_blocks()
    meter = _Peak(device)

    def backward() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()

    for _ in range(warmup):
        backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    parameters = _nbytes(params)
    state = optimizer_state_bytes(optimizer)
    before = meter.measure(backward)  # activations and gradients (gradients stay allocated)
    gradients = _nbytes(p.grad for p in params if p.grad is not None)
    transient = meter.measure(optimizer.step)
    if meter.cuda:  # allocator peaks include everything resident
        resident = int(torch.cuda.memory_allocated(device))
        peak = max(before, transient)
        return MemoryProfile(
            parameters, gradients, state, peak - parameters - state, before - parameters - state,
            transient - resident, peak, str(device), meter.method,
        )  # fmt: skip
    optimizer.zero_grad(set_to_none=True)
    step_peak = max(before, gradients + transient)
    return MemoryProfile(
        parameters, gradients, state, step_peak, before, transient, parameters + state + step_peak, str(device),
        meter.method,
    )  # fmt: skip
