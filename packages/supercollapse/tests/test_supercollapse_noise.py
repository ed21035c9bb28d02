"""The gradient-noise tracker against explicit per-example gradients, and the noise model against the exact
expected loss of SGD on linear regression."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from supercollapse import GradNoiseTracker, NoiseModel, Schedule
from supercollapse.models import ResidualMLP
from supercollapse.noise import preconditioner
from supercollapse.train import mse_half


def _setup(dtype=torch.float64, seed=0, optimizer="adam"):
    torch.manual_seed(seed)
    model = ResidualMLP(6, 2, in_dim=3, mlp_ratio=2).to(dtype)
    with torch.no_grad():  # non-zero readout and fc2 so every parameter has a gradient
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    opt = (
        torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.95), eps=1e-8)
        if optimizer == "adam"
        else torch.optim.SGD(model.parameters(), lr=0.05)
    )
    g = torch.Generator().manual_seed(seed)
    for _ in range(3):
        x = torch.randn(16, 3, generator=g, dtype=dtype)
        opt.zero_grad()
        mse_half(model(x), x.sum(1, keepdim=True).sin()).backward()
        opt.step()
    return model, opt, g


def _batches(g, n, B, dtype=torch.float64):
    out = []
    for _ in range(n):
        x = torch.randn(B, 3, generator=g, dtype=dtype)
        out.append((x, x.sum(1, keepdim=True).sin() + 0.1 * torch.randn(B, 1, generator=g, dtype=dtype)))
    return out


def _hand_D(model, opt):
    """Adam's P^-1 = lr / (sqrt(v / (1 - beta2^t)) + eps), written out."""
    D = []
    for p in model.parameters():
        st = opt.state[p]
        v_hat = st["exp_avg_sq"] / (1 - 0.95 ** float(st["step"]))
        D.append(0.01 / (v_hat.sqrt() + 1e-8))
    return D


def _explicit_per_example_trace(model, D, batches):
    names = [n for n, _ in model.named_parameters()]
    params = {n: p.detach() for n, p in model.named_parameters()}
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])

    def one(ps, xi, yi):
        return mse_half(functional_call(model, ps, (xi[None],)), yi[None])

    g = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
    u = torch.cat([(D[i].sqrt() * g[n]).reshape(len(x), -1) for i, n in enumerate(names)], dim=1)
    return float(u.var(dim=0, unbiased=True).sum()) / batches[0][0].shape[0]


def test_preconditioner_matches_hand_computation():
    model, opt, _ = _setup()
    for got, want in zip(preconditioner(opt, list(model.parameters())), _hand_D(model, opt)):
        torch.testing.assert_close(got, want, rtol=1e-14, atol=0)
    model, sgd, _ = _setup(optimizer="sgd")
    assert all(torch.all(d == 0.05) for d in preconditioner(sgd, list(model.parameters())))


def test_per_example_gemm_and_vmap_equal_explicit_covariance():
    model, opt, g = _setup()
    batches = _batches(g, 4, 8)
    want = _explicit_per_example_trace(model, _hand_D(model, opt), batches)
    fast = GradNoiseTracker(model, opt, mse_half, estimator="per_example")
    assert fast._linear_only
    assert fast.trace(batches) == pytest.approx(want, rel=1e-8)
    fast._linear_only = False  # force the vmap(grad) path
    assert fast.trace(batches) == pytest.approx(want, rel=1e-8)


def test_batches_estimator_is_the_sample_covariance_of_batch_gradients():
    model, opt, g = _setup()
    batches = _batches(g, 5, 8)
    D = _hand_D(model, opt)
    us = []
    for x, y in batches:
        gs = torch.autograd.grad(mse_half(model(x), y), list(model.parameters()))
        us.append(torch.cat([(d.sqrt() * gi).reshape(-1) for d, gi in zip(D, gs)]))
    want = float(torch.stack(us).var(dim=0, unbiased=True).sum())
    got = GradNoiseTracker(model, opt, mse_half, estimator="batches").trace(batches)
    assert got == pytest.approx(want, rel=1e-8)


def test_batches_agrees_with_per_example_over_b_statistically():
    model, opt, g = _setup()
    batches = _batches(g, 400, 8)
    pe = GradNoiseTracker(model, opt, mse_half, estimator="per_example").trace(batches)
    bt = GradNoiseTracker(model, opt, mse_half, estimator="batches").trace(batches)
    assert bt == pytest.approx(pe, rel=0.05)


def test_identical_examples_give_zero_and_grads_are_restored():
    model, opt, g = _setup()
    x = torch.randn(1, 3, generator=g, dtype=torch.float64).repeat(8, 1)
    batches = [(x, torch.ones(8, 1, dtype=torch.float64))] * 3
    marker = [torch.full_like(p, 7.0) for p in model.parameters()]
    for p, m in zip(model.parameters(), marker):
        p.grad = m.clone()
    for est in ("per_example", "batches"):
        assert abs(GradNoiseTracker(model, opt, mse_half, estimator=est).trace(batches)) < 1e-14
    assert all(torch.equal(p.grad, m) for p, m in zip(model.parameters(), marker))


def test_tracker_works_under_inference_mode_and_checks_input():
    model, opt, g = _setup()
    with torch.inference_mode():
        batches = _batches(g, 3, 4)
        t = GradNoiseTracker(model, opt, mse_half, estimator="per_example").trace(batches)
    assert t > 0
    with pytest.raises(ValueError, match="estimator must be one of"):
        GradNoiseTracker(model, opt, mse_half, estimator="ghost")
    with pytest.raises(ValueError, match="take >= 1 optimizer step first"):
        fresh = ResidualMLP(4, 1).double()
        GradNoiseTracker(fresh, torch.optim.Adam(fresh.parameters()), mse_half).trace(batches)
    with pytest.raises(ValueError, match="same size"):
        GradNoiseTracker(model, opt, mse_half).trace([batches[0], (batches[1][0][:2], batches[1][1][:2])])
    with pytest.raises(TypeError, match="parameters are torch.float32"):
        ResidualMLP(4, 1)(torch.zeros(2, 8, dtype=torch.float64))


# -- the noise model on exact SGD dynamics -----------------------------------------------------------------------------
D_DIM, ETA, T, SIGMA2 = 20, 0.01, 6000, 1.0
H = np.linspace(0.2, 1.0, D_DIM)


def _expected_sgd(schedule: Schedule, label: str) -> pd.DataFrame:
    """Exact E[loss] of one-sample SGD on y = w*·x + ε, x ~ N(0, H): for diagonal H the diagonal of E[e eᵀ] obeys
    s' = (1 − ηh)² s + η² (h² s + (s·h) h + σ² h), and Tr Cov(u) = η_peak (Σ h² s + (s·h) Σh + σ² Σh)."""
    T = schedule.total_steps
    lrs = ETA * schedule(np.arange(T))
    s = np.ones(D_DIM)
    loss, tr = np.empty(T), np.empty(T)
    for k, eta in enumerate(lrs):
        s = (1 - eta * H) ** 2 * s + eta**2 * (H**2 * s + (s @ H) * H + SIGMA2 * H)
        loss[k] = 0.5 * s @ H + 0.5 * SIGMA2
        tr[k] = ETA * (np.sum(H**2 * s) + (s @ H) * H.sum() + SIGMA2 * H.sum())
    steps = np.arange(20, T + 1, 20)
    tau = ETA * np.cumsum(schedule(np.arange(T)))[steps - 1]
    return pd.DataFrame(
        {"run_id": label, "size": 1.0, "seed": 0, "schedule": label, "step": steps, "compute": steps * 1.0,
         "loss": loss[steps - 1], "lr": ETA * schedule(steps), "tau": tau,
         "noise_trace": tr[steps - 1]}
    )  # fmt: skip


def test_noise_model_on_exact_sgd_dynamics():
    const = _expected_sgd(Schedule("const", T), "const")
    linear = _expected_sgd(Schedule("linear", T), "linear")
    cosine = _expected_sgd(Schedule("cosine", T), "cosine")
    model = NoiseModel().fit(const, linear)
    assert model.alpha == pytest.approx(0.25, rel=0.10)  # the small-η equilibrium: excess = ¼ η Tr Cov(g)
    assert model.rmse(cosine, alpha=0.0) >= 5 * model.rmse(cosine)
    pred = model.predict(cosine)
    assert pred.shape == (len(cosine),)
    const_trace = NoiseModel(trace_from="const").fit(const, linear)
    assert const_trace.rmse(cosine) < const_trace.rmse(cosine, alpha=0.0)


def test_noise_model_bad_input():
    const = _expected_sgd(Schedule("const", 200), "const")
    linear = _expected_sgd(Schedule("linear", 200), "linear")
    with pytest.raises(ValueError, match="const_run must be a constant-LR run"):
        NoiseModel().fit(linear, linear)
    with pytest.raises(ValueError, match="no 'noise_trace' column"):
        NoiseModel().fit(const, linear.drop(columns="noise_trace"))
    with pytest.raises(ValueError, match="call fit"):
        NoiseModel(alpha=0.2).predict(linear)


class _Scaled(nn.Module):
    """A model with a parameter outside nn.Linear: the tracker takes the vmap path."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1).double()
        self.scale = nn.Parameter(torch.tensor(1.5, dtype=torch.float64))

    def forward(self, x):
        return self.scale * self.lin(x)


def test_generic_model_uses_vmap_path():
    torch.manual_seed(0)
    m = _Scaled()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    tr = GradNoiseTracker(m, opt, mse_half, estimator="per_example")
    assert not tr._linear_only
    g = torch.Generator().manual_seed(1)
    batches = _batches(g, 200, 4)
    assert tr.trace(batches) == pytest.approx(
        GradNoiseTracker(m, opt, mse_half, estimator="batches").trace(batches), rel=0.1
    )


# -- the loss's reduction ----------------------------------------------------------------------------------------------
def _sum_half(pred, y):
    return 0.5 * (pred - y).pow(2).sum()


@pytest.mark.parametrize("estimator", ["per_example", "batches"])
def test_sum_reduced_losses_give_the_mean_loss_trace(estimator):
    """A torch loss with reduction='sum', a partial with reduction='sum', an explicit reduction='sum' and a plain
    sum callable (detected from a batch and its halves) all give the mean loss's trace."""
    import functools

    model, opt, g = _setup()
    batches = _batches(g, 6, 8)
    want = GradNoiseTracker(model, opt, nn.MSELoss(), estimator=estimator).trace(batches)
    assert want == pytest.approx(
        2.0**2 * GradNoiseTracker(model, opt, mse_half, estimator=estimator).trace(batches), rel=1e-10
    )  # MSELoss is (f − y)², twice mse_half: the trace scales by 2²
    for loss_fn, kw in [
        (nn.MSELoss(reduction="sum"), {}),
        (functools.partial(nn.functional.mse_loss, reduction="sum"), {}),
        (lambda p, y: ((p - y) ** 2).sum(), {"reduction": "sum"}),
        (lambda p, y: ((p - y) ** 2).sum(), {}),
    ]:
        tracker = GradNoiseTracker(model, opt, loss_fn, estimator=estimator, **kw)
        assert tracker.trace(batches) == pytest.approx(want, rel=1e-6)
        assert tracker.reduction == "sum"
    detected = GradNoiseTracker(model, opt, mse_half, estimator=estimator)
    detected.trace(batches)
    assert detected.reduction == "mean"


def test_estimators_agree_on_a_sum_reduced_loss():
    """Within the documented 5 % on 400 batches of 8, as for the mean loss."""
    model, opt, g = _setup()
    batches = _batches(g, 400, 8)
    pe = GradNoiseTracker(model, opt, nn.MSELoss(reduction="sum"), estimator="per_example").trace(batches)
    bt = GradNoiseTracker(model, opt, _sum_half, estimator="batches").trace(batches)
    assert bt == pytest.approx(pe / 4.0, rel=0.05)  # _sum_half = ½ (f − y)²: a quarter of the MSELoss trace
    assert pe == pytest.approx(
        GradNoiseTracker(model, opt, nn.MSELoss(), estimator="per_example").trace(batches), rel=1e-6
    )


def test_reduction_and_dtype_bad_input():
    model, opt, g = _setup()
    batches = _batches(g, 3, 8)
    with pytest.raises(ValueError, match="loss_fn.reduction must be 'mean' or 'sum'.*'none'"):
        GradNoiseTracker(model, opt, nn.MSELoss(reduction="none"))
    with pytest.raises(ValueError, match="reduction='mean' contradicts loss_fn.reduction='sum'"):
        GradNoiseTracker(model, opt, nn.MSELoss(reduction="sum"), reduction="mean")
    with pytest.raises(ValueError, match="reduction must be one of"):
        GradNoiseTracker(model, opt, mse_half, reduction="max")
    with pytest.raises(ValueError, match="matches neither of the mean"):
        GradNoiseTracker(model, opt, lambda p, y: ((p - y) ** 2).max()).trace(batches)
    with pytest.raises(ValueError, match="batches of >= 2 examples, got 1"):
        GradNoiseTracker(model, opt, _sum_half, estimator="per_example").trace([(b[0][:1], b[1][:1]) for b in batches])
    # one example needs no detection when the reduction is given
    assert GradNoiseTracker(model, opt, _sum_half, reduction="sum").trace([(b[0][:1], b[1][:1]) for b in batches]) > 0
    f32 = ResidualMLP(4, 1, in_dim=3)
    adam = torch.optim.Adam(f32.parameters())
    mse_half(f32(torch.randn(4, 3)), torch.zeros(4, 1)).backward()
    adam.step()
    with pytest.raises(TypeError, match=r"inputs are torch.float64 but the model's parameters are torch.float32"):
        GradNoiseTracker(f32, adam, mse_half).trace(batches)


class _TiedMLP(nn.Module):
    """A linear-only model whose hidden layer is applied twice (tied weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.out = nn.Linear(3, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.fc(torch.tanh(self.fc(x)))))


class _RowsPerExample(nn.Module):
    """A linear-only model that feeds its first layer two rows per example."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.fc(x[:, :4].reshape(-1, 2))).reshape(x.shape[0], 4))


@pytest.mark.parametrize("make", [_TiedMLP, _RowsPerExample])
def test_per_example_reused_or_reshaped_linear_layers_match_explicit_covariance(make):
    torch.manual_seed(0)
    model = make().double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    batches = [(x if make is _TiedMLP else x.repeat(1, 2), y) for x, y in _batches(g, 4, 8)]
    D = [torch.full_like(p, 0.05) for p in model.parameters()]
    want = _explicit_per_example_trace(model, D, batches)
    tracker = GradNoiseTracker(model, opt, mse_half, estimator="per_example")
    assert tracker._linear_only  # the GEMM path is tried first and must notice it does not apply
    assert tracker.trace(batches) == pytest.approx(want, rel=1e-8)


def test_trace_refuses_degenerate_batches():
    model, opt, g = _setup()
    (x, y), (x2, y2) = _batches(g, 2, 8)
    pe = GradNoiseTracker(model, opt, mse_half, estimator="per_example", reduction="mean")
    with pytest.raises(ValueError, match="needs >= 2 examples"):
        pe.trace([(x[:1], y[:1])])
    with pytest.raises(ValueError, match=r"eval_batches\[0\] inputs must not be empty"):
        pe.trace([(x[:0], y[:0]), (x2[:0], y2[:0])])
    with pytest.raises(ValueError, match=r"eval_batches\[1\] inputs must be finite"):
        pe.trace([(x, y), (x2 * float("nan"), y2)])
    with pytest.raises(ValueError, match=r"eval_batches\[0\] targets must be finite"):
        GradNoiseTracker(model, opt, mse_half).trace([(x, y * float("inf")), (x2, y2)])
    with pytest.raises(ValueError, match=r"one row per example.*\(8, 3\).*\(4, 1\)"):
        GradNoiseTracker(model, opt, mse_half).trace([(x, y[:4]), (x2, y2[:4])])


def test_trace_leaves_batchnorm_statistics_alone_and_per_example_refuses_train_mode_batchnorm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1)).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = _batches(torch.Generator().manual_seed(2), 6, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    first = GradNoiseTracker(model, opt, mse_half).trace(batches)  # train mode: each forward updates running stats
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert GradNoiseTracker(model, opt, mse_half).trace(batches) == first  # the same model measures the same
    with pytest.raises(ValueError, match="BatchNorm1d in training mode.*model.eval\\(\\)"):
        GradNoiseTracker(model, opt, mse_half, estimator="per_example").trace(batches)  # was a torch.func error
    model.eval()
    pe = GradNoiseTracker(model, opt, mse_half, estimator="per_example").trace(batches)
    D = [torch.full_like(p, 0.05) for p in model.parameters()]
    assert pe == pytest.approx(_explicit_per_example_trace(model, D, batches), rel=1e-8)
    assert model.training is False


def test_amsgrad_preconditioner_uses_the_running_maximum():
    torch.manual_seed(0)
    model = nn.Linear(4, 1).double()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.9), amsgrad=True)
    for i in range(30):  # one large gradient, then small ones: the maximum stays far above the decayed moment
        opt.zero_grad()
        (model(torch.randn(8, 4, dtype=torch.float64) * (10.0 if i == 0 else 0.1)) ** 2).mean().backward()
        opt.step()
    for p, d in zip(model.parameters(), preconditioner(opt, list(model.parameters()))):
        st = opt.state[p]
        want = 0.01 / (st["max_exp_avg_sq"].sqrt() / (1 - 0.9 ** float(st["step"])) ** 0.5 + 1e-8)  # torch's denom
        torch.testing.assert_close(d, want, rtol=1e-12, atol=0)


def test_per_example_vmap_path_runs_with_train_mode_dropout():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.Dropout(0.2), nn.Linear(8, 1)).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = _batches(torch.Generator().manual_seed(3), 8, 8)
    tracker = GradNoiseTracker(model, opt, mse_half, estimator="per_example")
    assert not tracker._linear_only
    got = tracker.trace(batches)  # was torch's "vmap: called random operation while in randomness error mode"
    assert np.isfinite(got) and got > 0
    model.eval()  # without dropout the same path is exact
    D = [torch.full_like(p, 0.05) for p in model.parameters()]
    assert tracker.trace(batches) == pytest.approx(_explicit_per_example_trace(model, D, batches), rel=1e-8)
