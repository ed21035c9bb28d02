import math

import numpy as np
import pytest
from scipy.stats import norm

from dp_ts_ucb.privacy import (
    compose_gdp,
    dp_ts_ucb_mu_bound,
    gaussian_mechanism_mu,
    gdp_delta,
    gdp_epsilon,
    gdp_tradeoff,
    paper_mu_bound,
    sampling_budget,
)


def test_mechanism_and_composition():
    assert gaussian_mechanism_mu(0.1, 0.2) == pytest.approx(0.5)
    assert compose_gdp([0.3, 0.4]) == pytest.approx(0.5)
    assert compose_gdp([]) == 0.0


@pytest.mark.parametrize(
    ("eps", "mu", "delta"),
    [(1, 1, 0.126937), (1, 0.5, 0.006830), (2, 2, 0.331898), (1, math.sqrt(2), 0.286208), (0, 1, 0.382925)],
)
def test_delta_vectors(eps, mu, delta):
    assert gdp_delta(mu=mu, epsilon=eps) == pytest.approx(delta, abs=1e-6)


@pytest.mark.parametrize(("mu", "eps"), [(0.5, 1.9931), (1, 4.3772), (math.sqrt(2), 6.5730), (2, 9.9973), (5, 33.1037)])
def test_epsilon_vectors_and_inverse(mu, eps):
    e = gdp_epsilon(mu=mu, delta=1e-5)
    assert e == pytest.approx(eps, abs=1e-4)
    assert gdp_delta(mu=mu, epsilon=e) == pytest.approx(1e-5, rel=1e-8)


def test_monotone_and_zero_epsilon():
    eps = np.linspace(0, 5, 11)
    d = [gdp_delta(mu=1.0, epsilon=e) for e in eps]
    assert all(a > b for a, b in zip(d, d[1:]))
    mus = [0.2, 0.5, 1, 2, 4]
    assert all(gdp_delta(mu=a, epsilon=1.0) < gdp_delta(mu=b, epsilon=1.0) for a, b in zip(mus, mus[1:]))
    for mu in mus:
        assert gdp_delta(mu=mu, epsilon=0.0) == pytest.approx(2 * norm.cdf(mu / 2) - 1, abs=1e-12)
    assert gdp_delta(mu=0.1, epsilon=700.0) == 0.0  # no overflow at huge epsilon


def test_tradeoff_curve():
    assert gdp_tradeoff(1.0, 0.05) == pytest.approx(norm.cdf(norm.ppf(0.95) - 1.0))
    assert gdp_tradeoff(2.0, 0.0) == pytest.approx(1.0)


def test_bad_conversion_input():
    with pytest.raises(ValueError, match="mu"):
        gdp_delta(mu=0.0, epsilon=1.0)
    with pytest.raises(ValueError, match="delta"):
        gdp_epsilon(mu=1.0, delta=1.5)
    with pytest.raises(ValueError, match="epsilon"):
        gdp_delta(mu=1.0, epsilon=-1.0)


def test_pld_cross_check():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    k, s = 4, 2.0
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(noise_multiplier=s), k))
    for eps in (0.5, 1.0, 2.0):
        assert acc.get_delta(eps) == pytest.approx(gdp_delta(mu=math.sqrt(k) / s, epsilon=eps), abs=1e-6)


def test_privacy_loss_monte_carlo():
    """LLR of N(m, s^2) vs N(m + 1/n, s^2): mean mu^2/2 and variance mu^2 per draw, mu = 1/(n s)."""
    rng = np.random.default_rng(0)
    n, sigma, m_draws, reps = 4, 0.5, 9, 40_000
    mu = 1 / (n * sigma)
    x = rng.normal(0.0, sigma, (reps, m_draws))
    shift = 1 / n
    llr = ((x - shift) ** 2 - x**2) / (2 * sigma**2)  # log p0(x) - log p1(x) under p0
    total = llr.sum(axis=1)
    se_mean = math.sqrt(m_draws * mu**2 / reps)
    assert abs(total.mean() - m_draws * mu**2 / 2) < 5 * se_mean
    assert total.var() == pytest.approx(m_draws * mu**2, rel=0.05)
    # the composed loss is that of one Gaussian mechanism with sqrt(m) mu
    assert compose_gdp([mu] * m_draws) == pytest.approx(math.sqrt(m_draws) * mu)


TABLE = {  # T: alpha -> (ceil phi, mu_bound, paper_bound)
    10**4: {
        0: (2796, 52.88, 74.77),
        0.25: (670, 19.61, 27.73),
        0.5: (161, 7.28, 10.28),
        0.75: (39, 2.72, 3.81),
        1: (10, 1.042, 1.414),
    },
    10**5: {0: (12354, 111.15, 157.18), 0.5: (378, 10.55, 14.91), 1: (12, 1.021, 1.414)},
    10**6: {0: (51352, 226.61, 320.47), 0.75: (108, 3.88, 5.49), 1: (14, 1.007, 1.414)},
}


@pytest.mark.parametrize("horizon", sorted(TABLE))
def test_budget_and_bounds_table(horizon):
    for alpha, (phi, mu_b, paper) in TABLE[horizon].items():
        assert sampling_budget(horizon, alpha) == phi
        assert dp_ts_ucb_mu_bound(horizon, alpha) == pytest.approx(mu_b, abs=0.006)
        assert paper_mu_bound(horizon, alpha) == pytest.approx(paper, abs=0.006)
        assert dp_ts_ucb_mu_bound(horizon, alpha) <= paper_mu_bound(horizon, alpha)
    ln_t = math.log(horizon)
    assert dp_ts_ucb_mu_bound(horizon, 1.0) <= math.sqrt(math.ceil(ln_t) / ln_t) + 1e-12
    assert dp_ts_ucb_mu_bound(horizon, 1.0, init_pulls=4) == pytest.approx(dp_ts_ucb_mu_bound(horizon, 1.0) / 2)


def test_conversions_are_keyword_only():
    """A caller meaning (epsilon=0.5, mu=3) got the delta of 0.5-GDP at epsilon 3 (3.4e-10) instead of 0.83."""
    with pytest.raises(TypeError):
        gdp_delta(0.5, 3.0)
    with pytest.raises(TypeError):
        gdp_epsilon(0.5, 1e-5)
    closed_form = norm.cdf(-0.5 / 3 + 1.5) - math.exp(0.5) * norm.cdf(-0.5 / 3 - 1.5)  # mu = 3, eps = 0.5
    assert gdp_delta(epsilon=0.5, mu=3.0) == pytest.approx(closed_form) == pytest.approx(0.83, abs=1e-4)


@pytest.mark.parametrize("alpha", [float("nan"), [0.1, float("nan")], -0.1, 1.5, True, "0.5"])
def test_tradeoff_refuses_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        gdp_tradeoff(1.0, alpha)


def test_our_bound_vs_the_papers_rounding():
    """Ours sqrt(ceil(phi) / ln^a T) is at most the paper's sqrt(2 phi / ln^a T) exactly when ceil(phi) <= 2 phi,
    i.e. phi >= 1/2; a tiny c0 rounds phi up to one draw and ours is the larger (as the README says)."""
    for c0 in (0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 3.0):
        for horizon in (100, 10**4, 10**6):
            for alpha in (0.0, 0.5, 1.0):
                phi = sampling_budget(horizon, alpha, c0, rounded=False)
                ours, paper = dp_ts_ucb_mu_bound(horizon, alpha, c0), paper_mu_bound(horizon, alpha, c0)
                assert (ours <= paper + 1e-12) == (math.ceil(phi - 1e-9) <= 2 * phi + 1e-12)
    assert dp_ts_ucb_mu_bound(10**4, 1.0, 0.05) == pytest.approx(0.3295, abs=1e-4)
    assert paper_mu_bound(10**4, 1.0, 0.05) == pytest.approx(0.3162, abs=1e-4)
