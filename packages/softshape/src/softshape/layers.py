"""The building blocks of SoftShape, one per idea of the paper: the contribution scorer, soft shape
sparsification, the shared mixture of experts (intra-shape patterns) and the Inception expert (inter-shape patterns).

Shapes: B batch, N tokens (shapes), D embedding width, E experts.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from softshape.config import GATING_MODES as GATINGS

__all__ = [
    "RMSNorm",
    "ContributionScorer",
    "soft_sparsify",
    "cv_squared",
    "SharedMoE",
    "moe_dispatch_loop",
    "InceptionExpert",
    "capped_same_conv1d",
    "instance_norm",
    "trunc_normal_init",
]


def trunc_normal_init(module: nn.Module) -> None:
    """The official initialisation: every Linear gets trunc_normal(std 0.02) weights and zero bias."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class RMSNorm(nn.Module):
    """normalize(z, dim=-1) * gamma * sqrt(D), gamma initialised to 1 (the official code's RMSNorm)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = math.sqrt(dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        # = F.normalize(z, dim=-1) * sqrt(D) * gamma, as torch's rms_norm z / sqrt(mean(z^2) + eps) * gamma (fewer
        # passes over z; tested equal to the normalize form); eps keeps a zero token at zero as normalize does
        return F.rms_norm(z, (z.shape[-1],), self.gamma, eps=1e-24)


class ContributionScorer(nn.Module):
    """Gated-MIL-style attention a(z) = sigmoid(w2 tanh(W1 z)) in (0, 1), one score per token: [B, N, D] -> [B, N, 1].

    One instance is shared by every layer (as in the official code).
    """

    def __init__(self, dim: int, hidden: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, 1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc2(torch.tanh(self.fc1(z))))


def _n_keep(keep_ratio: float, n_tokens: int) -> int:
    # round() first so that e.g. 0.5 * 30 stays 15 and float noise never adds a token
    return max(1, min(n_tokens, math.ceil(round(keep_ratio * n_tokens, 9))))


def soft_sparsify(
    z: torch.Tensor, scores: torch.Tensor, keep_ratio: float, *, fuse: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Soft shape sparsification, the paper's core operation: keep the top-scored shapes weighted by their scores
    and merge all the others into one fused token.

    Args:
        z: tokens [B, N, D].
        scores: contribution scores a [B, N, 1] or [B, N].
        keep_ratio: r in (0, 1]; k = ceil(r N) tokens are kept.
        fuse: ``True`` (soft, the paper) appends the fused token sum_{j not kept} a_j z_j; ``False`` is the "hard"
            ablation that drops the non-kept shapes.

    Returns:
        ``(tokens, kept_idx)``: tokens [B, k + 1, D] (kept a_i z_i in temporal order, then the fused token; [B, k, D]
        when ``fuse=False``) and kept_idx [B, k] (sorted positions of the kept tokens in ``z``). With
        ``keep_ratio=1`` the fused token is zero.
    """
    if z.ndim != 3:
        raise ValueError(f"z must be [B, N, D], got shape {tuple(z.shape)}")
    if scores.ndim == 2:
        scores = scores.unsqueeze(-1)
    if scores.shape != (*z.shape[:2], 1):
        raise ValueError(f"scores must be [B, N, 1] or [B, N] matching z {tuple(z.shape)}, got {tuple(scores.shape)}")
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError(f"keep_ratio must lie in (0, 1], got {keep_ratio}")
    n_tokens = z.shape[1]
    k = _n_keep(keep_ratio, n_tokens)
    weighted = scores * z  # a_i z_i
    kept_idx = scores.squeeze(-1).topk(k, dim=1).indices.sort(dim=1).values  # back in temporal order
    kept = weighted.gather(1, kept_idx.unsqueeze(-1).expand(-1, -1, z.shape[-1]))
    if not fuse:
        return kept, kept_idx
    # complement by a boolean mask (vectorised; the official code loops over the batch on the CPU)
    dropped = torch.ones(z.shape[:2], dtype=torch.bool, device=z.device).scatter(1, kept_idx, False)
    fused = (weighted * dropped.unsqueeze(-1).to(z.dtype)).sum(dim=1, keepdim=True)  # score-weighted SUM
    return torch.cat([kept, fused], dim=1), kept_idx


def cv_squared(v: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """Squared coefficient of variation var(v) / (mean(v)^2 + eps) (unbiased var); 0 for a single entry."""
    v = v.float()
    if v.numel() <= 1:
        return v.new_zeros(())
    return v.var() / (v.mean() ** 2 + eps)


class SharedMoE(nn.Module):
    """Top-k mixture of E residual MLP experts (the paper's class-count experts, E = K), shared by every sparse layer.

    The paper (Sec. 3.3) describes "a learnable router to activate a subset of class-specific experts". Router
    probabilities p = softmax(z W_g), W_g zero-initialised (routing starts uniform; the stable sort breaks the tie
    towards the lowest expert index, expert 0). ``gating`` chooses the gate value of the selected experts:

    - ``"switch"`` (default): the router probability itself, p_e for the selected e, not renormalised (Switch
      Transformer, Fedus et al. 2022, eq. 2); the output p_e * expert_e(z) carries a gradient to W_g, so the router
      learns from the classification loss. Balance loss: the Switch load-balancing loss
      E * sum_e f_e * P_e - 1 (f_e: share of token slots routed to e, P_e: mean router probability of e;
      differentiable through P; the constant -1 makes perfect balance 0, as for the cv^2 loss, gradients unchanged).
    - ``"official"``: the official code's rule, the top-k probabilities renormalised to sum to 1 (top-1: the gate
      is exactly 1, so no gradient ever reaches W_g and, from the zero initialisation, every token stays on expert
      0). Balance loss cv^2(importance) + cv^2(load), importance = column sums of the gates, load = count of
      gates > 0. Kept for comparison.

    Expert e: Linear(D, D) -> GELU -> Dropout -> Linear(D, D), weights stacked as [E, D, D] tensors.
    Output GELU(RMSNorm(z + sum_e gate_e expert_e(z))).
    """

    def __init__(self, dim: int, n_experts: int, top_k: int = 1, dropout: float = 0.0, gating: str = "switch") -> None:
        super().__init__()
        if top_k > n_experts:
            raise ValueError(f"top_k must be <= n_experts={n_experts}, got {top_k}")
        if gating not in GATINGS:
            raise ValueError(f"gating must be one of {GATINGS}, got {gating!r}")
        self.dim, self.n_experts, self.top_k, self.gating = dim, n_experts, top_k, gating
        self.w_gate = nn.Parameter(torch.zeros(dim, n_experts))
        self.w1 = nn.Parameter(torch.empty(n_experts, dim, dim))
        self.b1 = nn.Parameter(torch.zeros(n_experts, dim))
        self.w2 = nn.Parameter(torch.empty(n_experts, dim, dim))
        self.b2 = nn.Parameter(torch.zeros(n_experts, dim))
        self.dropout = nn.Dropout(dropout)
        self.norm = RMSNorm(dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Zero gate, trunc_normal(0.02) expert weights (as nn.Linear weights), zero biases."""
        nn.init.zeros_(self.w_gate)
        nn.init.trunc_normal_(self.w1, std=0.02)
        nn.init.trunc_normal_(self.w2, std=0.02)
        nn.init.zeros_(self.b1)
        nn.init.zeros_(self.b2)

    def expert(self, e: int, h: torch.Tensor) -> torch.Tensor:
        """Expert e on tokens h [n, D]."""
        return F.linear(self.dropout(F.gelu(F.linear(h, self.w1[e], self.b1[e]))), self.w2[e], self.b2[e])

    def router_probs(self, h: torch.Tensor) -> torch.Tensor:
        """Router probabilities softmax(h W_g) [n, E] of tokens h [n, D]."""
        return torch.softmax(h @ self.w_gate, dim=-1)

    def route(self, h: torch.Tensor, probs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k expert indices [n, k] and gate values [n, k] of tokens h [n, D] (see ``gating``)."""
        probs = self.router_probs(h) if probs is None else probs
        # stable descending sort: ties (e.g. the uniform routing of the zero-initialised gate) go to the lowest
        # expert index; torch.topk leaves the tie order unspecified
        sorted_p, sorted_i = probs.sort(dim=-1, descending=True, stable=True)
        top_p, top_i = sorted_p[:, : self.top_k], sorted_i[:, : self.top_k]
        if self.gating == "official":
            return top_i, top_p / top_p.sum(dim=-1, keepdim=True)
        return top_i, top_p

    def aux_loss(self, top_i: torch.Tensor, gates: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
        """The balance loss of ``gating`` (``probs``, the router probabilities [n, E], is needed for ``"switch"``)."""
        if self.gating == "switch":
            if probs is None:
                raise ValueError("aux_loss with gating='switch' needs the router probabilities probs [n, E]")
            counts = torch.bincount(top_i.flatten(), minlength=self.n_experts).to(probs.dtype)
            share = counts / top_i.numel()  # f_e (no gradient: counts)
            return self.n_experts * (share * probs.mean(0)).sum() - 1.0
        dense = torch.zeros(top_i.shape[0], self.n_experts, dtype=gates.dtype, device=gates.device)
        dense = dense.scatter(1, top_i, gates)
        return cv_squared(dense.sum(0)) + cv_squared((dense > 0).sum(0))

    def dispatch(self, h: torch.Tensor, top_i: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        """sum_e gate_e expert_e(h) for tokens h [n, D], vectorised (top-1).

        One expert used (the zero-initialised gate routes every token to expert 0): one pair of matmuls. Several
        experts: every token gets a slot ``expert * cap + rank within its expert`` (one stable sort), the tokens are
        copied into an [E, cap, D] buffer, all experts run as two batched matmuls (``baddbmm``), and the outputs
        are read back from the same slots; ``cap`` is the largest expert load. When that padding would more than
        triple the work (very unbalanced routing), the tokens are grouped by expert and each used expert runs on
        one contiguous block instead. Equal to :func:`moe_dispatch_loop` (tested to 1e-6); in training mode the
        expert dropout draws its masks in a different layout than the loop (same distribution).
        """
        if self.top_k != 1:
            return moe_dispatch_loop(self, h, top_i, gates)
        idx = top_i[:, 0]
        n, e_count = idx.shape[0], self.n_experts
        counts = torch.bincount(idx, minlength=e_count)
        n_used = int((counts > 0).sum())
        if n_used == 1:
            return self.expert(int(idx[0]), h) * gates
        order = torch.argsort(idx, stable=True)
        cap = int(counts.max())
        if e_count * cap <= 3 * n:
            starts = torch.cumsum(counts, 0) - counts
            sorted_e = idx.index_select(0, order)
            slot_sorted = sorted_e * cap + torch.arange(n, device=h.device) - starts.index_select(0, sorted_e)
            slot = torch.empty_like(slot_sorted).index_copy_(0, order, slot_sorted)
            buf = h.new_zeros(e_count * cap, h.shape[1]).index_copy(0, slot, h).view(e_count, cap, -1)
            hid = torch.baddbmm(self.b1.unsqueeze(1), buf, self.w1.transpose(1, 2))
            hid = self.dropout(F.gelu(hid))
            out_p = torch.baddbmm(self.b2.unsqueeze(1), hid, self.w2.transpose(1, 2))
            return out_p.reshape(e_count * cap, -1).index_select(0, slot) * gates
        blocks = h.index_select(0, order).split(counts.tolist())
        used = torch.nonzero(counts).flatten().tolist()
        out_sorted = torch.cat([self.expert(e, blocks[e]) for e in used], dim=0)
        out = torch.empty_like(out_sorted).index_copy_(0, order, out_sorted)
        return out * gates

    def forward(self, z: torch.Tensor, *, return_counts: bool = False) -> tuple[torch.Tensor, ...]:
        """z [B, N, D] -> (GELU(RMSNorm(z + MoE(z))) [B, N, D], aux loss scalar[, token slots per expert [E]])."""
        b, n, d = z.shape
        h = z.reshape(b * n, d)
        probs = self.router_probs(h)
        top_i, gates = self.route(h, probs)
        y = h + self.dispatch(h, top_i, gates)
        out = F.gelu(self.norm(y)).reshape(b, n, d), self.aux_loss(top_i, gates, probs)
        if return_counts:
            return (*out, torch.bincount(top_i.flatten(), minlength=self.n_experts))
        return out


def moe_dispatch_loop(moe: SharedMoE, h: torch.Tensor, top_i: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """Reference dispatch: for every expert, find its tokens, run it, weight by the gate and index-add back (the
    sparse-dispatcher loop of the official code). Used for top_k > 1, in tests and in the benchmark."""
    out = torch.zeros_like(h)
    for e in range(moe.n_experts):
        hit = top_i == e  # [n, k]
        rows = torch.nonzero(hit.any(dim=-1)).flatten()
        if rows.numel() == 0:
            continue
        g = (gates * hit.to(gates.dtype)).sum(dim=-1, keepdim=True).index_select(0, rows)
        out = out.index_add(0, rows, moe.expert(e, h.index_select(0, rows)) * g)
    return out


def instance_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """InstanceNorm1d without affine parameters over the last dim of [B, C, N]; also defined for N = 1 (zero
    output), where ``nn.InstanceNorm1d`` refuses to run in training mode."""
    if x.shape[-1] > 1:  # torch's fused kernel (about 2x faster, forward + backward, on CPU)
        return F.instance_norm(x, eps=eps)
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps)


def capped_same_conv1d(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """'same'-padded conv1d (odd kernel, no bias) of x [B, C, N]; a kernel longer than 2N - 1 is cut to its central
    2N - 1 taps, the only ones that can ever meet a non-padding input (same result, fewer MACs)."""
    k = weight.shape[-1]
    n = x.shape[-1]
    half = k // 2
    if k > 2 * n - 1:
        weight = weight[..., half - (n - 1) : half + n]
        half = n - 1
    return F.conv1d(x, weight, padding=half)


class InceptionExpert(nn.Module):
    """tsai-style Inception block on the token sequence (the paper's shared Inception expert), per layer, no biases.

    [B, N, D] -> bottleneck Conv1d(D, D/4, 1) -> three Conv1d(D/4, D/4) with kernels 39/19/9 ('same'), plus
    MaxPool(3, 1, 1) -> Conv1d(D, D/4, 1); concat (D channels) -> InstanceNorm -> GELU -> [B, N, D].
    """

    def __init__(self, dim: int, kernels: tuple[int, ...] = (39, 19, 9)) -> None:
        super().__init__()
        if dim % (len(kernels) + 1) != 0:
            raise ValueError(f"emb_dim must be divisible by {len(kernels) + 1}, got {dim}")
        self.n_filters = nf = dim // (len(kernels) + 1)
        self.bottleneck = nn.Conv1d(dim, nf, 1, bias=False)
        self.convs = nn.ModuleList(nn.Conv1d(nf, nf, k, padding=k // 2, bias=False) for k in kernels)
        self.pool_conv = nn.Conv1d(dim, nf, 1, bias=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = z.transpose(1, 2)  # [B, D, N]
        b = self.bottleneck(x)
        branches = [capped_same_conv1d(b, conv.weight) for conv in cast("list[nn.Conv1d]", list(self.convs))]
        branches.append(self.pool_conv(F.max_pool1d(x, 3, stride=1, padding=1)))
        return F.gelu(instance_norm(torch.cat(branches, dim=1))).transpose(1, 2)
