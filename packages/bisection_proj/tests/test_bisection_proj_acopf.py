"""AC-OPF (``[opf]`` extra): Newton completion against PYPOWER's power flow; bisection keeps the power balance."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("pypower")

from bisection_proj import BisectionProjector
from bisection_proj.problems import ACOPF


@pytest.fixture(scope="module")
def prob():
    return ACOPF("case30")


def test_newton_completion_matches_pypower_runpf(prob):
    from bisection_proj.problems.acopf import _pypower

    pp = _pypower()
    from pypower.idx_bus import VA, VM

    y = prob.z_to_y(prob.nominal_theta(), prob.nominal_z())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r, ok = pp.runpf(pp.case30(), pp.ppoption(VERBOSE=0, OUT_ALL=0))  # buses 1..30: same order
    assert ok
    _, _, vm, va = prob.split(y)
    assert np.abs(vm[0].numpy() - r["bus"][:, VM]).max() < 1e-8
    assert np.abs(va[0].numpy() - np.deg2rad(r["bus"][:, VA])).max() < 1e-8
    assert prob.eq_residual(prob.nominal_theta(), y).abs().max() < 1e-9
    assert torch.allclose(prob.y_to_z(prob.nominal_theta(), y), prob.nominal_z(), atol=1e-12)


def test_bisection_on_acopf_is_feasible_and_balanced(prob):
    gen = torch.Generator().manual_seed(0)
    theta = prob.sample_theta(32, gen)
    z = torch.rand(32, prob.z_dim, generator=gen, dtype=torch.float64)
    ip = prob.nominal_z().expand(32, -1).unsqueeze(1)
    assert (prob.z_violation(theta, ip[:, 0]).amax(-1) <= 1e-5).all()  # the case's dispatch is interior here
    y, info = BisectionProjector(prob)(theta, z, ip)
    assert info.projected.any() and info.feasible.all()
    assert prob.ineq_violation(theta, y).max() <= 1e-5
    assert prob.eq_residual(theta, y).abs().max() < 1e-8


@pytest.mark.slow
def test_slsqp_labels_are_feasible_and_beat_the_nominal_dispatch(prob):
    theta = prob.sample_theta(1, torch.Generator().manual_seed(0))
    y_star = prob.solve(theta)
    assert prob.max_violation(theta, y_star).max() < 1e-6
    y_nom = prob.z_to_y(theta, prob.nominal_z())
    assert prob.objective(theta, y_star) < prob.objective(theta, y_nom)
