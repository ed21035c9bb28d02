"""Tiny random-init models and helpers for the tests (no downloads)."""

from __future__ import annotations

import torch
from torch import nn

from bslora.config import BSLoRAConfig

__all__ = ["MODES", "tiny_llama_config", "tiny_llama", "bs_config", "randomize", "ToyDecoder"]

MODES = {
    "slice": {},
    "kron": {"kron_share_size": 8},
    "gate": {"gate_share_size": 16},
}


def tiny_llama_config(layers: int = 2, hidden: int = 16, inter: int = 32, **kw):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=64,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
        **kw,
    )


def tiny_llama(seed: int = 0, dtype=torch.float32, **kw):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_llama_config(**kw)).to(dtype).eval()


def bs_config(mode: str, **kw) -> BSLoRAConfig:
    base = {"r_local": 2, "r_intra": 3, "r_inter": 4, "share_mode": mode, "lora_dropout": 0.0}
    base.update(MODES[mode])
    base.update(kw)
    return BSLoRAConfig(**base)


@torch.no_grad()
def randomize(model, seed: int = 1, scale: float = 0.3) -> None:
    """Give every adapter tensor (B included) a random non-zero value."""
    g = torch.Generator().manual_seed(seed)
    for n, p in model.named_parameters():
        if "lora_" in n or "bslora_shared" in n or ".intra_adapt." in n or ".inter_adapt." in n:
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * scale)


class _ToyBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.up_proj, self.down_proj = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + torch.tanh(self.q_proj(h)) * self.k_proj(h) + self.v_proj(h)
        return h + self.down_proj(torch.tanh(self.up_proj(h)))


class ToyDecoder(nn.Module):
    """A smooth, all-float decoder stand-in with Llama's target names (``layers.N.{q,k,v,up,down}_proj``): exact
    float64 arithmetic end to end, for ``gradcheck`` (transformers' RMSNorm computes in float32)."""

    def __init__(self, d: int = 8, layers: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_ToyBlock(d) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return x


def assert_mixed_equals_rows_alone(m, ids, rows, tol: float = 1e-5) -> None:
    """A mixed batch (``adapter_names=rows``) gives, row by row, what that row's adapter alone gives
    (``"__base__"``: the model with its adapters disabled)."""
    with torch.no_grad():
        mixed = m(input_ids=ids, adapter_names=rows).logits
        for i, name in enumerate(rows):
            if name == "__base__":
                with m.disable_adapter():
                    alone = m(input_ids=ids[i : i + 1]).logits
            else:
                m.set_adapter(name)
                alone = m(input_ids=ids[i : i + 1]).logits
            torch.testing.assert_close(mixed[i : i + 1], alone, rtol=tol, atol=tol)
