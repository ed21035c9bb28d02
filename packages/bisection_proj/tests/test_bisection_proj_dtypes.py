"""Networks and problems of different dtypes work together (a float32 network on the default float64 problem
crashed with "expected m1 and m2 to have the same dtype")."""

from __future__ import annotations

import pytest
import torch

from bisection_proj import IPNN, BisectionProjector
from bisection_proj.experiments import NNSolver, train_nn_solver
from bisection_proj.ipnn import train_ipnn
from bisection_proj.metrics import eccentricity, feasible_mask, optimality_gap
from bisection_proj.problems import ConvexQP


@pytest.mark.parametrize(("net_dtype", "prob_dtype"), [(torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_network_and_problem_of_different_dtypes(net_dtype, prob_dtype):
    prob = ConvexQP.random(n=12, n_eq=5, n_ineq=5, seed=0, n_subsets=50, dtype=prob_dtype)
    wide = torch.promote_types(net_dtype, prob_dtype)
    gen = torch.Generator().manual_seed(0)
    thetas = prob.sample_theta(64, gen)
    torch.manual_seed(0)
    solver = NNSolver(prob.theta_dim, prob.z_dim, hidden=16).to(net_dtype)
    ipnn = IPNN(prob.theta_dim, prob.z_dim, hidden=16).to(net_dtype)
    losses = train_nn_solver(solver, prob, thetas, iters=5, batch_size=16, progress=False)
    hist = train_ipnn(ipnn, prob, thetas, iters=5, batch_size=16, progress=False)
    assert len(losses) == 5 and all(torch.isfinite(torch.tensor(losses)))
    assert hist.step[-1] == 5
    assert prob.dtype == prob_dtype  # the trainers leave the caller's problem as it was
    with torch.no_grad():
        z, ip = solver(thetas.to(net_dtype)), ipnn(thetas.to(net_dtype))
    # interior points known to be feasible, so that every row is repaired
    ip = prob.y_to_z(thetas, prob.analytic_interior(thetas)).unsqueeze(1).to(net_dtype)
    y, info = BisectionProjector(prob)(thetas, z, ip)
    assert y.dtype == wide and info.z.dtype == net_dtype
    assert info.feasible.all()
    # the returned z, checked in the wider dtype by an independent float64 copy of the problem
    ref = prob.in_dtype(torch.float64)
    assert (ref.z_violation(thetas.double(), info.z.double()).amax(-1) <= 1e-5).all()
    assert feasible_mask(prob, thetas, y).all()
    assert torch.isfinite(optimality_gap(prob, thetas, prob.z_to_y(thetas, z), y)).all()
    ratio, _ = eccentricity(prob, thetas[:4], ip[:4, 0], n_dirs=4, steps=5)
    assert torch.isfinite(ratio).all()


def test_in_dtype_copies_only_when_needed():
    prob = ConvexQP.random(n=8, n_eq=3, n_ineq=3, seed=0, n_subsets=20)
    assert prob.in_dtype(torch.float64) is prob
    p32 = prob.in_dtype(torch.float32)
    assert p32 is not prob and p32.dtype == torch.float32 and prob.dtype == torch.float64
    with pytest.raises(ValueError, match="dtype"):
        prob.in_dtype(torch.int64)
