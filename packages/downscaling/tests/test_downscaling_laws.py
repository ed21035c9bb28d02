"""Laws: noiseless recovery, closed form vs numeric argmin, break-even vs direct lifetime compute."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar

from downscaling import laws
from downscaling.laws import CHINCHILLA, Law, break_even, fit, lifetime_flops


def _chinchilla_runs(p=CHINCHILLA):
    law = Law("chinchilla", dict(p))
    n = np.array([1e7, 3e7, 1e8, 3e8, 1e9, 3e9])
    d = np.array([1e9, 1e10, 1e11])
    nn_, dd = np.meshgrid(n, d)
    return pd.DataFrame({"N": nn_.ravel(), "D": dd.ravel(), "loss": law.predict(N=nn_.ravel(), D=dd.ravel())})


def test_noiseless_chinchilla_recovered():
    law = fit(_chinchilla_runs(), "chinchilla")
    for k, v in CHINCHILLA.items():
        assert law.params[k] == pytest.approx(v, rel=1e-5), k


def test_noiseless_kaplan_and_data_pruning_recovered():
    n = np.logspace(6, 10, 8)
    runs = [{"N": v, "loss": (KN := laws.KAPLAN)["N_c"] ** KN["alpha_N"] * v ** -KN["alpha_N"]} for v in n]
    law = fit(runs, "kaplan")
    assert law.params["alpha_N"] == pytest.approx(0.076, rel=1e-5)
    assert law.params["N_c"] == pytest.approx(8.8e13, rel=1e-4)
    p = np.logspace(2, 6, 9)
    law = fit(pd.DataFrame({"P": p, "loss": 0.3 + 4.0 * p**-0.45}), "data_pruning")
    assert law.params == pytest.approx({"E": 0.3, "B": 4.0, "beta": 0.45}, rel=1e-5)


def test_pruning_law_fits_its_family():
    truth = Law("pruning", {"L0": 2.0, "c": 0.8, "gamma": 2.0, "D0": 1e6, "delta": 0.05})
    rho, drec = np.meshgrid([0.0, 0.2, 0.4, 0.6, 0.8], [0.0, 1e5, 1e6, 1e7])
    runs = pd.DataFrame({"rho": rho.ravel(), "D_rec": drec.ravel()})
    runs["loss"] = truth.predict(rho=runs.rho, D_rec=runs.D_rec)
    law = fit(runs, "pruning")
    got = law.predict(rho=runs.rho, D_rec=runs.D_rec)
    np.testing.assert_allclose(got, runs.loss, rtol=1e-6)


def test_published_compute_optimal_example():
    opt = Law.chinchilla().compute_optimal(1e21)
    assert opt["N"] == pytest.approx(1.824e9, rel=2e-3)
    assert opt["D"] == pytest.approx(9.14e10, rel=2e-3)
    assert opt["loss"] == pytest.approx(2.329, abs=2e-3)
    assert Law.chinchilla().compute_optimal(5.76e23)["N"] == pytest.approx(3.2e10, rel=0.05)


@pytest.mark.parametrize("c", [1e18, 1e21, 5.76e23])
def test_closed_form_equals_numeric_argmin(c):
    law = Law.chinchilla()
    res = minimize_scalar(
        lambda ln: float(law.predict(N=math.exp(ln), D=c / 6 / math.exp(ln))),
        bounds=(5, 40), method="bounded", options={"xatol": 1e-12},
    )  # fmt: skip
    assert math.exp(res.x) == pytest.approx(law.compute_optimal(c)["N"], rel=1e-6)


def test_break_even_equals_direct_lifetime_comparison():
    nl, dl, ns, ds = 1e9, 2e10, 2e8, 3e11
    s = break_even(nl, dl, ns, ds)
    assert lifetime_flops(nl, dl, s) == pytest.approx(lifetime_flops(ns, ds, s), rel=1e-12)
    assert lifetime_flops(nl, dl, 0.5 * s) < lifetime_flops(ns, ds, 0.5 * s)
    assert lifetime_flops(nl, dl, 2 * s) > lifetime_flops(ns, ds, 2 * s)
    assert break_even(nl, dl, ns, 1e9) == 0.0  # the small one is cheaper from the start


def test_law_break_even_uses_tokens_to_reach():
    law = Law.chinchilla()
    nl, dl, ns = 7e10, 1.4e12, 1e10
    ds = law.tokens_to_reach(ns, float(law.predict(N=nl, D=dl)))
    assert float(law.predict(N=ns, D=ds)) == pytest.approx(float(law.predict(N=nl, D=dl)), rel=1e-12)
    assert law.break_even(nl, dl, ns) == pytest.approx(break_even(nl, dl, ns, ds))
    assert law.break_even(7e10, 1e15, 1e6) == math.inf  # too small to ever match


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: fit(_chinchilla_runs().iloc[:4], "chinchilla"), "at least 5 rows"),
        (lambda: fit(_chinchilla_runs(), "hoffmann"), "family"),
        (lambda: fit(pd.DataFrame({"N": [1.0] * 6, "loss": [1.0] * 6}), "chinchilla"), "missing"),
        (lambda: Law("kaplan", dict(laws.KAPLAN)).compute_optimal(1e20), "chinchilla"),
        (lambda: Law.chinchilla().compute_optimal(-1.0), "flops"),
        (lambda: break_even(1e8, 1e9, 1e9, 1e9), "n_large"),
        (lambda: Law.chinchilla().predict(N=1e9), "inputs"),
    ],
)
def test_laws_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
