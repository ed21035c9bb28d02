"""The pruned hop of the decoupled propagation in one pass (paper Algorithm 1, entry mode), compiled with numba.

For each source ``v`` and feature ``k`` with ``cp[v, k] != 0`` the kernel walks ``v``'s neighbour list (sorted by
target degree, message magnitude descending) only as far as pushes fire, thresholding, selecting and scattering
each push as it goes: the work is the executed pushes plus one visit per (node, feature), not ``m × K``. Loops run
source by source, feature by feature: the rows a source pushes into stay in cache while its features are swept.

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

    AVAILABLE = True
except ImportError:  # pragma: no cover
    numba = None
    AVAILABLE = False

__all__ = ["AVAILABLE", "pruned_hop", "select_csr"]


def _pruned_hop_py(cp, theta, c_prev, use_u, hv, hk, ptr, nbr, g, w, a, out, c_out, scratch):
    n, K = cp.shape
    kept = 0
    det = 0
    executed = 0
    nnz = 0
    for v in range(n):
        av = a[v]
        s = ptr[v]
        e = ptr[v + 1]
        for k in range(K):
            x = cp[v, k]
            if x == 0:  # zero entries are skipped, never removed
                c_out[v, k] = c_prev[v, k]
                kept += c_prev[v, k]
                continue
            nnz += 1
            th = theta[k]
            t_det = th / (av * abs(x))
            j = s
            if use_u:
                # the uniform of (seed, hop, v, k): unifews.prop.hashed_uniform's last round, cast to the dtype
                h = hv[v] ^ hk[k]
                h = (h * 0x45D9F3B) & 0xFFFFFFFF
                h ^= h >> 16
                scratch[0] = (h + 0.5) / 4294967296.0
                t_fire = t_det * scratch[0]
                cd = 0
                while j < e and g[j] >= t_fire:  # branch-free body: max and a boolean count
                    tau = w[j] * x
                    out[nbr[j], k] += math.copysign(max(abs(tau), th), tau)
                    cd += g[j] >= t_det
                    j += 1
                c = min(c_prev[v, k], cd)
                executed += j - s
            else:
                while j < e and g[j] >= t_det:
                    j += 1
                c = min(c_prev[v, k], j - s)
                for jj in range(s, s + c):
                    out[nbr[jj], k] += w[jj] * x
                executed += c
            c_out[v, k] = c
            kept += c
            det += c
    return kept, det, executed, nnz


_kernel: Any = None
if numba is not None:
    _kernel = numba.njit(cache=True, nogil=True, error_model="numpy")(_pruned_hop_py)


def pruned_hop(cp, G, theta, c_prev, uniform_parts, out):
    """One pruned hop. ``cp`` (n × K) = c · P_l; ``out`` (n × K) holds the self-loop terms and receives the pushes
    (in place); ``uniform_parts`` the node and column hashes of :func:`unifews.prop.hashed_uniform` (random push)
    or None (drop). Returns ``(c, kept, deterministic pushes, executed pushes, non-zero entries)``, ``c``
    (n × K, int32) the regime after the hop."""
    import torch

    cp = cp.contiguous()
    c_prev = c_prev.to(torch.int32).contiguous()
    c_out = torch.empty_like(c_prev)
    if uniform_parts is None:
        hv = hk = torch.zeros(1, dtype=torch.int64)
    else:
        hv, hk = uniform_parts
    scratch = torch.zeros(1, dtype=cp.dtype)
    kept, det, executed, nnz = _kernel(
        cp.numpy(), theta.to(cp.dtype).contiguous().numpy(), c_prev.numpy(), uniform_parts is not None,
        hv.contiguous().numpy(), hk.contiguous().numpy(), G.ptr.numpy(), G.nbr.numpy(), G.g.numpy(), G.w.numpy(),
        G.a.numpy(), out.numpy(), c_out.numpy(), scratch.numpy(),
    )  # fmt: skip
    return c_out, int(kept), int(det), int(executed), int(nnz)


def _select_csr_py(ptr, col, vals, perm, use_perm, mask, ptr_out, col_out, vals_out):
    n = ptr.shape[0] - 1
    k = 0
    ptr_out[0] = 0
    for r in range(n):
        for p in range(ptr[r], ptr[r + 1]):
            e = perm[p] if use_perm else p
            if mask[e]:
                col_out[k] = col[p]
                vals_out[k] = vals[p]
                k += 1
        ptr_out[r + 1] = k
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
