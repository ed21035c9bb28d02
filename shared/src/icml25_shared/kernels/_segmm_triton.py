"""Triton kernels of the segmented matmul (imported only on a Triton path; the math is in ``segmm.py``).

Rows are visited in group order through ``perm`` (sorted position -> row), in tiles of ``BLOCK_M`` rows that never
straddle two groups (the SGMV schedule of ``segmm._Schedule.tiles``): a tile is a small dense GEMM against its group's
weight, read through its strides, so the transposed weight of the backward is a view, not a copy.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import triton
import triton.language as tl

from icml25_shared.kernels._dispatch import device_context, dot_precision, launch_options


def _segmm_fwd(
    x_ptr, w_ptr, y_ptr, perm_ptr, tiles_ptr,
    K, N_OUT,
    stride_xn, stride_xk, stride_wg, stride_wk, stride_wn, stride_yn, stride_yo,
    scale,
    HAS_PERM: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    # one program: rows [r0, r1) of one group (a tile of the schedule) x one block of output columns
    tile = tl.program_id(0)
    pid_n = tl.program_id(1)
    grp = tl.load(tiles_ptr + 3 * tile)  # -1: rows without a group (zeros), -2: an unused tile
    r0 = tl.load(tiles_ptr + 3 * tile + 1)
    r1 = tl.load(tiles_ptr + 3 * tile + 2)
    offs = r0 + tl.arange(0, BLOCK_M)
    rmask = offs < r1
    if HAS_PERM:
        rows = tl.load(perm_ptr + offs, mask=rmask, other=0).to(tl.int64)
    else:
        rows = offs.to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N_OUT
    ks = tl.arange(0, BLOCK_K)
    w_base = w_ptr + tl.maximum(grp, 0).to(tl.int64) * stride_wg
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_end = tl.where(grp >= 0, K, 0)
    for k0 in range(0, k_end, BLOCK_K):
        kk = k0 + ks
        kmask = kk < K
        a = tl.load(
            x_ptr + rows[:, None] * stride_xn + kk[None, :] * stride_xk,
            mask=rmask[:, None] & kmask[None, :],
            other=0.0,
        )
        b = tl.load(
            w_base + kk[:, None] * stride_wk + cols[None, :] * stride_wn,
            mask=kmask[:, None] & cmask[None, :],
            other=0.0,
        )
        if UPCAST:  # the CPU interpreter's bf16 dot is wrong; upcast there only
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    acc = acc * scale
    tl.store(
        y_ptr + rows[:, None] * stride_yn + cols[None, :] * stride_yo,
        acc.to(y_ptr.dtype.element_ty),
        mask=rmask[:, None] & cmask[None, :],
    )


def _segmm_dw(
    x_ptr, dy_ptr, dw_ptr, perm_ptr, seg_ptr,
    K, N_OUT,
    stride_xn, stride_xk, stride_dn, stride_do, stride_wg, stride_wk, stride_wn,
    scale,
    HAS_PERM: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # one program: dW[g][k block, n block] = scale * x_g^T dy_g, summed over the rows of group g in BLOCK_R steps
    pid = tl.program_id(0)
    g = tl.program_id(1)
    num_n = tl.cdiv(N_OUT, BLOCK_N)
    pid_k = pid // num_n
    pid_n = pid % num_n
    r0 = tl.load(seg_ptr + g)
    r1 = tl.load(seg_ptr + g + 1)
    kk = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    kmask = kk < K
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N_OUT
    acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    for r in range(r0, r1, BLOCK_R):
        offs = r + tl.arange(0, BLOCK_R)
        rmask = offs < r1
        if HAS_PERM:
            rows = tl.load(perm_ptr + offs, mask=rmask, other=0).to(tl.int64)
        else:
            rows = offs.to(tl.int64)
        xt = tl.load(
            x_ptr + rows[None, :] * stride_xn + kk[:, None] * stride_xk,
            mask=kmask[:, None] & rmask[None, :],
            other=0.0,
        )
        d = tl.load(
            dy_ptr + rows[:, None] * stride_dn + cols[None, :] * stride_do,
            mask=rmask[:, None] & cmask[None, :],
            other=0.0,
        )
        if UPCAST:
            xt = xt.to(tl.float32)
            d = d.to(tl.float32)
        acc = tl.dot(xt, d, acc, input_precision=PRECISION)
    acc = acc * scale
    tl.store(
        dw_ptr + g.to(tl.int64) * stride_wg + kk[:, None] * stride_wk + cols[None, :] * stride_wn,
        acc.to(dw_ptr.dtype.element_ty),
        mask=kmask[:, None] & cmask[None, :],
    )


def _segmm_tiles(
    seg_ptr, tiles_ptr, G, n_tiles,
    BLOCK_M: tl.constexpr, P: tl.constexpr, TB: tl.constexpr,
):  # fmt: skip
    # one program writes the whole schedule (one launch instead of a dozen small torch ops). Segment s = 0 holds the
    # rows without a group (sorted positions [0, seg[0])), segment s = g + 1 group g ([seg[g], seg[g+1]))
    s = tl.arange(0, P)
    smask = s <= G
    ends = tl.load(seg_ptr + s, mask=smask, other=0)
    starts = tl.load(seg_ptr + s - 1, mask=smask & (s >= 1), other=0)
    per = tl.where(smask, (ends - starts + BLOCK_M - 1) // BLOCK_M, 0)  # tiles of each segment
    tile_end = tl.cumsum(per, axis=0)
    for t0 in range(0, n_tiles, TB):
        t = t0 + tl.arange(0, TB)
        # the segments wholly before tile t form a prefix; tile t is in the next one (G + 1: past the last tile)
        before = (tile_end[None, :] <= t[:, None]) & smask[None, :]
        seg_t = tl.sum(before.to(tl.int32), axis=1)
        tiles_before = tl.sum(tl.where(before, per[None, :], 0), axis=1)
        valid = seg_t <= G
        # tl.sum is typed as returning a tuple in triton's stubs; in a kernel it is a tensor
        first = tl.load(seg_ptr + seg_t - 1, mask=valid & (seg_t >= 1), other=0) + (t - tiles_before) * BLOCK_M  # pyright: ignore[reportOperatorIssue]
        end = tl.load(seg_ptr + seg_t, mask=valid, other=0)
        tmask = t < n_tiles
        tl.store(tiles_ptr + 3 * t, tl.where(valid, seg_t - 1, -2), mask=tmask)  # pyright: ignore[reportOperatorIssue]
        tl.store(tiles_ptr + 3 * t + 1, tl.where(valid, first, 0), mask=tmask)
        tl.store(tiles_ptr + 3 * t + 2, tl.where(valid, end, 0), mask=tmask)


def _pow2(n: int) -> int:
    return max(16, triton.next_power_of_2(int(n)))


# (BLOCK_N, BLOCK_K, warps, stages); each is clamped to the problem (16 <= block <= next power of 2 of the dim)
_FWD = [(64, 32, 4, 4), (128, 32, 4, 4), (128, 64, 8, 3), (64, 64, 4, 3), (256, 32, 8, 3), (32, 128, 4, 3),
        (16, 256, 4, 3), (16, 128, 4, 4)]  # fmt: skip
# (BLOCK_K, BLOCK_N, BLOCK_R, warps, stages)
_DW = [(64, 64, 32, 4, 3), (64, 128, 32, 8, 3), (128, 64, 32, 8, 3), (32, 32, 64, 4, 3), (128, 16, 64, 4, 3),
       (16, 128, 64, 4, 3)]  # fmt: skip


def _clamped(configs: list[triton.Config], caps: dict[str, int]) -> list[triton.Config]:
    out, seen = [], set()
    for c in configs:
        kw = {k: min(v, caps[k]) if k in caps else v for k, v in c.kwargs.items()}
        key = (tuple(sorted(kw.items())), c.num_warps, c.num_stages)
        if key not in seen:
            seen.add(key)
            out.append(triton.Config(kw, num_warps=c.num_warps, num_stages=c.num_stages))
    return out


def _prune_fwd(configs, named_args, **kwargs):
    return _clamped(configs, {"BLOCK_N": _pow2(named_args["N_OUT"]), "BLOCK_K": _pow2(named_args["K"])})


def _prune_dw(configs, named_args, **kwargs):
    return _clamped(configs, {"BLOCK_N": _pow2(named_args["N_OUT"]), "BLOCK_K": _pow2(named_args["K"])})


def build(interpret: bool) -> SimpleNamespace:
    """The kernels (autotuned when compiled; one small fixed configuration under the CPU interpreter)."""
    # Any: a launch passes plain Python values for the tl.constexpr parameters, which the kernel signature types
    fwd: Any = triton.jit(_segmm_fwd)
    dw: Any = triton.jit(_segmm_dw)
    tiles_kernel: Any = triton.jit(_segmm_tiles)
    if not interpret:
        fwd = triton.autotune(
            [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s) for n, k, w, s in _FWD],
            key=["K", "N_OUT", "BLOCK_M", "HAS_PERM"],
            prune_configs_by={"early_config_prune": _prune_fwd},
        )(fwd)
        dw = triton.autotune(
            [
                triton.Config({"BLOCK_K": k, "BLOCK_N": n, "BLOCK_R": r}, num_warps=w, num_stages=s)
                for k, n, r, w, s in _DW
            ],
            key=["K", "N_OUT", "HAS_PERM"],
            prune_configs_by={"early_config_prune": _prune_dw},
        )(dw)

    def forward(x, w, y, perm, tiles, block_m: int, scale: float) -> None:
        """``y[rows of tile] = scale * x[rows] @ w[group of tile]`` for every tile of the schedule."""
        K, n_out = x.shape[1], w.shape[2]
        fixed = {"BLOCK_N": min(32, _pow2(n_out)), "BLOCK_K": min(32, _pow2(K))} if interpret else {}
        grid = lambda meta: (tiles.shape[0], triton.cdiv(n_out, meta["BLOCK_N"]))  # noqa: E731
        with device_context(x):
            fwd[grid](
                x, w, y, perm if perm is not None else tiles, tiles, K, n_out,
                x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2), y.stride(0), y.stride(1),
                float(scale),
                HAS_PERM=perm is not None, UPCAST=interpret and x.dtype == torch.bfloat16,
                PRECISION=dot_precision(x.dtype), BLOCK_M=block_m, **launch_options(), **fixed,
            )  # fmt: skip

    def weight_grad(x, dy, dw_out, perm, seg, scale: float) -> None:
        """``dw_out[g] = scale * x[rows of g]^T dy[rows of g]`` for every group (``seg``: group starts, sorted)."""
        K, n_out, G = x.shape[1], dy.shape[1], dw_out.shape[0]
        fixed = {"BLOCK_K": min(32, _pow2(K)), "BLOCK_N": min(32, _pow2(n_out)), "BLOCK_R": 16} if interpret else {}
        grid = lambda meta: (triton.cdiv(K, meta["BLOCK_K"]) * triton.cdiv(n_out, meta["BLOCK_N"]), G)  # noqa: E731
        with device_context(x):
            dw[grid](
                x, dy, dw_out, perm if perm is not None else seg, seg, K, n_out,
                x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
                dw_out.stride(0), dw_out.stride(1), dw_out.stride(2),
                float(scale),
                HAS_PERM=perm is not None, UPCAST=interpret and x.dtype == torch.bfloat16,
                PRECISION=dot_precision(x.dtype), **launch_options(), **fixed,
            )  # fmt: skip

    def tiles(seg, n_tiles: int, block_m: int):
        """The ``[n_tiles, 3]`` schedule ``(group, first, end)`` from the group starts ``seg`` (see
        ``segmm._Schedule.tiles``)."""
        G = seg.shape[0] - 1
        out = torch.empty(n_tiles, 3, dtype=torch.int64, device=seg.device)
        P = triton.next_power_of_2(G + 1)
        with device_context(seg):
            tiles_kernel[(1,)](seg, out, G, n_tiles, BLOCK_M=block_m, P=P, TB=max(16, min(128, 8192 // P)),
                               **launch_options(num_warps=4))  # fmt: skip
        return out

    return SimpleNamespace(forward=forward, weight_grad=weight_grad, tiles=tiles)
