"""Tiny configs and helpers for the mohd tests (random init, no downloads)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig

from mohd import MoHDConfig, MoHDForCausalLM

__all__ = ["VOCAB", "tiny_llama_config", "tiny_mohd_config", "tiny_mohd", "perturb", "SWITCHES"]

VOCAB = 37

# one entry per switch value that changes the computation (the gather/masked and accounting tests run them all)
SWITCHES = {
    "default": {},
    "K2_topk": {"num_routed": 2, "num_shared": 2, "gate_norm": "topk"},
    "K2_softmax": {"num_routed": 2, "num_shared": 2, "gate_norm": "softmax"},
    "centroid": {"router": "centroid"},
    "sqrt": {"scaling": "sqrt"},
    "learned": {"scaling": "learned"},
    "gate_sum": {"scaling": "gate_sum", "num_routed": 2, "num_shared": 2},
    "none_scaling": {"scaling": "none"},
    "group": {"fusion": "group"},
    "blockdiag": {"fusion": "blockdiag"},
    "no_fusion": {"fusion": "none"},
    "output_site": {"fusion_site": "output"},
    "write_gate": {"write_gate": True, "num_routed": 2, "num_shared": 2},
    "ffn": {"placement": "ffn"},
    "ffn_output_site": {"placement": "ffn", "fusion_site": "output"},
    "no_shared": {"num_shared": 0, "num_routed": 3},
}


def tiny_llama_config(hidden: int = 24, **kw) -> LlamaConfig:
    """GQA (4 query heads, 2 KV heads) and head_dim 10 != hidden / heads."""
    base = dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=10,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    base.update(kw)
    return LlamaConfig(**base)


def tiny_mohd_config(expansion: int = 2, **switches) -> MoHDConfig:
    """H = 48, N = 8 groups of 6 (N_s = 3, K = 1 unless overridden)."""
    kw = {"num_subdims": 8, "num_shared": 3, "num_routed": 1, **switches}
    return MoHDConfig.from_llama(tiny_llama_config(), expansion=expansion, **kw)


def perturb(model: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> torch.nn.Module:
    """Move every parameter off its init (fusion off the identity, routers spread) so that tests see all paths."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            if "router" in name:
                p.copy_(noise)  # sharp, varied routing
            elif "fusion" in name or "alpha" in name or "norm" in name:
                p.add_(scale * noise)
    return model


def tiny_mohd(seed: int = 0, dtype: torch.dtype = torch.float64, expansion: int = 2, **switches) -> MoHDForCausalLM:
    torch.manual_seed(seed)
    model = MoHDForCausalLM(tiny_mohd_config(expansion, **switches)).to(dtype)
    return perturb(model, seed).eval()
