"""IPNN: architecture, training schemes on the toys, margin growth, state round trip, seeds."""

from __future__ import annotations

import copy

import pytest
import torch

from bisection_proj import IPNN, IPNNConfig, train_ipnn, validity_rate
from bisection_proj.ipnn import NoiseModule, ray_boundary
from bisection_proj.metrics import eccentricity
from bisection_proj.problems import toys


def _train(prob, seed=0, iters=300, **kw):
    torch.manual_seed(seed)
    thetas = prob.sample_theta(512, torch.Generator().manual_seed(seed)).float()
    ipnn = IPNN(prob.theta_dim, 2, hidden=64, sigmoid=False, **kw)
    hist = train_ipnn(
        ipnn, copy.deepcopy(prob).float(), thetas, iters=iters, lr=1e-3, eval_every=50, seed=seed, progress=False
    )
    return ipnn, hist, thetas


@pytest.mark.parametrize("toy", [toys.Ring, toys.QuadraticSet])
def test_margin_scheme_reaches_validity_and_grows_gamma(toy):
    prob = toy()
    ipnn, hist, thetas = _train(prob)
    held_out = prob.sample_theta(512, torch.Generator().manual_seed(99)).float()
    assert validity_rate(ipnn, prob, held_out) > 0.95
    assert hist.validity[-1] > 0.95
    assert hist.gamma[0] == pytest.approx(1e-3) and hist.gamma[-1] > 1.2e-3
    ratio, diff = eccentricity(prob, held_out[:32], ipnn(held_out[:32])[:, 0], n_dirs=16)
    assert torch.isfinite(ratio).float().mean() > 0.9 and (ratio[torch.isfinite(ratio)] >= 1).all()


def test_fixed_margin_stays_fixed_and_noise_only_in_training():
    prob = toys.Ring()
    ipnn, hist, thetas = _train(prob, iters=60, learn_margin=False)
    assert all(abs(g - 1e-3) < 1e-9 for g in hist.gamma)
    ipnn.eval()
    assert torch.equal(ipnn(thetas[:8]), ipnn(thetas[:8]))
    noise = NoiseModule(0.5, noise="mul").train()
    out = torch.ones(1000)
    assert (noise(out) - 1).std() > 0.3


def test_eccentricity_scheme_trains_without_error():
    prob = toys.UnionOfBalls()
    torch.manual_seed(0)
    thetas = prob.sample_theta(256, torch.Generator().manual_seed(0)).float()
    ipnn = IPNN(prob.theta_dim, 2, n_ip=2, hidden=32, sigmoid=False)
    labels = thetas[:, :2].clone()  # the first ball's centre: a feasible "optimal" point
    hist = train_ipnn(
        ipnn, copy.deepcopy(prob).float(), thetas, scheme="eccentricity", iters=40, lr=1e-3, labels=labels,
        pretrain_iters=20, eval_every=20, progress=False,
    )  # fmt: skip
    assert hist.step == [0, 20, 40, 60] and all(0 <= v <= 1 for v in hist.validity)
    assert all(torch.isfinite(torch.tensor(hist.loss[1:])))  # loss[0] is the untrained evaluation (nan)


def test_ray_boundary_on_ball():
    prob = toys.Ring(r_in=0.0, r_out=1.0)
    theta = torch.zeros(3, 2, dtype=torch.float64)
    centre = torch.zeros(3, 1, 2, dtype=torch.float64)
    u = torch.nn.functional.normalize(torch.randn(3, 1, 5, 2, dtype=torch.float64), dim=-1)
    t = ray_boundary(prob, theta, centre, u, iters=40)
    assert torch.allclose(t, torch.ones_like(t), atol=1e-3)


def test_eccentricity_closed_form_on_box():
    from bisection_proj.problems import Polytope

    box = Polytope(torch.zeros(0, 2), torch.zeros(0), lower=-1.0, upper=1.0)
    theta = torch.zeros(2, 0, dtype=torch.float64)
    ip = torch.tensor([[0.0, 0.0], [0.5, 0.0]], dtype=torch.float64)
    ratio, diff = eccentricity(box, theta, ip, n_dirs=2000, generator=torch.Generator().manual_seed(0))
    assert abs(float(ratio[0]) - 2**0.5) < 0.02  # R = √2 (corners), r = 1
    assert abs(float(ratio[1]) - ((1.5**2 + 1) ** 0.5) / 0.5) < 0.05


def test_state_dict_round_trip_and_seed_reproducibility(tmp_path):
    prob = toys.Ring()
    a, _, thetas = _train(prob, seed=3, iters=30)
    b, _, _ = _train(prob, seed=3, iters=30)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    torch.save(a.state_dict(), tmp_path / "ipnn.pt")
    c = IPNN.from_config(a.config)
    c.load_state_dict(torch.load(tmp_path / "ipnn.pt", weights_only=True))
    c.eval()
    a.eval()
    assert torch.equal(a(thetas), c(thetas)) and c.gamma == a.gamma


def test_output_shape_and_config_validation():
    net = IPNN(3, 4, n_ip=5)
    assert net(torch.zeros(2, 3)).shape == (2, 5, 4)
    assert net.config.width == 5
    with pytest.raises(ValueError, match="n_ip must be a positive int, got 0"):
        IPNN(3, 4, n_ip=0)
    with pytest.raises(ValueError, match="noise must be one of 'add', 'mul'"):
        IPNNConfig(3, 4, noise="gauss")
    with pytest.raises(ValueError, match=r"theta must have shape \(B, 3\)"):
        net(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="scheme must be"):
        train_ipnn(net, toys.Ring(), torch.zeros(4, 2), scheme="other")
