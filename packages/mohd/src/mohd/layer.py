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
each group's slots in fixed-shape tiles: :func:`slot_matmul`, batch-invariant), or ``"grouped"`` (the same with
one GEMM per group sized by the routing: faster, not batch-invariant).
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

from icml25_shared.validate import check_tensor
from mohd.config import MoHDConfig
from mohd.fusion import build_fusion
from mohd.routing import Routing, SubDimRouter, dense_routing

__all__ = ["MoHDSublayer", "MoHDAttention", "MoHDMLP", "MoHDFeedForward", "MoHDDecoderLayer"]

SLOT_TILE = 16
"""Rows per multiplication of the routed slots: every slot is multiplied in a (SLOT_TILE, d_in) x (d_in, d_out)
product of the same shape, whatever the batch holds (see :func:`slot_matmul`)."""


def _tiled_mm(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` for ``x`` (c, d_in) with the rows cut into zero-padded tiles of :data:`SLOT_TILE` rows, each tile
    one ``torch.bmm`` of the same shape: a row's result does not depend on the other rows or on ``c``."""
    (c, d_in), d_out = x.shape, w.shape[1]
    tiles = -(-c // SLOT_TILE)
    padded = torch.cat([x, x.new_zeros(tiles * SLOT_TILE - c, d_in)]).view(tiles, SLOT_TILE, d_in)
    return torch.bmm(padded, w.expand(tiles, d_in, d_out)).view(-1, d_out)[:c]


def _zeros_like_strided(w: Tensor) -> Tensor:
    """Zeros of ``w``'s shape laid out in ``w``'s stride order (a gradient that flows back through the permuted and
    sliced weight views as a view, without a copy)."""
    order = sorted(range(w.dim()), key=lambda d: -w.stride(d))
    base = w.new_zeros([w.shape[d] for d in order])
    return base.permute([order.index(d) for d in range(w.dim())])


class _GroupedMatmul(torch.autograd.Function):
    """``y[i] = x[i] @ w[g_i]`` for slots ``x`` (S, d_in) sorted by group, ``counts[g]`` slots per group, ``w``
    (G, d_in, d_out) (a strided view of a projection's blocks). Forward: :func:`_tiled_mm` per group (``tiled``,
    batch-invariant) or one GEMM per group whose row count follows the routing. Backward: two GEMMs per group,
    and the weight gradient of every group in one tensor (not one full-size gradient per group)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor, counts: list[int], tiled: bool) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.counts = counts
        out = x.new_empty(x.shape[0], w.shape[2])
        start = 0
        for g, c in enumerate(counts):
            if c:
                rows = slice(start, start + c)
                if tiled:
                    out[rows] = _tiled_mm(x[rows], w[g])
                else:
                    torch.mm(x[rows], w[g], out=out[rows])
                start += c
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        x, w = ctx.saved_tensors
        gx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        gw = _zeros_like_strided(w) if ctx.needs_input_grad[1] else None
        start = 0
        for g, c in enumerate(ctx.counts):
            if c:
                rows = slice(start, start + c)
                if gx is not None:
                    torch.mm(grad[rows], w[g].t(), out=gx[rows])
                if gw is not None:
                    gw[g] = x[rows].t() @ grad[rows]
                start += c
        return gx, gw, None, None


class SlotPlan:
    """The routed slots of a batch sorted by group, computed once per sublayer and used by all its projections.

    ``token`` (S,) and ``group`` (S,) (0-based among the specialized groups) of each slot, ``slot`` its position in
    ``routing.index.reshape(-1)``, ``counts`` the slots per group; ``tiled``: batch-invariant products
    (:func:`_tiled_mm`) instead of one GEMM per group."""

    def __init__(self, index: Tensor, num_groups: int, tiled: bool) -> None:
        flat = index.reshape(-1)
        self.slot = torch.argsort(flat, stable=True)
        self.group = flat[self.slot]
        self.token = torch.div(self.slot, max(index.shape[1], 1), rounding_mode="floor")
        self.counts: list[int] = torch.bincount(flat, minlength=num_groups).tolist()
        self.tiled = tiled

    def matmul(self, x: Tensor, weight: Tensor) -> Tensor:
        """``x[i] @ weight[group[i]]`` for ``x`` (S, d_in) in this plan's order, ``weight`` (G, d_in, d_out)."""
        return _GroupedMatmul.apply(x, weight, self.counts, self.tiled)


def _routed_block_mm(x: Tensor, w_block: Tensor, tiled: bool) -> Tensor:
    """``x @ w_block`` for one group's slots: fixed tiles (batch-invariant) or one GEMM."""
    return _tiled_mm(x, w_block) if tiled else x @ w_block


class _RoutedRead(torch.autograd.Function):
    """One read projection ``W`` (out, H) of the residual stream: ``xs @ W[:, :s].T`` for the shared columns of
    every token, plus, for each routed slot, its d_s-wide input times its group's column block, added to its
    token's row. The backward writes the whole weight gradient block by block (no full-size zero gradient per
    slice of the weight)."""

    @staticmethod
    def forward(ctx: Any, xs: Tensor, x: Tensor, w: Tensor, plan: SlotPlan, ns: int, ds: int) -> Tensor:
        ctx.save_for_backward(xs, x, w)
        ctx.plan, ctx.ns, ctx.ds = plan, ns, ds
        s = ns * ds
        y = xs @ w[:, :s].t()
        ys, start = x.new_empty(x.shape[0], w.shape[0]), 0
        for g, c in enumerate(plan.counts):
            if c:
                cols = slice(s + g * ds, s + (g + 1) * ds)
                ys[start : start + c] = _routed_block_mm(x[start : start + c], w[:, cols].t(), plan.tiled)
                start += c
        return y.index_add_(0, plan.token, ys)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        xs, x, w = ctx.saved_tensors
        plan, ns, ds = ctx.plan, ctx.ns, ctx.ds
        s = ns * ds
        grad = grad.contiguous()  # attention's gradients arrive transposed: gathering rows of those is slow
        gxs = grad @ w[:, :s]
        gw = torch.empty_like(w, memory_format=torch.contiguous_format)
        torch.mm(grad.t(), xs, out=gw[:, :s])  # column blocks are BLAS matrices with a leading dimension: no copy
        gs, gx, start = grad.index_select(0, plan.token), torch.empty_like(x), 0
        for g, c in enumerate(plan.counts):
            cols = slice(s + g * ds, s + (g + 1) * ds)
            if c:
                rows = slice(start, start + c)
                torch.mm(gs[rows], w[:, cols], out=gx[rows])
                torch.mm(gs[rows].t(), x[rows], out=gw[:, cols])
                start += c
            else:
                gw[:, cols] = 0.0
        return gxs, gx, gw, None, None, None


class _RoutedWrite(torch.autograd.Function):
    """One write projection ``W`` (H, inner): the shared rows ``y @ W[:s].T`` of every token (M, s) and, for each
    routed slot, its group's d_s rows applied to its token's ``y`` (S, d_s); weight gradient written block by
    block."""

    @staticmethod
    def forward(ctx: Any, y: Tensor, w: Tensor, plan: SlotPlan, ns: int, ds: int) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(y, w)
        ctx.plan, ctx.ns, ctx.ds = plan, ns, ds
        s = ns * ds
        shared = y @ w[:s].t()
        yt, rows, start = y.index_select(0, plan.token), y.new_empty(plan.token.shape[0], ds), 0
        for g, c in enumerate(plan.counts):
            if c:
                block = w[s + g * ds : s + (g + 1) * ds].t()
                rows[start : start + c] = _routed_block_mm(yt[start : start + c], block, plan.tiled)
                start += c
        return shared, rows

    @staticmethod
    def backward(ctx: Any, g_shared: Tensor, g_rows: Tensor) -> tuple[Tensor | None, ...]:
        y, w = ctx.saved_tensors
        plan, ns, ds = ctx.plan, ctx.ns, ctx.ds
        s = ns * ds
        g_shared, g_rows = g_shared.contiguous(), g_rows.contiguous()
        gy = g_shared @ w[:s]
        gw = torch.empty_like(w, memory_format=torch.contiguous_format)
        torch.mm(g_shared.t(), y, out=gw[:s])
        yt, gyt, start = y.index_select(0, plan.token), y.new_empty(plan.token.shape[0], y.shape[1]), 0
        for g, c in enumerate(plan.counts):
            block = slice(s + g * ds, s + (g + 1) * ds)
            if c:
                rows = slice(start, start + c)
                torch.mm(g_rows[rows], w[block], out=gyt[rows])
                torch.mm(g_rows[rows].t(), yt[rows], out=gw[block])
                start += c
            else:
                gw[block] = 0.0
        return gy.index_add_(0, plan.token, gyt), gw, None, None, None


def slot_matmul(x: Tensor, weight: Tensor, group: Tensor, *, tiled: bool = True) -> Tensor:
    """``y[i] = x[i] @ weight[group[i]]`` for the routed slots: ``x`` (S, d_in), ``weight`` (G, d_in, d_out), usually
    a strided view of a projection's column or row blocks (read in place, no copy of the weights).

    ``tiled=True`` is batch-invariant: the slots of each group are cut into tiles of :data:`SLOT_TILE` rows (the
    last one padded with zeros) and every tile goes through a ``torch.bmm`` of the same shape, so a slot's result
    has one reduction order whatever the other tokens of the batch are, how many share its group, where it sits in
    its tile and where the weights lie in memory. ``tiled=False`` runs one GEMM per group whose row count follows
    the routing: faster, but BLAS may pick a different kernel, and so different round-off, for the same token in
    another batch."""
    if x.shape[0] == 0:
        return x.new_zeros(0, weight.shape[2])
    plan = SlotPlan(group.view(-1, 1), weight.shape[0], tiled)
    return x.new_empty(x.shape[0], weight.shape[2]).index_copy(0, plan.slot, plan.matmul(x[plan.slot], weight))


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

    def plan(self, routing: Routing) -> SlotPlan:
        """The routed slots sorted by group (see :class:`SlotPlan`), shared by a sublayer's read and write."""
        return SlotPlan(routing.index - self.num_shared, self.num_groups - self.num_shared, self.impl == "gather")

    def maybe_plan(self, routing: Routing) -> SlotPlan | None:
        """:meth:`plan` when the gather / grouped path has routed slots, else ``None``."""
        return self.plan(routing) if self.impl != "masked" and self.num_routed else None

    # ------------------------------------------------------------------------------- residual placement: read/write
    def sparse_read(
        self, u: Tensor, routing: Routing, weights: list[Tensor], plan: SlotPlan | None = None
    ) -> list[Tensor]:
        """``[W @ (alpha g (.) u) for W in weights]``: projections (out_i, H) that read the residual stream.

        masked: one dense matmul per weight on the zeroed input; gather / grouped: the shared columns as one GEMM,
        each routed slot's d_s columns grouped by :class:`SlotPlan`, added to its token's row."""
        coef = self.read_coefficients(routing)
        m, n, ds, ns = u.shape[0], self.num_groups, self.group_size, self.num_shared
        if self.impl == "masked":
            scaled = (u.view(m, n, ds) * coef.unsqueeze(-1)).view(m, n * ds)
            return [scaled @ w.t() for w in weights]
        s = ns * ds
        shared = (u[:, :s].view(m, ns, ds) * coef[:, :ns, None]).view(m, s)
        outs = [shared @ w[:, :s].t() for w in weights] if not self.num_routed else []
        if self.num_routed:
            plan = plan or self.plan(routing)
            gates = coef.gather(1, routing.index).reshape(-1)[plan.slot, None]
            x = u.view(m, n, ds)[plan.token, plan.group + ns] * gates
            return [_RoutedRead.apply(shared, x, w, plan, ns, ds) for w in weights]
        return outs

    def sparse_write(self, y: Tensor, routing: Routing, weight: Tensor, plan: SlotPlan | None = None) -> Tensor:
        """``m (.) (W y)`` for the write projection ``W`` (H, inner); with ``fusion_site="output"``
        ``m (.) Fuse(W y)`` (all rows computed). gather / grouped: shared rows as one GEMM, each slot's d_s rows
        grouped by :class:`SlotPlan`, scattered into the token's row."""
        wcoef = self.write_coefficients(routing)
        m, n, ds, ns = y.shape[0], self.num_groups, self.group_size, self.num_shared
        if self.fusion_site == "output" or self.impl == "masked":
            full = y @ weight.t()
            if self.fusion_site == "output":
                full = self.fuse(full)
            return (full.view(m, n, ds) * wcoef.unsqueeze(-1)).view(m, n * ds)
        s = ns * ds
        spec = y.new_zeros(m, n - ns, ds)
        if not self.num_routed:
            shared = (y @ weight[:s].t()).view(m, ns, ds) * wcoef[:, :ns, None]
            return torch.cat([shared, spec], dim=1).view(m, n * ds)
        plan = plan or self.plan(routing)
        shared, rows = _RoutedWrite.apply(y, weight, plan, ns, ds)
        gates = wcoef.gather(1, routing.index).reshape(-1)[plan.slot, None]
        spec = spec.index_put((plan.token, plan.group), rows * gates)
        return torch.cat([shared.view(m, ns, ds) * wcoef[:, :ns, None], spec], dim=1).view(m, n * ds)

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
            self.config._attn_implementation or "eager", eager_attention_forward
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
        plan = sub.maybe_plan(routing)
        q, k, v = (x.view(b, t, -1) for x in sub.sparse_read(u, routing, weights, plan))
        y = self.attend(q, k, v, position_embeddings, attention_mask, cache, **kwargs)
        return sub.sparse_write(y.reshape(b * t, -1), routing, self.o_proj.weight, plan).view(b, t, hdim), routing


class _SwiGLU(nn.Module):
    """Llama's SwiGLU projections (``gate_proj``/``up_proj``/``down_proj``, no bias) and the sub-dimension router."""

    def __init__(self, config: MoHDConfig) -> None:
        super().__init__()
        h, f = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)
        self.act_fn: Callable[[Tensor], Tensor] = ACT2FN[config.hidden_act]
        self.subdims = MoHDSublayer(config)


class MoHDMLP(_SwiGLU):
    """SwiGLU FFN (Llama's ``gate_proj``/``up_proj``/``down_proj``) reading and writing only the active groups of
    the residual stream (``placement="residual"``)."""

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Routing]:
        """The residual update of the normed ``hidden_states`` (B, T, H), and the routing."""
        shape, sub = hidden_states.shape, self.subdims
        h = hidden_states.reshape(-1, shape[-1])
        routing = sub.route(h)
        u = sub.fuse(h) if sub.fusion_site == "input" else h
        plan = sub.maybe_plan(routing)
        g, up = sub.sparse_read(u, routing, [self.gate_proj.weight, self.up_proj.weight], plan)
        y = self.act_fn(g) * up
        return sub.sparse_write(y, routing, self.down_proj.weight, plan).view(shape), routing


class MoHDFeedForward(_SwiGLU):
    """SwiGLU FFN whose inner width F is cut into N groups (``placement="ffn"``, the third-party variant); usable
    alone on normed hidden states ``(..., H)``.

    ``y = W_down (alpha g (.)_group [act(W_gate u) * (W_up u)])``, ``u = Fuse(h)`` (``fusion_site="input"``) or
    ``y <- Fuse(y)`` (``"output"``): only the active groups' rows of W_gate, W_up and columns of W_down are used.
    """

    def __init__(self, config: MoHDConfig) -> None:
        if config.placement != "ffn":
            raise ValueError(f"MoHDFeedForward needs placement='ffn', got placement={config.placement!r}")
        super().__init__(config)

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Routing]:
        """``(y, routing)`` for normed ``hidden_states`` of shape (..., H)."""
        check_tensor("hidden_states", hidden_states, dtype="floating")
        h_size = self.down_proj.weight.shape[0]
        if hidden_states.ndim < 1 or hidden_states.shape[-1] != h_size:
            raise ValueError(
                f"hidden_states must have shape (..., hidden_size={h_size}), got {tuple(hidden_states.shape)}"
            )
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
                plan = sub.plan(routing)
                x = u[plan.token]
                gate = plan.matmul(x, wg[s:].view(n - ns, ds, -1).transpose(1, 2))  # (M*K, d_s)
                up = plan.matmul(x, wu[s:].view(n - ns, ds, -1).transpose(1, 2))
                a_slot = self.act_fn(gate) * up * coef.gather(1, routing.index).reshape(-1)[plan.slot, None]
                w_out = wd.view(-1, n, ds)[:, ns:].permute(1, 2, 0)  # (N - N_s, d_s, H), a view
                y = y.index_add(0, plan.token, plan.matmul(a_slot, w_out))
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
