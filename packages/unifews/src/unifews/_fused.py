"""The pruned hop of the decoupled propagation in one pass (paper Algorithm 1, entry mode), compiled with numba.

Sources run one by one, each in one of two ways (the result is the same):

* a sparse row (fewer than ``K / SPARSE_ROW`` non-zero entries, as bag-of-words features before the first hop):
  entry by entry, each non-zero entry ``(v, k)`` walking ``v``'s neighbour list (sorted by target degree, message
  magnitude descending) only as far as its pushes fire -- work ∝ the executed pushes plus one visit per entry;
* a denser row: as whole-row vector passes -- the row's thresholds (and hashed uniforms) in one pass, then one
  masked pass over the row per neighbour, in list order, while any entry of the row still fires (the row's least
  threshold bounds the walk): an entry that does not fire at a neighbour adds ``0 · value``. Entries that stopped
  firing still cost a lane, but every pass is branch-free and SIMD-vectorised, where the entry-by-entry walk pays
  a mispredicted exit and a scattered add per entry.

Each target receives its sums in the same order either way (self-loop term, then sources in order, each source's
pushes in list order), so the two ways agree bit for bit.

The arithmetic is the masked hop's, in the input dtype: ``t = θ_k / (a_v |cp|)``, a push of edge ``e`` is
deterministic when ``g_e >= t``, fires when ``g_e >= t · U`` (random push) and carries
``sign(τ) · max(|τ|, θ_k)`` (random) or ``τ`` (drop), ``τ = w_e · cp[v, k]``. Only the order of the sums into a
target differs from the SpMM of the masked hop (equal to rounding).

:func:`select_csr` is the layers' kept-edge selection (:meth:`unifews.graph.LayerGraph.csr`) in one pass: the
kept entries of a CSR order, with their row pointer, instead of five torch passes (gather, nonzero, cumsum, two
selects).

numba is optional: :data:`AVAILABLE` is False without it, and :mod:`unifews.prop` and :mod:`unifews.graph` then run
the torch executions.
"""

from __future__ import annotations

import math
from typing import Any

try:  # pragma: no cover - exercised where numba is installed
    import numba
    import numpy as np

    AVAILABLE = True
except ImportError:  # pragma: no cover
    numba = np = None
    AVAILABLE = False

__all__ = ["AVAILABLE", "pruned_hop", "select_csr"]


SPARSE_ROW = 16
"""A source row with fewer than ``K / SPARSE_ROW`` non-zero entries runs entry by entry; a denser one runs as
whole-row vector passes."""


def _row_nnz(xr):
    nz = 0
    for k in range(xr.shape[0]):
        nz += xr[k] != 0
    return nz


def _row_copy(crow, crow_out):
    kept = 0
    for k in range(crow.shape[0]):
        c = crow[k]
        crow_out[k] = c
        kept += c
    return kept


def _row_setup(xr, theta, av, hvv, hk, use_u, td, tf, cd):
    # per entry: t = θ_k / (a_v |x|) (inf or nan at x = 0: never fires) and the fire threshold t · U, U the hashed
    # uniform of (seed, hop, v, k) (unifews.prop.hashed_uniform's last round) cast to the dtype; t without U (drop)
    for k in range(xr.shape[0]):
        td[k] = theta[k] / (av * abs(xr[k]))
        cd[k] = 0
    if use_u:
        for k in range(xr.shape[0]):
            h = (hvv ^ hk[k]) & 0xFFFFFFFF
            h = (h * 0x45D9F3B) & 0xFFFFFFFF
            h ^= h >> 16
            tf[k] = td[k] * xr.dtype.type((h + 0.5) * (1.0 / 4294967296.0))
    else:
        for k in range(xr.shape[0]):
            tf[k] = td[k]


def _row_min(tf, scratch):
    # the least threshold of the row, through its bits: non-negative floats order as unsigned integers (nan of
    # either sign above inf), and an integer min is one vector pass
    if tf.itemsize == 4:
        b32 = tf.view(np.uint32)
        m32 = np.uint32(0xFFFFFFFF)
        for k in range(b32.shape[0]):
            m32 = min(m32, b32[k])
        scratch.view(np.uint32)[0] = m32
    else:
        b64 = tf.view(np.uint64)
        m64 = np.uint64(0xFFFFFFFFFFFFFFFF)
        for k in range(b64.shape[0]):
            m64 = min(m64, b64[k])
        scratch.view(np.uint64)[0] = m64
    return scratch[0]


def _push_random(orow, xr, theta, tf, gj, wj):
    # one neighbour, the whole row: the entries with g >= t · U fire and carry sign(τ) · max(|τ|, θ_k); a masked
    # add (0 · value for the others), no branch, so the loop is one vector pass
    fired = 0
    for k in range(xr.shape[0]):
        fi = gj >= tf[k]
        tau = wj * xr[k]
        at = abs(tau)
        th = theta[k]
        orow[k] = orow[k] + math.copysign(at if at > th else th, tau) * np.float32(fi)
        fired += np.int32(fi)
    return fired


def _count_det(td, cd, gj):
    # one neighbour, the whole row: the entries whose message is deterministic there (g >= t)
    for k in range(td.shape[0]):
        cd[k] += np.int32(gj >= td[k])


def _push_drop(orow, xr, crow, td, cd, gj, wj, pos):
    fired = 0
    for k in range(xr.shape[0]):
        fi = (gj >= td[k]) & (pos < crow[k])
        orow[k] = orow[k] + (wj * xr[k]) * np.float32(fi)
        cd[k] += np.int32(fi)
        fired += np.int32(fi)
    return fired


def _row_stats(xr, crow, cd, crow_out):
    kept = 0
    det = 0
    for k in range(xr.shape[0]):
        nz = xr[k] != 0
        cp_ = crow[k]
        c = min(cp_, cd[k]) if nz else cp_
        crow_out[k] = c
        kept += c
        det += c * np.int32(nz)
    return kept, det


def _pruned_hop_py(cp, theta, c_prev, use_u, hv, hk, ptr, nbr, g, w, a, out, c_out, scratch, sparse_row):
    n, K = cp.shape
    td = np.empty(K, cp.dtype)
    tf = np.empty(K, cp.dtype)
    cd = np.empty(K, np.int32)
    kept = 0
    det = 0
    executed = 0
    nnz = 0
    lanes = 0  # pushes entry by entry, plus every lane of the masked push passes (a push or a 0 · value)
    for v in range(n):
        xr = cp[v]
        av = a[v]
        s = ptr[v]
        e = ptr[v + 1]
        nzr = _row_nnz(xr)
        nnz += nzr
        if nzr * sparse_row < K:
            # a sparse row, entry by entry: only the non-zero entries are visited, each walks its prefix
            kept += _row_copy(c_prev[v], c_out[v])  # zero entries are skipped, never removed
            for k in range(K):
                x = xr[k]
                if x == 0:
                    continue
                th = theta[k]
                t_det = th / (av * abs(x))
                j = s
                if use_u:
                    h = (hv[v] ^ hk[k]) & 0xFFFFFFFF
                    h = (h * 0x45D9F3B) & 0xFFFFFFFF
                    h ^= h >> 16
                    scratch[0] = (h + 0.5) * (1.0 / 4294967296.0)
                    t_fire = t_det * scratch[0]
                    c = 0
                    while j < e and g[j] >= t_fire:
                        tau = w[j] * x
                        out[nbr[j], k] += math.copysign(max(abs(tau), th), tau)
                        c += g[j] >= t_det
                        j += 1
                    c = min(c_prev[v, k], c)
                    executed += j - s
                    lanes += j - s
                else:
                    while j < e and g[j] >= t_det:
                        j += 1
                    c = min(c_prev[v, k], j - s)
                    for jj in range(s, s + c):
                        out[nbr[jj], k] += w[jj] * x
                    executed += c
                    lanes += c
                kept += c - c_prev[v, k]
                det += c
                c_out[v, k] = c
            continue
        # a dense row, whole-row vector passes: thresholds, then one masked pass per neighbour while any entry
        # fires (the neighbours come by message magnitude, so the row's least threshold bounds the walk)
        _row_setup(xr, theta, av, hv[v] if use_u else 0, hk, use_u, td, tf, cd)
        if s < e:
            t_min = _row_min(tf, scratch)
            j = s
            crow = c_prev[v]
            while j < e and g[j] >= t_min:
                if use_u:
                    executed += _push_random(out[nbr[j]], xr, theta, tf, g[j], w[j])
                else:
                    executed += _push_drop(out[nbr[j]], xr, crow, td, cd, g[j], w[j], j - s)
                j += 1
            lanes += (j - s) * K
            if use_u:  # the deterministic prefixes (the regime), over the shorter walk of the least t
                t_min = _row_min(td, scratch)
                j = s
                while j < e and g[j] >= t_min:
                    _count_det(td, cd, g[j])
                    j += 1
        k_row, d_row = _row_stats(xr, c_prev[v], cd, c_out[v])
        kept += k_row
        det += d_row
    return kept, det, executed, nnz, lanes


_kernel: Any = None
if numba is not None:
    _jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    _row_nnz, _row_copy, _row_setup, _row_min = (_jit(f) for f in (_row_nnz, _row_copy, _row_setup, _row_min))
    _push_random, _push_drop, _count_det, _row_stats = (
        _jit(f) for f in (_push_random, _push_drop, _count_det, _row_stats)
    )
    _kernel = _jit(_pruned_hop_py)


def pruned_hop(cp, G, theta, c_prev, uniform_parts, out, sparse_row: int = SPARSE_ROW, c_out=None):
    """One pruned hop. ``cp`` (n × K) = c · P_l; ``out`` (n × K) holds the self-loop terms and receives the pushes
    (in place); ``uniform_parts`` the node and column hashes of :func:`unifews.prop.hashed_uniform` (random push)
    or None (drop). Returns ``(c, kept, deterministic pushes, executed pushes, non-zero entries)``, ``c``
    (n × K, int32) the regime after the hop. ``sparse_row``: rows with fewer than ``K / sparse_row`` non-zero
    entries run entry by entry, the others as vector passes (0: every row entry by entry; above ``K``: every
    non-empty row as vector passes); the result does not depend on it. ``c_out``: an int32 n × K buffer for ``c``
    (default: a new one)."""
    import torch

    cp = cp.contiguous()
    c_prev = c_prev.to(torch.int32).contiguous()
    c_out = torch.empty_like(c_prev) if c_out is None else c_out
    if uniform_parts is None:
        hv = hk = torch.zeros(1, dtype=torch.int64)
    else:
        hv, hk = uniform_parts
    scratch = torch.zeros(1, dtype=cp.dtype)
    kept, det, executed, nnz, _ = _kernel(
        cp.numpy(), theta.to(cp.dtype).contiguous().numpy(), c_prev.numpy(), uniform_parts is not None,
        hv.contiguous().numpy(), hk.contiguous().numpy(), G.ptr.numpy(), G.nbr.numpy(), G.g.numpy(), G.w.numpy(),
        G.a.numpy(), out.numpy(), c_out.numpy(), scratch.numpy(), int(sparse_row),
    )  # fmt: skip
    return c_out, int(kept), int(det), int(executed), int(nnz)


def _select_csr_py(ptr, col, vals, perm, use_perm, mask, ptr_out, col_out, vals_out):
    # one flat loop over the entries (a loop per CSR row costs more than its few entries); the row pointer is
    # gathered afterwards from the running count at every entry
    m = col.shape[0]
    pref = np.empty(m + 1, dtype=ptr.dtype)
    k = 0
    for p in range(m):
        pref[p] = k
        e = perm[p] if use_perm else p
        if mask[e]:
            col_out[k] = col[p]
            vals_out[k] = vals[p]
            k += 1
    pref[m] = k
    for r in range(ptr.shape[0]):
        ptr_out[r] = pref[ptr[r]]
    return k


_select_kernel: Any = None
if numba is not None:
    _select_kernel = numba.njit(cache=True, nogil=True)(_select_csr_py)


def select_csr(ptr, col, vals, perm, mask):
    """The kept part of a CSR order in one pass: ``(ptr, col, vals)`` over the entries ``p`` with
    ``mask[perm[p]]`` (``perm`` None: ``mask[p]``), in order. CPU tensors; ``mask`` bool over the original edges."""
    import torch

    m = col.numel()
    ptr_out = torch.empty_like(ptr)
    col_out = torch.empty(m, dtype=col.dtype)
    vals_out = torch.empty(m, dtype=vals.dtype)
    use_perm = perm is not None
    k = _select_kernel(
        ptr.numpy(), col.numpy(), vals.numpy(), (perm if use_perm else ptr).numpy(), use_perm, mask.numpy(),
        ptr_out.numpy(), col_out.numpy(), vals_out.numpy(),
    )  # fmt: skip
    return ptr_out, col_out[:k], vals_out[:k]
