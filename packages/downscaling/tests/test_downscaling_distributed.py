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


def _recover_run(rank: int = 0, world: int = 1) -> tuple[list[torch.Tensor], list[float]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    from downscaling.config import PruneConfig, Recover
    from downscaling.prune import finalize, prune

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=65, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
    model = LlamaForCausalLM(cfg).double()
    calib = torch.randint(0, 65, (9, 17), generator=torch.Generator().manual_seed(5))  # 9 rows: ranks get 5 and 4
    res = prune(model, PruneConfig("wanda", 0.5, calib=calib, recover=Recover(steps=3, lr=1e-2)))
    params = [p.detach().clone() for p in finalize(res.model).parameters()]
    return params, res.record["recover_loss"]


def test_ddp_recover_two_ranks_equal_one_process():
    """Recovery after pruning under DDP: 2 gloo ranks, 5 and 4 rows of each 9-row batch, end with the weights of
    one process on the whole batch (1e-6), and each rank's loss is its own shard's (row-weighted mean == the
    single-process loss)."""
    single, single_loss = _recover_run()
    (p0, l0), (p1, l1) = launch(_recover_run, 2)
    for params in (p0, p1):
        for a, b in zip(params, single):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    assert l0 != single_loss and l1 != single_loss  # each rank saw only its rows
    for a, b, s in zip(l0, l1, single_loss):
        assert (5 * a + 4 * b) / 9 == pytest.approx(s, rel=1e-9, abs=1e-9)
