"""Triton kernels of the masked CSR SpMM (imported only on a Triton path; the math is in ``spmm.py``).

The forward walks one CSR row per program and skips the feature loads of dropped edges (the kept fraction is the
fraction of ``x`` rows read); the gradient of ``x`` is the same kernel over the transposed structure, reading the
edge values and mask through the transpose's edge order (``eid``) instead of gathered copies; the gradient of the
edge values is a sampled dense-dense product (one dot of ``dout[row]`` and ``x[col]`` per kept edge).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import triton
import triton.language as tl

from icml25_shared.kernels._dispatch import device_context, launch_options


def _spmm_fwd(
    crow_ptr, col_ptr, eid_ptr, val_ptr, keep_ptr, score_ptr, thr_ptr, x_ptr, out_ptr,
    F,
    stride_xn, stride_xf, stride_on, stride_of,
    HAS_EID: tl.constexpr, HAS_KEEP: tl.constexpr, HAS_SCORE: tl.constexpr,
    BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    # one program: out[r, f block] = sum over the kept edges e of row r of val[e] * x[col[e], f block]
    r = tl.program_id(0)
    pid_f = tl.program_id(1)
    e0 = tl.load(crow_ptr + r).to(tl.int64)
    e1 = tl.load(crow_ptr + r + 1).to(tl.int64)
    fs = pid_f * BLOCK_F + tl.arange(0, BLOCK_F)
    fmask = fs < F
    acc = tl.zeros((BLOCK_F,), dtype=tl.float32)
    if HAS_SCORE:
        thr = tl.load(thr_ptr).to(tl.float32)
    for e in range(e0, e1, BLOCK_E):
        es = e + tl.arange(0, BLOCK_E)
        emask = es < e1
        if HAS_EID:
            eid = tl.load(eid_ptr + es, mask=emask, other=0).to(tl.int64)
        else:
            eid = es
        keep = emask
        if HAS_KEEP:
            keep = keep & (tl.load(keep_ptr + eid, mask=emask, other=0) != 0)
        if HAS_SCORE:
            keep = keep & (tl.load(score_ptr + eid, mask=emask, other=0.0).to(tl.float32) >= thr)
        c = tl.load(col_ptr + es, mask=keep, other=0).to(tl.int64)
        v = tl.load(val_ptr + eid, mask=keep, other=0.0).to(tl.float32)
        xv = tl.load(
            x_ptr + c[:, None] * stride_xn + fs[None, :] * stride_xf, mask=keep[:, None] & fmask[None, :], other=0.0
        ).to(tl.float32)
        acc += tl.sum(tl.where(keep[:, None], v[:, None] * xv, 0.0), axis=0)
    tl.store(out_ptr + r.to(tl.int64) * stride_on + fs * stride_of, acc.to(out_ptr.dtype.element_ty), mask=fmask)


def _sddmm(
    row_ptr, col_ptr, keep_ptr, score_ptr, thr_ptr, dout_ptr, x_ptr, dval_ptr,
    NNZ, F,
    stride_dn, stride_df, stride_xn, stride_xf,
    HAS_KEEP: tl.constexpr, HAS_SCORE: tl.constexpr,
    BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    # one program: dval[e] = <dout[row[e]], x[col[e]]> for a block of edges, 0 for dropped ones
    es = tl.program_id(0).to(tl.int64) * BLOCK_E + tl.arange(0, BLOCK_E)
    emask = es < NNZ
    keep = emask
    if HAS_KEEP:
        keep = keep & (tl.load(keep_ptr + es, mask=emask, other=0) != 0)
    if HAS_SCORE:
        thr = tl.load(thr_ptr).to(tl.float32)
        keep = keep & (tl.load(score_ptr + es, mask=emask, other=0.0).to(tl.float32) >= thr)
    r = tl.load(row_ptr + es, mask=keep, other=0).to(tl.int64)
    c = tl.load(col_ptr + es, mask=keep, other=0).to(tl.int64)
    acc = tl.zeros((BLOCK_E,), dtype=tl.float32)
    for f0 in range(0, F, BLOCK_F):
        fs = f0 + tl.arange(0, BLOCK_F)
        m = keep[:, None] & (fs < F)[None, :]
        d = tl.load(dout_ptr + r[:, None] * stride_dn + fs[None, :] * stride_df, mask=m, other=0.0).to(tl.float32)
        xv = tl.load(x_ptr + c[:, None] * stride_xn + fs[None, :] * stride_xf, mask=m, other=0.0).to(tl.float32)
        acc += tl.sum(d * xv, axis=1)
    tl.store(dval_ptr + es, acc.to(dval_ptr.dtype.element_ty), mask=emask)


def _block_f(F: int) -> int:
    return min(128, max(16, triton.next_power_of_2(int(F))))


def _prune(configs, named_args, **kwargs):
    bf = _block_f(named_args["F"])
    return [c for c in configs if c.kwargs["BLOCK_F"] == bf] or configs[:1]


def build(interpret: bool) -> SimpleNamespace:
    """The kernels (autotuned over the edge block and warps when compiled; fixed under the CPU interpreter)."""
    # Any: a launch passes plain Python values for the tl.constexpr parameters, which the kernel signature types
    fwd: Any = triton.jit(_spmm_fwd)
    sddmm: Any = triton.jit(_sddmm)
    if not interpret:
        fwd = triton.autotune(
            [triton.Config({"BLOCK_E": e, "BLOCK_F": f}, num_warps=w) for f in (16, 32, 64, 128)
             for e, w in ((16, 2), (32, 4), (64, 4), (32, 8), (128, 8))],
            key=["F", "HAS_EID", "HAS_KEEP", "HAS_SCORE"],
            prune_configs_by={"early_config_prune": _prune},
        )(fwd)  # fmt: skip
        sddmm = triton.autotune(
            [triton.Config({"BLOCK_E": e, "BLOCK_F": f}, num_warps=w) for f in (16, 32, 64, 128)
             for e, w in ((32, 4), (64, 4), (128, 8))],
            key=["F", "HAS_KEEP", "HAS_SCORE"],
            prune_configs_by={"early_config_prune": _prune},
        )(sddmm)  # fmt: skip

    def spmm(crow, col, eid, val, keep, score, thr, x, out) -> None:
        """``out[r] = sum_{kept e in row r} val[eid_e] x[col_e]`` (``eid``: edge order of ``val``/``keep``/``score``,
        ``None`` for the identity)."""
        n_rows, F = out.shape
        val, keep, score = (t.contiguous() if t is not None else None for t in (val, keep, score))
        fixed = {"BLOCK_E": 16, "BLOCK_F": _block_f(F)} if interpret else {}
        grid = lambda meta: (n_rows, triton.cdiv(F, meta["BLOCK_F"]))  # noqa: E731
        with device_context(x):
            fwd[grid](
                crow, col, eid if eid is not None else col, val,
                keep if keep is not None else val, score if score is not None else val,
                thr if thr is not None else val, x, out,
                F, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                HAS_EID=eid is not None, HAS_KEEP=keep is not None, HAS_SCORE=score is not None,
                **launch_options(), **fixed,
            )  # fmt: skip

    def edge_grad(row, col, keep, score, thr, dout, x, dval) -> None:
        """``dval[e] = <dout[row_e], x[col_e]>`` for kept edges, 0 for dropped ones."""
        nnz, F = dval.shape[0], x.shape[1]
        keep, score = (t.contiguous() if t is not None else None for t in (keep, score))
        fixed = {"BLOCK_E": 16, "BLOCK_F": _block_f(F)} if interpret else {}
        grid = lambda meta: (triton.cdiv(nnz, meta["BLOCK_E"]),)  # noqa: E731
        with device_context(x):
            sddmm[grid](
                row, col, keep if keep is not None else dval, score if score is not None else dval,
                thr if thr is not None else dval, dout, x, dval,
                nnz, F, dout.stride(0), dout.stride(1), x.stride(0), x.stride(1),
                HAS_KEEP=keep is not None, HAS_SCORE=score is not None, **launch_options(), **fixed,
            )  # fmt: skip

    return SimpleNamespace(spmm=spmm, edge_grad=edge_grad)
