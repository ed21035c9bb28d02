"""Unifews convolutions: drop-in ``MessagePassing`` layers that prune messages and weights entry-wise.

Every layer follows the official code's rule for iterative layers (the paper's eq. 9 and eq. 14 applied to one
layer):

1. weight mask ``M`` by the input-norm rule (:func:`~unifews.functional.weight_mask`), ``W_eff = W ⊙ M``;
2. the factorised message norm ``s_e = |w_e| · ‖Z[src_e]‖₂`` of the matrix ``Z`` being propagated;
3. ``keep_e = (s_e >= θ_a ∨ is_loop(e)) ∧ active_e`` (``θ_a = δa · mean s`` or ``δa``; ``active``: the edges the
   previous layer kept);
4. ``agg_e = keep_e ∨ (lock[dst_e] ∧ active_e)`` -- messages into locked (evaluated) nodes are restored in this
   layer only;
5. :meth:`~torch_geometric.nn.conv.MessagePassing.propagate` over the aggregated edges: the fused path is one CSR SpMM
   whose kept edges are selected from the graph's cached CSR order by a mask (no sort per forward); under an
   explainer (``explain=True``) the message path runs over every edge, pruned ones weighted 0, so edge masks line
   up with the input graph. The layer records the kept set for the next layer (progressive:
   ``E^{(l+1)} ⊆ E^{(l)}``).

``edge_index`` may be an int64 ``[2, m]`` tensor, a :class:`torch_geometric.EdgeIndex`, a ``torch.sparse`` ``adj_t``
or (with ``torch_sparse``) a ``SparseTensor``, as for :class:`torch_geometric.nn.GCNConv`; see :mod:`unifews.graph`.

Schemes (``set_scheme(scheme_a, scheme_w)``): ``"prune_all"`` recomputes the mask from the current input and the
stored dense weights (pruned weights come back: "rewind"); ``"prune_inc"`` intersects with the stored mask (and
zeroes pruned weights for good); ``"keep"`` reuses the stored masks exactly, and only on the graph they were
computed on (same fingerprint, :func:`~unifews.graph.graph_fingerprint`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25_shared.validate import check_bool, check_choice, check_float, check_int
from unifews import _pyg  # noqa: F401  (imports torch_geometric quietly)
from unifews.config import SCHEMES, Scheme, Threshold, UnifewsConfig
from unifews.functional import (
    check_lock,
    check_x,
    edge_keep_mask,
    edge_keys,
    edge_threshold,
    weight_mask,
)
from unifews.graph import LayerGraph, as_edge_list, check_cached_graph, graph_fingerprint, kept_spmm_csr

from torch_geometric.nn import MessagePassing  # isort: skip
from torch_geometric.nn.dense.linear import Linear  # isort: skip
from torch_geometric.nn.inits import glorot, zeros  # isort: skip
from torch_geometric.utils import remove_self_loops, softmax  # isort: skip

__all__ = ["UnifewsConvMixin", "UnifewsGCNConv", "UnifewsGATv2Conv", "UnifewsSAGEConv", "UnifewsGCN2Conv"]


class _Kept(NamedTuple):
    """What the fused ``message_and_aggregate`` needs beyond the kept ``adj_t``: the graph, the weights, the mask."""

    graph: LayerGraph
    w: Tensor
    mask: Tensor | None


def check_active(active: Tensor | None, num_edges: int, device: torch.device) -> Tensor | None:
    """``active`` as a bool mask over the layer's ``num_edges`` edges (self-loops included), or None."""
    if active is None:
        return None
    if not isinstance(active, Tensor) or active.dtype != torch.bool or active.dim() != 1:
        raise TypeError(f"active must be None or a 1-D bool tensor, got {getattr(active, 'dtype', type(active))}")
    if active.numel() != num_edges:
        raise ValueError(f"active must have one entry per edge of the graph ({num_edges}), got {active.numel()}")
    return active.to(device)


class UnifewsConvMixin:
    """Mask state, schemes, graph cache and statistics shared by the Unifews layers.

    Subclasses list their pruned linear maps in ``_pruned`` (attribute names whose ``.weight`` is pruned) and call
    :meth:`_masked_weight`, :meth:`_layer_graph`, :meth:`_edge_step` and :meth:`_propagate` in ``forward``.
    """

    _pruned: tuple[str, ...] = ()

    def _init_unifews(self, config: UnifewsConfig | None, cached: bool = False, **overrides: Any) -> None:
        cfg = config if config is not None else UnifewsConfig()
        if not isinstance(cfg, UnifewsConfig):
            raise TypeError(f"config must be a UnifewsConfig or None, got {type(cfg).__name__}")
        if overrides:
            cfg = UnifewsConfig(**{**cfg.__dict__, **{k: v for k, v in overrides.items() if v is not None}})
        self.config = cfg
        self.cached = check_bool("cached", cached)
        self._cached_graph: LayerGraph | None = None
        self._cache_source: object = None
        self.theta_a: float | None = None  # a frozen absolute edge threshold (freeze_edge_threshold)
        self.scheme_a = "prune_all"
        self.scheme_w = "prune_all"
        for name in self._pruned:
            w = self._get_weight(name)
            self.register_buffer(f"{name}_mask", torch.ones(w.shape, dtype=torch.bool, device=w.device))
        self.register_buffer("edge_keep", None)
        self.register_buffer("edge_fingerprint", None)
        self._kept: Tensor | tuple[Tensor, Tensor] | None = None
        self.last_stats: dict[str, float] = {}

    # ---- state ----------------------------------------------------------------------------------------------
    def _get_weight(self, name: str) -> Tensor:
        mod = getattr(self, name)
        return mod.weight if isinstance(mod, nn.Module) else mod

    def set_scheme(self, scheme_a: Scheme, scheme_w: Scheme) -> None:
        """Set the edge scheme and the weight scheme, each one of ``prune_all``, ``prune_inc``, ``keep``."""
        self.scheme_a = check_choice("scheme_a", scheme_a, SCHEMES)
        self.scheme_w = check_choice("scheme_w", scheme_w, SCHEMES)

    def reset_cache(self) -> None:
        """Forget the cached graph (``cached=True``), as ``GCNConv`` does in ``reset_parameters``."""
        self._cached_graph = self._cache_source = None

    def _reset_masks(self) -> None:
        for name in self._pruned:
            if hasattr(self, f"{name}_mask"):
                getattr(self, f"{name}_mask").fill_(True)
        if hasattr(self, "_cached_graph"):
            self.edge_keep = self.edge_fingerprint = self.kept_edge_index = None
            self.theta_a = None
            self.reset_cache()

    @property
    def kept_edge_index(self) -> Tensor | None:
        """``[2, m_kept]``: the edges the last pruning forward kept (compacted on first access)."""
        kept = self.__dict__.get("_kept")
        if isinstance(kept, tuple):
            kept = kept[0][:, kept[1]]
            self.__dict__["_kept"] = kept
        return kept

    @kept_edge_index.setter
    def kept_edge_index(self, value: Tensor | None) -> None:
        self.__dict__["_kept"] = value

    def freeze_edge_threshold(self) -> float:
        """Fix the edge threshold at the ``θ_a`` of the last pruning forward, as an absolute value.

        With ``threshold="relative"`` the threshold is ``δa`` times the mean message norm of the graph the layer is
        given, so a mini-batch prunes relative to its own mean. Freezing it after a full-graph forward makes
        mini-batch inference prune exactly as the full graph did (for the edges whose sources the batch computes
        exactly). Returns ``θ_a``; ``theta_a = None`` undoes it.
        """
        if "theta_a" not in self.last_stats:
            raise RuntimeError("run a pruning forward (scheme_a 'prune_all' or 'prune_inc') before freezing θ_a")
        self.theta_a = float(self.last_stats["theta_a"])
        return self.theta_a

    def sparsity(self) -> dict[str, float]:
        """Weight sparsity (fraction of zero mask entries over the pruned maps) and edge sparsity of the last
        forward (fraction of removed non-loop edges of its input graph)."""
        total = sum(getattr(self, f"{n}_mask").numel() for n in self._pruned)
        kept = sum(int(getattr(self, f"{n}_mask").sum()) for n in self._pruned)
        out = {"weight": 1.0 - kept / total if total else 0.0}
        m, k = self.last_stats.get("edges_in_nonloop", 0), self.last_stats.get("edges_kept_nonloop", 0)
        out["edge"] = 1.0 - k / m if m else 0.0
        return out

    def weight_density(self) -> float:
        """Fraction of kept weights over the pruned maps (ρ_w of the MAC count, :mod:`unifews.macs`)."""
        return 1.0 - self.sparsity()["weight"]

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        kept = self.kept_edge_index
        if kept is not None:
            destination[prefix + "kept_edge_index"] = kept if keep_vars else kept.detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected, errors):
        # the edge masks have the size of the last graph: adopt them before the default (shape-checking) loader
        for key in ("edge_keep", "edge_fingerprint", "kept_edge_index"):
            if prefix + key in state_dict:
                setattr(self, key, state_dict[prefix + key].clone())
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected, errors)
        if prefix + "kept_edge_index" in unexpected:
            unexpected.remove(prefix + "kept_edge_index")

    # ---- the graph ------------------------------------------------------------------------------------------
    def _layer_graph(
        self,
        x: Tensor,
        edge_index: Any,
        edge_weight: Tensor | None,
        *,
        normalize: bool,
        add_self_loops: bool = True,
        improved: bool = False,
        mean_weights: bool = False,
    ) -> LayerGraph:
        """The :class:`LayerGraph` of this forward: the cached one (``cached=True``, the same graph), or prepared
        from ``edge_index`` (GCN normalisation when ``normalize``; ``1 / indeg`` weights when ``mean_weights`` and no
        ``edge_weight`` is given)."""
        n = x.size(0)
        if isinstance(edge_index, LayerGraph):
            if edge_weight is not None:
                raise ValueError("a LayerGraph carries its weights; pass edge_weight=None with it")
            if edge_index.n != n:
                raise ValueError(f"the LayerGraph has {edge_index.n} nodes but x has {n} rows")
            return edge_index
        if self.cached and self._cached_graph is not None:
            self._cache_source = check_cached_graph(
                self._cached_graph, self._cache_source, edge_index, n, "layer", "call reset_cache() to use a new graph"
            )
            return self._cached_graph
        g = LayerGraph.prepare(
            edge_index,
            edge_weight,
            n,
            normalize=normalize,
            add_self_loops=add_self_loops,
            improved=improved,
            r=self.config.r,
            dtype=x.dtype,
        )
        if mean_weights and edge_weight is None:  # SAGE: mean aggregation, 1 / indeg computed on the input graph
            deg = x.new_zeros(n).index_add_(0, g.edge_index[1], x.new_ones(g.m))
            g.w = deg.clamp_min(1).reciprocal()[g.edge_index[1]]
        if self.cached:
            self._cached_graph, self._cache_source = g, edge_index
        return g

    # ---- the two rules --------------------------------------------------------------------------------------
    def _masked_weight(self, name: str, h: Tensor, transpose: bool = False) -> Tensor:
        """``W ⊙ M`` for the linear map ``name`` fed with ``h`` (``transpose``: the weight is stored (f_in, f_out))."""
        w = self._get_weight(name)
        stored = getattr(self, f"{name}_mask")
        if self.scheme_w == "keep":
            mask = stored
        else:
            wt = w.t() if transpose else w
            new = weight_mask(wt, h, self.config.delta_w, self.config.threshold, eps=self.config.eps)
            new = new.t() if transpose else new
            if self.scheme_w == "prune_inc":
                mask = stored & new
                with torch.no_grad():
                    w.mul_(mask)  # pruned values are zeroed for good
            else:
                mask = new
            stored.copy_(mask)
        return w * mask

    def _stored_keep(self, graph: LayerGraph) -> Tensor:
        if self.edge_keep is None or self.edge_keep.numel() != graph.m:
            got = None if self.edge_keep is None else self.edge_keep.numel()
            raise ValueError(
                f"scheme_a='keep' needs the graph of the last pruning forward ({got} edges), got {graph.m} "
                "edges; run a 'prune_all' forward on this graph first"
            )
        fp = graph.fingerprint
        if self.edge_fingerprint is not None and fp is not None and not torch.equal(self.edge_fingerprint.cpu(), fp):
            raise ValueError(
                "scheme_a='keep' needs the graph of the last pruning forward: this edge list has the same size but "
                "other edges or another order (graph fingerprint differs); run a 'prune_all' forward on it first"
            )
        return self.edge_keep.to(graph.edge_index.device)

    def _edge_step(
        self, graph: LayerGraph, scores_fn, lock: Tensor | None, active: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """Return ``(keep, agg)``: bool masks over the graph's edges (steps 3-4 of the rule in the module docstring;
        ``agg`` None when every edge is aggregated), and record ``keep``."""
        cfg = self.config
        is_loop = graph.is_loop
        every_edge = False
        if self.scheme_a == "keep":
            keep = self._stored_keep(graph)
            if active is not None:
                keep = keep & active
        else:
            inf = cfg.delta_a == float("inf")
            if cfg.delta_a == 0 or (inf and self.theta_a is None):
                keep = edge_keep_mask(is_loop, is_loop, cfg.delta_a, active=active)
                every_edge = cfg.delta_a == 0 and active is None
                theta = 0.0 if cfg.delta_a == 0 else math.inf
            else:
                with torch.no_grad():
                    scores = scores_fn()
                if self.theta_a is not None:  # frozen absolute threshold (freeze_edge_threshold)
                    theta = self.theta_a
                    keep = (scores >= theta) | is_loop
                    keep = keep if active is None else keep & active
                else:
                    theta = float(edge_threshold(scores, cfg.delta_a, cfg.threshold, active))
                    keep = edge_keep_mask(scores, is_loop, cfg.delta_a, cfg.threshold, active=active)
            if self.scheme_a == "prune_inc" and self.edge_keep is not None:
                same = self.edge_fingerprint is not None and torch.equal(self.edge_fingerprint.cpu(), graph.fingerprint)
                if same and self.edge_keep.numel() == graph.m:
                    keep = keep & self.edge_keep.to(keep.device)
                elif self.kept_edge_index is not None:
                    prev = edge_keys(self.kept_edge_index.to(keep.device), graph.n)
                    keep = keep & torch.isin(edge_keys(graph.edge_index, graph.n), prev)
                every_edge = False
            self.edge_keep = keep.detach()
            self.edge_fingerprint = graph.fingerprint
            self.__dict__["_kept"] = (graph.edge_index, self.edge_keep)
            self.last_stats["theta_a"] = theta
        if lock is None:
            agg = None if every_edge else keep
        else:
            restored = lock[graph.edge_index[1]]
            agg = keep | (restored if active is None else restored & active)
        n_loop = graph.num_loops
        m_in = graph.m if active is None else int(torch.count_nonzero(active))
        m_kept = m_in if every_edge else int(torch.count_nonzero(keep))
        self.last_stats.update(
            num_nodes=graph.n,
            edges_in=m_in,
            edges_in_nonloop=m_in - n_loop,
            edges_kept=m_kept,
            edges_kept_nonloop=m_kept - n_loop,
            edges_aggregated=m_kept if agg is None or agg is keep else int(torch.count_nonzero(agg)),
        )
        return keep, agg

    # ---- propagation ----------------------------------------------------------------------------------------
    def _propagate(self, graph: LayerGraph, z: Tensor, agg: Tensor | None, w: Tensor | None = None) -> Tensor:
        """``out[u] = Σ_{e: dst_e = u, agg_e} w_e z[src_e]`` through :meth:`MessagePassing.propagate`."""
        w = graph.w if w is None else w
        if self.explain:  # message path over every edge (explainers mask the input edges; pruned ones weigh 0)
            ew = w if agg is None else w * agg
            return self.propagate(graph.edge_index, x=z, edge_weight=ew, kept=None)
        adj_t = graph.csr(w, agg)  # the kept edges, selected from the cached CSR order (values detached)
        return self.propagate(adj_t, x=z, edge_weight=None, kept=_Kept(graph, w, agg))

    def message(self, x_j: Tensor, edge_weight: Tensor | None) -> Tensor:
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor, kept: _Kept) -> Tensor:
        return kept_spmm_csr(adj_t, kept.graph, kept.w, x, kept.mask)


def _scores(graph: LayerGraph, z: Tensor) -> Tensor:
    """``s_e = |w_e| · ‖z[src_e]‖₂`` (:func:`~unifews.functional.message_scores`) with ``|w|`` kept on the graph."""
    return graph.abs_weights() * torch.linalg.vector_norm(z, dim=1)[graph.edge_index[0]]


def _graph_out(out: Tensor, graph: LayerGraph, keep: Tensor, return_graph: bool, carry_weights: bool = True):
    if not return_graph:
        return out
    return out, (graph.edge_index[:, keep], graph.w[keep] if carry_weights else None)


class UnifewsGCNConv(UnifewsConvMixin, MessagePassing):
    r"""Unifews ``GCNConv``: the rule of the module docstring on ``Z = H (W ⊙ M)ᵀ``,

    .. math::
        \mathbf{h}'_u = \sum_{e = (v \to u):\ \mathrm{agg}_e} w_e \, \mathbf{z}_v + \mathbf{b}, \qquad
        \mathrm{keep}_e = |w_e| \, \lVert \mathbf{z}_v \rVert_2 \ge \theta_a \ \vee\ u = v

    Drop-in for :class:`torch_geometric.nn.GCNConv` (same arguments, ``lin``/``bias`` parameters and
    initialisation; ``edge_index`` an ``[2, m]`` tensor, ``EdgeIndex``, ``torch.sparse`` ``adj_t`` or
    ``SparseTensor``). With ``normalize=True`` self-loops are added (weight 2 when ``improved``) and
    ``w = T[u, v]`` of ``T = D̄^{-(1-r)} Ā D̄^{-r}``; with ``normalize=False`` ``edge_weight`` (or ``adj_t``'s values)
    is ``w`` (1 when None). Kept edges keep their weight (no renormalisation). ``δa = δw = 0`` reproduces
    ``GCNConv``. ``cached=True`` keeps the normalised graph and its CSR orders across forwards (transductive use, as
    ``GCNConv(cached=True)``; a different edge list raises instead of being silently replaced).

    Args:
        in_channels, out_channels: feature sizes.
        improved: self-loops of weight 2 (``Â = A + 2I``).
        cached: keep the prepared graph of the first forward.
        add_self_loops: with ``normalize``, add a self-loop to every node that lacks one.
        normalize: compute the diffusion weights from the graph (``True``) or use ``edge_weight`` as given.
        bias: learn an additive bias (added after propagation).
        config: :class:`~unifews.config.UnifewsConfig`; keyword ``delta_a``/``delta_w``/``threshold`` override it.
    """

    _pruned = ("lin",)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        improved: bool = False,
        cached: bool = False,
        add_self_loops: bool = True,
        normalize: bool = True,
        bias: bool = True,
        *,
        config: UnifewsConfig | None = None,
        delta_a: float | None = None,
        delta_w: float | None = None,
        threshold: Threshold | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(**kwargs)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved = check_bool("improved", improved)
        self.normalize = check_bool("normalize", normalize)
        self.add_self_loops = check_bool("add_self_loops", add_self_loops)
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer="glorot")
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._init_unifews(config, cached, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot weights, zero bias (as ``GCNConv``); masks reset to all-kept, cache cleared."""
        super().reset_parameters()
        self.lin.reset_parameters()
        if self.bias is not None:
            zeros(self.bias)
        self._reset_masks()

    def forward(
        self,
        x: Tensor,
        edge_index: Any,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        active: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """Propagate ``x`` ([n, in_channels]) over ``edge_index`` with pruning.

        ``lock``: bool mask [n] or int64 indices of nodes whose incoming messages are all aggregated in this
        layer. ``active``: bool mask over the layer's edges (after self-loops are added) still in the graph, e.g.
        the previous layer's ``edge_keep``. ``return_graph=True`` also returns the kept ``(edge_index, edge_weight)``
        (normalised weights, self-loops included) to hand to the next layer with ``normalize=False``.
        """
        check_x(x, self.in_channels)
        graph = self._layer_graph(
            x, edge_index, edge_weight, normalize=self.normalize, add_self_loops=self.add_self_loops,
            improved=self.improved,
        )  # fmt: skip
        lock = check_lock(lock, x.size(0), x.device)
        active = check_active(active, graph.m, x.device)
        z = x @ self._masked_weight("lin", x).t()  # transform first (step 2 of the rule)
        keep, agg = self._edge_step(graph, lambda: _scores(graph, z), lock, active)
        out = self._propagate(graph, z, agg)
        if self.bias is not None:
            out = out + self.bias
        self.last_stats.update(f_in=self.in_channels, f_out=self.out_channels, f_prop=self.out_channels)
        return _graph_out(out, graph, keep, return_graph)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, delta_a={c.delta_a}, delta_w={c.delta_w})"
        )


class UnifewsSAGEConv(UnifewsConvMixin, MessagePassing):
    """Unifews ``SAGEConv`` (mean aggregation, root weight): propagate first, then the weight rule on both maps.

    ``out = lin_l(Σ_{kept e} w_e x[src_e]) + lin_r(x)`` with ``w_e = 1 / indeg(dst_e)`` computed on the input graph
    (or ``edge_weight`` when given; kept edges are not renormalised). Edge score ``|w_e| · ‖x[src_e]‖₂``.
    ``δa = δw = 0`` reproduces ``torch_geometric.nn.SAGEConv(aggr="mean")``.
    """

    _pruned = ("lin_l", "lin_r")

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        root_weight: bool = True,
        bias: bool = True,
        cached: bool = False,
        config: UnifewsConfig | None = None,
        delta_a: float | None = None,
        delta_w: float | None = None,
        threshold: Threshold | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(**kwargs)
        if not root_weight:
            self._pruned = ("lin_l",)
        self.in_channels, self.out_channels, self.root_weight = in_channels, out_channels, root_weight
        self.lin_l = Linear(in_channels, out_channels, bias=bias)
        self.lin_r = Linear(in_channels, out_channels, bias=False) if root_weight else None
        self._init_unifews(config, cached, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As ``SAGEConv.reset_parameters``; masks reset to all-kept."""
        super().reset_parameters()
        self.lin_l.reset_parameters()
        if self.lin_r is not None:
            self.lin_r.reset_parameters()
        self._reset_masks()

    def forward(
        self,
        x: Tensor,
        edge_index: Any,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        active: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """See :class:`UnifewsGCNConv.forward` (no self-loops are added; an ``adj_t``'s values are replaced by the
        mean weights); the returned graph carries the mean weights ``w_e``."""
        check_x(x, self.in_channels)
        if edge_weight is None and not isinstance(edge_index, LayerGraph):
            graph = self._layer_graph(x, edge_index, None, normalize=False, mean_weights=True)
        else:
            graph = self._layer_graph(x, edge_index, edge_weight, normalize=False)
        lock = check_lock(lock, x.size(0), x.device)
        active = check_active(active, graph.m, x.device)
        keep, agg = self._edge_step(graph, lambda: _scores(graph, x), lock, active)
        h = self._propagate(graph, x, agg)  # propagation first
        out = F.linear(h, self._masked_weight("lin_l", h), self.lin_l.bias)
        if self.lin_r is not None:
            out = out + x @ self._masked_weight("lin_r", x).t()
        self.last_stats.update(f_in=self.in_channels, f_out=self.out_channels, f_prop=self.in_channels)
        return _graph_out(out, graph, keep, return_graph)


class UnifewsGATv2Conv(UnifewsConvMixin, MessagePassing):
    """Unifews ``GATv2Conv`` (the official code's "GAT"): attention computed on the input graph, then messages
    ``α_{e,h} x_l[src_e, h]`` dropped when ``mean_h |α_{e,h}| · ‖x_l[src_e]‖₂`` is under the threshold.

    Kept attention coefficients are not renormalised (as kept GCN weights). Only ``m × heads`` scores are formed;
    the attention logits themselves need GATv2's ``m × heads × C`` tensor, as in PyG. ``δa = δw = 0``
    reproduces ``torch_geometric.nn.GATv2Conv`` (``share_weights=False``, no edge features, no residual).
    """

    _pruned = ("lin_l", "lin_r")

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
        *,
        config: UnifewsConfig | None = None,
        delta_a: float | None = None,
        delta_w: float | None = None,
        threshold: Threshold | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("aggr", "add")
        kwargs.setdefault("node_dim", 0)
        super().__init__(**kwargs)
        check_int("heads", heads, min=1)
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.lin_l = Linear(in_channels, heads * out_channels, bias=bias, weight_initializer="glorot")
        self.lin_r = Linear(in_channels, heads * out_channels, bias=bias, weight_initializer="glorot")
        self.att = nn.Parameter(torch.empty(1, heads, out_channels))
        total = heads * out_channels if concat else out_channels
        self.bias = nn.Parameter(torch.empty(total)) if bias else None
        self._init_unifews(config, False, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As ``GATv2Conv.reset_parameters``; masks reset to all-kept."""
        super().reset_parameters()
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()
        glorot(self.att)
        if self.bias is not None:
            zeros(self.bias)
        self._reset_masks()

    def forward(
        self,
        x: Tensor,
        edge_index: Any,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, None]]:
        """See :class:`UnifewsGCNConv.forward`. ``edge_weight`` is not used by attention and must be None (an
        ``adj_t``'s values are ignored). Messages ``α_{e,h} x_l[src_e, h]`` go through the message path of
        ``propagate``, as in ``GATv2Conv``."""
        if edge_weight is not None:
            raise ValueError("UnifewsGATv2Conv does not take edge_weight (attention sets the weights); pass None")
        check_x(x, self.in_channels)
        n, H, C = x.size(0), self.heads, self.out_channels
        edge_index, _, _ = as_edge_list(edge_index, None, n)  # an adj_t's values are not used
        fingerprint = graph_fingerprint(edge_index, n)
        if self.add_self_loops:  # PyG's layout: the non-loop edges in order, then one loop per node
            edge_index, _ = remove_self_loops(edge_index)
            loops = torch.arange(n, device=edge_index.device)
            edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        graph = LayerGraph(edge_index, x.new_ones(edge_index.size(1)), n)
        graph.fingerprint = fingerprint
        lock = check_lock(lock, n, x.device)
        x_l = F.linear(x, self._masked_weight("lin_l", x), self.lin_l.bias).view(n, H, C)
        x_r = F.linear(x, self._masked_weight("lin_r", x), self.lin_r.bias).view(n, H, C)
        src, dst = edge_index
        e = F.leaky_relu(x_l[src] + x_r[dst], self.negative_slope)  # GATv2 logits need m × H × C
        alpha = softmax((e * self.att).sum(-1), dst, num_nodes=n)  # [m, H]
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)

        def scores() -> Tensor:
            return alpha.detach().abs().mean(1) * torch.linalg.vector_norm(x_l.reshape(n, -1), dim=1)[src]

        keep, agg = self._edge_step(graph, scores, lock, None)
        a = alpha if agg is None else alpha * agg.unsqueeze(1)
        out = self.propagate(edge_index, x=x_l, alpha=a, size=(n, n))  # [n, H, C]
        out = out.reshape(n, H * C) if self.concat else out.mean(1)
        if self.bias is not None:
            out = out + self.bias
        self.last_stats.update(f_in=self.in_channels, f_out=H * C, f_prop=H * C)
        return _graph_out(out, graph, keep, return_graph, carry_weights=False)

    def message(self, x_j: Tensor, alpha: Tensor) -> Tensor:  # type: ignore[override]
        return alpha.unsqueeze(-1) * x_j


class UnifewsGCN2Conv(UnifewsConvMixin, MessagePassing):
    """Unifews ``GCN2Conv`` (GCNII): ``out = ((1-α) P̃ x + α x_0) ((1-β) I + β (W ⊙ M))``, ``β = log(θ/l + 1)``.

    Propagation first (edge score ``|w_e| · ‖x[src_e]‖₂``), the weight rule on ``weight1`` fed with the
    propagated-plus-initial input. ``δa = δw = 0`` reproduces ``torch_geometric.nn.GCN2Conv``
    (``shared_weights=True``). ``weight1`` is stored ``(in, out)`` as in PyG.
    """

    _pruned = ("weight1",)

    def __init__(
        self,
        channels: int,
        alpha: float,
        theta: float | None = None,
        layer: int | None = None,
        *,
        normalize: bool = True,
        add_self_loops: bool = True,
        cached: bool = False,
        config: UnifewsConfig | None = None,
        delta_a: float | None = None,
        delta_w: float | None = None,
        threshold: Threshold | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(**kwargs)
        check_float("alpha", alpha, min=0.0, max=1.0)
        self.channels, self.alpha, self.normalize, self.add_self_loops = channels, alpha, normalize, add_self_loops
        self.beta = 1.0 if theta is None or layer is None else math.log(theta / layer + 1)
        self.weight1 = nn.Parameter(torch.empty(channels, channels))
        self._init_unifews(config, cached, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot ``weight1`` (as ``GCN2Conv``); masks reset to all-kept."""
        super().reset_parameters()
        glorot(self.weight1)
        self._reset_masks()

    def forward(
        self,
        x: Tensor,
        x_0: Tensor,
        edge_index: Any,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        active: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """``x``, ``x_0``: [n, channels]; the rest as :meth:`UnifewsGCNConv.forward`."""
        check_x(x, self.channels)
        check_x(x_0, self.channels, name="x_0")
        n = x.size(0)
        graph = self._layer_graph(
            x, edge_index, edge_weight, normalize=self.normalize, add_self_loops=self.add_self_loops
        )
        lock = check_lock(lock, n, x.device)
        active = check_active(active, graph.m, x.device)
        keep, agg = self._edge_step(graph, lambda: _scores(graph, x), lock, active)
        h = self._propagate(graph, x, agg)
        h = (1 - self.alpha) * h + self.alpha * x_0[:n]
        out = (1 - self.beta) * h + self.beta * (h @ self._masked_weight("weight1", h, transpose=True))
        self.last_stats.update(f_in=self.channels, f_out=self.channels, f_prop=self.channels)
        return _graph_out(out, graph, keep, return_graph)
