import math

import numpy as np
import pytest
import torch

from lsmi import lsmi_discrete, lsmi_from_terms, mean_shift
from lsmi.datasets import gate_joint

LN2 = math.log(2)


def joint_copy():
    p = np.zeros((2, 2, 2))
    p[0, 0, 0] = p[1, 1, 1] = 0.5
    return p


def joint_y_is_b1():
    p = np.zeros((2, 2, 2))
    for a in (0, 1):
        for b in (0, 1):
            p[a, b, a] = 0.25
    return p


@pytest.mark.parametrize(
    ("joint", "raw", "adjusted"),
    [
        (gate_joint("xor"), (0, 0, 0, LN2), (0, 0, 0, LN2)),
        (gate_joint("or"), (0.3890, -0.1733, -0.1733, 0.5199), (0.2158, 0, 0, 0.3466)),
        (gate_joint("and"), (0.3890, -0.1733, -0.1733, 0.5199), (0.2158, 0, 0, 0.3466)),
        (gate_joint("sum"), (0.3466, 0, 0, LN2), (0.3466, 0, 0, LN2)),
        (joint_copy(), (LN2, 0, 0, 0), (LN2, 0, 0, 0)),
        # I+- gives r = ln 2 here (specificity min(h1, h2) = ln 2, ambiguity 0); dit's PID_PM agrees with these
        # values (test below)
        (joint_y_is_b1(), (LN2, 0, -LN2, LN2), (0, LN2, 0, 0)),
    ],
)
def test_discrete_closed_forms(joint, raw, adjusted):
    d = lsmi_discrete(joint)
    np.testing.assert_allclose(d.raw_means, raw, atol=1e-4)
    np.testing.assert_allclose(d.means, adjusted, atol=1e-4)


def _random_joint(shape, seed):
    p = np.random.default_rng(seed).random(shape)
    return p / p.sum()


@pytest.mark.parametrize(("shape", "seed"), [((3, 3, 2), 0), ((2, 4, 3), 1), ((3, 3, 2), 2)])
def test_equivalence_with_dit_pid_pm(shape, seed):
    dit = pytest.importorskip("dit")
    from dit.pid import PID_PM

    p = _random_joint(shape, seed)
    idx = list(np.ndindex(*shape))
    dist = dit.Distribution([tuple(i) for i in idx], [p[i] for i in idx])
    pw = PID_PM._pointwise_measure(dist, [[0], [1]], [2])
    d = lsmi_discrete(p)
    raw_r = d.r - d.delta
    for (a, b, c), r in zip(d.outcomes, raw_r):
        assert r == pytest.approx(pw[(a, b, c)] * LN2, abs=1e-9)
    pid = PID_PM(dist, [[0], [1]], [2])
    dit_means = [pid[((0,), (1,))], pid[((0,),)], pid[((1,),)], pid[((0, 1),)]]
    np.testing.assert_allclose(d.raw_means, np.array(dit_means) * LN2, atol=1e-9)


def test_identities_and_all_shift_branches():
    rng = np.random.default_rng(0)
    n = 500
    for offset in ((-1.0, 0, 0, 0), (0, -2.0, 0, 0), (5.0, 2.0, 2.0, 5.0)):  # R<0; U1<0; no shift
        i1, i2, i12 = rng.normal(size=(3, n))
        h1, h2 = rng.normal(3, 1, size=(2, n))
        r, u1, u2, s = lsmi_from_terms(i1, i2, i12, h1, h2)
        r, u1, u2, s = r + offset[0], u1 + offset[1], u2 + offset[2], s + offset[3]
        i1_, i2_, i12_ = r + u1, r + u2, r + u1 + u2 + s
        r2, u12, u22, s2, delta = mean_shift(r, u1, u2, s)
        np.testing.assert_allclose(r2 + u12, i1_, atol=1e-12)
        np.testing.assert_allclose(r2 + u22, i2_, atol=1e-12)
        np.testing.assert_allclose(r2 + u12 + u22 + s2, i12_, atol=1e-12)
        np.testing.assert_allclose(r2 - r, delta)  # the same delta for every sample
        rm, u1m, u2m, sm = r.mean(), u1.mean(), u2.mean(), s.mean()
        if rm < 0 or sm < 0:
            assert delta == pytest.approx(-min(rm, sm))
            assert min(r2.mean(), s2.mean()) == pytest.approx(0, abs=1e-12)
        elif u1m < 0 or u2m < 0:
            assert delta == pytest.approx(min(u1m, u2m))
        else:
            assert delta == 0.0
    # unshifted identities, torch path
    t = [torch.randn(50, dtype=torch.float64) for _ in range(5)]
    r, u1, u2, s = lsmi_from_terms(*t)
    torch.testing.assert_close(r + u1, t[0])
    torch.testing.assert_close(r + u1 + u2 + s, t[2])


def test_modality_swap():
    p = _random_joint((3, 4, 2), 3)
    a, b = lsmi_discrete(p), lsmi_discrete(p.transpose(1, 0, 2))
    ra, u1a, u2a, sa = a.means
    rb, u1b, u2b, sb = b.means
    assert (ra, sa) == pytest.approx((rb, sb), abs=1e-12)
    assert (u1a, u2a) == pytest.approx((u2b, u1b), abs=1e-12)


def test_discrete_bad_input():
    with pytest.raises(ValueError, match="3-D"):
        lsmi_discrete(np.ones((2, 2)))
    with pytest.raises(ValueError, match="non-negative"):
        lsmi_discrete(-np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="positive total"):
        lsmi_discrete(np.zeros((2, 2, 2)))


def test_broja_baseline_on_and_gate():
    pytest.importorskip("cvxpy")
    from lsmi.baselines import broja_discrete

    out = broja_discrete(gate_joint("and"))
    # BROJA of AND: R = 0.311 bits, U = 0, S = 0.5 bits
    assert out["R"] == pytest.approx(0.3113 * LN2, abs=2e-3)
    assert out["S"] == pytest.approx(0.5 * LN2, abs=2e-3)
    assert abs(out["U1"]) < 2e-3
    assert broja_discrete(gate_joint("xor"))["S"] == pytest.approx(LN2, abs=2e-3)


def test_broja_formulations_agree():
    """The sparse ("aux") and the dense ("direct") convex programs reach the same optimum; BROJA terms are >= 0.

    (dit's PID_BROJA is not used as the reference: on this joint its optimiser stops at R = -0.0013 nats, a worse
    objective than both programs reach.)"""
    pytest.importorskip("cvxpy")
    from lsmi.baselines import broja_discrete

    for shape, seed in (((2, 3, 2), 5), ((3, 3, 4), 1)):
        p = np.random.default_rng(seed).dirichlet(np.ones(int(np.prod(shape)))).reshape(shape)
        aux, direct = broja_discrete(p), broja_discrete(p, formulation="direct")
        assert aux["status"] == direct["status"] == "optimal"
        vals = np.array([aux[k] for k in ("R", "U1", "U2", "S")])
        np.testing.assert_allclose(vals, [direct[k] for k in ("R", "U1", "U2", "S")], atol=1e-5)
        assert (vals > -1e-6).all()
    big = np.random.default_rng(0).dirichlet(np.ones(640)).reshape(8, 8, 10)
    cut = broja_discrete(big, formulation="direct", time_limit=1e-3)  # stops at the limit: a lower bound
    assert cut["status"] == "time_limit" and math.isnan(cut["S"]) and cut["solve_s"] >= 1e-3
    with pytest.raises(ValueError, match="formulation"):
        broja_discrete(p, formulation="dense")
    with pytest.raises(ValueError, match="time_limit"):
        broja_discrete(p, time_limit=0)
