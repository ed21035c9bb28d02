"""Test helpers: tiny seeded Llama models."""

from __future__ import annotations

import torch


def tiny_llama(
    layers: int = 2, hidden: int = 32, heads: int = 4, kv: int = 4, mlp: int = 64, tied: bool = True, seed: int = 0
):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=65, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=64, tie_word_embeddings=tied,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


def tokens(b: int = 4, t: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 65, (b, t), generator=torch.Generator().manual_seed(seed))
