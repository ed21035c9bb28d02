"""PID-Batch (Liang et al., NeurIPS 2023) against the exact BROJA program on small discrete joints."""

import numpy as np
import pytest
import torch

from lsmi.baselines import PIDBatch, broja_discrete, broja_sinkhorn, pid_from_coupling, sinkhorn_project

pytest.importorskip("cvxpy")
KEYS = ("R", "U1", "U2", "S")


def _joint(seed: int = 36) -> np.ndarray:
    """A sparse random 3 x 3 x 2 joint on which the conditionally independent coupling q(x1|y) q(x2|y) q(y) is far
    (0.13 nats of I_q(X1, X2; Y)) from BROJA's optimum, so an optimiser that does not move fails."""
    return np.random.default_rng(seed).dirichlet(np.full(18, 0.3)).reshape(3, 3, 2)


def test_sinkhorn_projection_meets_both_marginals():
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(4, 3, generator=gen, dtype=torch.float64)
    b = torch.rand(5, 3, generator=gen, dtype=torch.float64)
    b = b * (a.sum(0) / b.sum(0))  # equal mass per label
    log_q = sinkhorn_project(torch.randn(4, 5, 3, generator=gen, dtype=torch.float64), a.log(), b.log(), 200)
    torch.testing.assert_close(log_q.exp().sum(1), a)
    torch.testing.assert_close(log_q.exp().sum(0), b)


@pytest.mark.parametrize(
    "joint",
    [
        _joint(36),
        pytest.param(_joint(1), marks=pytest.mark.slow),
        pytest.param(np.random.default_rng(1).random((2, 4, 3)), marks=pytest.mark.slow),
    ],
)
def test_free_coupling_optimum_equals_the_broja_program(joint):
    """PID-Batch's objective and projection with a free coupling reach the convex program's optimum."""
    exact = broja_discrete(joint)
    got = broja_sinkhorn(joint, steps=300)
    np.testing.assert_allclose([got[k] for k in KEYS], [exact[k] for k in KEYS], atol=2e-3)


def test_pid_from_the_product_coupling_is_not_the_optimum():
    p = _joint()
    py = p.sum((0, 1))
    q = np.einsum("ay,by->aby", p.sum(1), p.sum(0)) / py  # q(x1|y) q(x2|y) q(y), also in Delta_p
    exact = broja_discrete(p)
    i12_p = float(np.sum(p[p > 0] * np.log(p[p > 0] / (p.sum(2, keepdims=True) * py)[p > 0])))
    ci = pid_from_coupling(torch.log(torch.as_tensor(q)), i12_p)
    assert exact["S"] - ci["S"] > 0.1  # the optimum has the lowest I_q(X1, X2; Y), hence the largest S


def test_pid_batch_estimator_matches_exact_broja_on_samples():
    """End to end: classifiers, encoders, Sinkhorn on batches of 256, on one-hot codes of 3,000 samples."""
    p = _joint()
    rng = np.random.default_rng(0)
    a, b, y = np.unravel_index(rng.choice(p.size, size=3000, p=p.ravel()), p.shape)
    x1, x2 = np.eye(3)[a], np.eye(3)[b]
    exact = np.array([broja_discrete(p)[k] for k in KEYS])
    trace = []
    est = PIDBatch(2, epochs=3, seed=0).fit(x1, x2, y, callback=lambda e, m: trace.append(m.score(x1, x2)))
    np.testing.assert_allclose(est.score(x1, x2), exact, atol=0.03)
    assert np.abs(np.array(trace[0]) - exact).max() > 0.05  # before training the encoders: far off
    with pytest.raises(RuntimeError, match="not fitted"):
        PIDBatch(2).score(x1, x2)
    with pytest.raises(ValueError, match="logit_bound"):
        PIDBatch(2, logit_bound=0.0)
