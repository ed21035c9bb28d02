"""The GP predictor on embedding widths of real content (d = 32 and d = 768): it must learn the difficulty, not
predict the prior mean, and its 95% intervals must stay calibrated on held-out items."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amortized_irt import AmortizedDifficulty, ResponseMatrix
from amortized_irt.amortized import median_distance


def _wide_family(d: int, m: int, n: int = 300, density: float = 0.5, noise: float = 0.3, seed: int = 0):
    """Difficulty linear in a standardised d-dimensional embedding (unit variance) plus N(0, noise²)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, d))
    b = X @ (rng.standard_normal(d) / np.sqrt(d)) + noise * rng.standard_normal(m)
    theta = rng.standard_normal(n)
    Y = (rng.random((n, m)) < 1 / (1 + np.exp(-(theta[:, None] - b)))).astype(float)
    Y[rng.random((n, m)) > density] = np.nan
    return X, ResponseMatrix.from_dense(Y), b


def _gp_vs_linear(d: int, m: int, mode: str):
    X, R, b = _wide_family(d, m)
    tr, te = R.split_items(0.2, seed=0)
    lin = AmortizedDifficulty(mode=mode).fit(X[tr], R.subset_items(tr)).predict(X[te])
    gp = AmortizedDifficulty(regressor="gp", mode=mode).fit(X[tr], R.subset_items(tr))
    mu, var = gp.predict(X[te], return_var=True)
    cover = float(np.mean(np.abs(b[te] - mu) <= 1.96 * np.sqrt(var)))
    return np.corrcoef(lin, b[te])[0, 1], np.corrcoef(mu, b[te])[0, 1], cover, gp


def test_gp_learns_at_d768_as_well_as_linear_with_calibrated_intervals():
    # gpytorch's default lengthscale (0.69) against distances ≈ 39 makes every kernel entry 0: corr ≈ 0 before
    lin, gp, cover, model = _gp_vs_linear(768, 1000, "two_stage")
    assert gp >= lin - 0.05 and gp > 0.6, (lin, gp)
    assert 0.90 <= cover <= 0.98, cover
    assert model.gp_.covar_module.base_kernel.lengthscale.item() > 10.0  # moved with the data, not stuck at 0.69


@pytest.mark.slow
@pytest.mark.parametrize("d", [32, 768])
def test_gp_joint_fit_learns_on_wide_inputs(d):
    lin, gp, cover, _ = _gp_vs_linear(d, 1000, "joint")
    assert gp >= lin - 0.05, (lin, gp)
    assert 0.90 <= cover <= 0.98, cover


@pytest.mark.slow
def test_gp_learns_at_d32():
    lin, gp, cover, _ = _gp_vs_linear(32, 600, "two_stage")
    assert gp >= lin - 0.05, (lin, gp)
    assert 0.90 <= cover <= 0.98, cover


def test_median_distance_is_the_median_of_distinct_pairs():
    X = torch.tensor([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0], [6.0, 8.0]], dtype=torch.float64)
    # distinct-row pairs: 5, 10, 10, 5, 5 (the duplicate pair at distance 0 is skipped)
    assert median_distance(X) == 5.0
    rng = np.random.default_rng(0)
    Z = torch.as_tensor(rng.standard_normal((400, 768)))
    assert abs(median_distance(Z, max_rows=200) - np.sqrt(2 * 768)) < 1.0
