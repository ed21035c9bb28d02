"""μP coordinate check, the trainer's repeatability and schema, the tasks, and the annealing-law baseline."""

from __future__ import annotations

import numpy as np
import pandas.testing as pd_testing
import pytest
import torch

from supercollapse import AnnealingLaw, Runs, Schedule
from supercollapse.experiments import Setup, plrf_experiment
from supercollapse.models import ResidualMLP
from supercollapse.mup import adam_param_groups
from supercollapse.tasks import PLRF, FourierRegression
from supercollapse.train import RunSpec, mse_half, parameter_count, train_run

TASK = FourierRegression(modes=200)


def _feature_change(width: int, mup: bool, steps: int = 5) -> float:
    torch.manual_seed(0)
    model = ResidualMLP(width, 2)
    groups = adam_param_groups(model, 3e-3, base_width=32) if mup else [{"params": model.parameters(), "lr": 3e-3}]
    opt = torch.optim.Adam(groups, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(1)
    x_probe, _ = TASK.sample(256, torch.Generator().manual_seed(2))
    before = _hidden(model, x_probe)
    for _ in range(steps):
        x, y = TASK.sample(64, g)
        opt.zero_grad()
        mse_half(model(x), y).backward()
        opt.step()
    return float((_hidden(model, x_probe) - before).pow(2).mean().sqrt())


@torch.no_grad()
def _hidden(model: ResidualMLP, x: torch.Tensor) -> torch.Tensor:
    """The fc1 pre-activations of the last block: O(1) coordinates whose change μP keeps width-independent."""
    h = model.embed(x)
    for fc1, fc2 in zip(model.fc1, model.fc2):
        a = fc1(h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6))
        h = h + model.branch_scale * fc2(torch.nn.functional.gelu(a))
    return a


def test_mup_coordinate_check():
    widths = (32, 64, 128)
    with_rule = [_feature_change(w, True) for w in widths]
    without = [_feature_change(w, False) for w in widths]
    spread = lambda v: max(v) / min(v) - 1  # noqa: E731
    assert spread(with_rule) < 0.2
    assert spread(without) > spread(with_rule)


def test_mup_groups():
    m = ResidualMLP(256, 2)
    lrs = {g["name"]: g["lr"] for g in adam_param_groups(m, 1e-3)}
    assert lrs["embed.weight"] == 1e-3
    assert lrs["fc1.0.weight"] == pytest.approx(1e-3 * 128 / 256)
    assert lrs["readout.weight"] == pytest.approx(1e-3 * 128 / 256)
    frozen = {g["name"]: g["lr"] for g in adam_param_groups(m, 1e-3, freeze_at=384)}
    assert frozen["fc2.1.weight"] == pytest.approx(1e-3 * 128 / 384)
    base = ResidualMLP(128, 2)
    exact = {g["name"]: g["lr"] for g in adam_param_groups(m, 1e-3, base_model=base)}
    assert exact == pytest.approx(lrs)
    assert parameter_count(256, 2) == sum(p.numel() for p in m.parameters())


def test_train_run_is_repeatable_and_in_schema():
    spec = RunSpec(16, 3, Schedule("linear", 60), batch=16, n_evals=4, eval_batches=2, base_lr=3e-3)
    a = train_run(spec, TASK, test_size=64)
    b = train_run(spec, TASK, test_size=64)
    assert a.equals(b)
    runs = Runs.from_frame(a)
    assert runs.n_runs == 1 and a["step"].tolist() == [15, 30, 45, 60]
    assert a["lr"].iloc[-1] == 0.0 and (a["noise_trace"] > 0).all()
    np.testing.assert_allclose(a["tau"], 3e-3 * Schedule("linear", 60).tau(a["step"]))
    other = train_run(RunSpec(16, 4, Schedule("linear", 60), batch=16, n_evals=4, eval_batches=2), TASK, test_size=64)
    assert not np.allclose(other["loss"], a["loss"])
    assert torch.get_num_threads() >= 1


def test_runspec_bad_input():
    with pytest.raises(ValueError, match="n_evals"):
        RunSpec(16, 0, Schedule("const", 10), n_evals=11)
    with pytest.raises(ValueError, match="estimator"):
        RunSpec(16, 0, Schedule("const", 10), n_evals=5, estimator="ghost")


def test_fourier_task_variance_matches_its_spectrum():
    """Integer frequencies are orthogonal on the unit cube: Var y = Σ_{k≠0} (A_k² + B_k²)/2 after merging ±k."""
    task = FourierRegression(modes=500, seed=1)
    coef: dict[tuple, list[float]] = {}
    for k, w, ph in zip(task.k.tolist(), task.w.tolist(), task.phase.tolist()):
        sign = next((1 if v > 0 else -1 for v in k if v != 0), 0)
        if sign == 0:
            continue  # k = 0: a constant
        key = tuple(sign * v for v in k)
        a, b = coef.setdefault(key, [0.0, 0.0])
        c = w * 2**0.5
        # cos(θ + φ): φ = 0 adds c·cos θ; φ = π/2 adds −c·sin θ, and sin(−θ) = −sin θ flips with the sign
        coef[key] = [a + c, b] if ph == 0 else [a, b - sign * c]
    var = sum((a * a + b * b) / 2 for a, b in coef.values())
    x, y = task.sample(20000, torch.Generator().manual_seed(0), dtype=torch.float64)
    assert x.min() >= -0.5 and x.max() <= 0.5
    assert float(y.var()) == pytest.approx(var, rel=0.05)


def test_plrf_sgd_decreases_population_loss():
    plrf = PLRF(0.6, 0.52, v=200)
    W = plrf.features(20)
    assert plrf.loss(np.zeros(20), W) == pytest.approx(0.5 * np.sum(plrf.h * plrf.b**2))
    steps, losses = plrf.sgd(20, 400, lr=0.2, batch=4)
    assert losses[-1] < 0.7 * losses[0]


def test_plrf_gd_loss_equals_explicit_gradient_descent():
    plrf = PLRF(0.6, 0.52, v=300)
    W, theta, lr = plrf.features(40), np.zeros(40), 0.7
    explicit = []
    for _ in range(80):  # θ ← θ − lr·∇L, ∇L = W H (Wᵀθ − b)
        explicit.append(plrf.loss(theta, W))
        theta -= lr * (W * plrf.h) @ (W.T @ theta - plrf.b)
    closed = plrf.gd_loss(40, np.arange(80), lr=lr)
    np.testing.assert_allclose(closed, explicit, rtol=1e-10)
    assert closed[-1] < closed[0] and np.all(np.diff(closed) <= 1e-15)
    with pytest.raises(ValueError, match="lr = 5 diverges"):
        plrf.gd_loss(40, np.arange(3), lr=5.0)
    with pytest.raises(ValueError, match="steps must be"):
        plrf.gd_loss(40, np.array([-1.0]))


def test_plrf_experiment_finds_a_frontier():
    res = plrf_experiment(Setup(plrf_dims=(25, 50, 100, 200), plrf_v=1000))
    assert 0.5 < res["horizon"].gamma < 2.0
    assert set(res["delta"]) == {0.8, 1.0, 1.2} and all(np.isfinite(v) and v > 0 for v in res["delta"].values())


def test_annealing_law_recovers_its_own_curves():
    T = 2000
    law = AnnealingLaw()
    law.params = np.array([1.0, 2.0, 0.4, 2e-4])
    law.peak = 1.0
    steps = np.arange(50, T + 1, 50)
    curves = []
    for name in ("const", "linear", "cosine"):
        lr = Schedule(name, T)(np.arange(T))
        curves.append((lr, steps, law.predict(lr, steps)))
    fitted = AnnealingLaw().fit(curves[:2])
    np.testing.assert_allclose(fitted.predict(curves[2][0], steps), curves[2][2], rtol=1e-6)


def test_train_family_forks_equal_separate_runs():
    """WSD branches (shorter and equal length) forked from a constant-LR trunk, and a cosine branch forked at step
    1, give exactly the frames of separate runs; only the unshared steps are trained twice."""
    from supercollapse.train import branch_point, train_family

    kw = dict(batch=16, eval_batches=2, estimator="per_example")
    trunk = RunSpec(16, 3, Schedule("const", 60), n_evals=12, **kw)
    branches = [
        RunSpec(16, 3, Schedule("linear", 60, decay_frac=0.2), n_evals=12, label="wsd60", **kw),
        RunSpec(16, 3, Schedule("linear", 40, decay_frac=0.2), n_evals=8, label="wsd40", **kw),
        RunSpec(16, 3, Schedule("cosine", 40), n_evals=8, label="cos40", **kw),
    ]
    assert [branch_point(trunk, b) for b in branches] == [49, 33, 1]  # s = 1 up to and at (1 − f)·T
    frames = train_family(trunk, branches, TASK, test_size=64)
    for spec, got in zip([trunk, *branches], frames):
        want = train_run(spec, TASK, test_size=64)
        assert got["noise_trace"].notna().all()
        pd_testing.assert_frame_equal(got, want, check_exact=True)
    with pytest.raises(ValueError, match="evaluates at other steps"):
        branch_point(trunk, RunSpec(16, 3, Schedule("linear", 40, decay_frac=0.2), n_evals=10, **kw))
    with pytest.raises(ValueError, match="must match its trunk in seed"):
        branch_point(trunk, RunSpec(16, 4, Schedule("linear", 60, decay_frac=0.2), n_evals=12, **kw))
