"""Runs validation and I/O, frontier and horizon, the final-loss law fit, and the LR schedules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from supercollapse import Runs, Schedule, compute_frontier, fit_horizon, fit_scaling_law, tau
from supercollapse.schedules import SCHEDULES


def _frame(**over) -> pd.DataFrame:
    df = pd.DataFrame(
        {"run_id": ["a"] * 3 + ["b"] * 3, "size": [10.0] * 3 + [20.0] * 3, "seed": 0, "schedule": "const",
         "step": [1, 2, 3] * 2, "compute": [1.0, 2.0, 3.0, 2.0, 4.0, 6.0], "loss": [3.0, 2.0, 1.5, 2.9, 1.9, 1.2],
         "noise_trace": [0.1, 0.2, np.nan, 0.1, 0.2, 0.3]}
    )  # fmt: skip
    for k, v in over.items():
        df[k] = v
    return df


# -- Runs ------------------------------------------------------------------------------------------------------------
def test_runs_bad_input_names_column_and_value():
    with pytest.raises(ValueError, match=r"missing required column\(s\) \['loss'\]"):
        Runs.from_frame(_frame().drop(columns="loss"))
    with pytest.raises(ValueError, match=r"duplicate \(run_id, step\) = \('a', 1\)"):
        Runs.from_frame(_frame(step=[1, 1, 3, 1, 2, 3]))
    with pytest.raises(ValueError, match="strictly increasing within a run; run_id 'b'"):
        Runs.from_frame(_frame(compute=[1.0, 2.0, 3.0, 2.0, 2.0, 6.0]))
    with pytest.raises(ValueError, match="'loss' must be finite, got nan at run_id 'a'"):
        Runs.from_frame(_frame(loss=[3.0, np.nan, 1.5, 2.9, 1.9, 1.2]))
    with pytest.raises(ValueError, match="'loss' must be finite, got inf"):
        Runs.from_frame(_frame(loss=[3.0, 2.0, 1.5, 2.9, np.inf, 1.2]))
    with pytest.raises(ValueError, match="'size' must be constant within a run"):
        Runs.from_frame(_frame(size=[10.0, 11.0, 10.0, 20.0, 20.0, 20.0]))
    with pytest.raises(ValueError, match="'compute' must be > 0"):
        Runs.from_frame(_frame(compute=[0.0, 2.0, 3.0, 2.0, 4.0, 6.0]))


def test_runs_accepts_numpy_scalars_and_mappings_and_selects():
    d = {k: v.to_numpy() for k, v in _frame().items()}
    d["size"] = d["size"].astype(np.float32)
    runs = Runs.from_frame(d)
    assert runs.n_runs == 2 and runs.sizes.tolist() == [10.0, 20.0]
    assert runs.where(size=20.0).n_runs == 1
    assert runs.where(run_id=["a", "b"]).n_runs == 2
    assert runs.where(loss=lambda s: s < 2).frame["loss"].max() < 2
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        runs.where(nope=1)
    assert runs.meta()["final_loss"].tolist() == [1.5, 1.2]


def test_csv_round_trip_is_lossless(tmp_path):
    rng = np.random.default_rng(0)
    df = _frame(loss=rng.uniform(1, 2, 6))
    runs = Runs.from_frame(df)
    back = Runs.read(runs.to_csv(tmp_path / "r.csv"))
    pd.testing.assert_frame_equal(back.frame, runs.frame)
    # a directory of shards merges
    runs.where(run_id="a").to_csv(tmp_path / "shards" / "0.csv")
    runs.where(run_id="b").to_csv(tmp_path / "shards" / "1.csv")
    pd.testing.assert_frame_equal(Runs.read(tmp_path / "shards").frame, runs.frame)


def test_parquet_round_trip_is_lossless(tmp_path):
    try:
        import pyarrow  # noqa: F401
    except ImportError as err:
        pytest.skip(f"pyarrow unusable here ({err}); the parquet extra is needed")
    runs = Runs.from_frame(_frame(loss=np.random.default_rng(0).uniform(1, 2, 6)))
    pd.testing.assert_frame_equal(Runs.read(runs.to_parquet(tmp_path / "r.parquet")).frame, runs.frame)


# -- frontier ---------------------------------------------------------------------------------------------------------
def test_frontier_exponent_matches_closed_form():
    A, B, nu, mu = 2.0, 3.0, 0.35, 0.5
    rows = []
    for p in np.geomspace(1e3, 1e6, 25):
        t = np.geomspace(1e2, 1e9, 400)
        rows.append(
            pd.DataFrame({"run_id": f"{p:.0f}", "size": p, "seed": 0, "schedule": "const",
                          "step": np.arange(400), "compute": 6 * p * t, "loss": A * p**-nu + B * t**-mu})
        )  # fmt: skip
    front = compute_frontier(Runs.from_frame(pd.concat(rows)))
    h = fit_horizon(front)
    assert abs(h.exponent / (1 + nu / mu) - 1) < 0.02
    p = 3e4
    np.testing.assert_allclose(h.tokens(p), h.compute(p) / (6 * p))
    assert h.gamma == pytest.approx(h.exponent - 1)


def test_fit_horizon_needs_interior_sizes():
    rows = [
        pd.DataFrame({"run_id": str(p), "size": p, "seed": 0, "schedule": "const", "step": [0, 1],
                      "compute": [1.0, 10.0], "loss": [2.0 - p / 10, 1.0 - p / 10]})
        for p in (1.0, 2.0)
    ]  # fmt: skip
    with pytest.raises(ValueError, match=">= 2 distinct sizes"):
        fit_horizon(compute_frontier(Runs.from_frame(pd.concat(rows))))


# -- scaling-law fit ----------------------------------------------------------------------------------------------
C = np.logspace(15, 19, 10)
L_TRUE = 25.0 * C**-0.12 + 1.7


def test_noiseless_law_recovered():
    law = fit_scaling_law(C, L_TRUE)
    np.testing.assert_allclose([law.a, law.b, law.L0], [25.0, 0.12, 1.7], rtol=1e-6)
    assert law.r2 > 1 - 1e-12
    np.testing.assert_allclose(law(C), L_TRUE, rtol=1e-9)


def test_huber_resists_an_outlier_squared_does_not():
    L = L_TRUE.copy()
    L[4] *= 3
    huber = fit_scaling_law(C, L)
    squared = fit_scaling_law(C, L, loss="squared_log")
    assert abs(huber.L0 / 1.7 - 1) < 0.01
    assert abs(squared.L0 / 1.7 - 1) > abs(huber.L0 / 1.7 - 1)


def test_pruned_starts_match_the_exhaustive_loop():
    rng = np.random.default_rng(3)
    L = L_TRUE * np.exp(0.002 * rng.standard_normal(len(C)))
    fast = fit_scaling_law(C, L, n_grid=4)
    full = fit_scaling_law(C, L, n_grid=4, n_polish=64)
    assert fast.objective == pytest.approx(full.objective, rel=1e-8, abs=1e-14)


def test_fixed_l0_and_bad_input():
    law = fit_scaling_law(C, L_TRUE, L0=1.7)
    assert law.L0 == 1.7 and law.b == pytest.approx(0.12, rel=1e-6)
    with pytest.raises(ValueError, match="L0 must be below every final loss"):
        fit_scaling_law(C, L_TRUE, L0=5.0)
    with pytest.raises(ValueError, match="loss must be one of"):
        fit_scaling_law(C, L_TRUE, loss="l1")
    with pytest.raises(ValueError, match=">= 3 points"):
        fit_scaling_law(C[:2], L_TRUE[:2])


# -- schedules --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_boundaries(name):
    T = 100
    s = Schedule(name, T, decay_frac=0.2)
    assert np.all(s(np.arange(81)) == 1.0)  # no decay before (1 − f)·T
    end = {"const": 1.0, "exp": 0.1}.get(name, 0.0)
    assert float(s(T)) == pytest.approx(end, abs=1e-15)
    if name != "const":
        assert np.all(np.diff(s(np.arange(80, T + 1))) <= 1e-15) or name == "multicosine"
    w = Schedule(name, T, warmup=10)
    np.testing.assert_allclose(w(np.arange(10)), (np.arange(10) + 1) / 10 * Schedule(name, T)(np.arange(10)))
    assert float(w(10)) == float(Schedule(name, T)(10))


def test_tau_is_cumulative_sum_and_lambda_lr_matches():
    s = Schedule("cosine", 50, decay_frac=0.5, warmup=5)
    steps = np.array([0, 1, 7, 50])
    expected = [0.0] + [0.3 * sum(float(s(k)) for k in range(t)) for t in steps[1:]]
    np.testing.assert_allclose(tau(s, steps, eta_peak=0.3), expected, rtol=1e-12)
    w = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([w], lr=0.3)
    ref_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.3)
    sched = s.as_lambda_lr(opt)
    ref = torch.optim.lr_scheduler.LambdaLR(
        ref_opt, lambda t: min(1.0, (t + 1) / 5) * (1.0 if t < 25 else 0.5 * (1 + np.cos(np.pi * (t / 50 - 0.5) / 0.5)))
    )
    for _ in range(50):
        assert opt.param_groups[0]["lr"] == pytest.approx(ref_opt.param_groups[0]["lr"], rel=1e-12, abs=1e-15)
        opt.step()
        ref_opt.step()
        sched.step()
        ref.step()


def test_schedule_bad_input():
    with pytest.raises(ValueError, match="name must be one of"):
        Schedule("triangle", 10)
    with pytest.raises(ValueError, match="decay_frac"):
        Schedule("linear", 10, decay_frac=0.0)
    with pytest.raises(ValueError, match="decay_frac"):
        Schedule("linear", 10, decay_frac=1.5)
    with pytest.raises(ValueError, match="warmup"):
        Schedule("linear", 10, warmup=-1)


def test_objective_stays_finite_at_the_bound_corner():
    """L-BFGS-B may probe a = L0 = 0 (the prediction 0): value and gradient must stay finite there (with NumPy 2.4 /
    SciPy 1.17 the outlier fit above stepped onto that corner and the old 1e-300 floor overflowed the gradient)."""
    from supercollapse.laws import _value_and_grad

    L = L_TRUE.copy()
    L[4] *= 3
    lc, logL = np.log(C / C.min()), np.log(L)
    truth = np.array([25.0 * C.min() ** -0.12, 0.12, 1.7])  # the generating law in the fit's normalised units
    for loss in ("squared_log", "huber_log"):
        value, grad = _value_and_grad(np.array([0.0, 19022.1, 0.0]), lc, logL, loss, 1e-3, None)
        assert np.isfinite(value) and np.isfinite(grad).all()
        assert value > 100 * _value_and_grad(truth, lc, logL, loss, 1e-3, None)[0]  # far worse than the truth


def test_schedule_degenerate_input_raises():
    """A warmup longer than the run, and steps outside [0, T] (once clipped silently), raise naming the value."""
    with pytest.raises(ValueError, match=r"warmup must be an int in \[0, 10\], got 20"):
        Schedule("linear", 10, warmup=20)
    assert float(Schedule("linear", 10, warmup=10)(9)) == pytest.approx(1.0 * 0.1)  # w = T is allowed
    s = Schedule("cosine", 10)
    with pytest.raises(ValueError, match=r"step must lie in \[0, total_steps=10\], got \[11.0\]"):
        s(np.array([3, 11]))
    with pytest.raises(ValueError, match=r"got \[-1.0\]"):
        s(-1)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = s.as_lambda_lr(opt)
    for _ in range(10):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-18)  # step T: the end of the schedule
    opt.step()
    with pytest.raises(ValueError, match="stepped to step 11, outside the schedule's"):
        sched.step()


def test_scaling_law_refuses_a_constant_or_rising_loss():
    """A constant loss once came back as b = 0, r² = nan, as if it were a law."""
    with pytest.raises(ValueError, match=r"L is constant \(2.5 at every compute\)"):
        fit_scaling_law(C, np.full(len(C), 2.5))
    with pytest.raises(ValueError, match="L does not decrease with C"):
        fit_scaling_law(C, 2.0 + 0.1 * np.log(C / C.min()))
    with pytest.raises(ValueError, match="C is constant"):
        fit_scaling_law(np.full(4, 1e6), np.array([3.0, 2.0, 1.5, 1.2]))


def test_csv_round_trip_keeps_string_labels_that_look_numeric(tmp_path):
    from supercollapse import Runs

    base = {"size": [1e4] * 2, "schedule": ["1"] * 2, "step": [0, 1], "compute": [1.0, 2.0], "loss": [2.0, 1.0]}
    frames = [pd.DataFrame({**base, "run_id": rid, "seed": seed}) for rid, seed in (("001", "07"), ("1", "7"))]
    runs = Runs.concat(frames)
    back = Runs.read(runs.to_csv(tmp_path / "runs.csv"))
    assert back.n_runs == 2  # "001" and "1" were both read back as the int 1: one run with duplicate steps
    assert back.frame.equals(runs.frame)
    ints = Runs.from_frame(pd.DataFrame({**base, "run_id": [5, 5], "seed": [-3, -3]}))
    assert Runs.read(ints.to_csv(tmp_path / "ints.csv")).frame.equals(ints.frame)  # ints stay ints


def test_noise_model_names_bad_alpha_and_a_zero_lr_const_run():
    from supercollapse import NoiseModel

    steps = np.arange(20)
    run = {"size": 1e4, "seed": 0, "step": steps, "compute": steps + 1.0, "noise_trace": 1.0, "tau": 0.1 * steps}
    const = pd.DataFrame({**run, "run_id": "c", "schedule": "const", "loss": 2.0 - 0.01 * steps, "lr": 0.1})
    lin = pd.DataFrame({**run, "run_id": "l", "schedule": "linear", "loss": 2.0 - 0.01 * steps,
                        "lr": 0.1 * (1 - steps / 20)})  # fmt: skip
    with pytest.raises(ValueError, match="const_run's lr must be > 0"):
        NoiseModel().fit(const.assign(lr=0.0), lin)
    model = NoiseModel().fit(const, lin)
    with pytest.raises(ValueError, match="alpha must be a float and finite, got nan"):
        model.rmse(lin, alpha=float("nan"))  # was a NaN error
    with pytest.raises(TypeError, match="alpha must be a float, got '0.1'"):
        model.predict(lin, alpha="0.1")  # was a numpy UFuncTypeError
    assert model.rmse(lin, alpha=np.float32(0.0)) == pytest.approx(model.rmse(lin, alpha=0.0))


def test_annealing_law_names_bad_curves():
    from supercollapse import AnnealingLaw

    lr = np.r_[np.full(50, 1e-3), np.linspace(1e-3, 0, 50)]
    steps = np.arange(1, 101)
    loss = 1 + 2 / (1 + np.cumsum(lr) * 100)
    law = AnnealingLaw().fit([(lr, steps.astype(np.float64), loss)])  # integer-valued floats are fine
    with pytest.raises(ValueError, match="curves\\[0\\] has 50 steps but 100 losses"):
        AnnealingLaw().fit([(lr, steps[:50], loss)])  # was a numpy broadcast error
    with pytest.raises(ValueError, match="steps must hold integer step counts, got \\[1.5"):
        AnnealingLaw().fit([(lr, steps + 0.5, loss)])  # was truncated to 1, 2, ... silently
    with pytest.raises(ValueError, match="steps must hold integer step counts"):
        law.predict(lr, steps + 0.7)
    with pytest.raises(ValueError, match="must reach a positive peak, got a maximum of 0.0"):
        AnnealingLaw().fit([(0 * lr, steps, loss)])  # was scipy's "Residuals are not finite"
    with pytest.raises(ValueError, match="steps must be finite"):
        AnnealingLaw().fit([(lr, steps * np.nan, loss)])


def test_schedule_and_tau_refuse_non_numeric_steps():
    sched = Schedule("linear", 10)
    for bad in ("3", True, [None]):
        with pytest.raises(TypeError, match="step must be an int or float step count"):
            sched(bad)  # "3" used to be read as step 3
        with pytest.raises(TypeError, match="step must be an int or float step count"):
            tau(sched, bad)  # "3" used to be a numpy UFuncTypeError
    assert sched(np.int64(3)) == pytest.approx(0.7) and tau(sched, np.array([0, 2]))[1] == pytest.approx(1.9)
