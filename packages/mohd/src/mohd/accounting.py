"""Exact parameter accounting: total and activated parameters per token, and activated FLOPs.

The abstract's two claims are statements about activated parameters: "+1.7 % with 50 % fewer activated parameters"
and "+3.7 % with a 3x parameter expansion at constant activation cost". With the residual-stream placement every
projection touches H on one side only, so with active ratio delta = (N_s + K)/N each projection has exactly
delta x its parameters activated; expanding H -> kH with delta = 1/k keeps the activated projection parameters
equal to the vanilla model's while the total grows k-fold. Router, fusion and norms are counted as dense (they run
on every token) and reported separately: they are the "negligible increase" of the abstract.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, cast

import torch
from torch import nn
from transformers import LlamaConfig, MixtralConfig, PretrainedConfig, PreTrainedModel
from transformers.models.mixtral.modeling_mixtral import MixtralExperts, MixtralTopKRouter

from icml25_shared.validate import check_int
from mohd.config import MoHDConfig
from mohd.fusion import BlockDiagFusion, GroupFusion, MonarchFusion
from mohd.layer import MoHDFeedForward, MoHDSublayer
from mohd.routing import SubDimRouter

__all__ = ["ParamCount", "count_active_parameters", "count_touched_parameters", "activated_flops"]


@dataclass(frozen=True)
class ParamCount:
    """Parameter counts of a decoder (integers; embedding and LM head counted as dense)."""

    total: int
    """Every parameter (= the sum of ``numel()`` over ``model.parameters()``)."""
    active: int
    """Parameters activated for one token: dense parts in full, projections at their activated fraction."""
    embedding: int
    """V x H input embedding."""
    head: int
    """V x H LM head (0 when tied to the embedding)."""
    projection_total: int
    """All attention and FFN projections (W_q, W_k, W_v, W_o, W_gate, W_up, W_down; all experts for an MoE)."""
    projection_active: int
    """The projection entries one token touches."""
    router: int
    """Router weights (MoHD's per-sublayer routers or an MoE's gates)."""
    fusion: int
    """Group-fusion weights (Monarch / group / block-diagonal)."""
    norms: int
    """RMSNorm weights (two per layer and the final norm)."""
    scaling: int = 0
    """Learned activation-scaling factors (``scaling="learned"``)."""

    @property
    def active_non_embedding(self) -> int:
        """Activated parameters without the embedding and the head."""
        return self.active - self.embedding - self.head

    def to_dict(self) -> dict[str, int]:
        """The counts as a plain dict (with ``active_non_embedding``)."""
        return {**asdict(self), "active_non_embedding": self.active_non_embedding}


def _widths(cfg: PretrainedConfig) -> tuple[int, int, int, int, int, int, int]:
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return (
        cfg.hidden_size,
        cfg.num_hidden_layers,
        cfg.num_attention_heads * head_dim,
        kv * head_dim,
        cfg.intermediate_size,
        cfg.vocab_size,
        head_dim,
    )


def _fusion_params(cfg: MoHDConfig) -> int:
    h, n = cfg.hidden_size, cfg.num_subdims
    if cfg.fusion == "monarch":
        b = cfg.resolved_monarch_blocks
        return h * (h // b + b)
    if cfg.fusion == "group":
        return n * n
    if cfg.fusion == "blockdiag":
        return h * (h // n)
    return 0


def count_active_parameters(model_or_config: PreTrainedModel | PretrainedConfig) -> ParamCount:
    """Exact total and activated parameter counts of a MoHD, Llama or Mixtral model (or config).

    A model is counted from its modules (parameter shapes and each sublayer's own shared / routed groups), so the
    count follows the model even after its config object is edited; a config is counted by the closed form.
    MoHD, per layer (R router, Phi fusion, Pi = H(2A + 2A_kv + 3F) projections, A attention width, A_kv KV width,
    F FFN width): total non-embedding ``L(2H + 2R + 2Phi + Pi) + H`` and activated ``L(2H + 2R + 2Phi + delta Pi)
    + H``; with ``fusion_site="output"`` the write projections (W_o, W_down) count in full; with ``placement="ffn"``
    one router and fusion per layer, attention dense and the FFN at delta. Llama: active = total. Mixtral: all
    experts in the total, ``num_experts_per_tok`` of them active.
    """
    if isinstance(model_or_config, PreTrainedModel):
        return _count_from_modules(model_or_config)
    if not isinstance(model_or_config, PretrainedConfig):
        raise TypeError(
            f"model_or_config must be a PreTrainedModel or a PretrainedConfig, got {type(model_or_config).__name__}"
        )
    return _count_from_config(model_or_config)


def _active_projection(name: str, weight: torch.Tensor, owner: nn.Module) -> int:
    """Entries of one projection weight that a token touches, from the sublayer that owns it."""
    sub = getattr(owner, "subdims", None)
    if sub is None:  # a dense sublayer (Llama, or attention with placement="ffn")
        return weight.numel()
    width = (sub.num_shared + sub.num_routed) * sub.group_size  # active part of the cut width
    out_dim, in_dim = weight.shape
    if isinstance(owner, MoHDFeedForward):  # F is cut: rows of gate/up, columns of down
        return width * in_dim if name in ("gate_proj", "up_proj") else out_dim * width
    if name in ("o_proj", "down_proj"):  # write projections: active rows (all with fusion_site="output")
        return weight.numel() if sub.fusion_site == "output" else width * in_dim
    return out_dim * width  # read projections: active columns


def _count_from_modules(model: PreTrainedModel) -> ParamCount:
    counted: set[int] = set()

    def take(params: Iterable[torch.Tensor]) -> int:
        n = 0
        for p in params:
            if id(p) not in counted:
                counted.add(id(p))
                n += p.numel()
        return n

    emb = model.get_input_embeddings()
    embedding = take([cast(torch.Tensor, emb.weight)])
    out = model.get_output_embeddings()
    head = take([cast(torch.Tensor, out.weight)]) if out is not None else 0
    router = fusion = scaling = norms = proj_total = proj_active = 0
    for mod in model.modules():
        own = list(mod.parameters(recurse=False))
        if isinstance(mod, (SubDimRouter, MixtralTopKRouter)):
            router += take(own)
        elif isinstance(mod, (MonarchFusion, GroupFusion, BlockDiagFusion)):
            fusion += take(own)
        elif isinstance(mod, MoHDSublayer):
            scaling += take(own)  # the learned alpha
        elif type(mod).__name__.endswith("RMSNorm"):
            norms += take(own)
        elif isinstance(experts := getattr(mod, "experts", None), MixtralExperts):  # MoE: top_k of its experts
            n = take(experts.parameters(recurse=False))
            proj_total += n
            proj_active += n * int(getattr(mod, "top_k", 1)) // cast(int, experts.num_experts)
        for name in _PROJECTIONS:
            child = getattr(mod, name, None)
            if isinstance(child, nn.Linear) and id(child.weight) not in counted:
                proj_total += take([child.weight])
                proj_active += _active_projection(name, child.weight, mod)
    left = [n for n, p in model.named_parameters() if id(p) not in counted]
    if left:
        raise TypeError(
            f"count_active_parameters supports MoHD, Llama and Mixtral models; {type(model).__name__} has "
            f"parameters it cannot place: {left[:4]}"
        )
    return _assemble(embedding, head, norms, router, fusion, scaling, proj_total, proj_active)


def _assemble(
    embedding: int, head: int, norms: int, router: int, fusion: int, scaling: int, proj_total: int, proj_active: int
) -> ParamCount:
    """A :class:`ParamCount` from its parts: the dense parts count in both the total and the active figure."""
    dense = embedding + head + norms + router + fusion + scaling
    return ParamCount(
        total=dense + proj_total,
        active=dense + proj_active,
        embedding=embedding,
        head=head,
        projection_total=proj_total,
        projection_active=proj_active,
        router=router,
        fusion=fusion,
        norms=norms,
        scaling=scaling,
    )


def _count_from_config(cfg: PretrainedConfig) -> ParamCount:
    """The closed form of :func:`count_active_parameters` for a config."""
    h, layers, a, akv, f, v, _ = _widths(cfg)
    embedding = v * h
    head = 0 if cfg.tie_word_embeddings else v * h
    norms = layers * 2 * h + h
    attn = h * (2 * a + 2 * akv)
    router = fusion = scaling = 0
    if isinstance(cfg, MoHDConfig):
        n, ns, k, ds = cfg.num_subdims, cfg.num_shared, cfg.num_routed, cfg.subdim_size
        sublayers = 2 if cfg.placement == "residual" else 1
        if cfg.num_specialized:
            router = layers * sublayers * h * ((n - ns) if cfg.router == "linear" else n)
        fusion = layers * sublayers * _fusion_params(cfg)
        scaling = layers * sublayers * n if cfg.scaling == "learned" else 0
        proj_total = layers * (attn + 3 * h * f)
        active_groups = (ns + k) * ds  # = delta x the cut width, an integer
        if cfg.placement == "residual":
            if cfg.fusion_site == "output":
                per_layer = active_groups * (a + 2 * akv + 2 * f) + h * (a + f)
            else:
                per_layer = active_groups * (2 * a + 2 * akv + 3 * f)
        else:
            per_layer = attn + 3 * h * active_groups
        proj_active = layers * per_layer
    elif isinstance(cfg, MixtralConfig):
        experts, topk = cfg.num_local_experts, cfg.num_experts_per_tok
        router = layers * experts * h
        proj_total = layers * (attn + experts * 3 * h * f)
        proj_active = layers * (attn + topk * 3 * h * f)
    elif isinstance(cfg, LlamaConfig):
        proj_total = proj_active = layers * (attn + 3 * h * f)
    else:
        raise TypeError(f"count_active_parameters supports MoHD, Llama and Mixtral configs, got {type(cfg).__name__}")
    return _assemble(embedding, head, norms, router, fusion, scaling, proj_total, proj_active)


def activated_flops(model_or_config: PreTrainedModel | PretrainedConfig, context: int = 0) -> dict[str, Any]:
    """Forward FLOPs of one token (multiply-add = 2): ``2 x`` the activated matmul parameters (projections, router,
    fusion, LM head; the embedding is a lookup) plus attention over ``context`` cached positions
    (``4 A context`` per layer: scores and weighted sum)."""
    context = check_int("context", context, min=0)
    cfg = model_or_config.config if isinstance(model_or_config, PreTrainedModel) else model_or_config
    pc = count_active_parameters(model_or_config)
    _, layers, a, _, _, v, _ = _widths(cfg)
    head = pc.head or v * cfg.hidden_size
    matmul = 2 * (pc.projection_active + pc.router + pc.fusion + head)
    attention = 4 * a * context * layers
    return {"matmul": matmul, "attention": attention, "total": matmul + attention}


_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def count_touched_parameters(model: PreTrainedModel, token: int = 3, prefix_token: int = 5) -> dict[str, int]:
    """Measure, rather than compute, the parameters one token activates: a forward and backward of ``token`` after
    one cached ``prefix_token`` (so that the token's query and key get a gradient), counting

    - ``projection``: projection entries with a non-zero gradient (tensor hooks; inactive columns and rows of a
      MoHD projection get exactly zero, every entry of a dense one a non-zero value almost surely),
    - ``dense``: every parameter of the other leaf modules that ran (forward hooks: routers, fusion, norms, LM head,
      learned scaling), plus the embedding counted as dense (V x H) by convention.

    The independent check of :func:`count_active_parameters`: ``projection == projection_active`` and
    ``projection + dense == active`` (tested for every MoHD switch, Llama and Mixtral, whose stacked experts count
    as projections).
    """
    embedding = model.get_input_embeddings()
    assert isinstance(embedding, nn.Embedding)
    vocab = int(embedding.num_embeddings)
    token = check_int("token", token, min=0, max=vocab - 1)
    prefix_token = check_int("prefix_token", prefix_token, min=0, max=vocab - 1)
    device = next(model.parameters()).device
    counts: dict[str, int] = {}
    handles: list[Any] = []
    projection_ids: set[int] = set()
    for name, mod in model.named_modules():
        if name.rsplit(".", 1)[-1] in _PROJECTIONS:
            projection_ids.add(id(mod))
            weight = mod.weight
            assert isinstance(weight, torch.Tensor)
            handles.append(weight.register_hook(lambda g, n=name: counts.__setitem__(n, int((g != 0).sum()))))
        elif isinstance(mod, MixtralExperts):  # a MoE's stacked experts: the chosen experts' entries get gradients
            projection_ids.add(id(mod))
            for pname, p in mod.named_parameters(recurse=False):
                key = f"{name}.{pname}"
                handles.append(p.register_hook(lambda g, n=key: counts.__setitem__(n, int((g != 0).sum()))))
    ran: set[int] = set()
    for mod in model.modules():
        if next(mod.children(), None) is None:
            handles.append(mod.register_forward_hook(lambda m, i, o: ran.add(id(m))))
    try:
        with torch.no_grad():
            cache = model(torch.tensor([[prefix_token]], device=device), use_cache=True).cache
        logits = model(torch.tensor([[token]], device=device), cache=cache, use_cache=True).logits
        gen = torch.Generator(device="cpu").manual_seed(0)
        weights = torch.randn(logits.shape, generator=gen, dtype=torch.float64).to(device=device, dtype=logits.dtype)
        (logits * weights).sum().backward()
    finally:
        for h in handles:
            h.remove()
    dense = 0
    seen: set[int] = set()  # a tied LM head is the embedding's tensor: counted once, as count_active_parameters does
    for mod in model.modules():
        alpha = getattr(mod, "alpha", None)
        if isinstance(alpha, torch.Tensor) and ran & {id(c) for c in mod.children()} and id(alpha) not in seen:
            seen.add(id(alpha))
            dense += alpha.numel()  # learned scaling of a sublayer whose router / fusion ran
        if id(mod) in ran and id(mod) not in projection_ids:
            for p in mod.parameters(recurse=False):
                if id(p) not in seen:
                    seen.add(id(p))
                    dense += p.numel()
    model.zero_grad(set_to_none=True)
    projection = sum(counts.values())
    return {"projection": projection, "dense": dense, "active": projection + dense}
