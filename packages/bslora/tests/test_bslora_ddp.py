"""Data parallel training: shared tensors are ordinary parameters, registered once (2 gloo processes)."""

from __future__ import annotations

import pytest
import torch

from icml25_shared.distributed import launch

STEPS, BATCH = 3, 4


def _model():
    from bslora_testing import bs_config, tiny_llama

    from bslora import get_bslora_model

    return get_bslora_model(tiny_llama(seed=0), bs_config("slice", lora_dropout=0.0), "default")


def _data():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 64, (BATCH, 6), generator=g) for _ in range(STEPS)]


def _adapter(m) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.adapter_state_dict().items()}


def _worker(rank: int, world: int) -> dict[str, torch.Tensor]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    m = _model()
    ddp = DDP(m)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.5)
    for ids in _data():
        part = ids.chunk(world)[rank]
        loss = ddp(input_ids=part, labels=part).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return _adapter(m)


@pytest.mark.slow
def test_ddp_two_gloo_processes_equal_single_process():
    r0, r1 = launch(_worker, 2)
    # one process on the full batch; equal-size halves make the DDP mean of the two half-batch means the same loss
    m = _model()
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.5)
    for ids in _data():
        h = ids.chunk(2)
        loss = 0.5 * (m(input_ids=h[0], labels=h[0]).loss + m(input_ids=h[1], labels=h[1]).loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
    single = _adapter(m)
    assert not torch.equal(single["bslora_shared.inter.B"], torch.zeros_like(single["bslora_shared.inter.B"]))
    for k in single:
        torch.testing.assert_close(r0[k], r1[k], rtol=0, atol=0)
        torch.testing.assert_close(r0[k], single[k], rtol=1e-6, atol=1e-6)
