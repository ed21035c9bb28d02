"""The layers' edge rule and kept-edge selection in one compiled pass (numba; optional).

A pruning forward of a layer needs, for the message matrix ``Z``: the scores ``s_e = |w_e| · ‖Z[src_e]‖₂``, the
mask ``keep_e = (s_e >= θ ∨ is_loop_e) ∧ active_e``, the kept CSR in target order (the forward SpMM) and, when a
gradient flows through torch's CSR kernel, the kept CSR in source order (its backward SpMM). In torch these are about
ten passes over the edges and two selections; :func:`scored_kept_pair` does them in two passes over the cached CSR
orders, given the node norms ``‖Z[v]‖₂``. The score of an edge is the same product in the same dtype as
:func:`unifews.nn._scores` (one rounding of ``|w_e| · ‖Z[src_e]‖₂``), compared with ``θ`` cast to that dtype, as
``torch.ge`` does: the mask is equal bit for bit.

:func:`select_csr` is the selection alone (a given mask: locks, ``prune_inc``, a reused mask) and the source-order
half of :func:`scored_kept_pair`; :func:`spmm_gather` / :func:`spmm_scatter` are the layers' SpMMs on one thread.

:data:`AVAILABLE` is False without numba; :class:`unifews.graph.LayerGraph` then runs the torch passes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # pragma: no cover - exercised where numba is installed
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover
    numba = None
    AVAILABLE = False

__all__ = ["AVAILABLE", "scored_kept_pair", "select_csr", "spmm_gather", "spmm_scatter"]


def _scored_kept_pair_py(nrm, theta, fptr, fcol, fvals, fperm, loop, active, bptr, bcol, bvals, bperm):
    # ``fperm``, ``active`` and the source order may be None: numba compiles one specialisation per combination and
    # prunes the dead branches (a runtime flag would stay in the loop). One flat loop per order (a loop per CSR row
    # costs more than its few entries); the row pointer is gathered afterwards from the running count. The outputs
    # are allocated here (no Python allocation per call).
    m = fcol.shape[0]
    keep = np.empty(m, dtype=np.bool_)
    optr = np.empty_like(fptr)
    ocol = np.empty_like(fcol)
    ovals = np.empty_like(fvals)
    pref = np.empty(m + 1, dtype=fptr.dtype)
    k = 0
    for p in range(m):  # target order: score, rule, forward selection
        if fperm is None:
            e = p
        else:
            e = fperm[p]
        c = fcol[p]
        v = fvals[p]
        kk = abs(v) * nrm[c] >= theta or loop[e]
        if active is not None:
            kk = kk and active[e]
        keep[e] = kk
        pref[p] = k
        if kk:
            ocol[k] = c
            ovals[k] = v
            k += 1
    pref[m] = k
    for r in range(fptr.shape[0]):
        optr[r] = pref[fptr[r]]
    if bperm is None:
        return k, keep, optr, ocol[:k], ovals[:k], optr, ocol[:0], ovals[:0]
    tptr = np.empty_like(bptr)
    tcol = np.empty_like(bcol)
    tvals = np.empty_like(bvals)
    _select(bptr, bcol, bvals, bperm, keep, tptr, tcol, tvals)  # source order: the backward's transposed selection
    return k, keep, optr, ocol[:k], ovals[:k], tptr, tcol[:k], tvals[:k]


def _select_py(ptr, col, vals, perm, mask, ptr_out, col_out, vals_out):
    # the entries p of a CSR order with mask[perm[p]] (perm None: mask[p]), in order; one flat loop over the entries
    # (a loop per CSR row costs more than its few entries), the row pointer gathered afterwards from the running count
    m = col.shape[0]
    pref = np.empty(m + 1, dtype=ptr.dtype)
    k = 0
    for p in range(m):
        pref[p] = k
        if perm is None:
            e = p
        else:
            e = perm[p]
        if mask[e]:
            col_out[k] = col[p]
            vals_out[k] = vals[p]
            k += 1
    pref[m] = k
    for r in range(ptr.shape[0]):
        ptr_out[r] = pref[ptr[r]]
    return k


def _gather_py(ptr, col, vals, z, out):
    # out[r] = sum over the row's entries of vals[p] * z[col[p]], in entry order (as MKL's CSR SpMM sums)
    n = ptr.shape[0] - 1
    f = z.shape[1]
    for r in range(n):
        for j in range(f):
            out[r, j] = 0
        for p in range(ptr[r], ptr[r + 1]):
            c = col[p]
            v = vals[p]
            for j in range(f):
                out[r, j] += v * z[c, j]


def _scatter_py(ptr, col, vals, g, out):
    # out[col[p]] += vals[p] * g[r]: the transposed product from the same CSR, no transposed copy
    n = ptr.shape[0] - 1
    f = g.shape[1]
    for r in range(n):
        for p in range(ptr[r], ptr[r + 1]):
            c = col[p]
            v = vals[p]
            for j in range(f):
                out[c, j] += v * g[r, j]


_kernel: Any = None
_select: Any = None
_gather: Any = None
_scatter: Any = None
if numba is not None:
    _select = numba.njit(cache=True, nogil=True)(_select_py)
    _kernel = numba.njit(cache=True, nogil=True)(_scored_kept_pair_py)
    _gather = numba.njit(cache=True, nogil=True)(_gather_py)
    _scatter = numba.njit(cache=True, nogil=True)(_scatter_py)


def select_csr(ptr, col, vals, perm, mask):
    """The kept part of a CSR order in one pass: ``(ptr, col, vals)`` over the entries ``p`` with
    ``mask[perm[p]]`` (``perm`` None: ``mask[p]``), in order. CPU tensors; ``mask`` bool over the original edges."""
    import torch

    m = col.numel()
    ptr_out = torch.empty_like(ptr)
    col_out = torch.empty(m, dtype=col.dtype)
    vals_out = torch.empty(m, dtype=vals.dtype)
    k = _select(
        ptr.numpy(), col.numpy(), vals.numpy(), None if perm is None else perm.numpy(), mask.numpy(),
        ptr_out.numpy(), col_out.numpy(), vals_out.numpy(),
    )  # fmt: skip
    return ptr_out, col_out[:k], vals_out[:k]


def spmm_gather(ptr, col, vals, z, out) -> None:
    """``out = A @ z`` for the CSR ``A = (ptr, col, vals)`` (numpy arrays; ``z``, ``out`` C-contiguous 2-D)."""
    _gather(ptr, col, vals, z, out)


def spmm_scatter(ptr, col, vals, g, out) -> None:
    """``out += Aᵀ @ g`` for the CSR ``A = (ptr, col, vals)``, read row by row (``out`` zeroed by the caller)."""
    _scatter(ptr, col, vals, g, out)


def scored_kept_pair(nrm, theta, fwd, loop, active, bwd):
    """``(keep, k, (ptr, col, vals), (ptr, col, vals) | None)`` for one pruning forward, as numpy arrays.

    ``nrm`` [n] node norms (the dtype of the scores), ``theta`` the threshold (a float, cast to that dtype),
    ``fwd = (perm | None, ptr, col, vals)`` the target-sorted CSR order with its values, ``loop`` / ``active`` bool
    over the edges (``active`` None: all), ``bwd = (perm, ptr, col, vals)`` the source-sorted order or None (no
    backward selection). Contiguous numpy arrays (views of CPU tensors). ``|vals|`` times the norm is compared with
    ``theta`` in ``nrm``'s dtype, as ``torch.ge`` compares a float32 score with a Python float.
    """
    fperm, fptr, fcol, fvals = fwd
    bperm, bptr, bcol, bvals = (None, None, None, None) if bwd is None else bwd
    k, keep, optr, ocol, ovals, tptr, tcol, tvals = _kernel(
        nrm, nrm.dtype.type(theta), fptr, fcol, fvals, fperm, loop, active, bptr, bcol, bvals, bperm
    )
    return keep, int(k), (optr, ocol, ovals), None if bwd is None else (tptr, tcol, tvals)
