"""The pruned hop of the decoupled propagation in one pass (paper Algorithm 1, entry mode), compiled with numba.

Sources run one by one, each in one of two ways (the result is the same):

* a sparse row (fewer than ``K / SPARSE_ROW`` non-zero entries, as bag-of-words features before the first hop):
  entry by entry, each non-zero entry ``(v, k)`` walking ``v``'s neighbour list (sorted by target degree, message
  magnitude descending) only as far as its pushes fire -- work ∝ the executed pushes plus one visit per entry
  (the non-zero columns are listed first, a block of :data:`BLOCK` values tested at once);
* a denser row: as whole-row vector passes -- the row's thresholds (and hashed uniforms) in one pass, then one
  masked pass over the row per neighbour, in list order, while any entry of the row still fires (the row's least
  threshold bounds the walk): an entry that does not fire at a neighbour adds ``-0``. Entries that stopped
  firing still cost a lane, but every pass is branch-free and SIMD-vectorised, where the entry-by-entry walk pays
  a mispredicted exit and a scattered add per entry. (A shrinking list of the entries still walking, compacted
  after every neighbour, does work ∝ the pushes but runs scalar: on Cora it measured 1.1-2.3× slower per hop
  than these passes, also when used only once fewer than K / 16 entries fire.)

The regime ``c`` can be updated in place, where only the non-zero entries change (no pass over the zeros).

Each target receives its sums in the same order either way (self-loop term, then sources in order, each source's
pushes in list order), so the two ways agree bit for bit.

The arithmetic is the masked hop's, in the input dtype: ``t = θ_k / (a_v |cp|)``, a push of edge ``e`` is
deterministic when ``g_e >= t``, fires when ``g_e >= t · U`` (random push) and carries
``sign(τ) · max(|τ|, θ_k)`` (random) or ``τ`` (drop), ``τ = w_e · cp[v, k]``. Only the order of the sums into a
target differs from the SpMM of the masked hop (equal to rounding).

numba is optional: :data:`AVAILABLE` is False without it, and :mod:`unifews.prop` then runs the torch
executions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

try:  # pragma: no cover - exercised where numba is installed
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover
    numba = None
    AVAILABLE = False

__all__ = ["AVAILABLE", "pruned_hop", "row_nonzeros"]


SPARSE_ROW = 16
"""A source row with fewer than ``K / SPARSE_ROW`` non-zero entries runs entry by entry; a denser one runs as
whole-row vector passes."""


def _row_nnz(xr):
    nz = 0
    for k in range(xr.shape[0]):
        nz += xr[k] != 0
    return nz


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


def _push_random(orow, xr, theta, tf, td, cd, gj, wj):
    # one neighbour, the whole row: the entries with g >= t · U fire and carry sign(τ) · max(|τ|, θ_k), counted
    # deterministic where g >= t (t · U <= t: inside the firing walk, which the least t · U bounds); a masked add
    # (-0 for the others: x + (-0) is x bit for bit, a negative zero included), no branch: one vector pass
    nz = xr.dtype.type(-0.0)
    fired = np.int32(0)  # an int32 count: an int64 one widens every lane mask (about 5 % of a hop)
    for k in range(xr.shape[0]):
        fi = gj >= tf[k]
        tau = wj * xr[k]
        at = abs(tau)
        th = theta[k]
        orow[k] = orow[k] + (math.copysign(at if at > th else th, tau) if fi else nz)
        cd[k] += np.int32(gj >= td[k])
        fired += np.int32(fi)
    return fired


def _push_drop(orow, xr, crow, td, cd, gj, wj, pos):
    nz = xr.dtype.type(-0.0)
    fired = np.int32(0)
    for k in range(xr.shape[0]):
        fi = (gj >= td[k]) & (pos < crow[k])
        orow[k] = orow[k] + (wj * xr[k] if fi else nz)
        cd[k] += np.int32(fi)
        fired += np.int32(fi)
    return fired


def _row_stats(xr, crow, cd):
    # the regime of a dense row after the hop, in place: c = min(c_prev, cd) at the non-zero entries (zeros keep
    # theirs); returns the change of the row's sum and the row's deterministic pushes
    dk = 0
    det = 0
    for k in range(xr.shape[0]):
        nz = xr[k] != 0
        cp_ = crow[k]
        c = min(cp_, cd[k]) if nz else cp_
        crow[k] = c
        dk += c - cp_
        det += c * np.int32(nz)
    return dk, det


BLOCK = 16
"""Width of the blocks a sparse row's scan for non-zero entries tests at once (and skips when they hold none)."""


def _nz_list(bits, sign, ks):
    # the row's non-zero columns into ks, in order; returns their count. ``bits``: the row's values seen as unsigned
    # integers of their width, ``sign`` that width's sign bit (a value is non-zero when a bit other than the sign's
    # is set). Blocks of BLOCK values are tested at once (the OR of their bits: a fixed-length integer loop), only
    # blocks holding a non-zero value are listed (branch-free)
    K = bits.shape[0]
    low = ~sign
    nk = 0
    k0 = 0
    while k0 + BLOCK <= K:
        acc = bits[k0]
        for q in range(1, BLOCK):
            acc |= bits[k0 + q]
        if acc & low:
            for k in range(k0, k0 + BLOCK):
                ks[nk] = k
                nk += (bits[k] & low) != 0
        k0 += BLOCK
    for k in range(k0, K):
        ks[nk] = k
        nk += (bits[k] & low) != 0
    return nk


def _pruned_hop_py(cp, bits, sign, theta, c, use_u, hv, hk, ptr, nbr, g, w, a, out, scratch, sparse_row):
    # c: the regime, updated in place (only non-zero entries change); bits, sign: cp seen as unsigned integers of
    # its width and that width's sign bit (the sparse rows' scan for non-zero entries)
    n, K = cp.shape
    td = np.empty(K, cp.dtype)
    tf = np.empty(K, cp.dtype)
    cd = np.empty(K, np.int32)
    ks = np.empty(K, np.int64)
    dkept = 0  # change of the regime's sum
    det = 0
    executed = 0
    nnz = 0
    lanes = 0  # pushes entry by entry, plus every lane of the masked push passes (a push or a -0)
    for v in range(n):
        xr = cp[v]
        av = a[v]
        s = ptr[v]
        e = ptr[v + 1]
        crow = c[v]
        nzr = _row_nnz(xr)
        nnz += nzr
        if nzr == 0:
            continue
        if nzr * sparse_row < K:
            # a sparse row, entry by entry: only the non-zero entries are visited (blocks without one skipped),
            # each walks its prefix
            for i in range(_nz_list(bits[v], sign, ks)):
                k = ks[i]
                x = xr[k]
                th = theta[k]
                t_det = th / (av * abs(x))
                j = s
                if use_u:
                    h = (hv[v] ^ hk[k]) & 0xFFFFFFFF
                    h = (h * 0x45D9F3B) & 0xFFFFFFFF
                    h ^= h >> 16
                    scratch[0] = (h + 0.5) * (1.0 / 4294967296.0)
                    t_fire = t_det * scratch[0]
                    cc = 0
                    while j < e and g[j] >= t_fire:
                        tau = w[j] * x
                        out[nbr[j], k] += math.copysign(max(abs(tau), th), tau)
                        cc += g[j] >= t_det
                        j += 1
                    cc = min(crow[k], cc)
                    executed += j - s
                    lanes += j - s
                else:
                    while j < e and g[j] >= t_det:
                        j += 1
                    cc = min(crow[k], j - s)
                    for jj in range(s, s + cc):
                        out[nbr[jj], k] += w[jj] * x
                    executed += cc
                    lanes += cc
                dkept += cc - crow[k]
                det += cc
                crow[k] = cc
            continue
        # a dense row, whole-row vector passes: thresholds, then one masked pass per neighbour while any entry
        # fires (the neighbours come by message magnitude, so the row's least threshold bounds the walk)
        _row_setup(xr, theta, av, hv[v] if use_u else 0, hk, use_u, td, tf, cd)
        if s < e:
            t_min = _row_min(tf, scratch)
            j = s
            while j < e and g[j] >= t_min:
                if use_u:
                    f = _push_random(out[nbr[j]], xr, theta, tf, td, cd, g[j], w[j])
                else:
                    f = _push_drop(out[nbr[j]], xr, crow, td, cd, g[j], w[j], j - s)
                executed += f
                j += 1
            lanes += (j - s) * K
        d_row, det_row = _row_stats(xr, crow, cd)
        dkept += d_row
        det += det_row
    return dkept, det, executed, nnz, lanes


def _row_counts_py(x, out):
    for v in range(x.shape[0]):
        out[v] = _row_nnz(x[v])


_kernel: Any = None
_row_counts: Any = None
if numba is not None:
    _jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    _row_nnz, _nz_list, _row_setup, _row_min = (_jit(f) for f in (_row_nnz, _nz_list, _row_setup, _row_min))
    _push_random, _push_drop, _row_stats = (_jit(f) for f in (_push_random, _push_drop, _row_stats))
    _kernel = _jit(_pruned_hop_py)
    _row_counts = _jit(_row_counts_py)


def row_nonzeros(x):
    """Non-zero entries of each row of a 2-D tensor (int64, one per row): one compiled pass where numba, a CPU
    tensor and a float32/float64 dtype allow it, else torch's (which builds an ``n × f`` temporary). ``x`` finite."""
    import torch

    if x.dtype not in (torch.float32, torch.float64):  # a half-precision sum of ones stops counting at 2,048
        return torch.count_nonzero(x.detach(), dim=1)
    if _row_counts is None or x.is_cuda:  # finite input: |x| has sign 0 or 1, a float sum of <= 2**24 ones is exact
        return x.detach().abs().sign_().sum(1).long()
    xc = x.detach().contiguous()
    out = torch.empty(xc.size(0), dtype=torch.int64)
    _row_counts(xc.numpy(), out.numpy())
    return out


def pruned_hop(cp, G, theta, c_prev, uniform_parts, out, sparse_row: int = SPARSE_ROW, c_out=None, kept_prev=None):
    """One pruned hop. ``cp`` (n × K) = c · P_l; ``out`` (n × K) holds the self-loop terms and receives the pushes
    (in place); ``uniform_parts`` the node and column hashes of :func:`unifews.prop.hashed_uniform` (random push)
    or None (drop). Returns ``(c, kept, deterministic pushes, executed pushes, non-zero entries)``, ``c``
    (n × K, int32) the regime after the hop. ``sparse_row``: rows with fewer than ``K / sparse_row`` non-zero
    entries run entry by entry, the others as vector passes (0: every row entry by entry; above ``K``: every
    non-empty row as vector passes); the result does not depend on it. ``c_out``: an int32 n × K buffer
    for ``c`` (default: a new one); ``c_out=c_prev`` updates the regime in place, only at the non-zero entries.
    ``kept_prev``: ``c_prev``'s sum when known (saves a pass)."""
    import torch

    cp = cp.contiguous()
    c_in = c_prev.to(torch.int32).contiguous()
    if c_out is None:
        c_out = c_in if c_in is not c_prev else c_in.clone()
    elif c_out is not c_prev:
        c_out.copy_(c_in)
    elif c_in is not c_prev:
        raise ValueError("an in-place regime (c_out=c_prev) must be a contiguous int32 tensor")
    if kept_prev is None:
        kept_prev = int(c_in.sum())
    if uniform_parts is None:
        hv = hk = torch.zeros(1, dtype=torch.int64)
    else:
        hv, hk = uniform_parts
    scratch = torch.zeros(1, dtype=cp.dtype)
    cpn = cp.numpy()
    bits = cpn.view(np.uint32 if cpn.itemsize == 4 else np.uint64)
    dkept, det, executed, nnz, _ = _kernel(
        cpn, bits, bits.dtype.type(1 << (8 * cpn.itemsize - 1)), theta.to(cp.dtype).contiguous().numpy(), c_out.numpy(),
        uniform_parts is not None,
        hv.contiguous().numpy(), hk.contiguous().numpy(), G.ptr.numpy(), G.nbr.numpy(), G.g.numpy(), G.w.numpy(),
        G.a.numpy(), out.numpy(), scratch.numpy(), int(sparse_row),
    )  # fmt: skip
    return c_out, int(kept_prev) + int(dkept), int(det), int(executed), int(nnz)
