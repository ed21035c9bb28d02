"""Scale: the stateless multi-step neuron under torch DDP (2 gloo processes on loopback)."""

from __future__ import annotations

import pytest
import torch

from fpt_snn.config import FPTConfig
from fpt_snn.experiments import FPTNeuron, SNNClassifier
from icml25_shared.distributed import launch

STEPS, B, T = 5, 16, 6


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(STEPS, 2 * B, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (STEPS, 2 * B), generator=g)
    return X, y


def _model() -> SNNClassifier:
    torch.manual_seed(0)
    return SNNClassifier(10, 24, 3, FPTNeuron(FPTConfig(K=3, output="heaviside"))).double()


def _train(m: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    for k in range(STEPS):
        loss = torch.nn.functional.cross_entropy(m(X[k].unsqueeze(0).expand(T, -1, -1)), y[k])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in getattr(m, "module", m).parameters()])


def _worker(rank: int, world: int) -> torch.Tensor:
    X, y = _data()
    sl = slice(rank * B, (rank + 1) * B)
    return _train(torch.nn.parallel.DistributedDataParallel(_model()), X[:, sl], y[:, sl])


@pytest.mark.slow
def test_ddp_two_gloo_processes_match_single_process():
    r0, r1 = launch(_worker, 2, timeout=600)
    X, y = _data()
    single = _train(_model(), X, y)
    init = torch.cat([p.detach().flatten() for p in _model().parameters()])
    assert torch.equal(r0, r1)
    assert (r0 - single).abs().max().item() <= 1e-6
    assert (r0 - init).abs().max().item() > 1e-3  # training moved the weights
