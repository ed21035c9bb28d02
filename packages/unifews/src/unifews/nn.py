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
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25_shared.validate import check_bool, check_choice, check_float, check_int
from unifews import _pyg  # noqa: F401  (imports torch_geometric quietly)
from unifews.config import SCHEMES, Scheme, Threshold, UnifewsConfig
from unifews.functional import (
    check_batch,
    check_lock,
    check_x,
    edge_keep_mask,
    edge_keep_mask_per_graph,
    edge_keys,
    edge_threshold,
    weight_mask,
    weight_mask_per_graph,
)
from unifews.graph import LayerGraph, as_edge_list, check_cached_graph, graph_fingerprint, kept_spmm_csr

from torch_geometric.nn import MessagePassing  # isort: skip
from torch_geometric.nn.dense.linear import Linear  # isort: skip
from torch_geometric.nn.inits import glorot, zeros  # isort: skip
from torch_geometric.utils import add_self_loops as pyg_add_self_loops  # isort: skip
from torch_geometric.utils import remove_self_loops, softmax  # isort: skip

_Uninit = nn.parameter.UninitializedParameter

if TYPE_CHECKING:  # the mixin is only ever mixed into MessagePassing layers: type it as one
    _MixinBase = MessagePassing
else:
    _MixinBase = object

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


class UnifewsConvMixin(_MixinBase):
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
            lazy = isinstance(w, _Uninit)  # in_channels=-1: the mask is made at the first forward
            mask = None if lazy else torch.ones(w.shape, dtype=torch.bool, device=w.device)
            self.register_buffer(f"{name}_mask", mask)
        self.register_buffer("edge_keep", None)
        self.register_buffer("edge_fingerprint", None)
        self._kept: Tensor | tuple[Tensor, Tensor] | None = None
        self.last_stats: dict[str, Any] = {}

    # ---- state ----------------------------------------------------------------------------------------------
    def _get_weight(self, name: str) -> Tensor:
        mod = getattr(self, name)
        return cast(Tensor, mod.weight if isinstance(mod, nn.Module) else mod)

    def set_scheme(self, scheme_a: Scheme, scheme_w: Scheme) -> None:
        """Set the edge scheme and the weight scheme, each one of ``prune_all``, ``prune_inc``, ``keep``."""
        self.scheme_a = check_choice("scheme_a", scheme_a, SCHEMES)
        self.scheme_w = check_choice("scheme_w", scheme_w, SCHEMES)

    def reset_cache(self) -> None:
        """Forget the cached graph (``cached=True``), as ``GCNConv`` does in ``reset_parameters``."""
        self._cached_graph = self._cache_source = None

    def _reset_masks(self) -> None:
        for name in self._pruned:
            if getattr(self, f"{name}_mask", None) is not None:
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
        if "theta_a_per_graph" in self.last_stats:
            raise RuntimeError(
                "the last forward pruned each graph of a batch with its own θ_a (batch=...); freeze after a forward "
                "on one graph"
            )
        if "theta_a" not in self.last_stats:
            raise RuntimeError("run a pruning forward (scheme_a 'prune_all' or 'prune_inc') before freezing θ_a")
        self.theta_a = float(self.last_stats["theta_a"])
        return self.theta_a

    def sparsity(self) -> dict[str, float]:
        """Weight sparsity (fraction of zero mask entries over the pruned maps) and edge sparsity of the last
        forward (fraction of removed non-loop edges of its input graph)."""
        masks = [getattr(self, f"{n}_mask") for n in self._pruned if getattr(self, f"{n}_mask") is not None]
        total = sum(mk.numel() for mk in masks)
        kept = sum(int(mk.sum()) for mk in masks)
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

    def get_extra_state(self) -> dict[str, Any]:
        """The schemes and a frozen edge threshold travel with ``state_dict`` (a ``keep`` model stays ``keep``)."""
        return {"scheme_a": self.scheme_a, "scheme_w": self.scheme_w, "theta_a": self.theta_a}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.set_scheme(state["scheme_a"], state["scheme_w"])
        theta = state.get("theta_a")
        self.theta_a = None if theta is None else check_float("theta_a", theta, min=0.0)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected, errors):
        # the edge masks have the size of the last graph: adopt them before the default (shape-checking) loader;
        # a lazy layer (in_channels=-1) adopts the weight masks' shapes too
        for key in ("edge_keep", "edge_fingerprint", "kept_edge_index"):
            if prefix + key in state_dict:
                setattr(self, key, state_dict[prefix + key].clone())
        for name in self._pruned:
            key = f"{prefix}{name}_mask"
            if key in state_dict and getattr(self, f"{name}_mask") is None:
                setattr(self, f"{name}_mask", state_dict[key].clone())
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected, errors)
        if prefix + "kept_edge_index" in unexpected:
            unexpected.remove(prefix + "kept_edge_index")
        if prefix + "_extra_state" in missing_keys:  # a state dict saved before the schemes were stored
            missing_keys.remove(prefix + "_extra_state")

    # ---- inputs ---------------------------------------------------------------------------------------------
    def _materialize(self, name: str, x: Tensor) -> None:
        """Initialise a lazy ``Linear`` (``in_channels=-1``) from ``x``, as its own forward would."""
        mod = getattr(self, name)
        if isinstance(mod, Linear) and isinstance(mod.weight, _Uninit):
            mod.initialize_parameters(mod, (x,))

    def _check_dtype(self, x: Tensor, name: str = "x") -> None:
        """A clear error when ``x``'s dtype is not the layer's (torch's own is a bare matmul dtype mismatch)."""
        p = next((q for q in self.parameters() if not isinstance(q, _Uninit)), None)
        if p is not None and isinstance(x, Tensor) and x.is_floating_point() and x.dtype != p.dtype:
            raise TypeError(
                f"{name} has dtype {x.dtype} but {type(self).__name__}'s parameters are {p.dtype}; convert the input "
                f"({name}.to({p.dtype})) or the layer (.to({x.dtype}))"
            )

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
    def _mask_buffer(self, name: str, w: Tensor) -> Tensor:
        stored = getattr(self, f"{name}_mask")
        if stored is None or stored.shape != w.shape:  # a lazy layer's first forward
            stored = torch.ones(w.shape, dtype=torch.bool, device=w.device)
            setattr(self, f"{name}_mask", stored)
        return stored

    def _masked_weight(self, name: str, h: Tensor, transpose: bool = False) -> Tensor:
        """``W ⊙ M`` for the linear map ``name`` fed with ``h`` (``transpose``: the weight is stored (f_in, f_out))."""
        w = self._get_weight(name)
        stored = self._mask_buffer(name, w)
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

    def _linear(
        self,
        name: str,
        h: Tensor,
        x: Tensor | None = None,
        *,
        bias: Tensor | None = None,
        transpose: bool = False,
        batch: tuple[Tensor, int] | None = None,
    ) -> Tensor:
        """``x`` (default ``h``) through ``W ⊙ M``, the mask from ``h``. With ``batch = (batch vector, number of
        graphs)`` every graph gets the mask of its own rows of ``h``
        (:func:`~unifews.functional.weight_mask_per_graph`), so a graph's output does not depend on the other graphs
        of its mini-batch; the stored mask is then the union of the graphs' masks (the weights at least one graph
        used)."""
        x = h if x is None else x
        if batch is None or batch[1] == 1 or self.scheme_w == "keep" or self.config.delta_w == 0:
            w = self._masked_weight(name, h, transpose)
            return F.linear(x, w.t() if transpose else w, bias)
        vec, num = batch
        w = self._get_weight(name)
        stored = self._mask_buffer(name, w)
        wt = w.t() if transpose else w
        masks = weight_mask_per_graph(wt, h, vec, num, self.config.delta_w, self.config.threshold, eps=self.config.eps)
        if self.scheme_w == "prune_inc":
            masks = masks & (stored.t() if transpose else stored).unsqueeze(0)
            with torch.no_grad():
                union = masks.any(0)
                w.mul_(union.t() if transpose else union)
        union = masks.any(0)
        stored.copy_(union.t() if transpose else union)
        order = torch.argsort(vec, stable=True)
        counts = torch.bincount(vec, minlength=num).tolist()
        parts = [F.linear(xg, wt * masks[g], bias) for g, xg in enumerate(torch.split(x[order], counts))]
        out = torch.empty((x.size(0), wt.size(0)), dtype=x.dtype, device=x.device)
        return out.index_copy(0, order, torch.cat(parts))

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
        self,
        graph: LayerGraph,
        scores_fn,
        lock: Tensor | None,
        active: Tensor | None,
        batch: tuple[Tensor, int] | None = None,
        z: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Return ``(keep, agg)``: bool masks over the graph's edges (steps 3-4 of the rule in the module docstring;
        ``agg`` None when every edge is aggregated), and record ``keep``. With ``batch = (batch vector, number of
        graphs)`` a relative threshold is taken per graph (the graph of an edge is its target's). ``z``: the matrix
        propagated over the graph's own weights when ``scores_fn`` is ``_scores(graph, z)``; it allows the compiled
        rule (:meth:`LayerGraph.select_scored`, the same mask in one pass, the kept CSRs selected on the way)."""
        cfg = self.config
        is_loop = graph.is_loop
        every_edge = False
        m_fast: int | None = None
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
            elif (fast := self._compiled_rule(graph, z, lock, active, batch)) is not None:
                keep, m_fast, theta = fast
            else:
                with torch.no_grad():
                    scores = scores_fn()
                if self.theta_a is not None:  # frozen absolute threshold (freeze_edge_threshold)
                    theta = self.theta_a
                    keep = (scores >= theta) | is_loop
                    keep = keep if active is None else keep & active
                elif batch is not None and batch[1] > 1:
                    vec, num = batch
                    src_g, dst_g = vec[graph.edge_index[0]], vec[graph.edge_index[1]]
                    if bool((src_g != dst_g).any()):
                        raise ValueError("batch puts the two ends of an edge in different graphs; expected PyG's "
                                         "Batch.batch for this edge_index")  # fmt: skip
                    keep, thetas = edge_keep_mask_per_graph(
                        scores, is_loop, dst_g, num, cfg.delta_a, cfg.threshold, active=active
                    )
                    theta = None
                    self.last_stats.pop("theta_a", None)
                    self.last_stats["theta_a_per_graph"] = thetas.tolist()
                else:  # edge_keep_mask's rule, the threshold computed once
                    theta_t = edge_threshold(scores, cfg.delta_a, cfg.threshold, active)
                    theta = float(theta_t)
                    keep = torch.ge(scores, theta_t).logical_or_(is_loop)
                    keep = keep if active is None else keep.logical_and_(active)
            if self.scheme_a == "prune_inc" and self.edge_keep is not None:
                fp = graph.fingerprint
                same = (
                    self.edge_fingerprint is not None
                    and fp is not None
                    and torch.equal(self.edge_fingerprint.cpu(), fp)
                )
                if same and self.edge_keep.numel() == graph.m:
                    keep = keep & self.edge_keep.to(keep.device)
                elif self.kept_edge_index is not None:
                    prev = edge_keys(self.kept_edge_index.to(keep.device), graph.n)
                    keep = keep & torch.isin(edge_keys(graph.edge_index, graph.n), prev)
                every_edge = False
            self.edge_keep = keep.detach()
            self.edge_fingerprint = graph.fingerprint
            self.__dict__["_kept"] = (graph.edge_index, self.edge_keep)
            if theta is not None:
                self.last_stats["theta_a"] = theta
                self.last_stats.pop("theta_a_per_graph", None)
        if lock is None:
            agg = None if every_edge else keep
        else:
            restored = lock[graph.edge_index[1]]
            agg = keep | (restored if active is None else restored & active)
        n_loop = graph.num_loops
        m_in = graph.m if active is None else int(torch.count_nonzero(active))
        m_kept = m_in if every_edge else m_fast if m_fast is not None else int(torch.count_nonzero(keep))
        self.last_stats.update(
            num_nodes=graph.n,
            edges_in=m_in,
            edges_in_nonloop=m_in - n_loop,
            edges_kept=m_kept,
            edges_kept_nonloop=m_kept - n_loop,
            edges_aggregated=m_kept if agg is None or agg is keep else int(torch.count_nonzero(agg)),
        )
        return keep, agg

    def _compiled_rule(
        self,
        graph: LayerGraph,
        z: Tensor | None,
        lock: Tensor | None,
        active: Tensor | None,
        batch: tuple[Tensor, int] | None,
    ) -> tuple[Tensor, int, float] | None:
        """``(keep, number kept, θ)`` of a ``prune_all`` forward through :meth:`LayerGraph.select_scored`, or None
        where it does not apply (no ``z``, another scheme, locked nodes, an explainer, a mini-batch of several
        graphs, or the graph's own reasons). θ is the torch rule's: the frozen one, ``δa`` in the scores' dtype, or
        ``δa`` times the mean score (computed as :func:`~unifews.functional.edge_threshold` does)."""
        if z is None or self.scheme_a != "prune_all" or lock is not None or self.explain:
            return None
        if batch is not None and batch[1] > 1:
            return None
        cfg = self.config
        norms = torch.linalg.vector_norm(z.detach(), dim=1)
        if self.theta_a is not None:
            theta = self.theta_a
        elif cfg.threshold == "absolute":  # δa in the scores' dtype, as edge_threshold's 0-d tensor holds it
            theta = float(np.asarray(cfg.delta_a, dtype=np.float32 if norms.dtype == torch.float32 else np.float64))
        else:
            with torch.no_grad():
                scores = graph.abs_weights() * norms.index_select(0, graph.edge_index[0])
                theta = float(edge_threshold(scores, cfg.delta_a, cfg.threshold, active))
        got = graph.select_scored(norms, theta, active, backward=torch.is_grad_enabled() and z.requires_grad)
        return None if got is None else (got[0], got[1], theta)

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


def _batch(batch: Tensor | None, x: Tensor) -> tuple[Tensor, int] | None:
    vec, num = check_batch(batch, x.size(0), x.device)
    return None if vec is None else (vec, num)


def _scores(graph: LayerGraph, z: Tensor) -> Tensor:
    """``s_e = |w_e| · ‖z[src_e]‖₂`` (:func:`~unifews.functional.message_scores`) with ``|w|`` kept on the graph."""
    return graph.abs_weights() * torch.linalg.vector_norm(z, dim=1).index_select(0, graph.edge_index[0])


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
        in_channels: input feature size.
        out_channels: output feature size.
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
        batch: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor | None]]:
        """Propagate ``x`` ([n, in_channels]) over ``edge_index`` with pruning.

        ``lock``: bool mask [n] or int64 indices of nodes whose incoming messages are all aggregated in this
        layer. ``active``: bool mask over the layer's edges (after self-loops are added) still in the graph, e.g.
        the previous layer's ``edge_keep``. ``batch``: PyG's ``Batch.batch`` (the graph of each node) for a
        mini-batch of several graphs: every graph then gets its own edge threshold and weight mask, computed from its
        own nodes and edges, so its output is what it would be alone (without ``batch`` a relative threshold is one
        mean over the whole mini-batch). ``return_graph=True`` also returns the kept ``(edge_index, edge_weight)``
        (normalised weights, self-loops included) to hand to the next layer with ``normalize=False``.
        """
        self._check_dtype(x)
        check_x(x, self.in_channels if self.in_channels > 0 else None)
        self._materialize("lin", x)
        graph = self._layer_graph(
            x, edge_index, edge_weight, normalize=self.normalize, add_self_loops=self.add_self_loops,
            improved=self.improved,
        )  # fmt: skip
        lock = check_lock(lock, x.size(0), x.device)
        active = check_active(active, graph.m, x.device)
        b = _batch(batch, x)
        z = self._linear("lin", x, batch=b)  # transform first (step 2 of the rule)
        keep, agg = self._edge_step(graph, lambda: _scores(graph, z), lock, active, b, z=z)
        out = self._propagate(graph, z, agg)
        if self.bias is not None:
            out = out + self.bias
        self.last_stats.update(f_in=x.size(1), f_out=self.out_channels, f_prop=self.out_channels)
        return _graph_out(out, graph, keep, return_graph)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, delta_a={c.delta_a}, delta_w={c.delta_w})"
        )


def _pair(in_channels: Any, name: str = "in_channels") -> tuple[int, int]:
    """``in_channels`` as ``(source, target)`` sizes (an int: the same for both; -1: lazy)."""
    pair = in_channels if isinstance(in_channels, (tuple, list)) else (in_channels, in_channels)
    if len(pair) != 2:
        raise ValueError(f"{name} must be an int or a (source, target) pair, got {in_channels!r}")
    for v in pair:
        if isinstance(v, bool) or not isinstance(v, int) or (v < 1 and v != -1):
            raise ValueError(f"{name} entries must be positive ints or -1 (lazy), got {in_channels!r}")
    return int(pair[0]), int(pair[1])


def _split_x(x: Any) -> tuple[Tensor, Tensor | None, bool]:
    """``(x_src, x_dst, bipartite)`` from a tensor or a PyG ``(x_src, x_dst)`` pair."""
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise ValueError(f"x as a pair must be (x_src, x_dst), got {len(x)} entries")
        return x[0], x[1], True
    return x, x, False


class UnifewsSAGEConv(UnifewsConvMixin, MessagePassing):
    """Unifews ``SAGEConv`` (mean aggregation, root weight): propagate first, then the weight rule on both maps.

    ``out = lin_l(Σ_{kept e} w_e x_src[src_e]) + lin_r(x_dst)`` with ``w_e = 1 / indeg(dst_e)`` computed on the input
    graph (or ``edge_weight`` when given; kept edges are not renormalised). Edge score ``|w_e| · ‖x_src[src_e]‖₂``.
    ``δa = δw = 0`` reproduces ``torch_geometric.nn.SAGEConv(aggr="mean")``, with its signature: ``in_channels`` an
    int, ``-1`` (lazy) or a ``(source, target)`` pair for bipartite graphs (``x = (x_src, x_dst)``, as
    ``to_hetero`` calls it), ``normalize`` (L2-normalised output), ``root_weight``, ``bias``. ``aggr`` other than
    ``"mean"`` and ``project=True`` are refused (the pruning rule is defined for the mean aggregation).
    """

    _pruned = ("lin_l", "lin_r")

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        aggr: str = "mean",
        normalize: bool = False,
        root_weight: bool = True,
        project: bool = False,
        bias: bool = True,
        *,
        cached: bool = False,
        config: UnifewsConfig | None = None,
        delta_a: float | None = None,
        delta_w: float | None = None,
        threshold: Threshold | None = None,
        **kwargs: Any,
    ) -> None:
        if aggr != "mean":
            raise ValueError(f"UnifewsSAGEConv supports aggr='mean' only (the rule's mean weights), got {aggr!r}")
        if project:
            raise ValueError("UnifewsSAGEConv does not support project=True (SAGEConv's extra input projection)")
        super().__init__(aggr="add", **kwargs)
        src_in, dst_in = _pair(in_channels)
        self.root_weight = check_bool("root_weight", root_weight)
        if not self.root_weight:
            self._pruned = ("lin_l",)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.normalize = check_bool("normalize", normalize)
        self.lin_l = Linear(src_in, out_channels, bias=bias)
        self.lin_r = Linear(dst_in, out_channels, bias=False) if self.root_weight else None
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
        x: Tensor | tuple[Tensor, Tensor | None],
        edge_index: Any,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        active: Tensor | None = None,
        batch: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor | None]]:
        """See :class:`UnifewsGCNConv.forward` (no self-loops are added; an ``adj_t``'s values are replaced by the
        mean weights); the returned graph carries the mean weights ``w_e``. ``x`` may be a pair ``(x_src, x_dst)``
        (bipartite: ``edge_index`` from source rows to target rows; ``lock`` then indexes target nodes)."""
        x_src, x_dst, bipartite = _split_x(x)
        src_in, dst_in = _pair(self.in_channels)
        self._check_dtype(x_src, "x[0]" if bipartite else "x")
        check_x(x_src, src_in if src_in > 0 else None, name="x[0]" if bipartite else "x")
        if x_dst is not None and bipartite:
            self._check_dtype(x_dst, "x[1]")
            check_x(x_dst, dst_in if dst_in > 0 else None, name="x[1]")
        self._materialize("lin_l", x_src)
        if self.lin_r is not None and x_dst is not None:
            self._materialize("lin_r", x_dst)
        n_src = x_src.size(0)
        n_dst = x_dst.size(0) if bipartite and x_dst is not None else n_src
        if bipartite and batch is not None:
            raise ValueError("batch indexes one graph's nodes (x a tensor); it cannot go with an (x_src, x_dst) pair")
        n = max(n_src, n_dst)
        xs = x_src if n == n_src else torch.cat([x_src, x_src.new_zeros(n - n_src, x_src.size(1))])
        if edge_weight is None and not isinstance(edge_index, LayerGraph):
            graph = self._layer_graph(xs, edge_index, None, normalize=False, mean_weights=True)
        else:
            graph = self._layer_graph(xs, edge_index, edge_weight, normalize=False)
        if bipartite:  # a source and a target with the same index are two nodes: no edge is a self-loop
            graph.is_loop = torch.zeros_like(graph.is_loop)
            graph._num_loops = 0
        lock = check_lock(lock, n_dst, xs.device)
        if lock is not None and n > n_dst:
            lock = torch.cat([lock, lock.new_zeros(n - n_dst)])
        active = check_active(active, graph.m, xs.device)
        b = _batch(batch, xs)
        keep, agg = self._edge_step(graph, lambda: _scores(graph, xs), lock, active, b, z=xs)
        h = self._propagate(graph, xs, agg)[:n_dst]  # propagation first
        out = self._linear("lin_l", h, bias=self.lin_l.bias, batch=b)
        if self.lin_r is not None and x_dst is not None:
            out = out + self._linear("lin_r", x_dst, batch=b)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        self.last_stats.update(f_in=x_src.size(1), f_out=self.out_channels, f_prop=x_src.size(1))
        return _graph_out(out, graph, keep, return_graph)


class UnifewsGATv2Conv(UnifewsConvMixin, MessagePassing):
    """Unifews ``GATv2Conv`` (the official code's "GAT"): attention computed on the input graph, then messages
    ``α_{e,h} x_l[src_e, h]`` dropped when ``mean_h |α_{e,h}| · ‖x_l[src_e]‖₂`` is under the threshold.

    Kept attention coefficients are not renormalised (as kept GCN weights). Only ``m × heads`` scores are formed;
    the attention logits themselves need GATv2's ``m × heads × C`` tensor, as in PyG. ``δa = δw = 0``
    reproduces ``torch_geometric.nn.GATv2Conv`` with its signature: ``in_channels`` an int, ``-1`` (lazy) or a
    ``(source, target)`` pair (``x = (x_src, x_dst)``, as ``to_hetero`` calls it), ``edge_dim`` / ``fill_value``
    (edge features in the attention logits; self-loops get ``fill_value`` features, ``"mean"`` by default),
    ``share_weights``, ``residual`` (a skip connection, not pruned), and ``forward(x, edge_index, edge_attr,
    return_attention_weights)``. The attention weights returned are the ones aggregated: pruned messages weigh 0.
    """

    _pruned = ("lin_l", "lin_r")

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: int | None = None,
        fill_value: float | Tensor | str = "mean",
        bias: bool = True,
        share_weights: bool = False,
        residual: bool = False,
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
        src_in, dst_in = _pair(in_channels)
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout = negative_slope, dropout
        self.add_self_loops = check_bool("add_self_loops", add_self_loops)
        self.share_weights = check_bool("share_weights", share_weights)
        self.edge_dim = None if edge_dim is None else check_int("edge_dim", edge_dim, min=1)
        self.fill_value = fill_value
        if self.share_weights and src_in != dst_in:
            raise ValueError(f"share_weights=True needs equal source and target sizes, got in_channels={in_channels}")
        self.lin_l = Linear(src_in, heads * out_channels, bias=bias, weight_initializer="glorot")
        if self.share_weights:
            self._pruned = ("lin_l",)
            self.lin_r = self.lin_l
        else:
            self.lin_r = Linear(dst_in, heads * out_channels, bias=bias, weight_initializer="glorot")
        self.att = nn.Parameter(torch.empty(1, heads, out_channels))
        self.lin_edge = (
            Linear(self.edge_dim, heads * out_channels, bias=False, weight_initializer="glorot")
            if self.edge_dim is not None
            else None
        )
        total = heads * out_channels if concat else out_channels
        self.residual = check_bool("residual", residual)
        self.res = Linear(dst_in, total, bias=False, weight_initializer="glorot") if self.residual else None
        self.bias = nn.Parameter(torch.empty(total)) if bias else None
        self._init_unifews(config, False, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As ``GATv2Conv.reset_parameters``; masks reset to all-kept."""
        super().reset_parameters()
        self.lin_l.reset_parameters()
        if not self.share_weights:
            self.lin_r.reset_parameters()
        if self.lin_edge is not None:
            self.lin_edge.reset_parameters()
        if self.res is not None:
            self.res.reset_parameters()
        glorot(self.att)
        if self.bias is not None:
            zeros(self.bias)
        self._reset_masks()

    def forward(
        self,
        x: Tensor | tuple[Tensor, Tensor],
        edge_index: Any,
        edge_attr: Tensor | None = None,
        return_attention_weights: bool | None = None,
        *,
        lock: Tensor | None = None,
        batch: Tensor | None = None,
        return_graph: bool = False,
    ) -> Any:
        """See :class:`UnifewsGCNConv.forward`. ``edge_attr`` ([m, edge_dim] or [m]): edge features (needs
        ``edge_dim``; an ``adj_t``'s values are not used). ``return_attention_weights=True`` returns
        ``(out, (edge_index, alpha))`` as ``GATv2Conv`` (self-loops included, alpha [m, heads], pruned messages 0);
        with ``return_graph=True`` the kept graph comes last. Messages ``α_{e,h} x_l[src_e, h]`` go through the
        message path of ``propagate``, as in ``GATv2Conv``."""
        x_src, x_dst, bipartite = _split_x(x)
        if x_dst is None:
            raise ValueError("UnifewsGATv2Conv needs target features: x = (x_src, x_dst) with x_dst a tensor")
        src_in, dst_in = _pair(self.in_channels)
        for name, t, f in (("x[0]" if bipartite else "x", x_src, src_in), ("x[1]", x_dst, dst_in)):
            if t is x_src or bipartite:
                self._check_dtype(t, name)
                check_x(t, f if f > 0 else None, name=name)
        if bipartite and batch is not None:
            raise ValueError("batch indexes one graph's nodes (x a tensor); it cannot go with an (x_src, x_dst) pair")
        if edge_attr is not None and self.lin_edge is None:
            raise ValueError("edge_attr needs a layer built with edge_dim (the size of the edge features)")
        self._materialize("lin_l", x_src)
        self._materialize("lin_r", x_dst)
        if self.res is not None:
            self._materialize("res", x_dst)
        n_src, n_dst, H, C = x_src.size(0), x_dst.size(0), self.heads, self.out_channels
        n = max(n_src, n_dst)
        edge_index, _, _ = as_edge_list(edge_index, None, n)  # an adj_t's values are not used
        if edge_attr is not None:
            if edge_attr.dim() == 1:
                edge_attr = edge_attr.view(-1, 1)
            if edge_attr.size(0) != edge_index.size(1):
                raise ValueError(
                    f"edge_attr must have one row per edge ({edge_index.size(1)}), got shape {tuple(edge_attr.shape)}"
                )
            self._check_dtype(edge_attr, "edge_attr")
        fingerprint = graph_fingerprint(edge_index, n)
        if self.add_self_loops:  # PyG's layout: the non-loop edges in order, then one loop per node
            edge_index, edge_attr = remove_self_loops(edge_index, edge_attr)
            edge_index, edge_attr = pyg_add_self_loops(
                edge_index, edge_attr, fill_value=self.fill_value, num_nodes=min(n_src, n_dst)
            )
        graph = LayerGraph(edge_index, x_src.new_ones(edge_index.size(1)), n)
        graph.fingerprint = fingerprint
        if bipartite and not self.add_self_loops:  # a source and a target with the same index are two nodes
            graph.is_loop = torch.zeros_like(graph.is_loop)
            graph._num_loops = 0
        lock = check_lock(lock, n_dst, x_src.device)
        if lock is not None and n > n_dst:
            lock = torch.cat([lock, lock.new_zeros(n - n_dst)])
        b = _batch(batch, x_src)
        x_l = self._linear("lin_l", x_src, bias=self.lin_l.bias, batch=b).view(n_src, H, C)
        if self.share_weights and not bipartite:
            x_r = x_l
        else:
            name = "lin_l" if self.share_weights else "lin_r"
            x_r = self._linear(name, x_dst, bias=self.lin_r.bias, batch=b).view(n_dst, H, C)
        src, dst = edge_index
        e = x_l[src] + x_r[dst]  # GATv2 logits need m × H × C
        if edge_attr is not None:
            assert self.lin_edge is not None  # checked above: edge_attr needs edge_dim
            e = e + self.lin_edge(edge_attr).view(-1, H, C)
        e = F.leaky_relu(e, self.negative_slope)
        alpha = softmax((e * self.att).sum(-1), dst, num_nodes=n_dst)  # [m, H]
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)

        def scores() -> Tensor:
            return alpha.detach().abs().mean(1) * torch.linalg.vector_norm(x_l.reshape(n_src, -1), dim=1)[src]

        keep, agg = self._edge_step(graph, scores, lock, None, b)
        a = alpha if agg is None else alpha * agg.unsqueeze(1)
        out = self.propagate(edge_index, x=(x_l, x_r), alpha=a, size=(n_src, n_dst))  # [n_dst, H, C]
        out = out.reshape(n_dst, H * C) if self.concat else out.mean(1)
        if self.res is not None:
            out = out + self.res(x_dst)
        if self.bias is not None:
            out = out + self.bias
        self.last_stats.update(f_in=x_src.size(1), f_out=H * C, f_prop=H * C)
        res = _graph_out(out, graph, keep, return_graph, carry_weights=False)
        if not return_attention_weights:
            return res
        if return_graph:
            return res[0], (edge_index, a), res[1]
        return out, (edge_index, a)

    def message(self, x_j: Tensor, alpha: Tensor) -> Tensor:  # type: ignore[override]
        return alpha.unsqueeze(-1) * x_j


class UnifewsGCN2Conv(UnifewsConvMixin, MessagePassing):
    """Unifews ``GCN2Conv`` (GCNII): ``out = ((1-α) P̃ x + α x_0) ((1-β) I + β (W ⊙ M))``, ``β = log(θ/l + 1)``.

    Propagation first (edge score ``|w_e| · ‖x[src_e]‖₂``), the weight rule on ``weight1`` fed with the
    propagated-plus-initial input. With ``shared_weights=False`` (as ``GCN2Conv``) the initial term has its own
    ``weight2``: ``out = h ((1-β) I + β (W1 ⊙ M1)) + h_0 ((1-β) I + β (W2 ⊙ M2))`` with ``h = (1-α) P̃ x``,
    ``h_0 = α x_0``, each mask from its own input. ``δa = δw = 0`` reproduces ``torch_geometric.nn.GCN2Conv``.
    ``weight1`` / ``weight2`` are stored ``(in, out)`` as in PyG.
    """

    _pruned = ("weight1",)

    def __init__(
        self,
        channels: int,
        alpha: float,
        theta: float | None = None,
        layer: int | None = None,
        shared_weights: bool = True,
        cached: bool = False,
        add_self_loops: bool = True,
        normalize: bool = True,
        *,
        config: UnifewsConfig | None = None,
        delta_a: float | None = None,
        delta_w: float | None = None,
        threshold: Threshold | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(**kwargs)
        check_float("alpha", alpha, min=0.0, max=1.0)
        self.channels = check_int("channels", channels, min=1)
        self.alpha, self.normalize, self.add_self_loops = alpha, normalize, add_self_loops
        self.beta = 1.0 if theta is None or layer is None else math.log(theta / layer + 1)
        self.shared_weights = check_bool("shared_weights", shared_weights)
        self.weight1 = nn.Parameter(torch.empty(channels, channels))
        if self.shared_weights:
            self.register_parameter("weight2", None)
        else:
            self._pruned = ("weight1", "weight2")
            self.weight2 = nn.Parameter(torch.empty(channels, channels))
        self._init_unifews(config, cached, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot ``weight1`` (and ``weight2``), as ``GCN2Conv``; masks reset to all-kept."""
        super().reset_parameters()
        glorot(self.weight1)
        if self.weight2 is not None:
            glorot(self.weight2)
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
        batch: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor | None]]:
        """``x``, ``x_0``: [n, channels]; the rest as :meth:`UnifewsGCNConv.forward`."""
        self._check_dtype(x)
        self._check_dtype(x_0, "x_0")
        check_x(x, self.channels)
        check_x(x_0, self.channels, name="x_0")
        n = x.size(0)
        graph = self._layer_graph(
            x, edge_index, edge_weight, normalize=self.normalize, add_self_loops=self.add_self_loops
        )
        lock = check_lock(lock, n, x.device)
        active = check_active(active, graph.m, x.device)
        b = _batch(batch, x)
        keep, agg = self._edge_step(graph, lambda: _scores(graph, x), lock, active, b, z=x)
        h = self._propagate(graph, x, agg)
        beta = self.beta
        if self.weight2 is None:
            h = (1 - self.alpha) * h + self.alpha * x_0[:n]
            out = (1 - beta) * h + beta * self._linear("weight1", h, transpose=True, batch=b)
        else:
            h = (1 - self.alpha) * h
            h0 = self.alpha * x_0[:n]
            out = (1 - beta) * h + beta * self._linear("weight1", h, transpose=True, batch=b)
            out = out + (1 - beta) * h0 + beta * self._linear("weight2", h0, transpose=True, batch=b)
        self.last_stats.update(f_in=self.channels, f_out=self.channels, f_prop=self.channels)
        return _graph_out(out, graph, keep, return_graph)
