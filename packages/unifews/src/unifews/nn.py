"""Unifews convolutions: drop-in ``MessagePassing`` layers that prune messages and weights entry-wise.

Every layer follows the official code's rule for iterative layers (the paper's eq. 9 and eq. 14 applied to one
layer):

1. weight mask ``M`` by the input-norm rule (:func:`~unifews.functional.weight_mask`), ``W_eff = W ⊙ M``;
2. the factorised message norm ``s_e = |w_e| · ‖Z[src_e]‖₂`` of the matrix ``Z`` being propagated;
3. ``keep_e = s_e >= θ_a ∨ is_loop(e)`` (``θ_a = δa · mean s`` or ``δa``);
4. ``agg_e = keep_e ∨ lock[dst_e]`` -- messages into locked (evaluated) nodes are restored in this layer only;
5. one CSR SpMM over the aggregated edges; the layer returns the *kept* graph for the next layer (progressive:
   ``E^{(l+1)} ⊆ E^{(l)}``).

Schemes (``set_scheme(scheme_a, scheme_w)``): ``"prune_all"`` recomputes the mask from the current input and the
stored dense weights (pruned weights come back: "rewind"); ``"prune_inc"`` intersects with the stored mask (and
zeroes pruned weights for good); ``"keep"`` reuses the stored masks exactly.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25_shared.validate import check_choice, check_float, check_int
from unifews import _pyg  # noqa: F401  (imports torch_geometric quietly)
from unifews.config import SCHEMES, Scheme, Threshold, UnifewsConfig
from unifews.functional import (
    check_edge_index,
    check_edge_weight,
    check_lock,
    check_x,
    diffusion_weights,
    edge_keep_mask,
    edge_keys,
    message_scores,
    spmm,
    weight_mask,
)

from torch_geometric.nn import MessagePassing  # isort: skip
from torch_geometric.nn.dense.linear import Linear  # isort: skip
from torch_geometric.nn.inits import glorot, zeros  # isort: skip
from torch_geometric.utils import remove_self_loops, softmax  # isort: skip

__all__ = ["UnifewsConvMixin", "UnifewsGCNConv", "UnifewsGATv2Conv", "UnifewsSAGEConv", "UnifewsGCN2Conv"]


class UnifewsConvMixin:
    """Mask state, schemes and statistics shared by the Unifews layers.

    Subclasses list their pruned linear maps in ``_pruned`` (attribute names whose ``.weight`` is pruned) and call
    :meth:`_masked_weight` and :meth:`_edge_step` in ``forward``.
    """

    _pruned: tuple[str, ...] = ()

    def _init_unifews(self, config: UnifewsConfig | None, **overrides: Any) -> None:
        cfg = config if config is not None else UnifewsConfig()
        if not isinstance(cfg, UnifewsConfig):
            raise TypeError(f"config must be a UnifewsConfig or None, got {type(cfg).__name__}")
        if overrides:
            cfg = UnifewsConfig(**{**cfg.__dict__, **{k: v for k, v in overrides.items() if v is not None}})
        self.config = cfg
        self.scheme_a = "prune_all"
        self.scheme_w = "prune_all"
        for name in self._pruned:
            w = self._get_weight(name)
            self.register_buffer(f"{name}_mask", torch.ones(w.shape, dtype=torch.bool, device=w.device))
        self.register_buffer("edge_keep", None)
        self.register_buffer("kept_edge_index", None)
        self.last_stats: dict[str, float] = {}

    # ---- state ----------------------------------------------------------------------------------------------
    def _get_weight(self, name: str) -> Tensor:
        mod = getattr(self, name)
        return mod.weight if isinstance(mod, nn.Module) else mod

    def set_scheme(self, scheme_a: Scheme, scheme_w: Scheme) -> None:
        """Set the edge scheme and the weight scheme, each one of ``prune_all``, ``prune_inc``, ``keep``."""
        self.scheme_a = check_choice("scheme_a", scheme_a, SCHEMES)
        self.scheme_w = check_choice("scheme_w", scheme_w, SCHEMES)

    @property
    def weight_mask(self) -> Tensor | dict[str, Tensor]:
        """The stored weight mask (bool, the weight's shape); a dict ``{linear name: mask}`` for several maps."""
        masks = {name: getattr(self, f"{name}_mask") for name in self._pruned}
        return next(iter(masks.values())) if len(masks) == 1 else masks

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

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected, errors):
        # the edge masks have the size of the last graph: adopt them before the default (shape-checking) loader
        for key in ("edge_keep", "kept_edge_index"):
            if prefix + key in state_dict:
                setattr(self, key, state_dict[prefix + key].clone())
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected, errors)

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

    def _edge_step(
        self, edge_index: Tensor, edge_weight: Tensor, scores: Tensor, num_nodes: int, lock: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Return ``(keep, agg)`` bool masks over the input edges (steps 3-5 of the rule in the module docstring)
        and record them."""
        src, dst = edge_index
        is_loop = src == dst
        if self.scheme_a == "keep":
            if self.edge_keep is None or self.edge_keep.numel() != src.numel():
                got = None if self.edge_keep is None else self.edge_keep.numel()
                raise ValueError(
                    f"scheme_a='keep' needs the graph of the last pruning forward ({got} edges), got {src.numel()} "
                    "edges; run a 'prune_all' forward on this graph first"
                )
            keep = self.edge_keep.to(src.device)
        else:
            keep = edge_keep_mask(scores, is_loop, self.config.delta_a, self.config.threshold)
            if self.scheme_a == "prune_inc" and self.kept_edge_index is not None:
                prev = edge_keys(self.kept_edge_index.to(src.device), num_nodes)
                keep = keep & torch.isin(edge_keys(edge_index, num_nodes), prev)
            self.edge_keep = keep.detach().clone()
            self.kept_edge_index = edge_index[:, keep].detach().clone()
        agg = keep if lock is None else keep | lock[dst]
        n_loop = int(is_loop.sum())
        self.last_stats.update(
            num_nodes=num_nodes,
            edges_in=src.numel(),
            edges_in_nonloop=src.numel() - n_loop,
            edges_kept=int(keep.sum()),
            edges_kept_nonloop=int(keep.sum()) - n_loop,
            edges_aggregated=int(agg.sum()),
        )
        return keep, agg

    def _check_inputs(
        self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None, lock: Tensor | None, in_channels: int
    ) -> Tensor | None:
        check_x(x, in_channels)
        check_edge_index(edge_index, x.size(0))
        check_edge_weight(edge_weight, edge_index.size(1))
        return check_lock(lock, x.size(0), x.device)


def _graph_out(out: Tensor, edge_index: Tensor, edge_weight: Tensor | None, keep: Tensor, return_graph: bool):
    if not return_graph:
        return out
    return out, (edge_index[:, keep], None if edge_weight is None else edge_weight[keep])


class UnifewsGCNConv(UnifewsConvMixin, MessagePassing):
    """Unifews ``GCNConv``: ``out = Σ_{kept e} w_e (H (W ⊙ M)ᵀ)[src_e] + b`` (the rule in the module docstring).

    Drop-in for :class:`torch_geometric.nn.GCNConv` (same ``lin``/``bias`` parameters and initialisation). With
    ``normalize=True`` self-loops are added and ``w = T[u, v]`` of ``T = D̄^{-(1-r)} Ā D̄^{-r}``; with
    ``normalize=False`` ``edge_weight`` is used as ``w`` (1 when None). Kept edges keep their weight (no
    renormalisation). ``δa = δw = 0`` reproduces ``GCNConv``.

    Args:
        in_channels, out_channels: feature sizes.
        normalize: compute the diffusion weights from the graph (``True``) or use ``edge_weight`` as given.
        add_self_loops: with ``normalize``, add a self-loop to every node that lacks one.
        bias: learn an additive bias (added after propagation).
        config: :class:`~unifews.config.UnifewsConfig`; keyword ``delta_a``/``delta_w``/``threshold`` override it.
    """

    _pruned = ("lin",)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        normalize: bool = True,
        add_self_loops: bool = True,
        bias: bool = True,
        config: UnifewsConfig | None = None,
        delta_a: float | None = None,
        delta_w: float | None = None,
        threshold: Threshold | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(**kwargs)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.normalize, self.add_self_loops = normalize, add_self_loops
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer="glorot")
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._init_unifews(config, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot weights, zero bias (as ``GCNConv``); masks reset to all-kept."""
        super().reset_parameters()
        self.lin.reset_parameters()
        if self.bias is not None:
            zeros(self.bias)
        if hasattr(self, "lin_mask"):
            self.lin_mask.fill_(True)
            self.edge_keep = self.kept_edge_index = None

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """Propagate ``x`` ([n, in_channels]) over ``edge_index`` ([2, m], int64) with pruning.

        ``lock``: bool mask [n] or int64 indices of nodes whose incoming messages are all aggregated in this
        layer. ``return_graph=True`` also returns the kept ``(edge_index, edge_weight)`` (normalised weights,
        self-loops included) to hand to the next layer with ``normalize=False``.
        """
        lock = self._check_inputs(x, edge_index, edge_weight, lock, self.in_channels)
        n = x.size(0)
        if self.normalize:
            edge_index, edge_weight = diffusion_weights(
                edge_index, n, edge_weight, r=self.config.r, add_self_loops=self.add_self_loops, dtype=x.dtype
            )
        elif edge_weight is None:
            edge_weight = x.new_ones(edge_index.size(1))
        weight = self._masked_weight("lin", x)
        z = x @ weight.t()  # transform first (step 2 of the rule)
        with torch.no_grad():
            scores = message_scores(edge_index, edge_weight, z)
        keep, agg = self._edge_step(edge_index, edge_weight, scores, n, lock)
        out = spmm(edge_index[:, agg], edge_weight[agg], z, n)
        if self.bias is not None:
            out = out + self.bias
        self.last_stats.update(f_in=self.in_channels, f_out=self.out_channels, f_prop=self.out_channels)
        return _graph_out(out, edge_index, edge_weight, keep, return_graph)

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
        self._init_unifews(config, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As ``SAGEConv.reset_parameters``; masks reset to all-kept."""
        super().reset_parameters()
        self.lin_l.reset_parameters()
        if self.lin_r is not None:
            self.lin_r.reset_parameters()
        for name in self._pruned:
            if hasattr(self, f"{name}_mask"):
                getattr(self, f"{name}_mask").fill_(True)
        self.edge_keep = self.kept_edge_index = None

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """See :class:`UnifewsGCNConv.forward`; the returned graph carries the mean weights ``w_e``."""
        lock = self._check_inputs(x, edge_index, edge_weight, lock, self.in_channels)
        n = x.size(0)
        if edge_weight is None:
            deg = x.new_zeros(n).index_add_(0, edge_index[1], x.new_ones(edge_index.size(1)))
            edge_weight = deg.clamp_min(1).reciprocal()[edge_index[1]]
        with torch.no_grad():
            scores = message_scores(edge_index, edge_weight, x)
        keep, agg = self._edge_step(edge_index, edge_weight, scores, n, lock)
        h = spmm(edge_index[:, agg], edge_weight[agg], x, n)  # propagation first
        out = F.linear(h, self._masked_weight("lin_l", h), self.lin_l.bias)
        if self.lin_r is not None:
            out = out + x @ self._masked_weight("lin_r", x).t()
        self.last_stats.update(f_in=self.in_channels, f_out=self.out_channels, f_prop=self.in_channels)
        return _graph_out(out, edge_index, edge_weight, keep, return_graph)


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
        self._init_unifews(config, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As ``GATv2Conv.reset_parameters``; masks reset to all-kept."""
        super().reset_parameters()
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()
        glorot(self.att)
        if self.bias is not None:
            zeros(self.bias)
        for name in self._pruned:
            if hasattr(self, f"{name}_mask"):
                getattr(self, f"{name}_mask").fill_(True)
        self.edge_keep = self.kept_edge_index = None

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, None]]:
        """See :class:`UnifewsGCNConv.forward`. ``edge_weight`` is not used by attention and must be None."""
        if edge_weight is not None:
            raise ValueError("UnifewsGATv2Conv does not take edge_weight (attention sets the weights); pass None")
        lock = self._check_inputs(x, edge_index, None, lock, self.in_channels)
        n, H, C = x.size(0), self.heads, self.out_channels
        if self.add_self_loops:
            edge_index, _ = remove_self_loops(edge_index)
            loops = torch.arange(n, device=edge_index.device)
            edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        x_l = F.linear(x, self._masked_weight("lin_l", x), self.lin_l.bias).view(n, H, C)
        x_r = F.linear(x, self._masked_weight("lin_r", x), self.lin_r.bias).view(n, H, C)
        src, dst = edge_index
        e = F.leaky_relu(x_l[src] + x_r[dst], self.negative_slope)  # GATv2 logits need m × H × C
        alpha = softmax((e * self.att).sum(-1), dst, num_nodes=n)  # [m, H]
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        with torch.no_grad():
            scores = alpha.detach().abs().mean(1) * torch.linalg.vector_norm(x_l.reshape(n, -1), dim=1)[src]
        keep, agg = self._edge_step(edge_index, alpha, scores, n, lock)
        ei, a = edge_index[:, agg], alpha[agg]
        out = torch.stack([spmm(ei, a[:, h], x_l[:, h], n) for h in range(H)], dim=1)  # [n, H, C]
        out = out.reshape(n, H * C) if self.concat else out.mean(1)
        if self.bias is not None:
            out = out + self.bias
        self.last_stats.update(f_in=self.in_channels, f_out=H * C, f_prop=H * C)
        return _graph_out(out, edge_index, None, keep, return_graph)


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
        self._init_unifews(config, delta_a=delta_a, delta_w=delta_w, threshold=threshold)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot ``weight1`` (as ``GCN2Conv``); masks reset to all-kept."""
        super().reset_parameters()
        glorot(self.weight1)
        if hasattr(self, "weight1_mask"):
            self.weight1_mask.fill_(True)
        self.edge_keep = self.kept_edge_index = None

    def forward(
        self,
        x: Tensor,
        x_0: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        *,
        lock: Tensor | None = None,
        return_graph: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """``x``, ``x_0``: [n, channels]; the rest as :meth:`UnifewsGCNConv.forward`."""
        lock = self._check_inputs(x, edge_index, edge_weight, lock, self.channels)
        check_x(x_0, self.channels, name="x_0")
        n = x.size(0)
        if self.normalize:
            edge_index, edge_weight = diffusion_weights(
                edge_index, n, edge_weight, r=self.config.r, add_self_loops=self.add_self_loops, dtype=x.dtype
            )
        elif edge_weight is None:
            edge_weight = x.new_ones(edge_index.size(1))
        with torch.no_grad():
            scores = message_scores(edge_index, edge_weight, x)
        keep, agg = self._edge_step(edge_index, edge_weight, scores, n, lock)
        h = spmm(edge_index[:, agg], edge_weight[agg], x, n)
        h = (1 - self.alpha) * h + self.alpha * x_0[:n]
        out = (1 - self.beta) * h + self.beta * (h @ self._masked_weight("weight1", h, transpose=True))
        self.last_stats.update(f_in=self.channels, f_out=self.channels, f_prop=self.channels)
        return _graph_out(out, edge_index, edge_weight, keep, return_graph)
