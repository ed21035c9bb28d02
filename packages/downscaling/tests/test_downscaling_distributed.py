"""DDP distillation with 2 gloo processes on loopback, each half of the batch, equals one process (1e-6)."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed as dist

from icml25_shared.distributed import launch

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or sys.platform != "linux", reason="needs torch.distributed and fork"),
    pytest.mark.slow,  # two processes with transformers imported: over 10 s on 2 cores
]


def _run(rank: int = 0, world: int = 1) -> list[torch.Tensor]:
    from transformers import LlamaConfig, LlamaForCausalLM

    from downscaling.distill import distill

    def model(layers, hidden, seed):
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=65, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32)  # fmt: skip
        return LlamaForCausalLM(cfg).double()

    data = torch.randint(0, 65, (500,), generator=torch.Generator().manual_seed(3))
    r = distill(model(2, 32, 0), model(1, 16, 1), data, steps=3, batch_size=8, seq_len=16, lr=1e-2)
    return [p.detach().clone() for p in r.model.parameters()]


def test_ddp_two_ranks_equal_one_process():
    single = _run()
    ranks = launch(_run, 2)
    for params in ranks:
        for a, b in zip(params, single):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
