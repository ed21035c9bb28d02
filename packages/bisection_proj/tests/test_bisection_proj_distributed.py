"""Two gloo processes on loopback: sharded projection and DDP IPNN gradients equal the single-process ones."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from bisection_proj import IPNN, BisectionProjector
from bisection_proj.distributed import project_sharded
from bisection_proj.ipnn import margin_loss
from bisection_proj.problems import ConvexQP
from icml25_shared.distributed import launch, shard_bounds


def _setup():
    prob = ConvexQP.random(n=16, n_eq=6, n_ineq=6, seed=0, n_subsets=50)
    gen = torch.Generator().manual_seed(0)
    theta = prob.sample_theta(37, gen)  # odd size: uneven shards
    ip = prob.y_to_z(theta, prob.analytic_interior(theta)).unsqueeze(1)
    z = torch.rand(37, prob.z_dim, generator=gen, dtype=torch.float64)
    torch.manual_seed(1)
    ipnn = IPNN(prob.theta_dim, prob.z_dim, hidden=12, dropout=0.0).double()
    eps = torch.randn(32, prob.z_dim, generator=gen, dtype=torch.float64)
    return prob, theta, ip, z, ipnn, eps


def _worker(rank: int, world: int) -> None:
    # the checks run inside each rank; launch re-raises a failed assertion with its traceback
    prob, theta, ip, z, ipnn, eps = _setup()
    proj = BisectionProjector(prob)
    y_ref, info_ref = proj(theta, z, ip)
    y, info = project_sharded(proj, theta, z, ip)
    # same rows, same arithmetic; GEMMs on a different batch size may round differently in the last bit
    assert torch.allclose(y, y_ref, atol=1e-10, rtol=0) and torch.equal(info.feasible, info_ref.feasible)
    assert torch.allclose(info.alpha, info_ref.alpha, atol=1e-10, rtol=0) and info.steps == info_ref.steps
    assert torch.equal(info.ip_index, info_ref.ip_index)
    # DDP gradients on half the global batch each == single-process gradients on the whole batch
    ref = IPNN(prob.theta_dim, prob.z_dim, hidden=12, dropout=0.0).double()
    ref.load_state_dict(ipnn.state_dict())
    ref.train()
    margin_loss(ref, prob, theta[:32], eps).backward()
    ddp = torch.nn.parallel.DistributedDataParallel(ipnn)
    ddp.train()
    lo, hi = shard_bounds(32, rank, world)
    margin_loss(ddp, prob, theta[lo:hi], eps[lo:hi]).backward()
    for (name, p), q in zip(ipnn.named_parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-12, rtol=1e-9), name


@pytest.mark.slow  # two ranks, gloo set-up and DDP: ~10 s on 2 cores
@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not available")
def test_two_gloo_processes_match_single_process():
    launch(_worker, 2)


def test_project_sharded_without_process_group_is_plain_projection():
    prob, theta, ip, z, _, _ = _setup()
    proj = BisectionProjector(prob)
    y, info = project_sharded(proj, theta, z, ip)
    y_ref, _ = proj(theta, z, ip)
    assert torch.equal(y, y_ref) and info.feasible.all()


def test_shard_bounds_cover_rows():
    for n in (0, 1, 7, 32):
        bounds = [shard_bounds(n, r, 3) for r in range(3)]
        assert bounds[0][0] == 0 and bounds[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def _nccl_worker(rank: int, world: int) -> None:
    prob, theta, ip, z, _, _ = _setup()
    dev = torch.device("cuda", torch.cuda.current_device())
    prob, theta, ip, z = prob.to(dev), theta.to(dev), ip.to(dev), z.to(dev)
    proj = BisectionProjector(prob)
    y, info = project_sharded(proj, theta, z, ip)  # the steps all-reduce used to be a CPU tensor: NCCL refuses it
    y_ref, info_ref = proj(theta, z, ip)
    assert torch.allclose(y, y_ref, atol=1e-10, rtol=0) and info.steps == info_ref.steps


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA for an NCCL process group")
def test_project_sharded_under_nccl():
    launch(_nccl_worker, 1, backend="nccl")


def test_collective_tensors_live_on_the_process_groups_device(monkeypatch):
    """NCCL has no CPU tensors: the steps all-reduce goes to the current CUDA device; gloo keeps the data's."""
    from bisection_proj import distributed as bdist

    monkeypatch.setattr(bdist.dist, "get_backend", lambda *a, **k: "nccl")
    monkeypatch.setattr(bdist.torch.cuda, "current_device", lambda: 3)
    assert bdist._collective_device(torch.zeros(1)) == torch.device("cuda", 3)
    monkeypatch.setattr(bdist.dist, "get_backend", lambda *a, **k: "gloo")
    assert bdist._collective_device(torch.zeros(1)) == torch.device("cpu")
