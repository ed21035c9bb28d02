"""Decoupled propagation with entry-wise graph sparsification (paper Algorithm 1).

``P_{l+1} = c · T P_l`` with ``c = 1`` (SGC: ``P = T^L X``) or ``c = 1 − α`` (APPNP, accumulated as
``Z_L = α Σ_{l<L} P_l + P_L``, which is PyG's ``APPNP(K=L, alpha=α)``; ``appnp_tail=False`` drops ``P_L`` as the
official push does). A message of edge ``e = (v → u)`` and feature ``k`` is ``τ = c · T[u, v] · P_l[v, k]``.

``mode="entry"`` (default, column-separable): ``θ_k = δa · mean_u |X[u, k]|``. An entry whose non-zero message falls
under ``θ_k`` leaves the deterministic regime for good (progressive). Outside it, ``push="random"`` fires with
probability ``min(1, |τ|/θ_k)`` carrying ``sign(τ) · max(|τ|, θ_k)`` (unbiased), ``push="drop"`` removes it
(lossy). Zero entries are skipped, never marked removed. Because ``T[u, v] = d̄_u^{-(1-r)} d̄_v^{-r}`` depends on the
target only through its degree, each source's neighbour list is sorted by degree once, the deterministic pushes
of a (source, feature) pair are a prefix of it (one ``searchsorted``) and the random pushes, driven by one uniform
``U`` per (source, feature, hop), a longer prefix (threshold ``θ_k · U``). A consequence worth knowing: an entry
that left the deterministic regime but whose message grew back over ``θ_k`` fires with probability 1 and carries
``τ``, so with ``push="random"`` progressiveness moves pushes between the two counters but never changes the result;
with ``push="drop"`` it removes them for good.

The uniforms are a counter-based hash of ``(seed, hop, node, global column)``: propagating column blocks apart
(``column_offset``) and concatenating equals one call, which is how the precompute shards by feature.

``mode="row"``: Algorithm 1 literally -- an edge is removed for good at the first hop where
``|c · T[u, v]| · ‖P_l[v]‖₂`` is under ``δa`` (``threshold="absolute"``) or under ``δa`` times the mean edge score
of the hop (``"relative"``, loops included in the mean); self-loops are never removed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from icml25_shared.validate import check_choice, check_float, check_int
from unifews import _fused
from unifews.config import THRESHOLDS, Threshold
from unifews.functional import _csr, check_edge_index, check_x, spmm

__all__ = ["PropStats", "PropGraph", "unifews_propagate", "propagate_entry_reference", "KINDS", "MODES", "PUSHES"]

Kind = Literal["sgc", "appnp"]
Mode = Literal["entry", "row"]
Push = Literal["random", "drop"]
Impl = Literal["auto", "prefix", "masked", "fused"]
KINDS: tuple[str, ...] = get_args(Kind)
MODES: tuple[str, ...] = get_args(Mode)
PUSHES: tuple[str, ...] = get_args(Push)
IMPLS: tuple[str, ...] = get_args(Impl)
SpmmImpl = Literal["auto", "torch", "triton"]
SPMM_IMPLS: tuple[str, ...] = get_args(SpmmImpl)
_M32 = 0xFFFFFFFF


@dataclass
class PropStats:
    """Per-hop counts of one propagation.

    Attributes:
        kept: entry mode: entries (non-loop edge × feature) still in the deterministic regime (non-increasing);
            row mode: kept edges, self-loops included (non-increasing).
        deterministic_pushes: messages executed exactly (self-loop terms included).
        random_pushes: random pushes fired (entry mode, ``push="random"``).
        macs: executed multiply-adds of the hop (deterministic + random pushes; 1 MAC each).
        full_macs: what a dense CSR SpMM executes, ``(m + n) · f · hops`` (the paper's count, zeros included).
    """

    mode: str
    push: str
    kept: list[int] = field(default_factory=list)
    deterministic_pushes: list[int] = field(default_factory=list)
    random_pushes: list[int] = field(default_factory=list)
    macs: list[int] = field(default_factory=list)
    full_macs: int = 0

    @property
    def total_macs(self) -> int:
        """Executed MACs over all hops."""
        return int(sum(self.macs))

    def merge(self, other: PropStats) -> PropStats:
        """Sum of two column shards' statistics."""

        def add(a, b):
            return [x + y for x, y in zip(a, b)] if a else list(b)

        return PropStats(
            self.mode,
            self.push,
            add(self.kept, other.kept),
            add(self.deterministic_pushes, other.deterministic_pushes),
            add(self.random_pushes, other.random_pushes),
            add(self.macs, other.macs),
            self.full_macs + other.full_macs,
        )


class PropGraph:
    """The graph ``Ā = A + I`` prepared for prefix pushes: non-loop edges grouped by source, each source's list
    sorted by target degree ascending (message magnitude descending), ``T``'s factors and search keys."""

    def __init__(self, edge_index: Tensor, num_nodes: int, r: float = 0.5, dtype: torch.dtype = torch.float32):
        check_edge_index(edge_index, num_nodes)
        src, dst = edge_index
        nl = src != dst
        src, dst = src[nl], dst[nl]
        dev = edge_index.device
        self.n, self.r = num_nodes, r
        deg = torch.ones(num_nodes, dtype=torch.float64, device=dev).index_add_(
            0, dst, torch.ones(dst.numel(), dtype=torch.float64, device=dev)
        )  # d̄ counts the self-loop
        self.deg = deg
        order = torch.argsort(deg[dst], stable=True)
        order = order[torch.argsort(src[order], stable=True)]  # by source, then target degree ascending
        self.src, self.nbr = src[order], dst[order]
        self.m = int(self.src.numel())
        self.g64 = deg[self.nbr].pow(-(1.0 - r))  # target factor, descending within each source's list
        self.a64 = deg.pow(-r)  # source factor
        self.g, self.a = self.g64.to(dtype), self.a64.to(dtype)
        self.w = (self.g64 * self.a64[self.src]).to(dtype)  # T[u, v] of each non-loop edge
        self.w_loop = deg.pow(-1.0).to(dtype)
        self.out_deg = torch.bincount(self.src, minlength=num_nodes)
        self.ptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=dev)
        self.ptr[1:] = self.out_deg.cumsum(0)
        self.pos = torch.arange(self.m, device=dev) - self.ptr[self.src]  # position in the source's list
        self.keys = self.src.to(torch.float64) + (1.0 - self.g64) * 0.5  # segmented search keys, in [v, v + 0.5)
        self.edge_index = torch.stack([self.src, self.nbr])
        self._mats: dict = {}
        self._kernel_csr: Any = None  # icml25_shared.kernels.CSR of the non-loop edges (row mode on the kernel path)

    def matrices(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """CSR matrices, built once per dtype: ``(T_off, S_dst, S_src)`` with ``T_off[u, v] = T[u, v]`` over the
        non-loop edges, and the ``n × m`` incidences ``S_dst[nbr_e, e] = 1``, ``S_src[src_e, e] = 1``. Summing an
        ``m × K`` per-edge tensor into targets (sources) is one SpMM with ``S_dst`` (``S_src``)."""
        if dtype not in self._mats:
            e = torch.arange(self.m, device=self.src.device)
            ones = torch.ones(self.m, dtype=dtype, device=self.src.device)
            self._mats[dtype] = (
                _csr(self.nbr, self.src, (self.g64 * self.a64[self.src]).to(dtype), self.n, self.n),
                _csr(self.nbr, e, ones, self.n, self.m),
                _csr(self.src, e, ones, self.n, self.m),
            )
        return self._mats[dtype]

    def diffusion(self, dtype: torch.dtype, coef: float = 1.0) -> Tensor:
        """``c · T`` with its self-loops as one CSR matrix, built once per dtype and ``c``: a dense hop is one SpMM."""
        key = ("diffusion", dtype, coef)
        if key not in self._mats:
            loops = torch.arange(self.n, device=self.src.device)
            rows, cols = torch.cat([self.nbr, loops]), torch.cat([self.src, loops])
            vals = coef * torch.cat([self.g64 * self.a64[self.src], self.deg.pow(-1.0)])
            self._mats[key] = _csr(rows, cols, vals.to(dtype), self.n, self.n)
        return self._mats[key]

    def count_at_least(self, v: Tensor, t: Tensor) -> Tensor:
        """For sources ``v`` and thresholds ``t`` (flat, same length): how many entries of ``v``'s list have
        ``g >= t`` -- a prefix length, found by one binary search in the segmented keys."""
        q = v.to(torch.float64) + (1.0 - t.to(torch.float64)).clamp(-1.0, 1.5) * 0.5
        pos = torch.searchsorted(self.keys, q, right=True)
        return (pos - self.ptr[v]).clamp_(min=0).minimum(self.out_deg[v])

    def to_dtype(self, dtype: torch.dtype) -> PropGraph:
        self.g, self.a = self.g64.to(dtype), self.a64.to(dtype)
        self.w = (self.g64 * self.a64[self.src]).to(dtype)
        self.w_loop = self.deg.pow(-1.0).to(dtype)
        return self


def _hash32(x: Tensor) -> Tensor:
    # a 32-bit integer mixer; every product stays below 2**59, so int64 never overflows (in place after the copy)
    x = x & _M32
    x.bitwise_xor_(x >> 16).mul_(0x45D9F3B).bitwise_and_(_M32)
    x.bitwise_xor_(x >> 16).mul_(0x45D9F3B).bitwise_and_(_M32)
    return x.bitwise_xor_(x >> 16)


def uniform_parts(seed: int, hop: int, n: int, columns: Tensor) -> tuple[Tensor, Tensor]:
    """The node and column hashes (int64, < 2**32) that :func:`hashed_uniform` combines."""
    return _node_hash(seed, hop, n, columns.device), _column_hash(columns)


def _node_hash(seed: int, hop: int, n: int, dev) -> Tensor:
    base = _hash32(torch.tensor(seed * 0x27D4EB2F + hop * 0x165667B1 + 0x9E3779B9, device=dev))
    return _hash32(torch.arange(n, device=dev) * 0x2545F49 ^ base)


def _column_hash(columns: Tensor) -> Tensor:
    return _hash32(columns * 0x61C88647 + 0x632BE5AB)


def hashed_uniform(seed: int, hop: int, n: int, columns: Tensor) -> Tensor:
    """Uniforms in (0, 1), float64, of shape ``[n, len(columns)]``, a pure function of (seed, hop, node, column)."""
    hv, hk = uniform_parts(seed, hop, n, columns)
    # hv and hk are already well mixed: one multiply-xorshift round on the n × K combination is enough
    h = hv.unsqueeze(1) ^ hk.unsqueeze(0)
    h.mul_(0x45D9F3B).bitwise_and_(_M32)
    h.bitwise_xor_(h >> 16)
    return h.to(torch.float64).add_(0.5).div_(4294967296.0)


def _seed_from(generator: torch.Generator | int | None) -> int:
    if generator is None:
        return int(torch.randint(0, 2**31 - 1, (1,)))
    if isinstance(generator, torch.Generator):
        return int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    if isinstance(generator, bool) or not isinstance(generator, int) or generator < 0:
        raise TypeError(f"generator must be None, a torch.Generator or a non-negative int seed, got {generator!r}")
    return generator


def _check_common(x, edge_index, hops, delta_a, kind, alpha, r, mode, push, threshold):
    check_x(x)
    check_edge_index(edge_index, x.size(0))
    check_int("hops", hops, min=1)
    delta_a = check_float("delta_a", delta_a, min=0.0, allow_inf=True)
    check_choice("kind", kind, KINDS)
    check_choice("mode", mode, MODES)
    check_choice("push", push, PUSHES)
    check_choice("threshold", threshold, THRESHOLDS)
    check_float("alpha", alpha, min=0.0, max=1.0, min_open=True)
    check_float("r", r, min=0.0, max=1.0)
    return delta_a


def unifews_propagate(
    x: Tensor,
    edge_index: Tensor,
    hops: int = 20,
    delta_a: float = 0.0,
    *,
    kind: Kind = "sgc",
    alpha: float = 0.1,
    r: float = 0.5,
    mode: Mode = "entry",
    push: Push = "random",
    threshold: Threshold = "absolute",
    appnp_tail: bool = True,
    generator: torch.Generator | int | None = None,
    column_offset: int = 0,
    chunk_size: int | None = None,
    graph: PropGraph | None = None,
    impl: Impl = "auto",
    spmm_impl: SpmmImpl = "auto",
) -> tuple[Tensor, PropStats]:
    """Sparsified SGC/APPNP propagation of ``x`` ``[n, f]`` over ``edge_index`` (self-loops added; paper Algorithm 1).

    Args:
        x: node features (floating, finite). The output has its dtype.
        edge_index: int64 ``[2, m]``; existing self-loops are replaced by unit loops.
        hops: L >= 1.
        delta_a: δa >= 0; 0 gives the exact dense propagation (``SGConv``'s ``T^L X``, PyG's ``APPNP``).
        kind: ``"sgc"`` or ``"appnp"``; ``alpha`` in (0, 1] is APPNP's teleport probability.
        r: normalisation exponent of ``T``.
        mode: ``"entry"`` (per-feature thresholds, prefix pushes) or ``"row"`` (Algorithm 1, row norms).
        push: entry mode, entries outside the deterministic regime: ``"random"`` (unbiased) or ``"drop"``.
        threshold: row mode only, ``"absolute"`` (paper) or ``"relative"`` (δa × mean edge score of the hop).
        appnp_tail: keep APPNP's ``P_L`` term (PyG) or drop it (official push).
        generator: seed source for the random push (a ``torch.Generator``, an int seed, or None).
        column_offset: global index of ``x``'s first column (column shards draw the same uniforms).
        chunk_size: columns processed at once (memory bound, >= 1); default (None) keeps ``m × chunk`` near 4 M,
            and at most :data:`FUSED_CHUNK` columns where the fused hop may run.
        graph: a :class:`PropGraph` prepared earlier for the same ``edge_index`` and ``r`` (saves the sort).
        impl: entry mode execution of a pruned hop, ``"prefix"`` (pushes enumerated, cost ∝ pushes),
            ``"masked"`` (the same prefixes as an ``m × chunk`` comparison), ``"fused"`` (numba, one pass over the
            firing pushes) or ``"auto"``: per hop, the least predicted time under a cost model measured once per
            ``graph`` and dtype (:func:`calibrate_hop`, :func:`choose_impl`). Same result to rounding.
        spmm_impl: row mode: ``"auto"`` runs CUDA tensors through the shared Triton masked SpMM
            (``icml25_shared.kernels.masked_spmm``: one CSR of the graph, removed edges masked in the kernel, no
            per-hop compaction) and CPU tensors through a compacted edge list and a CSR SpMM; ``"torch"`` /
            ``"triton"`` force the masked SpMM's reference / kernel. Same result to rounding.

    Returns:
        ``(P, stats)``: the propagated features and a :class:`PropStats`.
    """
    delta_a = _check_common(x, edge_index, hops, delta_a, kind, alpha, r, mode, push, threshold)
    check_choice("impl", impl, IMPLS)
    check_choice("spmm_impl", spmm_impl, SPMM_IMPLS)
    if chunk_size is not None:
        check_int("chunk_size", chunk_size, min=1)
    column_offset = check_int("column_offset", column_offset, min=0)
    n, f = x.shape
    G = graph if graph is not None else PropGraph(edge_index, n, r, x.dtype)
    if G.g.dtype != x.dtype:
        G.to_dtype(x.dtype)
    coef = 1.0 - alpha if kind == "appnp" else 1.0
    stats = PropStats(mode, push, full_macs=(G.m + n) * f * hops)
    if mode == "row":
        return _row(x, G, hops, delta_a, coef, kind, alpha, threshold, appnp_tail, stats, spmm_impl)
    seed = _seed_from(generator) if push == "random" and delta_a > 0 else 0
    # chunks bound the m × chunk tensors of a pruned hop; the dense path (δa = 0) has none and runs whole
    step = chunk_size or (f if delta_a == 0 else max(1, min(f, (1 << 22) // max(G.m, 1))))
    pruned = 0 < delta_a < float("inf")
    if chunk_size is None and pruned and impl in ("auto", "fused") and "fused" in available_impls(x):
        step = min(step, FUSED_CHUNK)  # the fused hop's row passes stay in the first-level cache
    outs = []
    # θ_k's scale once over all columns: a per-chunk mean can differ in its last bit with the chunk width
    scale = x.abs().mean(0) if step < f and pruned else None
    node_hashes: dict[int, Tensor] = {}  # the fused hop's node hashes per hop, shared by the chunks
    for c0 in range(0, f, step):
        cols = torch.arange(column_offset + c0, column_offset + min(f, c0 + step), device=x.device)
        sc = scale[c0 : c0 + step] if scale is not None else None
        part, st = _entry(
            x[:, c0 : c0 + step], G, hops, delta_a, coef, kind, alpha, push, appnp_tail, seed, cols, impl, sc,
            node_hashes,
        )  # fmt: skip
        outs.append(part)
        stats = stats.merge(st) if stats.macs else _with_full(st, stats.full_macs)
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)), stats


def _with_full(st: PropStats, full: int) -> PropStats:
    st.full_macs = full
    return st


def _entry(x, G: PropGraph, hops, delta_a, coef, kind, alpha, push, tail, seed, cols, impl, scale=None, hashes=None):
    n, K = x.shape
    st = PropStats("entry", push)
    p = x
    acc = alpha * x if kind == "appnp" else None
    pruned = 0 < delta_a < float("inf")
    theta = None  # θ_k, only where a hop prunes
    if pruned:
        scale = x.abs().mean(0) if scale is None else scale
        theta = torch.where(scale > 0, delta_a * scale, torch.zeros_like(scale))
    # the deterministic prefix lengths per (source, feature); the dense path (δa = 0) never shrinks them
    c_prev = G.out_deg.to(torch.int32).unsqueeze(1).expand(n, K)
    c_prev = c_prev if delta_a == 0 else c_prev.clone()
    kept_dense = int(G.out_deg.sum()) * K
    col_hash = _column_hash(cols) if push == "random" and pruned else None
    hashes = {} if hashes is None else hashes
    # the fused hop writes P into two buffers, alternately (hop l reads hop l - 1's), and the regime c in place
    bufs: list = [None, None]
    for hop in range(hops):
        cp = p if coef == 1.0 else coef * p
        if delta_a == 0:
            # non-zero entries per source row: one compiled pass (6x cheaper than torch's sign-and-sum, which is 4x
            # cheaper than count_nonzero(dim=1)); torch's without numba, on CUDA and in half precision
            row_nnz = _fused.row_nonzeros(cp)
            loop_pushes = int(row_nnz.sum())
            nxt = torch.sparse.mm(G.diffusion(p.dtype, coef), p)  # c · T P, self-loops included
            det = int((G.out_deg * row_nnz).sum())
            st.kept.append(kept_dense)
            st.deterministic_pushes.append(det + loop_pushes)
            st.random_pushes.append(0)
            st.macs.append(det + loop_pushes)
        elif delta_a == float("inf"):  # θ = ∞: every non-zero message leaves for good, a random push never fires
            nz = cp != 0
            loop_pushes = int(torch.count_nonzero(nz))
            nxt = G.w_loop.unsqueeze(1) * cp
            c_prev = torch.where(nz, torch.zeros_like(c_prev), c_prev)
            st.kept.append(int(c_prev.sum()))
            st.deterministic_pushes.append(loop_pushes)
            st.random_pushes.append(0)
            st.macs.append(loop_pushes)
        else:
            est = st.macs[-1] if st.macs else G.m * K  # pushes expected this hop (impl="auto"): the last hop's
            parts = None
            if col_hash is not None:  # the uniforms' hashes, computed once per hop (nodes) and chunk (columns)
                if hop not in hashes:
                    hashes[hop] = _node_hash(seed, hop, n, x.device)
                parts = (hashes[hop], col_hash)
            if bufs[hop % 2] is None:
                bufs[hop % 2] = torch.empty(n, K, dtype=cp.dtype, device=cp.device)
            kept_prev = st.kept[-1] if st.kept else kept_dense
            nxt, kept, det, rnd, c_prev, loop_pushes = _entry_hop(
                cp, G, theta, c_prev, push, seed, hop, cols, impl, est, parts, (bufs[hop % 2], kept_prev)
            )
            st.kept.append(kept)
            st.deterministic_pushes.append(det + loop_pushes)
            st.random_pushes.append(rnd)
            st.macs.append(det + rnd + loop_pushes)
        p = nxt
        if acc is not None and (hop < hops - 1 or tail):
            acc = acc + (p if hop == hops - 1 else alpha * p)
    if kind == "appnp":
        return acc, st
    return p, st


FUSED_CHUNK = 256
"""Default column chunk of a pruned propagation that may run the fused hop: its whole-row vector passes touch a
few arrays of one row each per neighbour, which then stay in the first-level cache (on Cora, 256 columns run about
1.2× faster than 413 and 2× faster than all 1,433)."""

HOP_COSTS: dict[tuple, dict[str, float]] = {}
"""``impl="auto"``'s measured cost models, per graph size ``(n, m, dtype, device type)``: seconds per unit of
:func:`hop_work` of each execution (:func:`calibrate_hop`). Clear it to re-measure."""


def available_impls(cp: Tensor) -> tuple[str, ...]:
    """The executions of an entry-mode hop that can run on ``cp``: ``"fused"`` needs numba, CPU tensors and no
    autograd graph through ``cp``."""
    fused_ok = _fused.AVAILABLE and not cp.is_cuda and not (cp.requires_grad and torch.is_grad_enabled())
    return ("prefix", "masked", "fused") if fused_ok else ("prefix", "masked")


def hop_work(impl: str, n: int, m: int, K: int, pushes: int) -> int:
    """The unit of work each execution's time is taken proportional to: ``m · K`` (masked: every edge × feature
    is visited) or the executed pushes plus one visit per (node, feature) (prefix: only firing pushes are
    enumerated; fused: the same model, though its row passes also pay a lane for an entry that stopped firing
    while others in its row still fire)."""
    return m * K if impl == "masked" else n * K + max(0, pushes)


def choose_impl(per_unit: dict[str, float], n: int, m: int, K: int, pushes: int) -> str:
    """``impl="auto"``: the execution with the least predicted time ``per_unit[impl] · hop_work(impl, ...)``
    (``per_unit``: seconds per unit of work, measured once per graph size by :func:`calibrate_hop`; ties go to
    the first in the order masked, fused, prefix)."""
    order = [i for i in ("masked", "fused", "prefix") if i in per_unit]
    return min(order, key=lambda i: per_unit[i] * hop_work(i, n, m, K, pushes))


def _entry_hop(
    cp: Tensor,
    G: PropGraph,
    theta,
    c_prev,
    push: str,
    seed: int,
    hop: int,
    cols,
    impl,
    est: int = 0,
    parts=None,
    bufs=None,
):
    """One hop of the prefix form; ``cp`` = c · P_l (n × K), ``c_prev`` the deterministic prefix lengths.

    Returns ``(P_{l+1}, kept, deterministic pushes, random pushes, c, non-zero entries of cp)``. Three executions
    of the same hop: ``"prefix"`` (searchsorted per non-zero (source, feature), then the pushes one by one: cost
    ∝ pushes, about ten passes over them), ``"masked"`` (the same prefixes as an ``m × K`` comparison, then SpMMs:
    about ten passes over ``m × K``) and ``"fused"`` (numba, one pass: entry by entry over sparse source rows,
    whole-row vector passes over denser ones; :mod:`unifews._fused`). ``parts``: the uniforms' node and column
    hashes when already computed (:func:`uniform_parts`); ``bufs`` the fused hop's output buffer for ``P`` and
    ``c_prev``'s sum, given when ``c_prev`` may be updated in place.
    ``"auto"`` picks by the measured cost model (:func:`choose_impl`), calibrated on the first pruned hop a graph
    size sees in a dtype (:func:`calibrate_hop`).
    """
    n, K = cp.shape
    rnd = (seed, hop, n, cols) if push == "random" else None
    if impl == "auto":
        key = (G.n, G.m, cp.dtype, cp.device.type)  # the graph's size: a new PropGraph of the same graph reuses it
        costs = HOP_COSTS.get(key)
        cands = available_impls(cp)
        if costs is None or any(i not in costs for i in cands):
            res, costs = calibrate_hop(cp, G, theta, c_prev, rnd, cands)
            HOP_COSTS[key] = costs
            return res[choose_impl(costs, n, G.m, K, est)]
        impl = choose_impl({i: costs[i] for i in cands}, n, G.m, K, est)
    if impl == "fused" and "fused" not in available_impls(cp):
        raise ModuleNotFoundError("impl='fused' needs numba, CPU tensors and no autograd through x")
    return _run_hop(impl, cp, G, theta, c_prev, rnd, parts, bufs)


def _run_hop(impl, cp, G, theta, c_prev, rnd, parts=None, bufs=None):
    """One pruned hop with execution ``impl``: ``(P_{l+1}, kept, det, random, c, non-zero entries)``. ``bufs``:
    the fused hop's output buffer for ``P`` (reused hop after hop: fresh pages cost more than the pass) and
    ``c_prev``'s sum; given, the fused hop updates ``c_prev`` in place (only at non-zero entries)."""
    if impl == "fused":
        w_loop = G.w_loop.unsqueeze(1)
        out = w_loop * cp if bufs is None else torch.mul(w_loop, cp, out=bufs[0])  # self-loops: deterministic
        parts = (uniform_parts(*rnd) if parts is None else parts) if rnd is not None else None
        c_out, kept_prev = (None, None) if bufs is None else (c_prev, bufs[1])
        c, kept, det, executed, nnz = _fused.pruned_hop(
            cp.detach(), G, theta, c_prev, parts, out, c_out=c_out, kept_prev=kept_prev
        )
        return out, kept, det, executed - det, c.to(c_prev.dtype), nnz
    out = G.w_loop.unsqueeze(1) * cp  # self-loops: always deterministic
    u = hashed_uniform(*rnd).to(cp.dtype) if rnd is not None else None
    nz = cp != 0
    if impl == "masked":
        c_det, c_full, c = _hop_masked(out, cp, G, theta, c_prev, nz, u)
    else:
        c_det, c_full, c = _hop_prefix(out, cp, G, theta, c_prev, nz, u)
    det = int(torch.minimum(c, c_full).sum())
    executed = int(c_full.sum())
    return out, int(c.sum()), det, executed - det, c, int(torch.count_nonzero(nz))


def calibrate_hop(cp, G: PropGraph, theta, c_prev, rnd, cands) -> tuple[dict, dict[str, float]]:
    """Run one hop with every execution in ``cands`` and time it: seconds per unit of :func:`hop_work`, the cost
    model of ``impl="auto"`` for this graph (kept in :data:`HOP_COSTS` by graph size and dtype: measured once).
    ``"fused"`` runs once untimed first (numba compiles on its first call). Returns the hop's results by
    execution and the costs."""
    res, costs = {}, {}
    for impl in cands:
        if impl == "fused":
            _run_hop(impl, cp, G, theta, c_prev, rnd)
        t0 = time.perf_counter()
        res[impl] = _run_hop(impl, cp, G, theta, c_prev, rnd)
        dt = time.perf_counter() - t0
        pushes = res[impl][2] + res[impl][3]
        costs[impl] = max(dt, 1e-9) / max(1, hop_work(impl, G.n, G.m, cp.size(1), pushes))  # an edgeless graph
    return res, costs


def _hop_masked(out, cp, G: PropGraph, theta, c_prev, nz, u):
    # thresholds moved to the source side: |τ_e| >= θ  <=>  g_e >= θ / (a_v |cp_v|)  (inf for zero entries).
    # Everything per edge is an m × K elementwise pass; the sums into targets / sources are CSR SpMMs.
    _, s_dst, s_src = G.matrices(cp.dtype)
    amp = G.a.unsqueeze(1) * cp.abs()
    t_det = torch.where(nz, theta / torch.where(nz, amp, 1.0), torch.inf)
    g = G.g.unsqueeze(1)
    exact = g >= t_det[G.src]  # m × K, == position < c_det[src]
    c_det = (s_src @ exact.to(cp.dtype)).round_().to(c_prev.dtype)
    c = torch.where(nz, torch.minimum(c_prev, c_det), c_prev)
    del exact
    tau = G.w.unsqueeze(1) * cp[G.src]
    if u is not None:
        fire = g >= (t_det * u)[G.src]  # U · θ: a longer prefix, fires with probability min(1, |τ|/θ)
        # exact pushes carry τ, the others sign(τ) · θ: that is sign(τ) · max(|τ|, θ) up to rounding at |τ| = θ
        val = tau.abs().clamp_min_(theta).copysign_(tau).mul_(fire)
    else:
        fire = (G.pos.unsqueeze(1) < c[G.src]) & nz[G.src]  # zero entries are skipped, not counted as pushes
        val = tau.mul_(fire)
    out.add_(s_dst @ val)
    c_full = (s_src @ fire.to(cp.dtype)).round_().to(c_prev.dtype)
    return c_det, c_full, c


def _hop_prefix(out, cp, G: PropGraph, theta, c_prev, nz, u):
    n, K = cp.shape
    c = c_prev.clone()
    c_det = torch.zeros_like(c_prev)
    c_full = torch.zeros_like(c_prev)
    flat_nz = nz.reshape(-1).nonzero().view(-1)
    if flat_nz.numel() == 0:
        return c_det, c_full, c
    v, k = flat_nz // K, flat_nz % K
    cpv = cp.reshape(-1)[flat_nz]
    amp = G.a[v] * cpv.abs()
    cd = G.count_at_least(v, theta[k] / amp)
    c_det.view(-1)[flat_nz] = cd.to(c_det.dtype)
    cc = torch.minimum(c_prev.reshape(-1)[flat_nz].long(), cd)  # the regime only shrinks; zeros are skipped
    c.view(-1)[flat_nz] = cc.to(c.dtype)
    cf = torch.maximum(G.count_at_least(v, theta[k] * u.reshape(-1)[flat_nz] / amp), cd) if u is not None else cc
    c_full.view(-1)[flat_nz] = cf.to(c_full.dtype)
    cf = cf.long()
    # enumerate the executed pushes: positions 0..cf-1 of each non-zero (source, feature) list
    local = torch.repeat_interleave(torch.arange(cf.numel(), device=cp.device), cf)
    starts = cf.cumsum(0) - cf
    pos = torch.arange(int(cf.sum()), device=cp.device) - starts[local]
    j = G.ptr[v[local]] + pos
    val_src = cpv[local]
    if u is not None:
        val = torch.where(pos < cd[local], G.w[j] * val_src, torch.sign(val_src) * theta[k[local]])
    else:
        val = G.w[j] * val_src
    out.view(-1).index_add_(0, G.nbr[j] * K + k[local], val)
    return c_det, c_full, c


def _row(x, G: PropGraph, hops, delta_a, coef, kind, alpha, threshold, tail, stats: PropStats, spmm_impl="auto"):
    """Row mode (Algorithm 1). The CPU default compacts the edge list as edges are removed and runs a CSR SpMM; CUDA
    (or ``spmm_impl`` forced) keeps one CSR of ``T``'s non-loop part and a cumulative keep mask for the shared masked
    SpMM kernel: the same edges removed at the same hops, nothing compacted or re-sorted."""
    n, f = x.shape
    masked = spmm_impl != "auto" or x.is_cuda
    csr: Any = None
    if masked:
        from icml25_shared.kernels import CSR, masked_spmm

        if G._kernel_csr is None:  # messages src -> nbr: out[nbr] += w · p[src]; kept on the graph for later calls
            G._kernel_csr = CSR.from_coo(G.nbr, G.src, (n, n))
        csr = G._kernel_csr
        src, w = G.src[csr.order], G.w[csr.order]
        keep = torch.ones(G.m, dtype=torch.bool, device=x.device)
    else:
        ei, w = G.edge_index, G.w
        src = ei[0]
    p = x
    acc = alpha * x if kind == "appnp" else None
    for hop in range(hops):
        if delta_a > 0:
            norm = torch.linalg.vector_norm(p, dim=1)
            score = coef * w * norm[src]
            if threshold == "relative":
                live = score[keep] if masked else score
                thr = delta_a * torch.cat([live, coef * G.w_loop * norm]).mean()
            else:
                thr = delta_a
            if masked:
                keep = keep & (score >= thr)  # removed for good (Algorithm 1)
            else:
                kept_now = score >= thr
                ei, w = ei[:, kept_now], w[kept_now]  # removed for good (Algorithm 1)
                src = ei[0]
        prop = masked_spmm(csr, w, p, keep=keep, impl=spmm_impl) if masked else spmm(ei, w, p, n)
        p = coef * (prop + G.w_loop.unsqueeze(1) * p)
        kept = (int(keep.sum()) if masked else int(ei.size(1))) + n
        stats.kept.append(kept)
        stats.deterministic_pushes.append(kept * f)
        stats.random_pushes.append(0)
        stats.macs.append(kept * f)
        if acc is not None and (hop < hops - 1 or tail):
            acc = acc + (p if hop == hops - 1 else alpha * p)
    return (p if acc is None else acc), stats  # acc is set exactly for APPNP


def propagate_entry_reference(
    x: Tensor,
    edge_index: Tensor,
    hops: int,
    delta_a: float,
    *,
    kind: Kind = "sgc",
    alpha: float = 0.1,
    r: float = 0.5,
    push: Push = "random",
    appnp_tail: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The per-entry definition of ``mode="entry"`` (an ``m × f`` regime mask, one uniform per (edge, feature,
    hop)): the test reference of the prefix form, equal in law (same mean), not in draws."""
    delta_a = _check_common(x, edge_index, hops, delta_a, kind, alpha, r, "entry", push, "absolute")
    n, f = x.shape
    G = PropGraph(edge_index, n, r, x.dtype)
    coef = 1.0 - alpha if kind == "appnp" else 1.0
    theta = delta_a * x.abs().mean(0)
    regime = torch.ones(G.m, f, dtype=torch.bool)
    p = x
    acc = alpha * x if kind == "appnp" else None
    for hop in range(hops):
        tau = coef * G.w.unsqueeze(1) * p[G.src]  # m × f messages
        mag = tau.abs()
        small = (mag < theta) & (mag > 0)
        regime &= ~small  # non-zero entries under θ leave for good; zeros are skipped
        if push == "random":
            u = torch.rand(G.m, f, generator=generator, dtype=x.dtype)
            prob = torch.where(theta > 0, mag / torch.where(theta > 0, theta, 1.0), torch.ones_like(mag))
            fire = u < prob
            val = torch.where(regime | (mag >= theta), tau, torch.sign(tau) * theta * fire)
        else:
            val = tau * regime
        nxt = (coef * G.w_loop).unsqueeze(1) * p
        nxt = nxt.index_add(0, G.nbr, val)
        p = nxt
        if acc is not None and (hop < hops - 1 or appnp_tail):
            acc = acc + (p if hop == hops - 1 else alpha * p)
    return p if acc is None else acc  # acc is set exactly for APPNP
