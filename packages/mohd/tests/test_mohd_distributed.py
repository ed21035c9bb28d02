"""Data parallel: 2 gloo processes, each on half of a batch of 8, against one process on the full batch."""

from __future__ import annotations

import pytest
import torch

from icml25_shared.distributed import launch


def _model(aux_coef: float, sync: bool):
    from mohd_testing import tiny_mohd

    model = tiny_mohd(seed=11, num_routed=2, num_shared=2)
    model.config.router_aux_loss_coef = aux_coef
    for r in (m for m in model.modules() if type(m).__name__ == "SubDimRouter"):
        r.aux_loss_sync = sync
    return model.train()


def _batch() -> torch.Tensor:
    return torch.randint(0, 37, (8, 6), generator=torch.Generator().manual_seed(0))


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _worker(rank: int, world: int, aux_coef: float, sync: bool) -> dict[str, torch.Tensor]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = _model(aux_coef, sync)
    ddp = DDP(model)
    part = _batch().chunk(world)[rank]
    ddp(input_ids=part, labels=part).loss.backward()
    return _grads(model)


@pytest.mark.slow
@pytest.mark.parametrize(("aux_coef", "sync"), [(0.0, False), (0.5, True)])
def test_ddp_gradients_equal_full_batch(aux_coef, sync):
    r0, r1 = launch(_worker, 2, (aux_coef, sync))
    model = _model(aux_coef, False)
    ids = _batch()
    model(input_ids=ids, labels=ids).loss.backward()
    full = _grads(model)
    for n in full:
        torch.testing.assert_close(r0[n], full[n], rtol=0, atol=1e-6, msg=n)
        torch.testing.assert_close(r1[n], full[n], rtol=0, atol=1e-6, msg=n)


@pytest.mark.slow
def test_ddp_without_sync_differs_when_aux_on():
    """The check above can fail: per-rank aux statistics give different gradients from the full batch."""
    r0, _ = launch(_worker, 2, (0.5, False))
    model = _model(0.5, False)
    ids = _batch()
    model(input_ids=ids, labels=ids).loss.backward()
    full = _grads(model)
    assert max(float((r0[n] - full[n]).abs().max()) for n in full if "router" in n) > 1e-6


def _mask() -> torch.Tensor:
    """Right padding, more of it in the first half of the batch (rank 0's rows): unequal kept tokens per rank."""
    lengths = torch.tensor([2, 3, 6, 1, 6, 6, 5, 6])
    return (torch.arange(6)[None] < lengths[:, None]).long()


def _worker_masked(rank: int, world: int) -> dict[str, torch.Tensor]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = _model(1.0, True)
    ddp = DDP(model)
    ids, mask = _batch().chunk(world)[rank], _mask().chunk(world)[rank]
    out = ddp(input_ids=ids, attention_mask=mask)
    (out.aux_loss + 0 * out.logits.sum()).backward()  # the aux loss alone; every parameter in the graph
    return _grads(model)


@pytest.mark.slow
def test_ddp_masked_aux_gradients_equal_full_batch():
    """With aux_loss_sync the padding-free aux statistics are all-reduced: unequal padding per rank still gives the
    full batch's gradient."""
    r0, r1 = launch(_worker_masked, 2, ())
    model = _model(1.0, False)
    out = model(input_ids=_batch(), attention_mask=_mask())
    (out.aux_loss + 0 * out.logits.sum()).backward()
    full = _grads(model)
    assert max(float(g.abs().max()) for n, g in full.items() if "router" in n) > 1e-4
    for n in full:
        torch.testing.assert_close(r0[n], full[n], rtol=0, atol=1e-6, msg=n)
        torch.testing.assert_close(r1[n], full[n], rtol=0, atol=1e-6, msg=n)
