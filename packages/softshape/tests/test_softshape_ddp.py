"""SoftShapeNet under torch DDP: 2 gloo processes on loopback match one process on the concatenated batch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from icml25_shared.distributed import launch
from softshape import SoftShapeConfig, SoftShapeNet


def _net() -> SoftShapeNet:
    torch.manual_seed(0)
    # gating="official": its balance loss carries no gradient, so every op is per-sample and 2 ranks equal 1
    # process exactly; the Switch balance loss (the default) is a statistic of each rank's own batch, as in the
    # Switch Transformer, so under DDP it differs from the whole-batch loss by design
    cfg = SoftShapeConfig(n_timepoints=40, n_classes=3, shape_size=8, emb_dim=16, dropout=0.0, gating="official")
    return SoftShapeNet(cfg)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 1, 40, generator=g), torch.arange(8) % 3


def _train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        out = model(x)
        loss = F.cross_entropy(out.logits, y) + 1e-3 * out.aux_loss
        opt.zero_grad()
        loss.backward()
        opt.step()


def _worker(rank: int, world: int) -> dict[str, torch.Tensor]:
    net = _net()
    x, y = _data()
    half = len(x) // world
    _train(DistributedDataParallel(net), x[rank * half : (rank + 1) * half], y[rank * half : (rank + 1) * half])
    return net.state_dict()


@pytest.mark.slow
def test_ddp_two_processes_match_single_process():
    ranks = launch(_worker, 2, timeout=600)
    net = _net()
    _train(net, *_data())
    for key, ref in net.state_dict().items():
        torch.testing.assert_close(ranks[0][key], ranks[1][key], atol=0, rtol=0)
        torch.testing.assert_close(ranks[0][key], ref, atol=1e-6, rtol=0)
