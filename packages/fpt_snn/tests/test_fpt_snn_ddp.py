"""Scale: FPTLIFNode, stateless and multi-step, under torch DDP (2 gloo processes on loopback)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("spikingjelly.activation_based")
from spikingjelly.activation_based import layer

from fpt_snn import FPTLIFNode
from icml25_shared.distributed import launch

STEPS, B, T = 5, 16, 6


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(STEPS, 2 * B, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (STEPS, 2 * B), generator=g)
    return X, y


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            layer.Linear(10, 24, step_mode="m"), FPTLIFNode(decay_input=False, K=3), layer.Linear(24, 3, step_mode="m")
        )

    def forward(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.body(x_seq).mean(0)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return _Net().double()


def _train(m: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    for k in range(STEPS):
        loss = torch.nn.functional.cross_entropy(m(X[k].unsqueeze(0).expand(T, -1, -1)), y[k])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in getattr(m, "module", m).parameters()])


def _bernoulli_twice() -> tuple[torch.Tensor, torch.Tensor]:
    node = FPTLIFNode(output="bernoulli")
    x = torch.full((T, 4000), 1.2)
    torch.manual_seed(123)  # the same global seed on every rank, as DDP scripts do
    a = node(x)
    torch.manual_seed(123)
    return a, node(x)


def _worker(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    X, y = _data()
    sl = slice(rank * B, (rank + 1) * B)
    params = _train(torch.nn.parallel.DistributedDataParallel(_model()), X[:, sl], y[:, sl])
    a, b = _bernoulli_twice()
    return params, a, b, torch.rand(1)


@pytest.mark.slow
def test_ddp_two_gloo_processes_match_single_process_and_sample_per_rank():
    (r0, a0, b0, g0), (r1, a1, b1, g1) = launch(_worker, 2, timeout=600)
    X, y = _data()
    single = _train(_model(), X, y)
    init = torch.cat([p.detach().flatten() for p in _model().parameters()])
    assert torch.equal(r0, r1)
    assert (r0 - single).abs().max().item() <= 1e-6
    assert (r0 - init).abs().max().item() > 1e-3  # training moved the weights
    # Bernoulli output: reproducible on each rank, different between ranks, global RNG still in step
    assert torch.equal(a0, b0) and torch.equal(a1, b1)
    assert not torch.equal(a0, a1)
    assert 0.2 < a0.mean().item() < 0.95
    assert torch.equal(g0, g1)
    # one process: the global RNG, as before
    s0, s1 = _bernoulli_twice()
    assert torch.equal(s0, s1)
