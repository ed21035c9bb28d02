r"""Decayed linear scan: the first-order linear recurrence over time, for every other index at once.

.. math::

    h_t = \lambda_t \odot h_{t-1} + x_t \qquad (t = 0..T-1,\ h_{-1} = h_0 \text{ or } 0)

with ``x`` time-first ``[T, *]`` (spikingjelly's layout) and ``λ`` per step and element, or broadcast from any
shape (a scalar leak, one per neuron, one per step). It is the membrane of a LIF neuron between resets, the
``Λ y`` product of the fixed-point (FPT) form of a LIF layer, an exponential moving average, a linear RNN.

Backward (a reverse scan): with :math:`g_t = \partial L / \partial h_t` accumulated as
:math:`g_t = \bar g_t + \lambda_{t+1} \odot g_{t+1}` (:math:`\bar g` the incoming gradient),
:math:`\partial x_t = g_t`, :math:`\partial \lambda_t = g_t \odot h_{t-1}` and
:math:`\partial h_0 = \lambda_0 \odot g_0`.

The Triton kernel is parallel over the non-time indices and walks time in float32; with few columns it also cuts
time into chunks (each chunk's effect on its start state is affine, so the chunks are joined by a short scan over
their summaries). The torch reference is the sequential loop.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from icml25_shared.kernels._dispatch import TRITON_DTYPES, dtype_reason, kernels, use_triton
from icml25_shared.validate import check_float, check_int, check_tensor

__all__ = ["linear_scan", "linear_scan_reference", "LinearScan"]


def _acc_dtype(*dtypes: torch.dtype) -> torch.dtype:
    out = torch.float32
    for d in dtypes:
        out = torch.promote_types(out, d)
    return out


def _decay_tensor(decay: float | Tensor, x: Tensor) -> Tensor:
    if isinstance(decay, Tensor):
        return decay
    return torch.tensor(float(decay), dtype=_acc_dtype(x.dtype), device=x.device)


# ------------------------------------------------------------------------------------------------------------------
# the definition
# ------------------------------------------------------------------------------------------------------------------
def linear_scan_reference(x: Tensor, decay: float | Tensor, h0: Tensor | None = None) -> Tensor:
    """``h[t] = decay[t] * h[t-1] + x[t]`` one step after the other (in float32 or wider, returned in ``x``'s
    dtype). Plain torch, differentiable by autograd; the test oracle of :func:`linear_scan`."""
    lam = torch.broadcast_to(_decay_tensor(decay, x), x.shape)
    acc = _acc_dtype(x.dtype, lam.dtype)
    h = torch.zeros(x.shape[1:], dtype=acc, device=x.device) if h0 is None else h0.to(acc)
    hs = []
    for t in range(x.shape[0]):
        h = lam[t].to(acc) * h + x[t].to(acc)
        hs.append(h)
    if not hs:
        return x.new_zeros(x.shape)
    return torch.stack(hs).to(x.dtype)


def _torch_scan(x: Tensor, lam: Tensor, init: Tensor | None, reverse: bool) -> Tensor:
    """The loop on ``(T, M)`` views; ``reverse``: ``s_t = lam[t+1] s_{t+1} + x_t`` from the end."""
    T, M = x.shape
    acc = _acc_dtype(x.dtype, lam.dtype)
    out = torch.empty(T, M, dtype=x.dtype, device=x.device)
    s = torch.zeros(M, dtype=acc, device=x.device) if init is None else init.to(acc)
    steps = range(T - 1, -1, -1) if reverse else range(T)
    for t in steps:
        if reverse:
            s = x[t].to(acc) + (lam[t + 1].to(acc) * s if t + 1 < T else 0.0)
        else:
            s = lam[t].to(acc) * s + x[t].to(acc)
        out[t] = s
    return out


class LinearScan(torch.autograd.Function):
    """``h = scan(x, λ, h0)`` on ``(T, M)`` views with its reverse-scan backward, on the Triton kernel or in torch.
    ``apply(x, decay, h0, chunk_size, use_triton)`` (``decay`` already broadcast to ``x``'s shape, ``h0`` ``(M,)`` or
    ``None``); call :func:`linear_scan` rather than this directly."""

    @staticmethod
    def forward(ctx, x, lam, h0, chunk, triton):  # type: ignore[override]
        T, M = x.shape
        if triton:
            h = torch.empty(T, M, dtype=x.dtype, device=x.device)
            if h.numel():
                init = None if h0 is None else h0.to(torch.float32).contiguous()
                kernels("scan").scan(x, lam, h, init=init, chunk=chunk)
        else:
            h = _torch_scan(x, lam, h0, reverse=False)
        need_h = ctx.needs_input_grad[1]
        ctx.save_for_backward(lam, h if need_h else None, h0 if need_h else None)
        ctx.chunk, ctx.triton, ctx.x_dtype = chunk, triton, x.dtype
        ctx.h0_dtype = None if h0 is None else h0.dtype
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, dh):  # type: ignore[override]
        lam, h, h0 = ctx.saved_tensors
        T, M = dh.shape
        want_lam = ctx.needs_input_grad[1]
        dlam = None
        if ctx.triton:
            g = torch.empty(T, M, dtype=ctx.x_dtype, device=dh.device)
            dlam = torch.empty(T, M, dtype=lam.dtype, device=dh.device) if want_lam else None
            if g.numel():
                h0c = None if h0 is None or not want_lam else h0.to(torch.float32).contiguous()
                kernels("scan").scan(
                    dh, lam, g, reverse=True, hprev=h if want_lam else None, h0=h0c, dlam=dlam, chunk=ctx.chunk
                )
        else:
            g = _torch_scan(dh, lam, None, reverse=True)
            if want_lam:  # dλ_t = g_t h_{t-1}, h_{-1} = h0 (or 0)
                acc = _acc_dtype(g.dtype, h.dtype)
                first = torch.zeros(1, M, dtype=acc, device=h.device) if h0 is None else h0.to(acc).view(1, M)
                prev = torch.cat([first, h[:-1].to(acc)])
                dlam = (g.to(acc) * prev).to(lam.dtype)
        dh0 = None
        if ctx.needs_input_grad[2]:
            if T == 0:
                dh0 = torch.zeros(M, dtype=ctx.h0_dtype, device=g.device)
            else:
                acc = _acc_dtype(lam.dtype, g.dtype)
                dh0 = (lam[0].to(acc) * g[0].to(acc)).to(ctx.h0_dtype)
        return g if ctx.needs_input_grad[0] else None, dlam, dh0, None, None


def linear_scan(
    x: Tensor,
    decay: float | Tensor,
    h0: Tensor | None = None,
    *,
    chunk_size: int | None = None,
    impl: str = "auto",
) -> Tensor:
    """All states ``h[t] = decay[t] * h[t-1] + x[t]`` of the recurrence over the first axis of ``x``.

    Args:
        x: ``[T, *]`` floating, time first, any strides.
        decay: λ: a float, or a floating tensor broadcastable to ``x`` (``()`` a learnable leak, ``x.shape[1:]`` one
            per element, ``[T, 1, ...]`` one per step, ``x.shape`` one per step and element); differentiable.
        h0: ``x.shape[1:]``, the state before step 0 (default 0); differentiable.
        chunk_size: Triton only: time steps per chunk (``None``: chosen from the shape; ``T``: no chunking).
        impl: ``"auto"`` (Triton for CUDA float32/float16/bfloat16 tensors, torch otherwise), ``"torch"`` or
            ``"triton"``.

    Returns:
        ``h`` of ``x``'s shape and dtype (accumulated in float32, or float64 for float64 inputs).
    """
    check_tensor("x", x, dtype="floating")
    if x.dim() < 1:
        raise ValueError("x must have a time axis first, [T, *], got a 0-d tensor")
    if isinstance(decay, Tensor):
        check_tensor("decay", decay, dtype="floating", device=x.device)
        try:
            ok = torch.broadcast_shapes(decay.shape, x.shape) == x.shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"decay must be broadcastable to x's shape {tuple(x.shape)}, got shape {tuple(decay.shape)}"
            )
    else:
        decay = check_float("decay", decay)
    if h0 is not None:
        check_tensor("h0", h0, shape=tuple(x.shape[1:]), dtype="floating", device=x.device)
    check_int("chunk_size", chunk_size, min=1, allow_none=True)
    lam = _decay_tensor(decay, x)
    why_not = dtype_reason(x.dtype)
    if why_not is None and lam.dtype not in TRITON_DTYPES:
        why_not = f"the Triton kernel takes float32, float16 or bfloat16 decays, got {lam.dtype}"
    triton = use_triton("linear_scan", impl, [x, lam], why_not=why_not)
    T, M = x.shape[0], math.prod(x.shape[1:])
    x2 = x.reshape(T, M)
    lam2 = lam.expand(x.shape).reshape(T, M)
    h02 = None if h0 is None else h0.reshape(M)
    return LinearScan.apply(x2, lam2, h02, chunk_size, triton).view(x.shape)
