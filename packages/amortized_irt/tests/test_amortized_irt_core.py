"""Core math: quadrature, EM monotonicity, masking, invariances, Fisher information, ability estimators against
quadrature and root-finding references, persistence, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from amortized_irt_testing import rasch_data
from scipy.optimize import brentq, minimize_scalar

from amortized_irt import IRTConfig, Rasch, ResponseMatrix, ThreePL, TwoPL, from_mirt, to_mirt
from amortized_irt import functional as irtF


def test_gauss_hermite_moments():
    x, log_w = irtF.gauss_hermite(41)
    w = torch.exp(log_w)
    assert abs(float(w.sum()) - 1.0) < 1e-12
    assert abs(float((w * x**2).sum()) - 1.0) < 1e-10
    assert abs(float((w * x**4).sum()) - 3.0) < 1e-10
    x2, lw2 = irtF.gauss_hermite(21, prior_sd=2.0)
    assert abs(float((torch.exp(lw2) * x2**2).sum()) - 4.0) < 1e-10


@pytest.mark.parametrize("cls", [Rasch, TwoPL, ThreePL])
def test_em_loglik_non_decreasing(cls):
    Y, *_ = rasch_data(400, 15, seed=1, density=0.7)
    m = cls(tol=1e-10, max_iter=60).fit(Y)
    assert len(m.loglik_trace_) > 5
    assert np.diff(m.loglik_trace_).min() >= -1e-9


def test_masked_entries_ignored():
    rng = np.random.default_rng(0)
    Z = (rng.random((200, 12)) < 0.6).astype(float)
    obs = rng.random((200, 12)) < 0.7
    obs[:, 0] = True
    Z2 = np.where(obs, Z, 1.0 - Z)  # differs only where O = 0
    m1 = Rasch().fit(ResponseMatrix.from_dense(Z, mask=obs))
    m2 = Rasch().fit(ResponseMatrix.from_dense(Z2, mask=obs))
    assert np.array_equal(m1.difficulty_, m2.difficulty_)
    assert not np.array_equal(Z, Z2)


def test_shift_invariance_of_probabilities():
    Y, *_ = rasch_data(200, 10, seed=2)
    m = Rasch().fit(Y)
    R = ResponseMatrix.from_dense(Y)
    p = m.predict_proba(R)
    m.difficulty_ = m.difficulty_ + 0.75
    np.testing.assert_allclose(m.predict_proba(R, theta=m.theta_ + 0.75), p, rtol=1e-12)


def test_mirt_round_trip():
    rng = np.random.default_rng(3)
    p = {"a": np.ones(7), "b": rng.normal(size=7)}
    back = from_mirt(to_mirt(p))
    assert np.array_equal(back["b"], p["b"]) and np.array_equal(back["a"], p["a"])
    p3 = {"a": rng.uniform(0.5, 2, 7), "b": rng.normal(size=7), "c": rng.uniform(0, 0.3, 7)}
    back3 = from_mirt(to_mirt(p3))
    np.testing.assert_allclose(back3["b"], p3["b"], rtol=1e-15, atol=1e-15)
    assert np.array_equal(back3["c"], p3["c"])
    assert np.array_equal(to_mirt(p)["d"], -p["b"])  # the official code's easiness z = −b


@pytest.mark.parametrize("model", ["rasch", "2pl", "3pl"])
def test_fisher_information_equals_expected_negative_hessian(model):
    g = torch.Generator().manual_seed(4)
    for _ in range(5):
        a = (
            torch.rand((), generator=g, dtype=torch.float64) * 2 + 0.3
            if model != "rasch"
            else torch.tensor(1.0, dtype=torch.float64)
        )
        b = torch.randn((), generator=g, dtype=torch.float64)
        c = torch.rand((), generator=g, dtype=torch.float64) * 0.4 if model == "3pl" else None
        theta = torch.randn((), generator=g, dtype=torch.float64).requires_grad_(True)

        def logp(th, y, a=a, b=b, c=c):
            p = torch.sigmoid(a * (th - b))
            p = p if c is None else c + (1 - c) * p
            return y * torch.log(p) + (1 - y) * torch.log1p(-p)

        p = torch.sigmoid(a * (theta - b))
        p = (p if c is None else c + (1 - c) * p).detach()
        expected = 0.0
        for y, w in ((1.0, p), (0.0, 1 - p)):
            (d1,) = torch.autograd.grad(logp(theta, y), theta, create_graph=True)
            (d2,) = torch.autograd.grad(d1, theta)
            expected = expected - w * d2
        info = irtF.item_information(theta.detach(), a, b, c)
        assert abs(float(info - expected)) < 1e-12 * max(1.0, float(expected))


def _grid_posterior(y, a, b, prior=(0.0, 1.0)):
    grid = np.linspace(-6, 6, 40001)
    ll = sum(
        yy * -np.logaddexp(0, -aa * (grid - bb)) + (1 - yy) * -np.logaddexp(0, aa * (grid - bb))
        for yy, aa, bb in zip(y, a, b)
    )
    lp = ll - 0.5 * ((grid - prior[0]) / prior[1]) ** 2
    w = np.exp(lp - lp.max())
    w /= w.sum()
    mean = (w * grid).sum()
    return mean, math.sqrt((w * (grid - mean) ** 2).sum()), ll


def test_ability_estimators_against_references():
    Y, _, b, _ = rasch_data(300, 12, seed=5)
    model = Rasch().fit(Y)
    R = ResponseMatrix.from_dense(Y)
    bh = model.difficulty_
    t_eap, se_eap, _ = model.ability(R, "eap")
    t_map, se_map, _ = model.ability(R, "map")
    t_mle, se_mle, flag = model.ability(R, "mle")
    for i in range(5):
        y = Y[i]
        mean, sd, _ = _grid_posterior(y, np.ones(12), bh)
        assert abs(t_eap[i] - mean) < 1e-4 and abs(se_eap[i] - sd) < 1e-4

        def nlp(t, prior=True, y=y):
            z = t - bh
            ll = np.sum(y * -np.logaddexp(0, -z) + (1 - y) * -np.logaddexp(0, z))
            return -(ll - 0.5 * t * t) if prior else -ll

        ref = minimize_scalar(nlp, bounds=(-6, 6), method="bounded", options={"xatol": 1e-10}).x
        assert abs(t_map[i] - ref) < 1e-4
        if 0 < y.sum() < len(y):
            root = brentq(lambda t, y=y: np.sum(y - 1 / (1 + np.exp(-(t - bh)))), -20, 20, xtol=1e-12)
            assert abs(t_mle[i] - root) < 1e-4 and flag[i] == 0
            p = 1 / (1 + np.exp(-(root - bh)))
            assert abs(se_mle[i] - 1 / math.sqrt(np.sum(p * (1 - p)))) < 1e-4


def test_mle_perfect_patterns_are_infinite_and_flagged():
    Y, *_ = rasch_data(100, 8, seed=6)
    model = Rasch().fit(Y)
    Z = np.vstack([np.ones(8), np.zeros(8), Y[0]])
    theta, se, flag = model.ability(ResponseMatrix.from_dense(Z, item_ids=model.item_ids_), "mle")
    assert theta[0] == math.inf and theta[1] == -math.inf and np.isfinite(theta[2])
    assert list(flag) == [irtF.FLAG_INFINITE, irtF.FLAG_INFINITE, irtF.FLAG_OK]
    t_eap, _, _ = model.ability(ResponseMatrix.from_dense(Z, item_ids=model.item_ids_), "eap")
    assert np.isfinite(t_eap).all()


def test_eap_with_no_items_is_prior_mean():
    Y, *_ = rasch_data(100, 8, seed=7)
    model = Rasch().fit(Y)
    R = ResponseMatrix(np.array([0]), np.array([3]), np.array([1.0]), (2, 8))  # taker 1 answered nothing
    theta, se, flag = model.ability(R, "eap", prior=(0.3, 1.0))
    assert theta[1] == 0.3 and se[1] == 1.0 and flag[1] == irtF.FLAG_NO_ITEMS


def test_ability_by_scenario_matches_subset_fit():
    Y, *_ = rasch_data(150, 10, seed=8)
    model = Rasch().fit(Y)
    R = ResponseMatrix.from_dense(Y)
    labels = np.array(["x"] * 4 + ["y"] * 6)
    theta, _, _ = model.ability(R, by=labels)
    sub = Rasch().fit(Y)
    sub.difficulty_, sub.discrimination_ = model.difficulty_[4:], model.discrimination_[4:]
    sub.item_ids_, sub.n_items_ = R.item_ids[4:], 6
    t_y, _, _ = sub.ability(R.subset_items(np.arange(4, 10)))
    np.testing.assert_allclose(theta[:, 1], t_y, atol=1e-12)


def test_save_load_exact(tmp_path):
    Y, *_ = rasch_data(150, 10, seed=9)
    for cls in (Rasch, ThreePL):
        m = cls(max_iter=20).fit(Y)
        path = m.save(tmp_path / f"{cls.__name__}.safetensors")
        m2 = cls.load(path)
        assert np.array_equal(m.difficulty_, m2.difficulty_) and np.array_equal(m.discrimination_, m2.discrimination_)
        assert np.array_equal(m.theta_, m2.theta_) and m.config == m2.config
        if cls is ThreePL:
            assert np.array_equal(m.guessing_, m2.guessing_)
    with pytest.raises(ValueError, match="holds a 'ThreePL'"):
        Rasch.load(tmp_path / "ThreePL.safetensors")


def test_methods_agree_in_order():
    Y, _, b, _ = rasch_data(300, 10, seed=10)
    em = Rasch().fit(Y).difficulty_
    for method in ("jml", "expected_ll", "gh_adam"):
        other = Rasch(method=method, max_iter=20 if method == "expected_ll" else 200).fit(Y).difficulty_
        assert np.corrcoef(em, other)[0, 1] > 0.99, method


def test_expected_ll_stationary_point():
    # the official objective's optimum: mean over the fixed nuisance draws of σ(θ_s − b_j) equals item j's p-value
    Y, *_ = rasch_data(300, 10, seed=13)
    bh = Rasch(method="expected_ll", seed=3, max_iter=10).fit(Y).difficulty_
    draws = torch.randn(150, 300, generator=torch.Generator().manual_seed(3), dtype=torch.float64).numpy()
    fitted = (1 / (1 + np.exp(-(draws[:, :, None] - bh)))).mean(axis=(0, 1))
    np.testing.assert_allclose(fitted, Y.mean(0), atol=2e-4)


def test_estimate_prior_sd_recovers_spread():
    rng = np.random.default_rng(11)
    theta = 2.0 * rng.standard_normal(1500)
    b = rng.normal(0, 1, 25)
    Y = (rng.random((1500, 25)) < 1 / (1 + np.exp(-(theta[:, None] - b)))).astype(float)
    m = Rasch(estimate_prior_sd=True).fit(Y)
    assert abs(m.prior_sd_ - 2.0) < 0.15


# ---------------------------------------------------------------------------------------------------- bad input
def test_bad_input():
    with pytest.raises(ValueError, match="responses must be 0 or 1, got 2"):
        ResponseMatrix.from_dense(np.array([[0.0, 2.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="missing=-1"):
        ResponseMatrix.from_dense(np.array([[0.0, np.nan], [1.0, -1.0]]), missing=-1)
    with pytest.raises(ValueError, match="no observed response"):
        ResponseMatrix.from_dense(np.array([[0.0, np.nan], [1.0, np.nan]]))
    with pytest.warns(UserWarning, match="dropped"):
        R = ResponseMatrix.from_dense(np.array([[0.0, np.nan], [1.0, np.nan]]), drop_empty=True)
    assert R.shape == (2, 1)
    with pytest.raises(ValueError, match="n_quad must be an int >= 5, got 3"):
        IRTConfig(n_quad=3)
    with pytest.raises(ValueError, match="prior_sd"):
        Rasch(prior_sd=0.0)
    with pytest.raises(ValueError, match="tol"):
        Rasch(tol=-1.0)
    with pytest.raises(ValueError, match="method must be one of"):
        Rasch(method="vi")
    Y, *_ = rasch_data(100, 8, seed=12)
    m = Rasch().fit(Y)
    with pytest.raises(ValueError, match="method must be one of"):
        m.ability(Y, method="wle")
    with pytest.raises(ValueError, match="differ from the fitted bank"):
        m.ability(Y[:, :5])
    assert Rasch(n_quad=np.int64(21)).config.n_quad == 21  # numpy scalars accepted
    with pytest.raises(ValueError, match="int32|responses"):
        ResponseMatrix.from_dense(np.array([[3, 0], [1, 0]], dtype=np.int32))
    with pytest.raises(ValueError, match=r"init\['c'\] must lie in \[0, 1\), got 1"):
        ThreePL().fit(Y, init={"c": np.full(8, 1.0)})
