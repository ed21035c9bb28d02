"""Triton kernel of the decayed linear scan (imported only on a Triton path; the math is in ``scan.py``).

One program owns ``BLOCK_M`` independent columns and walks time; with few columns the time axis is cut into chunks
(a chunk's end state is an affine map of its start state, ``s -> P s + e``): pass 1 computes each chunk's ``(P, e)``
from a zero start, pass 2 scans those over the chunks, pass 3 reruns every chunk from its true start and stores.
The reverse direction (the backward) processes time from the end with the decay of the following step, and can
fuse ``dλ_t = g_t h_{t-1}`` into its stores.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import triton
import triton.language as tl

from icml25_shared.kernels._dispatch import device_context, launch_options, sm_count


def _scan(
    x_ptr, lam_ptr, out_ptr, init_ptr, carry_ptr, hprev_ptr, h0_ptr, dlam_ptr, end_ptr, prod_ptr,
    T, M, CHUNK,
    stride_xt, stride_xm, stride_lt, stride_lm,
    REVERSE: tl.constexpr, HAS_INIT: tl.constexpr, HAS_CARRY: tl.constexpr, SUMMARY: tl.constexpr,
    STORE_DLAM: tl.constexpr, HAS_H0: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    # forward: s_t = λ_t s_{t-1} + x_t over t in this chunk; reverse: s_t = λ_{t+1} s_{t+1} + x_t (λ_T = 0)
    pid_m = tl.program_id(0)
    c = tl.program_id(1)  # the chunk, in processing order
    ms = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mmask = ms < M
    ms64 = ms.to(tl.int64)
    # masks that depend on a scalar condition are written `ms < where(cond, M, 0)`: Triton 3.9's CPU interpreter
    # rejects `block_mask & scalar_bool` as a load mask
    if REVERSE:
        t_hi = T - c * CHUNK
        t_lo = tl.maximum(t_hi - CHUNK, 0)
    else:
        t_lo = c * CHUNK
        t_hi = tl.minimum(t_lo + CHUNK, T)
    state = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if not SUMMARY:
        if HAS_INIT:
            state += tl.load(init_ptr + ms64, mask=ms < tl.where(c == 0, M, 0), other=0.0).to(tl.float32)
        if HAS_CARRY:
            state += tl.load(carry_ptr + (c - 1).to(tl.int64) * M + ms64, mask=ms < tl.where(c > 0, M, 0), other=0.0)
    prod = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)
    for i in range(0, t_hi - t_lo):
        if REVERSE:
            t = t_hi - 1 - i
            td = t + 1
        else:
            t = t_lo + i
            td = t
        t64 = t.to(tl.int64)
        xv = tl.load(x_ptr + t64 * stride_xt + ms64 * stride_xm, mask=mmask, other=0.0).to(tl.float32)
        lam = tl.load(
            lam_ptr + td.to(tl.int64) * stride_lt + ms64 * stride_lm, mask=ms < tl.where(td < T, M, 0), other=0.0
        ).to(tl.float32)
        state = lam * state + xv
        if SUMMARY:
            prod = prod * lam
        else:
            tl.store(out_ptr + t64 * M + ms64, state.to(out_ptr.dtype.element_ty), mask=mmask)
            if STORE_DLAM:  # dλ_t = g_t h_{t-1} (h_{-1} = h0 or 0)
                hp = tl.load(hprev_ptr + (t64 - 1) * M + ms64, mask=ms < tl.where(t > 0, M, 0), other=0.0)
                hp = hp.to(tl.float32)
                if HAS_H0:
                    hp += tl.load(h0_ptr + ms64, mask=ms < tl.where(t == 0, M, 0), other=0.0).to(tl.float32)
                tl.store(dlam_ptr + t64 * M + ms64, (state * hp).to(dlam_ptr.dtype.element_ty), mask=mmask)
    if SUMMARY:
        tl.store(end_ptr + c.to(tl.int64) * M + ms64, state, mask=mmask)
        tl.store(prod_ptr + c.to(tl.int64) * M + ms64, prod, mask=mmask)


def build(interpret: bool) -> SimpleNamespace:
    """The scan; block sizes are chosen per call (chunking depends on them, so they are not autotuned)."""
    # Any: a launch passes plain Python values for the tl.constexpr parameters, which the kernel signature types
    kernel: Any = triton.jit(_scan)

    def blocks(x: torch.Tensor, chunk: int | None) -> tuple[int, int, int]:
        """``(BLOCK_M, warps, chunk)``: 4 columns per thread (16-byte loads) when there are enough columns, and
        chunks over time until about 8 programs per multiprocessor are in flight (latency hiding)."""
        T, M = x.shape
        if interpret:
            return min(64, max(16, triton.next_power_of_2(M))), 1, chunk or T
        block = 512 if M >= 512 * 64 else (256 if M >= 256 * 32 else 128)
        if chunk is None:
            target = 8 * sm_count(x.device.index if x.device.index is not None else torch.cuda.current_device())
            programs = triton.cdiv(M, block)
            n_chunks = 1 if programs >= target or T < 64 else min(triton.cdiv(target, programs), T // 32)
            chunk = triton.cdiv(T, max(1, n_chunks))
        return block, 4, chunk

    def launch(grid, x, lam, out, T, M, chunk, warps, block, *, init=None, carry=None, hprev=None, h0=None,
               dlam=None, end=None, prod=None, reverse=False, summary=False):  # fmt: skip
        dummy = out
        kernel[grid](
            x, lam, out, init if init is not None else dummy, carry if carry is not None else dummy,
            hprev if hprev is not None else dummy, h0 if h0 is not None else dummy,
            dlam if dlam is not None else dummy, end if end is not None else dummy,
            prod if prod is not None else dummy,
            T, M, chunk, x.stride(0), x.stride(1), lam.stride(0), lam.stride(1),
            REVERSE=reverse, HAS_INIT=init is not None, HAS_CARRY=carry is not None, SUMMARY=summary,
            STORE_DLAM=dlam is not None, HAS_H0=h0 is not None, BLOCK_M=block, **launch_options(num_warps=warps),
        )  # fmt: skip

    def scan(x, lam, out, *, init=None, reverse=False, hprev=None, h0=None, dlam=None, chunk=None) -> None:
        """``out[t] = lam[t] out[t-1] + x[t]`` (``out[-1] = init``), or the reverse recurrence
        ``out[t] = lam[t+1] out[t+1] + x[t]``; with ``dlam``, also ``dlam[t] = out[t] * hprev[t-1]`` (``h0`` at 0).
        ``x``, ``lam``: ``(T, M)`` any strides; ``out``, ``dlam``, ``hprev``: contiguous ``(T, M)``; ``init``,
        ``h0``: contiguous ``(M,)``."""
        T, M = x.shape
        block, warps, chunk = blocks(x, chunk)
        n_chunks = triton.cdiv(T, chunk)
        nmb = triton.cdiv(M, block)
        with device_context(x):
            if n_chunks == 1:
                launch((nmb, 1), x, lam, out, T, M, T, warps, block, init=init, hprev=hprev, h0=h0, dlam=dlam,
                       reverse=reverse)  # fmt: skip
                return
            end = torch.empty(n_chunks, M, dtype=torch.float32, device=x.device)
            prod = torch.empty_like(end)
            launch((nmb, n_chunks), x, lam, out, T, M, chunk, warps, block, end=end, prod=prod, reverse=reverse,
                   summary=True)  # fmt: skip
            # the chunks' start states: the same recurrence over the chunk summaries (in processing order)
            starts = torch.empty_like(end)
            launch((nmb, 1), end, prod, starts, n_chunks, M, n_chunks, warps, block, init=init)
            launch((nmb, n_chunks), x, lam, out, T, M, chunk, warps, block, init=init, carry=starts, hprev=hprev,
                   h0=h0, dlam=dlam, reverse=reverse)  # fmt: skip

    return SimpleNamespace(scan=scan)
