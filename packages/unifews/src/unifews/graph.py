"""The graph a Unifews layer propagates over, prepared once: PyG's input forms, the normalised edge list, two CSR
orders and a fingerprint.

A layer accepts what :class:`torch_geometric.nn.GCNConv` accepts as ``edge_index``: an int64 ``[2, m]`` tensor, a
:class:`torch_geometric.EdgeIndex`, a ``torch.sparse`` adjacency ``adj_t`` (COO, CSR or CSC; ``adj_t[dst, src]`` is
the weight of the message ``src → dst``, PyG's transposed convention) or, when ``torch_sparse`` is installed, its
``SparseTensor``. :func:`as_edge_list` turns each into ``(edge_index, edge_weight)``; :class:`LayerGraph` then holds

* the edge list in PyG's layout (with self-loops added: the input's non-loop edges in their order, then one loop per
  node, as ``torch_geometric.utils.add_remaining_self_loops``), so explainers' edge masks line up with it;
* the diffusion weights ``w_e`` (paper Sec. 3.4's ``T[u, v]``);
* the edges sorted by target (the forward CSR) and by source (the transposed CSR of the backward), each sorted once.

Pruning then selects the kept edges of a CSR order with one boolean mask, O(m), without sorting again (paper Sec.
3.4, step 6: one SpMM over the kept edges). With ``cached=True`` a layer keeps its :class:`LayerGraph` across
forwards, as ``GCNConv(cached=True)`` keeps its normalisation.

:func:`graph_fingerprint` binds masks to the graph they were computed on: the ``"keep"`` scheme refuses a graph whose
fingerprint differs (a reordered or different edge list of the same size).
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch
from torch import Tensor

from unifews import _kept, _pyg  # noqa: F401  (_pyg imports torch_geometric quietly)
from unifews.functional import check_edge_index, check_edge_weight, diffusion_weights

from torch_geometric import EdgeIndex  # isort: skip
import torch_geometric.typing as pyg_typing  # isort: skip

# torch_sparse's SparseTensor when installed, else PyG's placeholder class (which nothing is an instance of)
SparseTensor: Any = pyg_typing.SparseTensor

__all__ = ["LayerGraph", "as_edge_list", "graph_fingerprint", "is_sparse_adj", "kept_spmm", "kept_spmm_csr"]

_M32 = 0xFFFFFFFF
_CSR_QUIET = False  # set once the first CSR tensor was built with torch's once-per-process beta warning silenced


def _mix32(x: Tensor) -> Tensor:
    # a 32-bit integer mixer on int64 values (products stay below 2**59)
    x = x & _M32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _M32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _M32
    return x ^ (x >> 16)


def graph_fingerprint(edge_index: Tensor, num_nodes: int) -> Tensor:
    """int64 ``[4]``: ``(num_nodes, num_edges, h1, h2)`` with ``h1``, ``h2`` two position-dependent hashes of the
    edge list. Equal graphs in the same edge order give equal fingerprints; a reordered or different edge list of
    the same size differs with probability ``1 - 2^-64`` or so."""
    src, dst = edge_index[0], edge_index[1]
    pos = torch.arange(src.numel(), device=src.device)
    h1 = _mix32(src * 0x9E3779B1 + dst * 0x85EBCA77 + pos * 0xC2B2AE3D).sum()
    h2 = _mix32(src * 0x27D4EB2F + pos * 0x165667B1 + dst * 0x61C88647 + 0x632BE5AB).sum()
    return torch.stack([src.new_tensor(num_nodes), src.new_tensor(src.numel()), h1, h2]).cpu()


def is_sparse_adj(adj: object) -> bool:
    """True for a ``torch.sparse`` tensor or a ``torch_sparse.SparseTensor`` (an ``adj_t``)."""
    return isinstance(adj, SparseTensor) or (isinstance(adj, Tensor) and adj.layout != torch.strided)


def as_edge_list(adj: object, edge_weight: Tensor | None, num_nodes: int) -> tuple[Tensor, Tensor | None, bool]:
    """``(edge_index [2, m], edge_weight or None, sorted_by_target)`` from any of the accepted graph forms.

    A sparse ``adj_t`` gives its stored values as ``edge_weight`` (as PyG's layers use them); passing both an
    ``adj_t`` and an ``edge_weight`` is an error. ``sorted_by_target`` says whether the edges already come in CSR
    order (a CSR ``adj_t``, or an ``EdgeIndex`` sorted by column), which saves the sort of the forward CSR.
    """
    if isinstance(adj, SparseTensor):  # torch_sparse, when installed
        if edge_weight is not None:
            raise ValueError("pass edge weights inside the SparseTensor adj_t, not as edge_weight")
        sp = cast(Any, adj)
        row, col, value = sp.coo()
        _check_square(tuple(sp.sizes()), num_nodes)
        return torch.stack([col, row]), value, True
    if isinstance(adj, Tensor) and adj.layout != torch.strided:
        if edge_weight is not None:
            raise ValueError("pass edge weights as the values of the sparse adj_t, not as edge_weight")
        _check_square(tuple(adj.shape), num_nodes)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
            if adj.layout == torch.sparse_csr:
                crow, col, value = adj.crow_indices(), adj.col_indices(), adj.values()
                row = torch.repeat_interleave(torch.arange(num_nodes, device=crow.device), crow.diff())
                return torch.stack([col, row]), value, True
            if adj.layout == torch.sparse_coo:
                adj = adj.coalesce()
                row, col = adj.indices()
                return torch.stack([col, row]), adj.values(), True  # coalesced: sorted by row = target
            if adj.layout == torch.sparse_csc:
                ccol, row, value = adj.ccol_indices(), adj.row_indices(), adj.values()
                col = torch.repeat_interleave(torch.arange(num_nodes, device=ccol.device), ccol.diff())
                return torch.stack([col, row]), value, False
        raise TypeError(f"edge_index as a sparse tensor must be COO, CSR or CSC, got layout {adj.layout}")
    if isinstance(adj, EdgeIndex):
        sorted_by_target = adj.is_sorted_by_col
        ei = adj.as_tensor()
        check_edge_index(ei, num_nodes)
        check_edge_weight(edge_weight, ei.size(1))
        return ei, edge_weight, sorted_by_target
    ei = cast(Tensor, adj)  # check_edge_index raises on anything else
    check_edge_index(ei, num_nodes)
    check_edge_weight(edge_weight, ei.size(1))
    return ei, edge_weight, False


def _check_square(shape: tuple, num_nodes: int) -> None:
    if len(shape) != 2 or shape[0] != num_nodes or shape[1] != num_nodes:
        raise ValueError(f"adj_t must have shape [num_nodes, num_nodes] = [{num_nodes}, {num_nodes}], got {shape}")


def _is_sorted(t: Tensor) -> bool:
    return t.numel() < 2 or bool((t[1:] >= t[:-1]).all())


def _index_dtype(n: int, m: int) -> torch.dtype:
    """int32 CSR indices when they fit (what MKL's sparse kernels take: no conversion per SpMM), else int64."""
    return torch.int32 if max(n, m) < 2**31 - 1 else torch.long


def _ptr(sorted_rows: Tensor, n: int) -> Tensor:
    ptr = torch.zeros(n + 1, dtype=torch.long, device=sorted_rows.device)
    ptr[1:] = torch.bincount(sorted_rows, minlength=n).cumsum(0)
    return ptr


class LayerGraph:
    """A graph prepared for Unifews propagation: ``edge_index`` ``[2, m]`` (source, target), weights ``w`` ``[m]``,
    ``is_loop``, and the two CSR orders (built on first use, then kept).

    Build it with :meth:`prepare` (from any accepted graph form, with or without GCN normalisation).
    """

    def __init__(self, edge_index: Tensor, edge_weight: Tensor, num_nodes: int, *, sorted_by_target: bool = False):
        self.edge_index, self.w, self.n = edge_index, edge_weight, num_nodes
        self.m = int(edge_index.size(1))
        self.is_loop = edge_index[0] == edge_index[1]
        self._sorted_by_target = sorted_by_target and _is_sorted(edge_index[1])
        self._fwd: tuple[Tensor | None, Tensor, Tensor] | None = None
        self._bwd: tuple[Tensor, Tensor, Tensor] | None = None
        self.fingerprint: Tensor | None = None  # of the input graph, set by prepare
        self._num_loops: int | None = None

    @property
    def num_loops(self) -> int:
        """Number of self-loop edges."""
        if self._num_loops is None:
            self._num_loops = int(self.is_loop.sum())
        return self._num_loops

    @classmethod
    def prepare(
        cls,
        adj: object,
        edge_weight: Tensor | None,
        num_nodes: int,
        *,
        normalize: bool,
        add_self_loops: bool = True,
        improved: bool = False,
        r: float = 0.5,
        dtype: torch.dtype | None = None,
    ) -> LayerGraph:
        """From ``adj`` (any accepted form): with ``normalize`` the diffusion weights of ``T`` (self-loops of weight 1,
        or 2 when ``improved``, added when missing); otherwise ``edge_weight`` (1 when None) as given."""
        if isinstance(adj, LayerGraph):
            return adj
        ei, ew, sorted_by_target = as_edge_list(adj, edge_weight, num_nodes)
        fp = graph_fingerprint(ei, num_nodes)
        if normalize:
            fill = 2.0 if improved else 1.0
            n_before = ei.size(1)
            ei, ew = diffusion_weights(
                ei, num_nodes, ew, r=r, add_self_loops=add_self_loops, fill_value=fill, dtype=dtype
            )
            sorted_by_target = sorted_by_target and ei.size(1) == n_before  # loops appended at the end
        elif ew is None:
            ew = torch.ones(ei.size(1), dtype=dtype or torch.get_default_dtype(), device=ei.device)
        elif dtype is not None:
            ew = ew.to(dtype)
        g = cls(ei, ew, num_nodes, sorted_by_target=sorted_by_target)
        g.fingerprint = fp
        return g

    # ---- the two CSR orders -------------------------------------------------------------------------------------
    def forward_order(self) -> tuple[Tensor | None, Tensor, Tensor]:
        """``(perm, ptr, col)``: edges sorted by target (``perm`` None when already sorted), row pointer, sources."""
        if self._fwd is None:
            src, dst = self.edge_index
            idt = _index_dtype(self.n, self.m)
            perm = None if self._sorted_by_target else torch.argsort(dst, stable=True)
            rows = dst if perm is None else dst[perm]
            col = src if perm is None else src[perm]
            perm = None if perm is None else perm.to(idt)
            self._fwd = (perm, _ptr(rows, self.n).to(idt), col.to(idt))
        return self._fwd

    def backward_order(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(perm, ptr, col)``: edges sorted by source (the transposed CSR), row pointer, targets."""
        if self._bwd is None:
            src, dst = self.edge_index
            idt = _index_dtype(self.n, self.m)
            perm = torch.argsort(src, stable=True)
            self._bwd = (perm.to(idt), _ptr(src[perm], self.n).to(idt), dst[perm].to(idt))
        return self._bwd

    def _sorted_values(self, w: Tensor, perm: Tensor | None, transposed: bool) -> Tensor:
        """``w`` (detached) in a CSR order; the graph's own weights are gathered into each order once."""
        if w is not self.w:
            return w.detach() if perm is None else w.detach().index_select(0, perm)
        key = "_w_bwd" if transposed else "_w_fwd"
        cached = self.__dict__.get(key)
        if cached is None or cached[0] is not w:
            cached = (w, w.detach() if perm is None else w.detach().index_select(0, perm))
            self.__dict__[key] = cached
        return cached[1]

    def csr(self, w: Tensor, mask: Tensor | None, transposed: bool = False) -> Tensor:
        """The CSR matrix ``A[dst, src] = w_e`` (``transposed``: ``A[src, dst]``) over the edges where ``mask`` holds
        (all when None), selected from the stored order with one boolean pass (no sort).

        The last kept CSR of each order is remembered with its mask and weights (by identity and in-place version
        counter): a fixed mask (``scheme_a="keep"``, or the backward of the forward that built it) selects once.
        """
        key = "_kept_bwd" if transposed else "_kept_fwd"
        # inference tensors (torch.inference_mode) have no version counter: their selections are not remembered
        remember = not (w.is_inference() or (mask is not None and mask.is_inference()))
        version = (w._version, None if mask is None else mask._version) if remember else None
        memo = self.__dict__.get(key)
        if remember and memo is not None and memo[0] is mask and memo[1] is w and memo[2] == version:
            return memo[3]
        perm, ptr, col = self.backward_order() if transposed else self.forward_order()
        vals = self._sorted_values(w, perm, transposed)
        if mask is not None and mask.is_contiguous() and _compiled_ok(mask, vals):
            ptr, col, vals = _kept.select_csr(ptr, col, vals.contiguous(), perm, mask)  # one pass (numba)
        elif mask is not None:
            sel = mask if perm is None else mask.index_select(0, perm)
            idx = sel.nonzero().view(-1)  # kept positions, in CSR order
            csum = torch.empty(sel.numel() + 1, dtype=torch.long, device=sel.device)
            csum[0] = 0
            torch.cumsum(sel, 0, out=csum[1:])
            ptr = csum.index_select(0, ptr).to(ptr.dtype)
            col, vals = col.index_select(0, idx), vals.index_select(0, idx)
        out = self._csr_tensor(ptr, col, vals)
        self.__dict__[key] = (mask, w, version, out) if remember else None
        return out

    def _csr_tensor(self, ptr: Tensor, col: Tensor, vals: Tensor) -> Tensor:
        global _CSR_QUIET
        if _CSR_QUIET:
            return torch.sparse_csr_tensor(ptr, col, vals, (self.n, self.n), check_invariants=False)
        with warnings.catch_warnings():  # torch warns once per process that CSR is beta: not the user's concern
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
            out = torch.sparse_csr_tensor(ptr, col, vals, (self.n, self.n), check_invariants=False)
        _CSR_QUIET = True
        return out

    def _numpy_order(self, transposed: bool) -> tuple[tuple[Any, ...], Any]:
        """``((perm | None, ptr, col, vals), is_loop)`` of a CSR order over the graph's own weights, as numpy views
        (kept while ``w`` and ``is_loop`` are the same tensors, ``w`` unchanged in place)."""
        key = "_np_bwd" if transposed else "_np_fwd"
        w, loop = self.w, self.is_loop
        memo = self.__dict__.get(key)
        if memo is None or memo[0] is not w or memo[1] != w._version or memo[2] is not loop:
            perm, ptr, col = self.backward_order() if transposed else self.forward_order()
            vals = self._sorted_values(w, perm, transposed).contiguous()
            order = (None if perm is None else perm.numpy(), ptr.numpy(), col.numpy(), vals.numpy())
            memo = (w, w._version, loop, order, loop.contiguous().numpy())
            self.__dict__[key] = memo
        return memo[3], memo[4]

    def select_scored(
        self, norms: Tensor, theta: float, active: Tensor | None, backward: bool
    ) -> tuple[Tensor, int] | None:
        """The edge rule and the kept CSRs in one compiled pass over the graph's own weights
        (:func:`unifews._kept.scored_kept_pair`): ``keep_e = (|w_e| · norms[src_e] >= θ ∨ is_loop_e) ∧ active_e``.

        Returns ``(keep, number kept)`` and remembers the kept forward CSR (and, with ``backward``, the transposed
        one) for :meth:`csr` under the returned mask, so the SpMMs that follow select nothing. Returns None where this
        path does not apply (numba missing, not on the CPU, a dtype other than float32 / float64, inference mode):
        the caller then runs the torch rule, whose mask this one equals bit for bit.
        """
        w = self.w
        if not _compiled_ok(norms, w) or w.dtype != norms.dtype or torch.is_inference_mode_enabled():
            return None
        fwd, loop = self._numpy_order(False)
        if backward and compiled_spmm_applies(norms, w):
            backward = False  # the compiled backward scatters from the forward CSR: no transposed selection
        bwd = self._numpy_order(True)[0] if backward else None
        keep_np, k, f, b = _kept.scored_kept_pair(
            norms.detach().contiguous().numpy(), theta, fwd, loop,
            None if active is None else active.contiguous().numpy(), bwd,
        )  # fmt: skip
        keep = torch.from_numpy(keep_np)
        f = tuple(torch.from_numpy(a) for a in f)
        b = None if b is None else tuple(torch.from_numpy(a) for a in b)
        version = (w._version, keep._version)
        self.__dict__["_kept_fwd"] = (keep, w, version, self._csr_tensor(*f))
        if b is not None:
            self.__dict__["_kept_bwd"] = (keep, w, version, self._csr_tensor(*b))
        return keep, k

    def abs_weights(self) -> Tensor:
        """``|w|`` (kept for the edge scores of every forward)."""
        cached = self.__dict__.get("_w_abs")
        if cached is None or cached[0] is not self.w:
            cached = (self.w, self.w.abs())
            self.__dict__["_w_abs"] = cached
        return cached[1]


def check_cached_graph(
    graph: LayerGraph, source: object, edge_index: object, num_nodes: int, owner: str, hint: str
) -> object:
    """``cached=True``: the cached ``graph`` (built from ``source``) may serve ``edge_index`` only if it is the same
    object or the same edge list in the same order (equal fingerprints); otherwise ``ValueError``. Returns the
    object to remember as the cache's source."""
    if edge_index is not source:  # not the same object: prove it is the same graph
        ei, _, _ = as_edge_list(edge_index, None, num_nodes)
        fp = graph.fingerprint
        if fp is None or not torch.equal(graph_fingerprint(ei, num_nodes), fp):
            raise ValueError(
                f"cached=True: the {owner} cached the graph of its first forward and got a different edge list "
                f"(other edges or another order); {hint}"
            )
    return edge_index


def compiled_spmm_applies(z: Tensor, w: Tensor) -> bool:
    """Whether :class:`_KeptSpMM` runs its SpMMs as compiled loops (:func:`unifews._kept.spmm_gather` /
    :func:`~unifews._kept.spmm_scatter`) rather than through torch's CSR kernel: numba installed, CPU, float32 /
    float64, and one torch thread (the library's default; with more threads torch's parallel kernel is used). The
    loops sum every row in the CSR's entry order, as torch's kernel does, and need no transposed CSR: the backward
    scatters from the forward's."""
    return _compiled_ok(z, w) and w.dtype == z.dtype and torch.get_num_threads() == 1


def _compiled_ok(*tensors: Tensor) -> bool:
    """Whether the compiled loops of :mod:`unifews._kept` can take these tensors: numba installed, every tensor on
    the CPU, the floating ones in float32 / float64 (numba has no half types)."""
    return _kept.AVAILABLE and all(
        t.device.type == "cpu" and (not t.is_floating_point() or t.dtype in (torch.float32, torch.float64))
        for t in tensors
    )


def _csr_mm(a: Tensor, m: Tensor) -> Tensor:
    """``a @ m`` through torch's CSR kernel; half precision on the CPU (which that kernel lacks) in float32, the
    result cast back."""
    if m.device.type == "cpu" and m.dtype in (torch.float16, torch.bfloat16):
        return (a.to(torch.float32) @ m.to(torch.float32)).to(m.dtype)
    return a @ m


def _csr_numpy(a: Tensor) -> tuple[Any, Any, Any]:
    return a.crow_indices().numpy(), a.col_indices().numpy(), a.values().detach().numpy()


class _KeptSpMM(torch.autograd.Function):
    """``out = (A ⊙ M) @ Z`` over a :class:`LayerGraph`: forward through the target-sorted CSR; backward through the
    source-sorted one (torch's kernel) or by scattering from the forward's (compiled loops,
    :func:`compiled_spmm_applies`), both selected by the mask ``M`` (no m × f message tensor)."""

    @staticmethod
    def forward(ctx, w: Tensor, z: Tensor, graph: LayerGraph, mask: Tensor | None, adj_t: Tensor | None):  # type: ignore[override]
        ctx.graph, ctx.mask, ctx.own_weights = graph, mask, w is graph.w
        ctx.save_for_backward(w, z)
        ctx.csr_np = None
        if graph.m == 0:
            return z.new_zeros(graph.n, z.size(1))
        a = graph.csr(w, mask) if adj_t is None else adj_t
        if compiled_spmm_applies(z, w):
            ctx.csr_np = ptr, col, vals = _csr_numpy(a)
            out = torch.empty((graph.n, z.size(1)), dtype=z.dtype)
            _kept.spmm_gather(ptr, col, vals, z.detach().contiguous().numpy(), out.numpy())
            return out
        return _csr_mm(a, z.detach())

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        w, z = ctx.saved_tensors
        graph, mask = ctx.graph, ctx.mask
        if ctx.own_weights:  # the graph's weights: their transposed order is cached on the graph
            w = graph.w
        grad_w = grad_z = None
        if ctx.needs_input_grad[1]:
            if graph.m == 0:
                grad_z = torch.zeros_like(z)
            elif ctx.csr_np is not None:
                grad_z = torch.zeros((graph.n, z.size(1)), dtype=z.dtype)
                ptr, col, vals = ctx.csr_np
                _kept.spmm_scatter(ptr, col, vals, grad_out.detach().contiguous().numpy(), grad_z.numpy())
            else:
                grad_z = _csr_mm(graph.csr(w, mask, transposed=True), grad_out)
        if ctx.needs_input_grad[0]:
            src, dst = graph.edge_index
            grad_w = torch.zeros_like(w)
            step = max(1, (1 << 22) // max(1, z.size(1)))
            for i in range(0, graph.m, step):  # d out[dst_e] / d w_e = Z[src_e], in chunks
                s, d = src[i : i + step], dst[i : i + step]
                grad_w[i : i + step] = (grad_out[d] * z[s]).sum(-1)
            if mask is not None:
                grad_w = grad_w * mask
        return grad_w, grad_z, None, None, None


def kept_spmm(graph: LayerGraph, w: Tensor, z: Tensor, mask: Tensor | None = None) -> Tensor:
    """``out[u] = Σ_{e: dst_e = u, mask_e} w_e Z[src_e]``, differentiable in ``w`` and ``z``."""
    return _KeptSpMM.apply(w, z, graph, mask, None)


def kept_spmm_csr(adj_t: Tensor, graph: LayerGraph, w: Tensor, z: Tensor, mask: Tensor | None) -> Tensor:
    """:func:`kept_spmm` with the forward CSR already built (``adj_t = graph.csr(w, mask)``)."""
    return _KeptSpMM.apply(w, z, graph, mask, adj_t)
