"""Sub-dimension routing: which specialized groups each token activates, their gates, and the load-balancing loss.

The paper (abstract, Sec. 3) keeps *shared* sub-dimensions always active and lets a router activate *specialized*
ones per token. The router's exact form is not public; ours is a reconstruction: a linear map of the normed hidden
state to one logit per specialized group (or, with ``router="centroid"``, a softmax over N centroids), token-choice
top-K with ties broken to the lower index, so that routing is deterministic and decoding causal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from mohd.config import MoHDConfig

__all__ = ["Routing", "SubDimRouter", "stable_topk", "routed_gates", "load_balancing_loss"]


def stable_topk(probs: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest entries of the last axis, ties broken to the lower index (a stable descending sort)."""
    values, index = torch.sort(probs, dim=-1, descending=True, stable=True)
    return values[..., :k], index[..., :k]


def routed_gates(top_probs: Tensor, gate_norm: str, num_specialized: int) -> Tensor:
    """Gates of the chosen specialized groups from their router probabilities ``top_probs`` (``..., K``).

    ``"topk"``: ``g_j = K p_j / sum_topK p`` (mean gate 1); ``"softmax"``: ``g_j = (N - N_s) p_j`` (mean 1 under
    uniform routing; used for K = 1, where renormalising would make every gate 1 and the router untrainable).
    """
    if gate_norm == "topk":
        return top_probs.shape[-1] * top_probs / top_probs.sum(-1, keepdim=True)
    if gate_norm == "softmax":
        return num_specialized * top_probs
    raise ValueError(f"gate_norm must be 'topk' or 'softmax' once resolved, got {gate_norm!r}")


def load_balancing_loss(
    probs: Tensor, index: Tensor, num_specialized: int, *, sync: bool = False, weight: Tensor | None = None
) -> Tensor:
    """Switch-style balance over the specialized groups: ``(N - N_s) * sum_j f_j * pbar_j``.

    ``probs`` (M, N - N_s): router probabilities of M tokens; ``index`` (M, K): the chosen specialized groups (0-based
    among the specialized). ``f_j`` is the fraction of the K*M routed slots that chose j, ``pbar_j`` the mean
    probability. Equals 1 at uniform load with uniform probabilities. ``weight`` (M,), e.g. a flattened 0/1
    attention mask, weights each token in both statistics (padding left out, as in HF Mixtral's loss).

    ``sync=True`` all-reduces the counts and probability sums over the default process group, so every rank sees
    the global statistics; the local probabilities keep a gradient scaled by the world size, so that data-parallel
    gradient averaging gives exactly the gradient of the full-batch loss.
    """
    probs2 = probs.reshape(-1, num_specialized)
    counts = torch.zeros(num_specialized, dtype=probs2.dtype, device=probs2.device)
    if weight is None:
        counts = counts.index_add(
            0, index.reshape(-1), torch.ones(index.numel(), dtype=probs2.dtype, device=probs2.device)
        )
        prob_sum = probs2.sum(0)
        tokens = torch.tensor(float(probs2.shape[0]), dtype=probs2.dtype, device=probs2.device)
    else:
        w = weight.reshape(-1).to(device=probs2.device, dtype=probs2.dtype)
        slot_w = w[:, None].expand(index.shape).reshape(-1)
        counts = counts.index_add(0, index.reshape(-1), slot_w)
        prob_sum = (probs2 * w[:, None]).sum(0)
        tokens = w.sum()
    if sync and torch.distributed.is_available() and torch.distributed.is_initialized():
        world = torch.distributed.get_world_size()
        stats = torch.cat([counts, prob_sum.detach(), tokens.view(1)])
        torch.distributed.all_reduce(stats)
        counts, global_sum, tokens = stats[:num_specialized], stats[num_specialized:-1], stats[-1]
        # value: the global sum; gradient: world * the local one (DDP then averages over the ranks)
        prob_sum = world * prob_sum - (world * prob_sum - global_sum).detach()
    frac = counts / counts.sum().clamp_min(1.0)
    # all tokens masked out: prob_sum is 0, and so is the loss
    return num_specialized * (frac * (prob_sum / torch.where(tokens > 0, tokens, 1.0))).sum()


def _softmax(logits: Tensor) -> Tensor:
    """Softmax in at least float32 (as HF MoE routers), returned in the logits' dtype."""
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return logits.softmax(-1, dtype=acc).to(logits.dtype)


@dataclass
class Routing:
    """Routing decision of M tokens (flattened batch) over N groups."""

    gates: Tensor
    """(M, N): 1 on shared groups, the gate on chosen specialized groups, 0 elsewhere."""
    index: Tensor
    """(M, K): chosen groups (absolute ids in [N_s, N)), or an empty (M, 0) tensor without specialized groups."""
    gate_values: Tensor
    """(M, K): gates of the chosen groups (same order as ``index``)."""
    logits: Tensor | None
    """(M, N - N_s) router logits (``None`` without specialized groups)."""
    aux_loss: Tensor
    """Load-balancing loss of this sublayer (0 without specialized groups), over all M tokens."""
    probs: Tensor | None = None
    """(M, N - N_s) router probabilities of the specialized groups (``None`` without them): the model recomputes
    the loss from them without the padded tokens when an attention mask is given."""
    sync: bool = False
    """Whether the router all-reduces its balance statistics (``aux_loss_sync``); the masked loss does the same."""


class SubDimRouter(nn.Module):
    """Token-choice router over the specialized groups (reconstruction).

    ``router="linear"``: logits ``r = W_r h``, ``W_r`` of shape (N - N_s, H); ``p = softmax(r)``.
    ``router="centroid"``: logits ``C h`` over all N groups, ``C`` of shape (N, H); ``p`` = the softmax over all N,
    restricted to the specialized groups, from which the top K are taken.
    """

    def __init__(self, config: MoHDConfig) -> None:
        super().__init__()
        self.kind = config.router
        self.num_shared = config.num_shared
        self.num_specialized = config.num_specialized
        self.num_routed = config.num_routed
        self.gate_norm = config.resolved_gate_norm
        self.aux_loss_sync = config.aux_loss_sync
        rows = self.num_specialized if self.kind == "linear" else config.num_subdims
        self.weight = nn.Parameter(torch.empty(rows, config.hidden_size))

    def forward(self, h: Tensor) -> Routing:
        """Route the normed hidden states ``h`` (M, H)."""
        m, ns = h.shape[0], self.num_shared
        logits = h @ self.weight.t()
        probs = _softmax(logits)
        if self.kind == "centroid":
            logits, probs = logits[:, ns:], probs[:, ns:]
        top, idx = stable_topk(probs, self.num_routed)
        gate_values = routed_gates(top, self.gate_norm, self.num_specialized)
        gates = torch.cat([h.new_ones(m, ns), h.new_zeros(m, self.num_specialized).scatter(1, idx, gate_values)], dim=1)
        aux = load_balancing_loss(probs, idx, self.num_specialized, sync=self.aux_loss_sync)
        return Routing(gates, idx + ns, gate_values, logits, aux, probs, self.aux_loss_sync)


def dense_routing(h: Tensor, num_subdims: int) -> Routing:
    """Every group active with gate 1 (N_s = N: the dense limit)."""
    m = h.shape[0]
    empty = torch.zeros(m, 0, dtype=torch.long, device=h.device)
    return Routing(h.new_ones(m, num_subdims), empty, h.new_zeros(m, 0), None, h.new_zeros(()))
