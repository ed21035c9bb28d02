"""SoftShapeNet: the whole SoftShape network (shape embedding, L sparse layers, score-weighted MIL head) as a plain
``nn.Module`` for custom training loops."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from softshape.config import SoftShapeConfig
from softshape.layers import ContributionScorer, InceptionExpert, RMSNorm, SharedMoE, soft_sparsify, trunc_normal_init

__all__ = ["SoftShapeNet", "SoftShapeOutput"]


@dataclass
class SoftShapeOutput:
    """What :meth:`SoftShapeNet.forward` returns.

    Attributes:
        logits: class logits [B, K].
        aux_loss: sum over MoE layers of the MoE balance loss (scalar; 0 without MoE layers).
        scores: [B, M] score of each original shape from the last layer at which it was still an individual token
            (only with ``return_scores=True``).
        kept: [B, M] bool, shapes that survive every sparsification (only with ``return_scores=True``).
        layer_scores: [L, B, M] the score of every original shape at the input of each layer; NaN where the shape
            is no longer an individual token (merged into the fused token or dropped by an earlier layer). Row 0 is
            layer 1, whose tokens are the input subsequences themselves (only with ``return_scores=True``).
        expert_counts: [E] token slots routed to each expert, summed over the MoE layers (only with
            ``return_scores=True``).
    """

    logits: torch.Tensor
    aux_loss: torch.Tensor
    scores: torch.Tensor | None = None
    kept: torch.Tensor | None = None
    layer_scores: torch.Tensor | None = None
    expert_counts: torch.Tensor | None = None


class SoftShapeNet(nn.Module):
    """SoftShape: shape embedding, shared contribution scorer, soft sparsification, shared MoE (intra-shape),
    per-layer Inception expert (inter-shape) and score-weighted MIL head.

    ``forward(x, sparse=True)``: x [B, C, T]; ``sparse=False`` runs every layer densely (the warm-up mode).
    """

    def __init__(self, config: SoftShapeConfig) -> None:
        super().__init__()
        self.config = c = config
        d = c.emb_dim
        self.embed = nn.Conv1d(c.n_channels, d, kernel_size=c.shape_size, stride=c.stride)
        self.pos = nn.Parameter(torch.zeros(1, c.n_shapes, d))
        self.dropout = nn.Dropout(c.dropout)
        self.scorer = ContributionScorer(d, c.scorer_hidden)
        assert c.n_experts is not None  # resolved by SoftShapeConfig (default: the class count)
        self.moe = SharedMoE(d, c.n_experts, c.top_k, c.dropout, gating=c.gating)
        self.rms1 = nn.ModuleList(RMSNorm(d) for _ in range(c.depth))
        self.rms2 = nn.ModuleList(RMSNorm(d) for _ in range(c.depth))
        self.inception = nn.ModuleList(InceptionExpert(d, c.inception_kernels) for _ in range(c.depth))
        self.head = nn.Linear(d, c.n_classes)
        trunc_normal_init(self.scorer)
        trunc_normal_init(self.head)

    def embed_shapes(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> shape tokens [B, M, D] (conv embedding + positional embedding + dropout)."""
        return self.dropout(self.embed(x).transpose(1, 2) + self.pos)

    def layer(
        self, layer: int, z: torch.Tensor, keep_ratio: float, *, return_counts: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """One SoftShape layer (index ``layer``, 0-based) on tokens z [B, N, D] at keep ratio ``keep_ratio``.

        Returns ``(z_out, aux, a, kept_idx, counts)``: the layer's output before the last-layer dropout and GELU
        [B, N', D] (N' = ceil(r N) + 1 when soft-sparsified), the MoE balance loss, the scores a [B, N, 1] of the
        input tokens, the sorted kept positions [B, k] (``None`` for a dense layer) and, with ``return_counts``,
        the token slots per expert [E] (``None`` when the layer runs no MoE).
        """
        c = self.config
        z = self.rms1[layer](z)
        a = self.scorer(z)  # [B, N, 1]
        kept_idx = None
        if keep_ratio < 1.0:
            z_prime, kept_idx = soft_sparsify(z, a, keep_ratio, fuse=c.sparsify == "soft")
            use_moe = c.use_moe
        else:  # dense layer: no MoE in the official code
            z_prime = a * z
            use_moe = c.use_moe and c.moe_in_dense
        update, aux, counts = self._experts(layer, z_prime, use_moe=use_moe, return_counts=return_counts)
        return z_prime + update, aux, a, kept_idx, counts

    def forward(self, x: torch.Tensor, *, sparse: bool = True, return_scores: bool = False) -> SoftShapeOutput:
        c = self.config
        if x.ndim != 3 or x.shape[1] != c.n_channels or x.shape[2] != c.n_timepoints:
            raise ValueError(f"x must be [B, {c.n_channels}, {c.n_timepoints}], got shape {tuple(x.shape)}")
        z = self.embed_shapes(x)
        b, m, _ = z.shape
        # original shape index of every current token (-1: the fused token)
        positions = torch.arange(m, device=x.device).expand(b, m)
        per_layer = []
        assert c.n_experts is not None
        counts = torch.zeros(c.n_experts, dtype=torch.long, device=x.device) if return_scores else None
        aux = z.new_zeros(())
        ratios = c.keep_ratios if sparse else [1.0] * c.depth
        a_end = None
        for layer, r in enumerate(ratios):
            z, layer_aux, a, kept_idx, layer_counts = self.layer(layer, z, r, return_counts=return_scores)
            if return_scores:
                at_layer = torch.full((b, m), float("nan"), device=x.device, dtype=z.dtype)
                real = positions >= 0
                at_layer[real.nonzero(as_tuple=True)[0], positions[real]] = a.squeeze(-1)[real].detach()
                per_layer.append(at_layer)
                if layer_counts is not None and counts is not None:
                    counts = counts + layer_counts
            if kept_idx is not None:
                positions = positions.gather(1, kept_idx)
                if c.sparsify == "soft":
                    positions = torch.cat([positions, positions.new_full((b, 1), -1)], dim=1)
            aux = aux + layer_aux
            if layer == c.depth - 1:
                z = self.dropout(z)
                a_end = self.scorer(z)
            z = F.gelu(z)
        logits = (self.head(z) * a_end).mean(dim=1)  # score-weighted MIL pooling
        if not return_scores:
            return SoftShapeOutput(logits, aux)
        kept = torch.zeros((b, m), dtype=torch.bool, device=x.device)
        real = positions >= 0
        kept[real.nonzero(as_tuple=True)[0], positions[real]] = True
        layer_scores = torch.stack(per_layer)
        # the old definition: each shape's score at the last layer where it was an individual token
        last = layer_scores[0].clone()
        for row in layer_scores[1:]:
            last = torch.where(torch.isnan(row), last, row)
        return SoftShapeOutput(logits, aux, last, kept, layer_scores, counts)

    def _experts(
        self, layer: int, z_prime: torch.Tensor, *, use_moe: bool, return_counts: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """MoE (intra-shape) + Inception (inter-shape) on H = RMSNorm(Z'); returns (update, aux loss, counts)."""
        h = self.rms2[layer](z_prime)
        out = torch.zeros_like(z_prime)
        aux = z_prime.new_zeros(())
        counts = None
        if use_moe:
            if return_counts:
                moe_out, aux, counts = self.moe(h, return_counts=True)
            else:
                moe_out, aux = self.moe(h)
            out = out + moe_out
        if self.config.use_inception:
            out = out + self.inception[layer](h)
        return out, aux, counts
