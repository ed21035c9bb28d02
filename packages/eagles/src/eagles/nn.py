r"""Consensus-informed parameter sparsification (Sec. 4.2) as PyTorch / PyG modules.

:class:`ThresholdMaskedLinear` is a drop-in ``nn.Linear`` whose weight is masked by a trainable threshold per
output row, :math:`M = \mathbb 1[|W| > t\,\mathbf 1^\top]`, :math:`y = x (W \odot M)^\top + b`, trained through an
identity straight-through estimator; :func:`masked_gnn` swaps the linear maps of PyG ``GCNConv`` / ``SAGEConv`` /
``GENConv`` models for it; :class:`EaglesGCN` is the official Cora backbone and :class:`EaglesModel` one client's
sparsifier plus GNN.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import torch
from torch import Tensor, nn
from torch.nn import functional as tF
from torch_geometric.nn import MessagePassing

import eagles._pyg  # noqa: F401  (before torch_geometric)
from eagles.config import EaglesConfig
from eagles.graph import MixtureGraphSparsifier, check_graph, matmul
from icml25_shared.validate import check_choice, check_float, check_int, check_tensor

__all__ = [
    "ThresholdMaskedLinear",
    "masked_gnn",
    "masked_layers",
    "EaglesConv",
    "EaglesGCN",
    "EaglesModel",
    "build_model",
]


class _MaskedWeight(torch.autograd.Function):
    """W ⊙ 1[|W| > t] with the identity straight-through estimator of the step, fused:
    dW = g ⊙ (M + |W|), dt = −Σ_cols g ⊙ W (the gradient of W ⊙ M(|W| − t) with dM/du := 1)."""

    @staticmethod
    def forward(ctx, w: Tensor, t: Tensor) -> Tensor:  # type: ignore[override]
        keep = w.abs() > t.unsqueeze(1)
        ctx.save_for_backward(w, keep)
        return w * keep

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, Tensor | None]:  # type: ignore[override]
        w, keep = ctx.saved_tensors
        gw = gt = None
        if ctx.needs_input_grad[0]:
            gw = g * keep + g * w.abs()
        if ctx.needs_input_grad[1]:
            gt = -(g * w).sum(1)
        return gw, gt


class ThresholdMaskedLinear(nn.Linear):
    r"""``nn.Linear`` with a trainable threshold per output row (initialised to 0: only exact zeros are masked).

    .. math::
        M = \mathrm{step}(|W| - t\,\mathbf 1^\top), \qquad y = x\,(W \odot M)^\top + b

    The step's backward is the identity (straight-through), so :math:`W` and :math:`t` both get gradient through
    :math:`M`. :meth:`sparsity_loss` is :math:`\sum_o e^{-t_o}`, the pressure that raises :math:`t`. A fixed mask
    (:meth:`set_mask`, the re-train phase) replaces the threshold's mask and freezes :math:`t`; it is a
    non-persistent buffer, since both sides of a federation know it. Sparse (COO/CSR) inputs are multiplied
    without densifying them.
    """

    fixed_mask: Tensor | None

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.threshold = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype))
        self.register_buffer("fixed_mask", None, persistent=False)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if hasattr(self, "threshold"):
            nn.init.zeros_(self.threshold)

    @classmethod
    def from_linear(cls, linear: nn.Module) -> ThresholdMaskedLinear:
        """A masked copy of an ``nn.Linear`` or PyG ``Linear`` (same weight, bias, device and dtype)."""
        weight = getattr(linear, "weight", None)
        if not isinstance(weight, Tensor) or isinstance(weight, nn.parameter.UninitializedParameter):
            raise ValueError(
                f"linear must be an initialised linear layer (lazy in_channels=-1 is not supported), got {linear!r}"
            )
        bias = getattr(linear, "bias", None)
        new = cls(weight.size(1), weight.size(0), bias=bias is not None, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            new.weight.copy_(weight)
            if bias is not None:
                new.bias.copy_(bias)
        new.weight.requires_grad_(weight.requires_grad)
        return new

    def mask(self) -> Tensor:
        """The current binary mask (float, the weight's dtype) with the straight-through gradient."""
        if self.fixed_mask is not None:
            return self.fixed_mask.to(self.weight.dtype)
        u = self.weight.abs() - self.threshold.unsqueeze(1)
        return (u > 0).to(u.dtype) + u - u.detach()

    def hard_mask(self) -> Tensor:
        """The current mask as a bool tensor (no gradient)."""
        with torch.no_grad():
            return self.mask() > 0

    def set_mask(self, mask: Tensor | None) -> None:
        """Fix the mask (bool or 0/1 tensor of the weight's shape) and freeze the threshold; None unfixes it."""
        if mask is None:
            self.fixed_mask = None
            self.threshold.requires_grad_(True)
            return
        check_tensor("mask", mask, shape=tuple(self.weight.shape))
        if mask.dtype != torch.bool:
            if not bool(((mask == 0) | (mask == 1)).all()):
                raise ValueError("mask must be bool or hold only 0 and 1")
            mask = mask != 0
        self.fixed_mask = mask.to(self.weight.device).clone()
        self.threshold.requires_grad_(False)
        with torch.no_grad():  # weights outside a fixed mask are never sent nor trained: keep them at zero
            self.weight.mul_(self.fixed_mask)

    def sparsity_loss(self) -> Tensor:
        r""":math:`\sum_o e^{-t_o}` (its gradient in t is negative: descent raises the thresholds)."""
        return torch.exp(-self.threshold).sum()

    def masked_weight(self) -> Tensor:
        """W ⊙ M (fused; the same values and gradients as ``self.weight * self.mask()``)."""
        if self.fixed_mask is not None:
            return self.weight * self.fixed_mask
        return _MaskedWeight.apply(self.weight, self.threshold)

    def forward(self, input: Tensor) -> Tensor:
        w = self.masked_weight()
        if input.layout in (torch.sparse_coo, torch.sparse_csr):
            out = matmul(input, w.t())
            return out if self.bias is None else out + self.bias
        return tF.linear(input, w, self.bias)


def masked_layers(model: nn.Module) -> dict[str, ThresholdMaskedLinear]:
    """Every :class:`ThresholdMaskedLinear` of ``model`` by qualified name (module order)."""
    return {name: mod for name, mod in model.named_modules() if isinstance(mod, ThresholdMaskedLinear)}


def _host_convs() -> tuple[type, ...]:
    from torch_geometric.nn import GCNConv, GENConv, SAGEConv

    return (GCNConv, SAGEConv, GENConv)


def masked_gnn(model: nn.Module) -> nn.Module:
    """Swap every linear map (``nn.Linear`` or PyG ``Linear``) inside the ``GCNConv``, ``SAGEConv`` and ``GENConv``
    layers of ``model`` for a :class:`ThresholdMaskedLinear` with the same weights (in place); returns ``model``.

    With thresholds at zero the model computes exactly what it computed before (outputs and gradients).
    """
    from torch_geometric.nn.dense.linear import Linear as PygLinear

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    convs = [m for m in model.modules() if isinstance(m, _host_convs())]
    if not convs:
        raise ValueError("model must contain a GCNConv, SAGEConv or GENConv layer; found none")
    for conv in convs:
        for parent in list(conv.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, (nn.Linear, PygLinear)) and not isinstance(child, ThresholdMaskedLinear):
                    setattr(parent, name, ThresholdMaskedLinear.from_linear(child))
    return model


class EaglesConv(MessagePassing):
    r"""The official Cora layer with masked messages:

    .. math::
        h_i = \mathrm{normalize}_2\Big(\sum_{j \to i} m_e w_e\, W_l x_j + W_r x_i\Big), \quad
        w_e = (d^{out}_j d^{in}_i)^{-1/2}

    with degrees counted over kept edges (``edge_norm="sym"``; ``"none"``: :math:`w_e = 1`). ``execute=True``
    drops the masked edges and multiplies by the sparse adjacency of the kept ones (inference that saves work);
    it computes the same output as masking the messages.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        edge_norm: str = "sym",
        normalize: bool = True,
        masked: bool = True,
    ) -> None:
        super().__init__(aggr="add")
        self.in_channels = check_int("in_channels", in_channels, min=1)
        self.out_channels = check_int("out_channels", out_channels, min=1)
        self.edge_norm = check_choice("edge_norm", edge_norm, ("sym", "none"))
        self.normalize = normalize
        lin = ThresholdMaskedLinear if masked else nn.Linear
        self.lin_l = lin(in_channels, out_channels)
        self.lin_r = lin(in_channels, out_channels, bias=False)

    def reset_parameters(self) -> None:
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()

    def edge_weight(self, edge_index: Tensor, n: int, edge_mask: Tensor | None, dtype: torch.dtype) -> Tensor:
        m = edge_index.size(1)
        w = edge_mask.to(dtype) if edge_mask is not None else torch.ones(m, dtype=dtype, device=edge_index.device)
        if self.edge_norm == "none":
            return w
        src, dst = edge_index
        d_out = torch.zeros(n, dtype=dtype, device=w.device).index_add(0, src, w).clamp_min(1)
        d_in = torch.zeros(n, dtype=dtype, device=w.device).index_add(0, dst, w).clamp_min(1)
        return w * d_out[src].rsqrt() * d_in[dst].rsqrt()

    def forward(self, x: Tensor, edge_index: Tensor, edge_mask: Tensor | None = None, execute: bool = False) -> Tensor:
        n = x.size(0)
        w = self.edge_weight(edge_index, n, edge_mask, self.lin_l.weight.dtype)
        if x.layout != torch.strided:  # sparse features: one SpMM for both maps
            wl, wr = (
                lin.masked_weight() if isinstance(lin, ThresholdMaskedLinear) else lin.weight
                for lin in (self.lin_l, self.lin_r)
            )
            hr = matmul(x, torch.cat([wl.t(), wr.t()], 1))  # (F, 2·out), row-major in one copy
            h, root = hr[:, : self.out_channels], hr[:, self.out_channels :]
            h = h + self.lin_l.bias
        else:
            h, root = self.lin_l(x), self.lin_r(x)
        if execute:
            keep = w != 0 if edge_mask is None else edge_mask > 0
            ei, wk = edge_index[:, keep], w[keep]
            adj = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), wk, (n, n), check_invariants=False).coalesce()
            agg = torch.sparse.mm(adj, h)
        else:
            agg = self.propagate(edge_index, x=h, w=w)
        out = agg + root
        return tF.normalize(out, p=2.0, dim=-1) if self.normalize else out

    def message(self, x_j: Tensor, w: Tensor) -> Tensor:
        return w.unsqueeze(-1) * x_j


class EaglesGCN(nn.Module):
    """The official Cora backbone: :class:`EaglesConv` layers (L2-normalised hidden outputs), ReLU and dropout
    between layers, log-softmax output. ``masked=False`` builds the dense GNN (plain ``nn.Linear``).

    ``forward(x, edge_index, edge_mask=None, execute_sparsity=None)``: ``execute_sparsity`` defaults to
    ``not self.training`` (inference runs on kept edges only).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 3,
        dropout: float = 0.5,
        edge_norm: str = "sym",
        masked: bool = True,
    ) -> None:
        super().__init__()
        num_layers = check_int("num_layers", num_layers, min=1)
        self.dropout = check_float("dropout", dropout, min=0.0, max=1.0, max_open=True)
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = nn.ModuleList(
            EaglesConv(dims[i], dims[i + 1], edge_norm, normalize=i < num_layers - 1, masked=masked)
            for i in range(num_layers)
        )

    @property
    def layers(self) -> list[EaglesConv]:
        """The message-passing layers, typed."""
        return cast(list[EaglesConv], list(self.convs))

    def reset_parameters(self) -> None:
        for conv in self.layers:
            conv.reset_parameters()

    def forward(
        self, x: Tensor, edge_index: Tensor, edge_mask: Tensor | None = None, execute_sparsity: bool | None = None
    ) -> Tensor:
        check_graph(x, edge_index)
        dtype = self.layers[0].lin_l.weight.dtype
        if x.dtype != dtype:
            raise ValueError(f"x must have the model's dtype {dtype}, got {x.dtype} (cast x or the model)")
        if edge_mask is not None:
            check_tensor("edge_mask", edge_mask, ndim=1, shape=(edge_index.size(1),))
        execute = (not self.training) if execute_sparsity is None else execute_sparsity
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index, edge_mask, execute=execute)
            if i < len(self.convs) - 1:
                x = tF.dropout(torch.relu(x), self.dropout, self.training)
        return torch.log_softmax(x, dim=-1)


class EaglesModel(nn.Module):
    """One client's model: the optional :class:`~eagles.graph.MixtureGraphSparsifier` and the GNN.

    ``forward(x, edge_index, tau=1.0, topo=None) -> (log_probs, edge_mask or None, aux_loss)``; ``topo``: the
    classical edge scores the sparsifier adds (``config.topo_scores``, :func:`eagles.graph.topological_edge_scores`).
    """

    def __init__(self, gnn: nn.Module, sparsifier: MixtureGraphSparsifier | None = None) -> None:
        super().__init__()
        self.gnn = gnn
        self.sparsifier = sparsifier

    def forward(
        self, x: Tensor, edge_index: Tensor, tau: float = 1.0, topo: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None, Tensor]:
        if self.sparsifier is None:
            return self.gnn(x, edge_index), None, x.new_zeros(())
        edge_mask, aux = self.sparsifier(x, edge_index, tau=tau, topo=topo)
        return self.gnn(x, edge_index, edge_mask), edge_mask, aux

    def masks(self) -> dict[str, Tensor]:
        """The GNN's current layer masks (bool), keyed by the masked layer's weight name in the state dict."""
        return {f"{name}.weight": mod.hard_mask() for name, mod in masked_layers(self).items()}

    def set_masks(self, masks: Mapping[str, Tensor] | None) -> None:
        """Fix every masked layer's mask (keys as :meth:`masks`); None unfixes them."""
        layers = {f"{name}.weight": mod for name, mod in masked_layers(self).items()}
        if masks is None:
            for mod in layers.values():
                mod.set_mask(None)
            return
        if set(masks) != set(layers):
            raise ValueError(f"masks must have the keys {sorted(layers)}, got {sorted(masks)}")
        for key, mod in layers.items():
            if tuple(masks[key].shape) != tuple(mod.weight.shape):
                raise ValueError(
                    f"mask {key!r} must have shape {tuple(mod.weight.shape)}, got {tuple(masks[key].shape)}"
                )
            mod.set_mask(masks[key])

    def sparsity_loss(self) -> Tensor:
        terms = [mod.sparsity_loss() for mod in masked_layers(self).values() if mod.fixed_mask is None]
        return torch.stack(terms).sum() if terms else torch.zeros(())


def build_model(in_channels: int, num_classes: int, config: EaglesConfig) -> EaglesModel:
    """The client model of ``config`` with initial weights drawn from ``config.seed`` (identical on every client);
    the caller's RNG state is left untouched."""
    if not isinstance(config, EaglesConfig):
        raise TypeError(f"config must be an EaglesConfig, got {type(config).__name__}")
    in_channels = check_int("in_channels", in_channels, min=1)
    num_classes = check_int("num_classes", num_classes, min=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        gnn = EaglesGCN(
            in_channels,
            config.hidden_channels,
            num_classes,
            config.num_layers,
            config.dropout,
            config.edge_norm,
            masked=config.weight_sparsifier,
        )
        sparsifier = MixtureGraphSparsifier(in_channels, config) if config.graph_sparsifier else None
    return EaglesModel(gnn, sparsifier)
