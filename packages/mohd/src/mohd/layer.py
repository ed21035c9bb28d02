"""One MoHD sublayer: norm -> route -> fuse -> scaled sparse read -> attention / SwiGLU -> sparse write.

Per token x in R^H cut into N groups of width d_s (reconstruction of the paper's Sec. 3, see the README):

1. ``h = RMSNorm(x)``; the router picks K specialized groups, the N_s shared groups are always on; gates ``g``
   (1 on shared groups, the routed gate on chosen ones, 0 elsewhere);
2. group fusion ``Fuse(h)`` (identity at init) and activation scaling ``alpha``:
   ``u = alpha * (g (.)_group Fuse(h))`` -- zero outside the active groups, so every projection that reads the
   residual stream (W_q, W_k, W_v, W_gate, W_up) only needs the active groups' columns;
3. the sublayer ``f`` (Llama attention with RoPE, GQA and the KV cache, or the SwiGLU FFN) at its vanilla inner
   width;
4. sparse write ``x <- x + m (.)_group f(u)``: the write projections (W_o, W_down) only compute the active rows.

Two implementations, equal in outputs and gradients: ``"masked"`` (dense matmuls on zeroed inputs, the oracle) and
``"gather"`` (the shared groups as one GEMM over all tokens, the specialized groups dispatched like MoE experts,
each group's slots in fixed-shape tiles: :func:`slot_matmul`, batch-invariant).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaRMSNorm,
    apply_rotary_pos_emb,
    eager_attention_forward,
)

from mohd.config import MoHDConfig
from mohd.fusion import build_fusion
from mohd.routing import Routing, SubDimRouter, dense_routing

__all__ = ["MoHDSublayer", "MoHDAttention", "MoHDMLP", "MoHDFeedForward", "MoHDDecoderLayer"]

SLOT_TILE = 16
"""Rows per multiplication of the routed slots: every slot is multiplied in a (SLOT_TILE, d_in) x (d_in, d_out)
product of the same shape, whatever the batch holds (see :func:`slot_matmul`)."""


class _TiledMatmul(torch.autograd.Function):
    """``x @ w`` for ``x`` (c, d_in) with the rows cut into zero-padded tiles of :data:`SLOT_TILE` rows, each tile
    one ``torch.bmm`` of the same shape (the forward is batch-invariant); the backward is the plain two GEMMs
    (``g @ w.T``, ``x.T @ g``), one each instead of one per tile."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor) -> Tensor:
        ctx.save_for_backward(x, w)
        (c, d_in), d_out = x.shape, w.shape[1]
        tiles = -(-c // SLOT_TILE)
        padded = torch.cat([x, x.new_zeros(tiles * SLOT_TILE - c, d_in)]).view(tiles, SLOT_TILE, d_in)
        return torch.bmm(padded, w.expand(tiles, d_in, d_out)).view(-1, d_out)[:c]

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x, w = ctx.saved_tensors
        gx = grad @ w.t() if ctx.needs_input_grad[0] else None
        gw = x.t() @ grad if ctx.needs_input_grad[1] else None
        return gx, gw


def slot_matmul(x: Tensor, weight: Tensor, group: Tensor) -> Tensor:
    """``y[i] = x[i] @ weight[group[i]]`` for the routed slots: ``x`` (S, d_in), ``weight`` (G, d_in, d_out), usually
    a strided view of a projection's column or row blocks (read in place, no copy of the weights).

    Batch-invariant: the slots of each group are cut into tiles of :data:`SLOT_TILE` rows (the last one padded
    with zeros) and every tile goes through a ``torch.bmm`` of the same shape, so a slot's result has one
    reduction order whatever the other tokens of the batch are, how many share its group, where it sits in its
    tile and where the weights lie in memory. A grouped GEMM whose per-group row count follows the routing (or a
    vector-matrix product for a few slots, as in decoding) lets BLAS pick a different kernel, and so different
    round-off, for the same token in another batch."""
    s, d_out = x.shape[0], weight.shape[2]
    if s == 0:
        return x.new_zeros(0, d_out)
    order = torch.argsort(group, stable=True)
    counts = torch.bincount(group, minlength=weight.shape[0]).tolist()
    pieces, start = [], 0
    for g, c in enumerate(counts):
        if c:
            pieces.append(_TiledMatmul.apply(x.index_select(0, order[start : start + c]), weight[g]))
            start += c
    return x.new_zeros(s, d_out).index_copy(0, order, torch.cat(pieces))


class MoHDSublayer(nn.Module):
    """Routing, fusion and activation scaling of one sublayer, with the sparse read and write of the projections
    held by the attention / FFN module (so those keep Llama's parameter names).

    ``groups`` and ``group_size`` describe the width that is cut: H (``placement="residual"``) or F (``"ffn"``).
    """

    def __init__(self, config: MoHDConfig) -> None:
        super().__init__()
        self.num_groups, self.num_shared = config.num_subdims, config.num_shared
        self.num_routed, self.group_size = config.num_routed, config.subdim_size
        self.delta = config.active_ratio
        self.scaling, self.fusion_site = config.scaling, config.fusion_site
        self.write_gate, self.impl = config.write_gate, config.resolved_impl
        self.router = SubDimRouter(config) if config.num_specialized else None
        self.fusion = build_fusion(config)
        if self.scaling == "learned":
            self.alpha = nn.Parameter(torch.full((self.num_groups,), 1.0 / self.delta))

    # ---------------------------------------------------------------------------------------------------- routing
    def route(self, h: Tensor) -> Routing:
        """Routing of the normed hidden states ``h`` (M, H)."""
        return self.router(h) if self.router is not None else dense_routing(h, self.num_groups)

    def fuse(self, x: Tensor) -> Tensor:
        """Group fusion (identity when ``fusion="none"``)."""
        return x if self.fusion is None else self.fusion(x)

    def read_coefficients(self, routing: Routing) -> Tensor:
        """(M, N): ``alpha * g`` per group -- the activation scaling of the sparse read."""
        g = routing.gates
        if self.scaling == "inverse_ratio":
            return g / self.delta
        if self.scaling == "sqrt":
            return g * self.delta**-0.5
        if self.scaling == "learned":
            return g * self.alpha
        if self.scaling == "gate_sum":  # alpha = N / sum_i g_i: 1/delta when every active gate is 1
            return g * (self.num_groups / g.sum(-1, keepdim=True))
        return g

    def write_coefficients(self, routing: Routing) -> Tensor:
        """(M, N): the binary active mask m (or the gates g with ``write_gate=True``)."""
        if self.write_gate:
            return routing.gates
        m, ns = routing.gates.shape[0], self.num_shared
        ones = routing.gates.new_ones(routing.index.shape)
        spec = routing.gates.new_zeros(m, self.num_groups - ns).scatter(1, routing.index - ns, ones)
        return torch.cat([routing.gates.new_ones(m, ns), spec], dim=1)

    def _slots(self, routing: Routing) -> tuple[Tensor, Tensor]:
        """Token id and specialized group id (0-based) of each of the M*K routed slots."""
        m, k = routing.index.shape
        token = torch.arange(m, device=routing.index.device).repeat_interleave(k)
        return token, routing.index.reshape(-1) - self.num_shared

    # ------------------------------------------------------------------------------- residual placement: read/write
    def sparse_read(self, u: Tensor, routing: Routing, weights: list[Tensor]) -> list[Tensor]:
        """``[W @ (alpha g (.) u) for W in weights]``: projections (out_i, H) that read the residual stream.

        masked: one dense matmul per weight on the zeroed input; gather: the shared columns as one GEMM, each routed
        slot's d_s columns through :func:`slot_matmul`, summed over the K slots of a token."""
        coef = self.read_coefficients(routing)
        m, n, ds, ns = u.shape[0], self.num_groups, self.group_size, self.num_shared
        if self.impl == "masked":
            scaled = (u.view(m, n, ds) * coef.unsqueeze(-1)).view(m, n * ds)
            return [scaled @ w.t() for w in weights]
        s = ns * ds
        shared = (u[:, :s].view(m, ns, ds) * coef[:, :ns, None]).view(m, s)
        outs = [shared @ w[:, :s].t() for w in weights]
        if self.num_routed:
            token, group = self._slots(routing)
            x = u.view(m, n, ds)[token, group + ns] * coef.gather(1, routing.index).reshape(-1, 1)
            for i, w in enumerate(weights):
                w_spec = w.view(-1, n, ds)[:, ns:].permute(1, 2, 0)  # (N - N_s, d_s, out), a view: no copy
                outs[i] = outs[i] + slot_matmul(x, w_spec, group).view(m, self.num_routed, -1).sum(1)
        return outs

    def sparse_write(self, y: Tensor, routing: Routing, weight: Tensor) -> Tensor:
        """``m (.) (W y)`` for the write projection ``W`` (H, inner); with ``fusion_site="output"``
        ``m (.) Fuse(W y)`` (all rows computed). gather: shared rows as one GEMM, each slot's d_s rows through
        :func:`slot_matmul`, scattered into the token's row."""
        wcoef = self.write_coefficients(routing)
        m, n, ds, ns = y.shape[0], self.num_groups, self.group_size, self.num_shared
        if self.fusion_site == "output" or self.impl == "masked":
            full = y @ weight.t()
            if self.fusion_site == "output":
                full = self.fuse(full)
            return (full.view(m, n, ds) * wcoef.unsqueeze(-1)).view(m, n * ds)
        s = ns * ds
        shared = (y @ weight[:s].t()).view(m, ns, ds) * wcoef[:, :ns, None]
        spec = y.new_zeros(m, n - ns, ds)
        if self.num_routed:
            token, group = self._slots(routing)
            w_spec = weight[s:].view(n - ns, ds, -1).transpose(1, 2)  # (N - N_s, inner, d_s)
            rows = slot_matmul(y[token], w_spec, group) * wcoef.gather(1, routing.index).reshape(-1, 1)
            spec = spec.index_put((token, group), rows)
        return torch.cat([shared, spec], dim=1).view(m, n * ds)

    def extra_repr(self) -> str:
        return (
            f"groups={self.num_groups}, shared={self.num_shared}, routed={self.num_routed}, "
            f"group_size={self.group_size}, scaling={self.scaling!r}, impl={self.impl!r}"
        )


class MoHDAttention(LlamaAttention):
    """Llama attention (RoPE, causal, GQA, KV cache, any attention backend) whose Q/K/V read and O write only the
    active groups of the residual stream. With ``placement="ffn"`` it is plain Llama attention (``subdims=None``)."""

    def __init__(self, config: MoHDConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        self.subdims = MoHDSublayer(config) if config.placement == "residual" else None

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_mask: Tensor | None,
        cache: Any = None,
        **kwargs: Any,
    ) -> Tensor:
        """Attention on projected ``q`` (B, T, heads*head_dim), ``k``, ``v`` (B, T, kv_heads*head_dim)."""
        b, t = q.shape[:2]
        q = q.view(b, t, -1, self.head_dim).transpose(1, 2)
        k = k.view(b, t, -1, self.head_dim).transpose(1, 2)
        v = v.view(b, t, -1, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        out, _ = interface(
            self,
            q,
            k,
            v,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        return out.reshape(b, t, -1)

    def forward(  # type: ignore[override]
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_mask: Tensor | None = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> tuple[Tensor, Routing | None]:
        """The residual update of the normed ``hidden_states`` (B, T, H), and the routing (``None`` when dense)."""
        b, t, hdim = hidden_states.shape
        weights = [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]
        if self.subdims is None:
            h = hidden_states
            q, k, v = (h @ w.t() for w in weights)
            y = self.attend(q, k, v, position_embeddings, attention_mask, cache, **kwargs)
            return self.o_proj(y), None
        sub = self.subdims
        h = hidden_states.reshape(b * t, hdim)
        routing = sub.route(h)
        u = sub.fuse(h) if sub.fusion_site == "input" else h
        q, k, v = (x.view(b, t, -1) for x in sub.sparse_read(u, routing, weights))
        y = self.attend(q, k, v, position_embeddings, attention_mask, cache, **kwargs)
        return sub.sparse_write(y.reshape(b * t, -1), routing, self.o_proj.weight).view(b, t, hdim), routing


def _init_swiglu(module: nn.Module, config: MoHDConfig) -> None:
    """Llama's SwiGLU projections (``gate_proj``/``up_proj``/``down_proj``, no bias) and the sub-dimension router."""
    h, f = config.hidden_size, config.intermediate_size
    module.gate_proj = nn.Linear(h, f, bias=False)
    module.up_proj = nn.Linear(h, f, bias=False)
    module.down_proj = nn.Linear(f, h, bias=False)
    module.act_fn = ACT2FN[config.hidden_act]
    module.subdims = MoHDSublayer(config)


class MoHDMLP(nn.Module):
    """SwiGLU FFN (Llama's ``gate_proj``/``up_proj``/``down_proj``) reading and writing only the active groups of
    the residual stream (``placement="residual"``)."""

    def __init__(self, config: MoHDConfig) -> None:
        super().__init__()
        _init_swiglu(self, config)

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Routing]:
        """The residual update of the normed ``hidden_states`` (B, T, H), and the routing."""
        shape, sub = hidden_states.shape, self.subdims
        h = hidden_states.reshape(-1, shape[-1])
        routing = sub.route(h)
        u = sub.fuse(h) if sub.fusion_site == "input" else h
        g, up = sub.sparse_read(u, routing, [self.gate_proj.weight, self.up_proj.weight])
        y = self.act_fn(g) * up
        return sub.sparse_write(y, routing, self.down_proj.weight).view(shape), routing


class MoHDFeedForward(nn.Module):
    """SwiGLU FFN whose inner width F is cut into N groups (``placement="ffn"``, the third-party variant); usable
    alone on normed hidden states ``(..., H)``.

    ``y = W_down (alpha g (.)_group [act(W_gate u) * (W_up u)])``, ``u = Fuse(h)`` (``fusion_site="input"``) or
    ``y <- Fuse(y)`` (``"output"``): only the active groups' rows of W_gate, W_up and columns of W_down are used.
    """

    def __init__(self, config: MoHDConfig) -> None:
        super().__init__()
        if config.placement != "ffn":
            raise ValueError(f"MoHDFeedForward needs placement='ffn', got placement={config.placement!r}")
        _init_swiglu(self, config)

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Routing]:
        """``(y, routing)`` for normed ``hidden_states`` of shape (..., H)."""
        shape, sub = hidden_states.shape, self.subdims
        h = hidden_states.reshape(-1, shape[-1])
        routing = sub.route(h)
        u = sub.fuse(h) if sub.fusion_site == "input" else h
        coef = sub.read_coefficients(routing)
        m, n, ds, ns = h.shape[0], sub.num_groups, sub.group_size, sub.num_shared
        wg, wu, wd = self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight
        if sub.impl == "masked":
            a = self.act_fn(u @ wg.t()) * (u @ wu.t())
            y = (a.view(m, n, ds) * coef.unsqueeze(-1)).view(m, n * ds) @ wd.t()
        else:
            s = ns * ds
            a = self.act_fn(u @ wg[:s].t()) * (u @ wu[:s].t())
            y = (a.view(m, ns, ds) * coef[:, :ns, None]).view(m, s) @ wd[:, :s].t()
            if sub.num_routed:
                token, group = sub._slots(routing)
                x = u[token]
                gate = slot_matmul(x, wg[s:].view(n - ns, ds, -1).transpose(1, 2), group)  # (M*K, d_s)
                up = slot_matmul(x, wu[s:].view(n - ns, ds, -1).transpose(1, 2), group)
                a_slot = self.act_fn(gate) * up * coef.gather(1, routing.index).reshape(-1, 1)
                w_out = wd.view(-1, n, ds)[:, ns:].permute(1, 2, 0)  # (N - N_s, d_s, H), a view
                y = y + slot_matmul(a_slot, w_out, group).view(m, sub.num_routed, -1).sum(1)
        if sub.fusion_site == "output":
            y = sub.fuse(y)
        return y.view(shape), routing


class MoHDDecoderLayer(GradientCheckpointingLayer):
    """Pre-norm decoder layer with Llama's module names: ``input_layernorm``, ``self_attn``,
    ``post_attention_layernorm``, ``mlp``; each sublayer routes separately."""

    def __init__(self, config: MoHDConfig, layer_idx: int) -> None:
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = MoHDAttention(config, layer_idx)
        self.mlp = MoHDMLP(config) if config.placement == "residual" else MoHDFeedForward(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(  # type: ignore[override]
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        position_embeddings: tuple[Tensor, Tensor] | None = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> tuple[Tensor, list[Routing]]:
        """``(hidden_states, [routing of attention, routing of FFN])`` (dense sublayers left out)."""
        routings: list[Routing] = []
        delta, r = self.self_attn(
            self.input_layernorm(hidden_states),
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            cache=cache,
            **kwargs,
        )
        hidden_states = hidden_states + delta
        routings += [r] if r is not None else []
        delta, r = self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states + delta, [*routings, r]
