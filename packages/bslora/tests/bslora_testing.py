"""Tiny random-init models and helpers for the tests (no downloads)."""

from __future__ import annotations

import torch
from torch import nn

from bslora.config import BSLoRAConfig

__all__ = ["MODES", "tiny_llama_config", "tiny_llama", "tied_llama", "bs_config", "randomize", "ToyDecoder", "train"]

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


def tied_llama(seed: int = 0):
    """The README's quick-start shape in miniature: a Llama whose lm_head shares the embedding's tensor."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                      tie_word_embeddings=True)  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


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


def train(m, tmp, max_steps: int, *, save_steps: int | None = None, resume: str | None = None):
    """A ``transformers.Trainer`` run of ``m`` (in place) on 8 fixed rows, batch 2, seed 3."""
    from transformers import Trainer, TrainingArguments

    ids = torch.randint(0, 64, (8, 7), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": ids[i], "labels": ids[i]} for i in range(len(ids))]
    args = TrainingArguments(
        output_dir=str(tmp), per_device_train_batch_size=2, max_steps=max_steps, learning_rate=1e-2,
        report_to=[], use_cpu=True, logging_strategy="no", disable_tqdm=True, seed=3,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
    )  # fmt: skip
    Trainer(model=m, args=args, train_dataset=data).train(resume_from_checkpoint=resume)
    return m
