import math

import numpy as np
import pytest
import torch

from lsmi import KNIFE, LSMIConfig, LSMIEstimator
from lsmi.datasets import gaussian_exact_terms, gaussian_modalities, logic_gate
from lsmi.estimator import StackedMLP, mlp_classifier
from lsmi.functional import lsmi_from_terms, mean_shift


def test_knife_density_integrates_to_one():
    torch.manual_seed(0)
    k = KNIFE(2, 5)
    g = torch.linspace(-12, 12, 601, dtype=torch.float64)
    xx, yy = torch.meshgrid(g, g, indexing="ij")
    pts = torch.stack([xx.reshape(-1), yy.reshape(-1)], 1)
    with torch.no_grad():
        dens = k.double().logpdf(pts).exp()
    area = (g[1] - g[0]) ** 2
    assert float(dens.sum() * area) == pytest.approx(1.0, abs=1e-2)


def _train_knife(x, steps, zero_grad=True, seed=0, lr=2e-2, batch=256):
    torch.manual_seed(seed)
    k = KNIFE(x.shape[1], 5)
    opt = torch.optim.Adam(k.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(len(x), (batch,), generator=gen)
        if zero_grad:
            opt.zero_grad()
        k(x[idx]).mean().backward()
        opt.step()
    return k


def test_knife_upper_bounds_entropy_tightly():
    cov = torch.tensor([[1.0, 0.6], [0.6, 1.0]])
    mvn = torch.distributions.MultivariateNormal(torch.zeros(2), cov)
    torch.manual_seed(1)
    train, fresh = mvn.sample((4000,)), mvn.sample((4000,))
    k = _train_knife(train, 400)
    with torch.no_grad():
        gap = (k(fresh) + mvn.log_prob(fresh)).mean().item()  # h_theta(x) - (-log p(x)), paired
    assert -0.01 <= gap <= 0.05
    legacy = _train_knife(train, 30, zero_grad=False)
    fresh_k = _train_knife(train, 30, zero_grad=True)
    assert not torch.allclose(legacy.means, fresh_k.means)


def test_stacked_heads_match_separate_mlps():
    torch.manual_seed(0)
    st = StackedMLP(3, 2, 4, 8)
    x1, x2 = torch.randn(5, 3), torch.randn(5, 2)
    for i, (d, x) in enumerate([(3, x1), (2, x2), (5, torch.cat([x1, x2], 1))]):
        m = mlp_classifier(d, 4, 8)
        m[0].weight.data = st.w1[i, :d].T.clone()
        m[0].bias.data = st.b1[i, 0].clone()
        m[2].weight.data, m[2].bias.data = st.w2[i].T.clone(), st.b2[i, 0].clone()
        m[4].weight.data, m[4].bias.data = st.w3[i].T.clone(), st.b3[i, 0].clone()
        torch.testing.assert_close(st(x1, x2)[i], m(x))
    assert torch.all(st.w1[0, 3:] == 0) and torch.all(st.w1[1, 2:] == 0)
    st(x1, x2).sum().backward()
    assert torch.all(st.w1.grad[0, 3:] == 0)  # padded columns never move


def test_pmi_priors():
    from lsmi.functional import pmi

    logits = torch.randn(10, 3)
    y = torch.randint(0, 3, (10,))
    p_hat = torch.tensor([0.5, 0.3, 0.2])
    emp = pmi(torch.log_softmax(logits, 1), y, p_hat.log())
    uni = pmi(torch.log_softmax(logits, 1), y, torch.full((3,), -math.log(3)))
    torch.testing.assert_close(uni - emp, torch.log(3 * p_hat[y]))
    # with exact posteriors, E[i(x;y)] = I(X;Y) <= log C
    p = torch.softmax(torch.randn(3, 3), 1) * torch.tensor([[0.2], [0.5], [0.3]])  # joint p(x, y)
    px, py = p.sum(1), p.sum(0)
    mi = (p * torch.log(p / (px[:, None] * py[None]))).sum()
    assert 0 <= mi <= math.log(3)


@pytest.fixture(scope="module")
def fitted_gaussian():
    x1, x2, y = gaussian_modalities(4000, 2, 0.5, 0.5, seed=0)
    est = LSMIEstimator(LSMIConfig(n_classes=2, epochs_clf=15, epochs_entropy=15, batch_size=64, seed=0))
    est.fit(x1[:3200], x2[:3200], y[:3200], verbose=False)
    return est, (x1, x2, y)


def test_estimator_vs_exact_plugin(fitted_gaussian):
    est, (x1, x2, y) = fitted_gaussian
    R, U1, U2, S = est.score(x1[3200:], x2[3200:], y[3200:])
    t = gaussian_exact_terms(x1[3200:], x2[3200:], y[3200:], 2, 0.5, 0.5)
    ex = [float(v.mean()) for v in mean_shift(*lsmi_from_terms(t["i1"], t["i2"], t["i12"], t["h1"], t["h2"]))[:4]]
    assert ex[0] == pytest.approx(0.500, abs=0.03)  # plug-in on 800 samples vs the closed form I(X1;Y)
    assert pytest.approx(0.500, abs=0.05) == R
    assert pytest.approx(0.063, abs=0.05) == S
    assert abs(U1) < 0.05 and abs(U2) < 0.05


def test_aligned_order_batch_invariance_and_round_trip(fitted_gaussian):
    est, (x1, x2, y) = fitted_gaussian
    xa, xb, ya = x1[:300], x2[:300], y[:300]
    full = est.terms(xa, xb, ya)
    one_by_one = [est.terms(xa[i : i + 1], xb[i : i + 1], ya[i : i + 1]) for i in range(0, 300, 37)]
    for j, i in enumerate(range(0, 300, 37)):
        for k in full:
            assert full[k][i].item() == pytest.approx(one_by_one[j][k][0].item(), abs=1e-5)
    perm = np.random.default_rng(0).permutation(300)
    shuffled = est.terms(xa[perm], xb[perm], ya[perm])
    small_batches = est.terms(xa, xb, ya, batch_size=7)
    for k in full:
        torch.testing.assert_close(shuffled[k], full[k][perm])
        torch.testing.assert_close(small_batches[k], full[k])
    twin = LSMIEstimator(LSMIConfig(n_classes=2)).load_state_dict(est.state_dict())
    a, b = est.transform(xa, xb, ya), twin.transform(xa, xb, ya)
    for v, w in zip((a.r, a.u1, a.u2, a.s), (b.r, b.u1, b.u2, b.s)):
        assert torch.equal(v, w)
    bits = LSMIEstimator(LSMIConfig(n_classes=2, units="bits")).load_state_dict(
        {**est.state_dict(), "config": {**est.config.to_dict(), "units": "bits"}}
    )
    assert bits.score(xa, xb, ya)[0] == pytest.approx(a.mean()[0] / math.log(2), rel=1e-5)


def test_seed_reproducible_and_user_heads():
    x1, x2, y = logic_gate("xor", 400, seed=3)
    cfg = LSMIConfig(n_classes=2, epochs_clf=2, epochs_entropy=2, seed=5)
    a = LSMIEstimator(cfg).fit(x1, x2, y, verbose=False).transform(x1, x2, y)
    b = LSMIEstimator(cfg).fit(x1, x2, y, verbose=False).transform(x1, x2, y)
    assert torch.equal(a.r, b.r) and torch.equal(a.s, b.s)
    heads = (mlp_classifier(2, 2), mlp_classifier(2, 2), mlp_classifier(4, 2))
    est = LSMIEstimator(cfg).fit(x1, x2, y, classifiers=heads, verbose=False)
    assert est.transform(x1, x2, y).r.shape == (400,)


def test_bad_input():
    x1, x2, y = logic_gate("or", 100, seed=0)
    est = LSMIEstimator(n_classes=2, epochs_clf=1, epochs_entropy=1)
    with pytest.raises(ValueError, match="100, 99 and 100"):
        est.fit(x1, x2[:99], y)
    with pytest.raises(ValueError, match="got 2"):
        est.fit(x1, x2, np.where(y == 1, 2, 0))
    with pytest.raises(ValueError, match="integer"):
        est.fit(x1, x2, y + 0.5)
    bad = x2.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="x2 contains NaN"):
        est.fit(x1, bad, y)
    with pytest.raises(RuntimeError, match="not fitted"):
        est.transform(x1, x2, y)
    est.fit(x1, x2, y, verbose=False)
    with pytest.raises(ValueError, match="3 features at transform, but 2 at fit"):
        est.transform(np.ones((100, 3)), x2, y)
    for kw in (
        {"n_classes": 1},
        {"n_classes": 2, "n_kernels": 0},
        {"n_classes": 2, "hidden": 0},
        {"n_classes": 2, "epochs_clf": -1},
        {"n_classes": 2, "prior": "flat"},
        {"n_classes": 2, "adjust": "shift"},
    ):
        with pytest.raises(ValueError, match=next(iter(kw)) if len(kw) == 1 else list(kw)[1]):
            LSMIConfig(**kw)


@pytest.mark.slow
def test_gaussian_rho_sweep_orders_synergy():
    """On the official Gaussian generator the estimated S follows the exact plug-in and grows as rho falls."""
    est_s, ex_s = [], []
    for rho in (0.9, 0.5, 0.0, -0.5):
        x1, x2, y = gaussian_modalities(4000, 2, 0.5, rho, seed=0)
        est = LSMIEstimator(LSMIConfig(n_classes=2, epochs_clf=15, epochs_entropy=15, batch_size=64, seed=0))
        m = est.fit(x1[:3200], x2[:3200], y[:3200], verbose=False).score(x1[3200:], x2[3200:], y[3200:])
        t = gaussian_exact_terms(x1[3200:], x2[3200:], y[3200:], 2, 0.5, rho)
        ex = [float(v.mean()) for v in mean_shift(*lsmi_from_terms(t["i1"], t["i2"], t["i12"], t["h1"], t["h2"]))[:4]]
        np.testing.assert_allclose(m, ex, atol=0.05)
        est_s.append(m[3])
        ex_s.append(ex[3])
    assert est_s == sorted(est_s) and ex_s == sorted(ex_s)
