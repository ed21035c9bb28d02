"""The Rasch E-step once per group of takers with the same answered items and raw score (a sufficient statistic)
gives the per-taker E-step's statistics and the per-taker fit's estimates up to rounding; groups never mix answered
item sets; dense and CSR storage of a design agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from amortized_irt_testing import rasch_data

from amortized_irt import AmortizedDifficulty, Rasch, ResponseMatrix, TwoPL
from amortized_irt import functional as irtF


def _forms_data(n: int = 900, m: int = 30, seed: int = 0) -> np.ndarray:
    """Every taker answers one of three overlapping forms (items 0–19, 10–29, all), a few answer one item fewer:
    many takers share an answered set and a score, and the same scores occur with different answered sets."""
    Y, *_ = rasch_data(n, m, seed=seed)
    form = np.arange(n) % 3
    Y[form == 0, 20:] = np.nan
    Y[form == 1, :10] = np.nan
    drop = np.random.default_rng(seed).random(n) < 0.1
    Y[drop, 15] = np.nan  # in every form
    return Y


def _ungrouped(monkeypatch) -> None:
    monkeypatch.setattr(Rasch, "_group_takers", False)


def test_taker_groups_key_is_answered_items_and_score():
    # takers 0, 1: items {0, 1}, score 1; taker 2: items {0, 2}, score 1 (same score, other mask); taker 3: items
    # {0, 1}, score 2; taker 4 = taker 1's mask and score with the other item right; taker 5: items {0, 1, 2}, score 1
    rows = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 5])
    cols = np.array([0, 1, 0, 1, 0, 2, 0, 1, 0, 1, 0, 1, 2])
    vals = np.array([1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 1, 0, 0], dtype=float)
    group, size = irtF.taker_groups(rows, cols, vals, 6)
    assert group.tolist() == [0, 0, 1, 2, 0, 3]
    assert size.tolist() == [3, 1, 1, 1]


def test_taker_groups_exact_under_hash_collisions(monkeypatch):
    """With every item's hash code equal, all masks of one size collide: the exact comparison must still separate
    them (a group is homogeneous), so the grouped E-step matches the per-taker one."""
    Y = ResponseMatrix.from_dense(_forms_data(300, 30, seed=1))
    monkeypatch.setattr(irtF, "_item_codes", lambda m: np.zeros(m, dtype=np.uint64))
    group, size = irtF.taker_groups(Y.rows, Y.cols, Y.values, Y.n_takers)
    dense = Y.to_dense(fill=np.nan)
    for g in range(len(size)):
        members = dense[group == g]
        assert (np.isnan(members) == np.isnan(members[0])).all()  # one answered set
        assert len(set(np.nansum(members, axis=1))) == 1  # one score
    assert len(size) < Y.n_takers  # takers of one form with one score still merge
    x, log_w = irtF.gauss_hermite(21)
    b = torch.linspace(-1.0, 1.0, Y.n_items, dtype=irtF.DTYPE)
    lp = irtF.log_probs(x, torch.ones_like(b), b)
    per_taker, grouped = irtF.SparseDesign.build(Y), irtF.SparseDesign.build(Y, group=True)
    stats1 = per_taker.item_stats(irtF.e_step(per_taker, *lp, log_w)[0])
    stats2 = grouped.item_stats(irtF.e_step(grouped, *lp, log_w)[0])
    for s1, s2 in zip(stats1, stats2, strict=True):
        assert torch.allclose(s1, s2, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("data", ["complete", "forms", "random_missing"])
@pytest.mark.parametrize("dense_storage", [True, False])
def test_grouped_e_step_equals_per_taker(data, dense_storage, monkeypatch):
    monkeypatch.setattr(irtF, "DENSE_MIN_DENSITY", 0.0 if dense_storage else 2.0)
    if data == "complete":
        Y, *_ = rasch_data(500, 25, seed=2)
    elif data == "forms":
        Y = _forms_data()
    else:
        Y, *_ = rasch_data(500, 8, seed=2, density=0.8)
    R = ResponseMatrix.from_dense(Y)
    per_taker, grouped = irtF.SparseDesign.build(R), irtF.SparseDesign.build(R, group=True)
    assert grouped.n_rows < per_taker.n_rows and grouped.n_takers == per_taker.n_takers == R.n_takers
    if data == "complete":
        assert grouped.n_rows <= R.n_items + 1
    x, log_w = irtF.gauss_hermite(31)
    b = torch.linspace(-1.5, 1.5, R.n_items, dtype=irtF.DTYPE)
    lp = irtF.log_probs(x, torch.ones_like(b), b)
    post1, log_m1 = irtF.e_step(per_taker, *lp, log_w)
    post2, log_m2 = irtF.e_step(grouped, *lp, log_w)
    # every taker's posterior is its group's
    assert torch.allclose(grouped.per_taker(post2), post1, rtol=0, atol=1e-12)
    for s1, s2 in zip(per_taker.item_stats(post1), grouped.item_stats(post2), strict=True):
        assert torch.allclose(s1, s2, rtol=1e-12, atol=1e-10)
    assert abs(float(per_taker.total(log_m1) - grouped.total(log_m2))) <= 1e-12 * abs(float(per_taker.total(log_m1)))
    assert torch.allclose(per_taker.total(post1), grouped.total(post2), rtol=1e-12, atol=0)
    theta1, se1 = irtF.eap(per_taker, torch.ones_like(b), b, None)
    theta2, se2 = irtF.eap(grouped, torch.ones_like(b), b, None)
    assert torch.allclose(theta1, theta2, rtol=0, atol=1e-12) and torch.allclose(se1, se2, rtol=0, atol=1e-12)


def test_grouping_by_score_alone_would_be_wrong():
    """Two takers with the same score and different answered items have different posteriors: merging them (a key
    on the score alone) changes the item statistics, so the key must include the answered items."""
    R = ResponseMatrix.from_dense(_forms_data())
    per_taker = irtF.SparseDesign.build(R)
    x, log_w = irtF.gauss_hermite(31)
    b = torch.linspace(-1.5, 1.5, R.n_items, dtype=irtF.DTYPE)
    post, _ = irtF.e_step(per_taker, *irtF.log_probs(x, torch.ones_like(b), b), log_w)
    score = np.bincount(R.rows, weights=R.values, minlength=R.n_takers)
    group, _ = irtF.taker_groups(R.rows, R.cols, R.values, R.n_takers)
    same_score_other_group = [
        (i, k) for i in range(60) for k in range(60) if score[i] == score[k] and group[i] != group[k]
    ]
    assert same_score_other_group
    diff = max(float((post[i] - post[k]).abs().max()) for i, k in same_score_other_group)
    assert diff > 1e-3


@pytest.mark.parametrize("data", ["complete", "forms", "random_missing"])
@pytest.mark.parametrize("kw", [{}, {"n_quad": 81, "estimate_prior_sd": True}, {"method": "gh_adam", "max_iter": 40}])
def test_grouped_fit_equals_per_taker_fit(data, kw, monkeypatch):
    if data == "complete":
        Y, *_ = rasch_data(800, 40, seed=4)
    elif data == "forms":
        Y = _forms_data(seed=4)
    else:
        Y, *_ = rasch_data(600, 6, seed=4, density=0.8)
    grouped = Rasch(**kw).fit(Y)
    R = ResponseMatrix.from_dense(Y)
    n_rows = irtF.SparseDesign.build(R, group=True).n_rows
    assert n_rows < R.n_takers // 2  # the grouped path really ran on fewer rows
    _ungrouped(monkeypatch)
    ref = Rasch(**kw).fit(Y)
    assert grouped.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(grouped.difficulty_, ref.difficulty_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(grouped.theta_, ref.theta_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(grouped.theta_se_, ref.theta_se_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(grouped.loglik_trace_, ref.loglik_trace_, rtol=1e-12, atol=0)
    assert abs(grouped.prior_sd_ - ref.prior_sd_) < 1e-10
    for theta_g, theta_r in zip(grouped.ability(Y), ref.ability(Y), strict=True):
        np.testing.assert_allclose(theta_g, theta_r, rtol=0, atol=1e-10)


def test_amortized_joint_fit_grouped_equals_per_taker(monkeypatch):
    Y = _forms_data(seed=5)
    X = np.random.default_rng(0).standard_normal((Y.shape[1], 3))
    grouped = AmortizedDifficulty(regressor="linear", mode="joint").fit(X, Y)
    _ungrouped(monkeypatch)
    ref = AmortizedDifficulty(regressor="linear", mode="joint").fit(X, Y)
    np.testing.assert_allclose(grouped.difficulty_, ref.difficulty_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(grouped.theta_, ref.theta_, rtol=0, atol=1e-9)


def test_two_pl_is_never_grouped():
    R = ResponseMatrix.from_dense(_forms_data())
    assert TwoPL()._design(R).weight is None
    assert Rasch()._design(R).weight is not None


def test_grouped_design_with_empty_takers_gets_the_prior():
    Y = np.array([[1.0, 0.0, np.nan], [np.nan, np.nan, np.nan], [1.0, 0.0, np.nan], [np.nan] * 3, [0, 1, 1.0]])
    R = ResponseMatrix(*np.nonzero(~np.isnan(Y)), Y[~np.isnan(Y)], Y.shape)
    grouped = irtF.SparseDesign.build(R, group=True)
    assert grouped.n_rows == 3
    b = torch.zeros(3, dtype=irtF.DTYPE)
    theta, se = irtF.eap(grouped, torch.ones_like(b), b, None, prior_mean=0.4, prior_sd=2.0)
    assert theta[1] == theta[3] == 0.4 and se[1] == se[3] == 2.0
    ref = irtF.eap(irtF.SparseDesign.build(R), torch.ones_like(b), b, None, prior_mean=0.4, prior_sd=2.0)
    assert torch.allclose(theta, ref[0], rtol=0, atol=1e-12) and torch.allclose(se, ref[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls", [Rasch, TwoPL])
def test_dense_and_csr_storage_give_the_same_fit(cls, monkeypatch):
    Y, *_ = rasch_data(400, 15, seed=6, density=0.7)
    monkeypatch.setattr(irtF, "DENSE_MIN_DENSITY", 0.0)
    dense = cls().fit(Y)
    assert not irtF.SparseDesign.build(ResponseMatrix.from_dense(Y)).O.is_sparse_csr
    monkeypatch.setattr(irtF, "DENSE_MIN_DENSITY", 2.0)
    csr = cls().fit(Y)
    assert irtF.SparseDesign.build(ResponseMatrix.from_dense(Y)).O.is_sparse_csr
    assert dense.n_iter_ == csr.n_iter_
    np.testing.assert_allclose(dense.difficulty_, csr.difficulty_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(dense.discrimination_, csr.discrimination_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(dense.theta_, csr.theta_, rtol=0, atol=1e-10)
