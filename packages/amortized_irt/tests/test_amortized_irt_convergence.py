"""EM stops on a criterion on the parameters: at the defaults it ends near the converged MML solution on real data
(the Swedish SAT verbal half, shipped in the irtorch wheel), and ``converged_`` is true only when the criterion
held."""

from __future__ import annotations

import numpy as np
import pytest
from amortized_irt_testing import rasch_data

from amortized_irt import AmortizedDifficulty, Rasch, ThreePL, TwoPL


@pytest.fixture(scope="module")
def sat_verbal():
    pytest.importorskip("irtorch", reason="the Swedish SAT sample ships in the irtorch wheel ([real] extra)")
    from amortized_irt.datasets import swedish_sat

    Y, _ = swedish_sat()  # omitted responses missing
    V = Y.subset_items(np.flatnonzero(Y.scenario == "verbal"))
    return V.subset_takers(np.flatnonzero(np.bincount(V.rows, minlength=V.n_takers) > 0))


def _params(m):
    return np.concatenate([m.difficulty_, m.discrimination_, [] if m.guessing_ is None else m.guessing_])


def _check_defaults_converge(cls, V):
    ref = cls(tol=1e-12, max_iter=5000).fit(V)
    assert ref.converged_ and ref.final_change_ < 1e-12
    m = cls().fit(V)
    assert m.converged_ and m.final_change_ < m.config.tol and m.n_iter_ == len(m.loglik_trace_)
    assert np.abs(_params(m) - _params(ref)).max() <= 0.005  # 0.029 with the old |log-likelihood| criterion


def test_rasch_defaults_converge_on_sat_verbal(sat_verbal):
    _check_defaults_converge(Rasch, sat_verbal)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [TwoPL, ThreePL])
def test_2pl_3pl_defaults_converge_on_sat_verbal(cls, sat_verbal):
    _check_defaults_converge(cls, sat_verbal)


@pytest.mark.parametrize("cls", [Rasch, TwoPL])
def test_converged_is_false_when_max_iter_stops_em(cls):
    Y, *_ = rasch_data(400, 15, seed=1, density=0.7)
    m = cls(max_iter=3).fit(Y)
    assert not m.converged_ and m.n_iter_ == 3 and m.final_change_ >= m.config.tol
    done = cls().fit(Y)
    assert done.converged_ and done.final_change_ < done.config.tol
    # one more EM iteration from the converged parameters moves none by tol or more
    again = cls(max_iter=2).fit(Y, init={"b": done.difficulty_, "a": done.discrimination_})
    assert again.final_change_ < done.config.tol


def test_amortized_joint_fit_reports_convergence():
    Y, *_ = rasch_data(300, 15, seed=1, density=0.8)
    X = np.random.default_rng(0).standard_normal((15, 3))
    am = AmortizedDifficulty().fit(X, Y)
    assert am.converged_ and am.final_change_ < am.tol
    assert not AmortizedDifficulty(max_iter=2).fit(X, Y).converged_


def test_item_without_a_finite_difficulty_ends_at_the_bound_and_em_converges():
    Y, *_ = rasch_data(300, 12, seed=4)
    Y[:, 3] = 1.0  # every taker right: the marginal-ML difficulty of item 3 is -inf
    m = Rasch().fit(Y)
    assert m.converged_ and m.difficulty_[3] == -m.config.b_bound
    assert m.at_bound_.tolist() == [k == 3 for k in range(12)]
    free = Rasch(b_bound=1e6, max_iter=200).fit(Y)  # unbounded, it drifts outwards (to where p rounds to 1)
    assert free.difficulty_[3] < -8.0 and not free.at_bound_.any()
