"""``UnifewsGNN``: a stack of Unifews layers that hands the kept graph from layer to layer (progressive
sparsification: each layer sees only the edges the previous one kept)."""

from __future__ import annotations

from typing import Any, Literal, cast, get_args

import torch.nn.functional as F
from torch import Tensor, nn

from icml25_shared.validate import check_bool, check_choice, check_float, check_int
from unifews.config import Scheme, UnifewsConfig
from unifews.functional import check_lock, check_x
from unifews.graph import LayerGraph, as_edge_list, check_cached_graph
from unifews.macs import Convention, LayerOps, count_macs
from unifews.nn import UnifewsGATv2Conv, UnifewsGCN2Conv, UnifewsGCNConv, UnifewsSAGEConv

UnifewsConv = UnifewsGCNConv | UnifewsSAGEConv | UnifewsGATv2Conv | UnifewsGCN2Conv

__all__ = ["UnifewsGNN", "CONVS"]

Conv = Literal["gcn", "gat", "sage", "gcn2"]
CONVS: tuple[str, ...] = get_args(Conv)


class UnifewsGNN(nn.Module):
    """An iterative GNN with Unifews layers: ``conv → BatchNorm1d → ReLU → Dropout`` between layers, logits last.

    The graph each layer keeps is the only graph the next layer sees (progressive sparsification,
    ``E^{(L-1)} ⊆ … ⊆ E^{(0)}``). For ``conv="gcn"`` the diffusion weights are computed once from the input graph
    (self-loops added) and carried along unchanged; ``"sage"`` carries its mean weights; ``"gat"`` uses
    ``heads`` concatenated heads of width ``hidden_channels // heads``; ``"gcn2"`` is GCNII
    (``Linear → GCN2Conv × num_layers → Linear``, α = 0.1, θ = 0.5).

    Args:
        in_channels: input feature size.
        hidden_channels: hidden feature size.
        out_channels: output feature size.
        num_layers: number of graph layers (>= 1).
        conv: ``"gcn"`` | ``"gat"`` | ``"sage"`` | ``"gcn2"``.
        dropout: dropout probability between layers.
        config: :class:`UnifewsConfig` shared by every layer.
        heads: attention heads for ``"gat"``.
        bn_momentum: BatchNorm momentum (0.9 in the official code).
        normalize: compute the diffusion weights (``"gcn"``/``"gcn2"``) from the graph; ``False`` uses the given
            ``edge_weight`` as ``T`` (self-loops included), e.g. precomputed on the full graph for mini-batches.
        cached: keep the prepared graph (normalisation, CSR orders) of the first forward for later forwards
            (transductive training; a different edge list raises).

    ``edge_index`` takes every form :class:`~unifews.nn.UnifewsGCNConv` takes (``[2, m]`` tensor, ``EdgeIndex``,
    ``torch.sparse`` ``adj_t``, ``SparseTensor``). Every layer (GCN, SAGE, GCNII) propagates over the same prepared
    edge list, the edges the previous layer removed masked out (``active``), so explainers' edge masks apply to
    every layer; GATv2 layers hand the compacted kept graph on instead (attention re-adds self-loops).

    Mini-batches: with ``threshold="relative"`` each forward prunes relative to the mean message norm of the graph
    it is given, so a sampled subgraph prunes relative to its own mean. For mini-batch inference that prunes as the
    full graph did, run one full-graph forward and :meth:`freeze_edge_thresholds` (absolute thresholds), keep the
    weight masks (``set_scheme("prune_all", "keep")``), and give GCN weights precomputed on the full graph
    (``normalize=False``): the outputs of nodes whose receptive field the batch contains are then the full-graph
    ones.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        conv: Conv = "gcn",
        dropout: float = 0.5,
        config: UnifewsConfig | None = None,
        *,
        heads: int = 8,
        bn_momentum: float = 0.9,
        normalize: bool = True,
        gcn2_alpha: float = 0.1,
        gcn2_theta: float = 0.5,
        cached: bool = False,
    ) -> None:
        super().__init__()
        check_choice("conv", conv, CONVS)
        self.cached = check_bool("cached", cached)
        self._cached_graph: LayerGraph | None = None
        self._cache_source: object = None
        for name, v in (
            ("in_channels", in_channels),
            ("hidden_channels", hidden_channels),
            ("out_channels", out_channels),
            ("num_layers", num_layers),
        ):
            check_int(name, v, min=1)
        check_float("dropout", dropout, min=0.0, max=1.0, max_open=True)
        self.config = config if config is not None else UnifewsConfig()
        self.conv_type, self.dropout, self.normalize = conv, dropout, normalize
        self.in_channels, self.out_channels, self.num_layers = in_channels, out_channels, num_layers
        cfg = self.config
        self.lin_in: nn.Linear | None = None
        self.lin_out: nn.Linear | None = None
        convs: list[nn.Module] = []
        if conv == "gcn2":
            self.lin_in = nn.Linear(in_channels, hidden_channels)
            self.lin_out = nn.Linear(hidden_channels, out_channels)
            for layer in range(num_layers):
                convs.append(
                    UnifewsGCN2Conv(hidden_channels, gcn2_alpha, gcn2_theta, layer + 1, normalize=False, config=cfg)
                )
            dims = [hidden_channels] * num_layers
        else:
            dims = [hidden_channels] * (num_layers - 1) + [out_channels]
            f_in = in_channels
            for i, f_out in enumerate(dims):
                last = i == num_layers - 1
                if conv == "gcn":
                    convs.append(UnifewsGCNConv(f_in, f_out, normalize=False, config=cfg))
                elif conv == "sage":
                    convs.append(UnifewsSAGEConv(f_in, f_out, config=cfg))
                else:
                    h = 1 if last else heads
                    if not last and f_out % heads:
                        raise ValueError(f"hidden_channels={f_out} must be divisible by heads={heads} for conv='gat'")
                    convs.append(UnifewsGATv2Conv(f_in, f_out // h, heads=h, concat=True, config=cfg))
                    dims[i] = f_out
                f_in = f_out
        self.convs = nn.ModuleList(convs)
        n_bn = num_layers if conv == "gcn2" else num_layers - 1
        self.bns = nn.ModuleList(nn.BatchNorm1d(d, momentum=bn_momentum) for d in dims[:n_bn])
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise every layer, clear the masks and the cached graph."""
        for m in [*self.convs, *self.bns, self.lin_in, self.lin_out]:
            if m is not None:
                m.reset_parameters()
        self._cached_graph = self._cache_source = None

    def layers(self) -> list[UnifewsConv]:
        """The Unifews convolutions, in order (``self.convs`` as a typed list)."""
        return cast("list[UnifewsConv]", list(self.convs))

    def set_scheme(self, scheme_a: Scheme, scheme_w: Scheme) -> None:
        """Set the edge and weight schemes of every layer (``prune_all`` | ``prune_inc`` | ``keep``)."""
        for conv in self.layers():
            conv.set_scheme(scheme_a, scheme_w)

    def freeze_edge_thresholds(self) -> list[float]:
        """Fix every layer's edge threshold at the absolute ``θ_a`` of the last pruning forward (see the class
        docstring on mini-batches); returns them. ``unfreeze_edge_thresholds`` undoes it."""
        return [conv.freeze_edge_threshold() for conv in self.layers()]

    def unfreeze_edge_thresholds(self) -> None:
        """Back to the configured rule (``δa`` relative or absolute)."""
        for conv in self.layers():
            conv.theta_a = None

    def _prepare_graph(self, x: Tensor, edge_index: Any, edge_weight: Tensor | None) -> LayerGraph:
        n = x.size(0)
        if self.cached and self._cached_graph is not None:
            self._cache_source = check_cached_graph(
                self._cached_graph, self._cache_source, edge_index, n, "model",
                "call reset_parameters() or build a new model for a new graph",
            )  # fmt: skip
            return self._cached_graph
        gcn = self.conv_type in ("gcn", "gcn2")
        g = LayerGraph.prepare(
            edge_index, edge_weight, n, normalize=gcn and self.normalize, r=self.config.r, dtype=x.dtype
        )
        if self.conv_type == "sage" and edge_weight is None:  # mean aggregation over the input graph
            deg = x.new_zeros(n).index_add_(0, g.edge_index[1], x.new_ones(g.m))
            g.w = deg.clamp_min(1).reciprocal()[g.edge_index[1]]
        if self.cached:
            self._cached_graph, self._cache_source = g, edge_index
        return g

    def forward(
        self,
        x: Tensor,
        edge_index: Any,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        batch: Tensor | None = None,
    ) -> Tensor:
        """Logits ``[n, out_channels]``. ``lock`` (bool mask or indices): nodes whose messages are restored.
        ``batch``: PyG's ``Batch.batch`` for a mini-batch of several graphs (node- or graph-level tasks): every
        graph is then pruned with its own thresholds, as it would be alone."""
        check_x(x, self.in_channels)
        if self.conv_type == "gat":
            if edge_weight is not None:
                raise ValueError("conv='gat' does not take edge_weight; pass None")
            ei, _, _ = as_edge_list(edge_index, None, x.size(0))
            lock = check_lock(lock, x.size(0), x.device)
            h = x
            for i, conv in enumerate(self.convs):
                h, (ei, _) = conv(h, ei, lock=lock, batch=batch, return_graph=True)
                if i < len(self.convs) - 1:
                    h = F.dropout(F.relu(self.bns[i](h)), self.dropout, self.training)
            return h
        graph = self._prepare_graph(x, edge_index, edge_weight)
        lock = check_lock(lock, x.size(0), x.device)
        active = None  # progressive: each layer sees only the edges the previous one kept
        h = x
        if self.conv_type == "gcn2":
            h = F.dropout(h, self.dropout, self.training)
            assert self.lin_in is not None and self.lin_out is not None  # built for gcn2
            h = x_0 = F.relu(self.lin_in(h))
            for conv, bn in zip(self.convs, self.bns):
                h = F.dropout(h, self.dropout, self.training)
                h = conv(h, x_0, graph, lock=lock, active=active, batch=batch)
                active = conv.edge_keep
                h = F.relu(bn(h))
            h = F.dropout(h, self.dropout, self.training)
            return self.lin_out(h)
        for i, conv in enumerate(self.convs):
            h = conv(h, graph, lock=lock, active=active, batch=batch)
            active = conv.edge_keep
            if i < len(self.convs) - 1:
                h = F.dropout(F.relu(self.bns[i](h)), self.dropout, self.training)
        return h

    def sparsity(self) -> dict[str, Any]:
        """Per-layer and overall weight/edge sparsity of the last forward (edge: removed non-loop input edges of
        each layer; ``edge_total``: removed fraction of the first layer's non-loop edges by the last layer)."""
        convs = self.layers()
        per = [conv.sparsity() for conv in convs]
        wt = sum(c.weight_density() * sum(getattr(c, f"{n}_mask").numel() for n in c._pruned) for c in convs)
        total = sum(sum(getattr(c, f"{n}_mask").numel() for n in c._pruned) for c in convs)
        first, last = convs[0].last_stats, convs[-1].last_stats
        m0 = first.get("edges_in_nonloop", 0)
        return {
            "layers": per,
            "weight": 1.0 - wt / total if total else 0.0,
            "edge_total": 1.0 - last.get("edges_kept_nonloop", 0) / m0 if m0 else 0.0,
        }

    def layer_ops(self) -> list[LayerOps]:
        """The per-layer quantities of the MAC count recorded by the last forward (for :func:`count_macs`)."""
        convs = self.layers()
        if not convs[0].last_stats:
            raise RuntimeError("run a forward pass before asking for operation counts")
        ops = []
        for conv in convs:
            s = conv.last_stats
            ops.append(
                LayerOps(
                    num_nodes=int(s["num_nodes"]),
                    f_in=int(s["f_in"]),
                    f_out=int(s["f_out"]),
                    weight_density=conv.weight_density(),
                    edges_nonloop=int(s["edges_aggregated"] - (s["edges_kept"] - s["edges_kept_nonloop"])),
                    f_prop=int(s["f_prop"]),
                )
            )
        return ops

    def macs(self, convention: Convention = "exact") -> int:
        """MACs of the graph layers of the last forward (``convention="official"`` uses ``f_in`` for
        every propagation term). The dense reference is the same model with ``delta_a = delta_w = 0``."""
        return count_macs(self.layer_ops(), convention=convention)
