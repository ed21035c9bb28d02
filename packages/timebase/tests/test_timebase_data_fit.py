"""Data protocol, closed forms, training protocol and baselines on ETTh1 (tests needing the data skip without it)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from timebase import TimeBase, TimeBaseConfig, evaluate, fit, fit_timebase_least_squares, predict, training_preset
from timebase import data as tbdata
from timebase.baselines import DLinear, LastValue, SeasonalNaive, moving_average
from timebase.least_squares import sliding_moments, window_moments
from timebase.trainer import Adam, lr_factor


def assert_close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Like torch.testing.assert_close (which costs seconds of lazy imports on first use)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    err = float((a.detach() - b.detach()).abs().max()) if a.numel() else 0.0
    tol = atol + rtol * float(b.detach().abs().max()) if b.numel() else atol
    assert err <= tol, f"max abs error {err:.3g} > {tol:.3g}"


@pytest.fixture(scope="module")
def etth1(etth1_data: None) -> tbdata.Splits:
    return tbdata.ett("ETTh1", seq_len=720, pred_len=96)


def _periodic(length: int, p: int = 24, channels: int = 2) -> np.ndarray:
    t = np.arange(length)[:, None]
    k = np.arange(1, channels + 1)[None]
    return np.sin(2 * np.pi * t / p + k) + 0.3 * np.cos(4 * np.pi * t / p * k) + 0.5 * k


def test_ett_split_window_counts(etth1: tbdata.Splits) -> None:
    assert (len(etth1.train), len(etth1.val), len(etth1.test)) == (7825, 2785, 2785)
    assert etth1.n_channels == 7
    x, y = etth1.val[0]
    assert x.shape == (720, 7) and y.shape == (96, 7)
    raw = etth1.scaler.inverse_transform(y.double().numpy())
    full = tbdata.load_ett("ETTh1")
    np.testing.assert_allclose(raw[0], full[8640], rtol=1e-5, atol=1e-4)  # first val target follows the border
    xs, ys = etth1.train.take(torch.tensor([0, 5]))
    assert_close(xs[1], etth1.train[5][0])
    assert_close(ys[1], etth1.train[5][1])


def test_scaler_uses_training_rows_only() -> None:
    values = np.random.default_rng(0).normal(size=(1000, 3))
    a = tbdata.split_series(values, 48, 24)
    changed = values.copy()
    changed[-5:] += 100.0  # a test row
    b = tbdata.split_series(changed, 48, 24)
    np.testing.assert_array_equal(a.scaler.mean, b.scaler.mean)
    np.testing.assert_array_equal(a.scaler.scale, b.scaler.scale)
    np.testing.assert_allclose(a.scaler.mean, values[:700].mean(axis=0))
    np.testing.assert_allclose(a.scaler.scale, values[:700].std(axis=0))  # population std
    # 7:1:2 with val/test starting seq_len rows early
    assert (len(a.train), len(a.val), len(a.test)) == (700 - 72 + 1, 100 + 48 - 72 + 1, 200 + 48 - 72 + 1)


def test_last_partial_batch_is_kept() -> None:
    ds = tbdata.WindowDataset(np.zeros((100, 2)), 10, 5)  # 86 windows
    sizes = [len(x) for x, _ in ds.batches(32, shuffle=True, generator=torch.Generator().manual_seed(0))]
    assert sizes == [32, 32, 22] and ds.num_batches(32) == 3
    assert [len(x) for x, _ in ds.batches(32, drop_last=True)] == [32, 32]


def test_bad_series_raise() -> None:
    with pytest.raises(ValueError, match="shorter than seq_len \\+ pred_len"):
        tbdata.WindowDataset(np.zeros((100, 2)), 96, 24)
    bad = np.zeros((500, 2))
    bad[10, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        tbdata.split_series(bad, 48, 24)
    with pytest.raises(ValueError, match="batch_size"):
        next(tbdata.WindowDataset(np.zeros((100, 2)), 10, 5).batches(0))
    with pytest.raises(ValueError, match="ETTh1"):
        tbdata.ett("ETTm9")


def test_dominant_period() -> None:
    assert tbdata.dominant_period(_periodic(24 * 50)) == 24
    t = np.arange(4000)[:, None]
    assert tbdata.dominant_period(np.sin(2 * np.pi * t / 4) + 0.1 * np.sin(2 * np.pi * t / 100)) == 4


def test_sliding_moments_equal_stacked_windows() -> None:
    series = np.random.default_rng(1).normal(size=(300, 3))
    ds = tbdata.WindowDataset(series, 40, 12)
    g1, m1, n1 = sliding_moments(ds.series, 52)
    g2, m2, n2 = window_moments(ds)
    assert n1 == n2 == (300 - 52 + 1) * 3
    np.testing.assert_allclose(g1, g2, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m1, m2, rtol=1e-6, atol=1e-6)


def test_dlinear_closed_form_is_the_least_squares_optimum() -> None:
    """The closed form matches numpy's lstsq on the stacked rows and no gradient step from it helps."""
    series = np.cumsum(np.random.default_rng(2).normal(size=(400, 2)), axis=0) * 0.1 + _periodic(400)
    ds = tbdata.WindowDataset(series, 48, 12)
    model = DLinear(48, 12).double().fit_least_squares(ds)
    x, y = ds.arrays()
    rows_x = x.transpose(1, 2).reshape(-1, 48).double().numpy()
    rows_y = y.transpose(1, 2).reshape(-1, 12).double().numpy()
    design = np.hstack([rows_x, np.ones((len(rows_x), 1))])
    coef = np.linalg.lstsq(design, rows_y, rcond=None)[0]
    ref = torch.as_tensor((design @ coef).reshape(len(x), 2, 12)).transpose(1, 2)
    assert_close(model(x.double()), ref, rtol=1e-6, atol=1e-6)
    loss = torch.nn.functional.mse_loss(model(x.double()), y.double())
    loss.backward()
    assert all(float(p.grad.abs().max()) < 1e-7 for p in model.parameters())


def test_dlinear_moving_average_and_gradient_training() -> None:
    x = torch.arange(10.0).reshape(1, 10, 1)
    trend = moving_average(x, 5)
    assert trend.shape == x.shape
    assert float(trend[0, 0, 0]) == pytest.approx((0 + 0 + 0 + 1 + 2) / 5)
    assert float(trend[0, 5, 0]) == pytest.approx(5.0)
    splits = tbdata.split_series(_periodic(1200), 96, 24)
    model = DLinear(96, 24)
    before = evaluate(model, splits.val)["mse"]
    result = fit(model, splits, epochs=3, lr=0.005, batch_size=32, progress=False)
    assert result.best_val_mse < 0.1 * before


def test_timebase_closed_form_matches_reference_values(etth1: tbdata.Splits) -> None:
    """Spec 7.6 / table of section 5: test MSE 0.3723, train MSE 0.3491 (ETTh1, T=720, H=96, P=24)."""
    model = fit_timebase_least_squares(TimeBase(TimeBaseConfig(720, 96)), etth1.train)
    w1, w2 = model.basis_extract.weight, model.segment_forecast.weight
    assert torch.all(w1[4:] == 0) and torch.equal(w2[:, :4], torch.eye(4)) and torch.all(w2[:, 4:] == 0)
    test = evaluate(model, etth1.test)
    assert test["mse"] == pytest.approx(0.3723, abs=5e-4)
    assert test["mae"] == pytest.approx(0.3885, abs=5e-4)
    assert evaluate(model, etth1.train)["mse"] == pytest.approx(0.3491, abs=5e-4)


def test_dlinear_closed_form_and_seasonal_naive_match_reference_values(etth1: tbdata.Splits) -> None:
    dl = DLinear(720, 96).fit_least_squares(etth1.train)
    test = evaluate(dl, etth1.test)
    assert test["mse"] == pytest.approx(0.3757, abs=5e-4) and test["mae"] == pytest.approx(0.3986, abs=5e-4)
    assert evaluate(SeasonalNaive(24, 96), etth1.test)["mse"] == pytest.approx(0.5122, abs=5e-4)
    assert evaluate(LastValue(96), etth1.test)["mse"] == pytest.approx(1.2944, abs=5e-4)


def test_reduced_rank_closed_form_beats_random_and_respects_rank() -> None:
    splits = tbdata.split_series(
        _periodic(2000, channels=3) + np.random.default_rng(3).normal(size=(2000, 3)) * 0.1, 96, 48
    )
    full = fit_timebase_least_squares(TimeBase(TimeBaseConfig(96, 48, basis_num=2)), splits.train)
    low = fit_timebase_least_squares(TimeBase(TimeBaseConfig(96, 48, basis_num=1)), splits.train)
    rand = TimeBase(TimeBaseConfig(96, 48, basis_num=1))
    e_full, e_low, e_rand = (evaluate(m, splits.train)["mse"] for m in (full, low, rand))
    assert e_full <= e_low + 1e-9 < e_rand
    assert torch.linalg.matrix_rank(low.segment_forecast.weight @ low.basis_extract.weight) == 1


def test_lr_schedule_matches_official_logs() -> None:
    lrs = [0.1 * lr_factor(e) for e in range(1, 7)]
    assert lrs == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.08, 0.064])


def test_learns_noiseless_periodic_series_and_is_repeatable() -> None:
    """Spec 7.9 (noiseless sum of P-periodic sinusoids: train MSE < 1e-4) and 7.11 (same seed, same run)."""
    splits = tbdata.split_series(_periodic(1500), 100, 30)  # T = 100: padded, aligned
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TimeBase(TimeBaseConfig(100, 30, basis_num=3, orth_weight=0.01))
        res = fit(model, splits, epochs=12, lr=0.02, batch_size=64, seed=7, progress=False)
        runs.append((model, res))
    assert evaluate(runs[0][0], splits.train)["mse"] < 1e-4
    assert runs[0][1].history == runs[1][1].history
    for a, b in zip(runs[0][0].parameters(), runs[1][0].parameters(), strict=True):
        assert torch.equal(a, b)
    preds = predict(runs[0][0], splits.test)
    assert preds.shape == (len(splits.test), 30, 2)


def test_trained_timebase_beats_seasonal_naive_on_etth1(etth1: tbdata.Splits) -> None:
    """Two epochs of the official ETTh1 H=96 preset already beat the 24 h seasonal-naive forecast (0.512)."""
    torch.manual_seed(0)
    model = TimeBase(TimeBaseConfig.preset("ETTh1", 96))
    kw = training_preset("ETTh1", 96) | {"epochs": 2}
    result = fit(model, etth1, seed=0, progress=False, **kw)
    assert result.test is not None
    assert result.test["mse"] < 0.45  # margin >= 0.06 under seasonal naive
    assert math.isfinite(result.best_val_mse) and result.best_epoch in (1, 2)


@pytest.mark.slow
def test_full_protocol_three_seeds_match_dlinear_closed_form(etth1: tbdata.Splits) -> None:
    dl = evaluate(DLinear(720, 96).fit_least_squares(etth1.train), etth1.test)["mse"]
    mses = []
    for seed in range(3):
        torch.manual_seed(seed)
        model = TimeBase(TimeBaseConfig.preset("ETTh1", 96))
        mses.append(fit(model, etth1, seed=seed, progress=False, **training_preset("ETTh1", 96)).test["mse"])
    assert np.mean(mses) <= 1.05 * dl


def test_fit_bad_arguments(etth1: tbdata.Splits) -> None:
    model = TimeBase(TimeBaseConfig(720, 96))
    with pytest.raises(ValueError, match="lr"):
        fit(model, etth1, lr=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        fit(model, etth1, batch_size=0)
    with pytest.raises(ValueError, match="splits"):
        fit(model, etth1.train)
    with pytest.raises(ValueError, match="multiple of period_len"):
        fit_timebase_least_squares(
            TimeBase(TimeBaseConfig(720, 100)), tbdata.WindowDataset(np.zeros((900, 1)), 720, 100)
        )


def test_presets() -> None:
    cfg = TimeBaseConfig.preset("ETTh2", 192)
    assert (cfg.basis_num, cfg.orth_weight) == (4, 0.08)
    assert training_preset("ETTh2", 192)["batch_size"] == 512
    w = TimeBaseConfig.preset("Weather", 96)
    assert w.period_len == 4 and w.individual and w.n_channels == 21
    with pytest.raises(ValueError, match="pred_len=100"):
        TimeBaseConfig.preset("ETTh1", 100)


def test_builtin_adam_matches_closed_form() -> None:
    """Two steps of the built-in Adam on fixed gradients equal the textbook update (bias-corrected moments)."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    opt = Adam([p], lr=0.1)
    grads = [torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64), torch.tensor([-0.1, 0.5, 2.0], dtype=torch.float64)]
    ref = p.detach().clone()
    m = torch.zeros(3, dtype=torch.float64)
    v = torch.zeros(3, dtype=torch.float64)
    for t, g in enumerate(grads, start=1):
        p.grad = g.clone()
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        ref = ref - 0.1 * (m / (1 - 0.9**t)) / ((v / (1 - 0.999**t)).sqrt() + 1e-8)
    assert_close(p.detach(), ref, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_builtin_adam_matches_torch_adam() -> None:
    splits = tbdata.split_series(_periodic(800), 96, 24)
    states = []
    for opt in ("adam", "torch"):
        torch.manual_seed(0)
        model = TimeBase(TimeBaseConfig(96, 24, basis_num=3, orth_weight=0.1))
        fit(model, splits, epochs=2, lr=0.05, batch_size=32, seed=1, progress=False, optimizer=opt)
        states.append(model.state_dict())
    for k in states[0]:
        assert_close(states[0][k], states[1][k], rtol=1e-5, atol=1e-6)


def test_fit_checks_the_model_against_the_splits_and_its_arguments() -> None:
    splits = tbdata.split_series(_periodic(1500), 100, 30)
    with pytest.raises(ValueError, match=r"forecasts H=24 steps from T=100 but the splits hold windows of T=100, H=30"):
        fit(TimeBase(TimeBaseConfig(100, 24, basis_num=3)), splits, epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"forecasts H=30 steps from T=96"):
        fit(DLinear(96, 30), splits, epochs=1, progress=False)
    with pytest.raises(ValueError, match="decay_start must be a non-negative int, got -3"):
        fit(TimeBase(TimeBaseConfig(100, 30, basis_num=3)), splits, decay_start=-3, progress=False)


def test_fit_warns_when_the_run_diverges() -> None:
    splits = tbdata.split_series(_periodic(1500), 100, 30)
    torch.manual_seed(0)
    with pytest.warns(RuntimeWarning, match="fit diverged"):
        res = fit(TimeBase(TimeBaseConfig(100, 30, basis_num=3)), splits, epochs=2, lr=1e6, progress=False)
    assert res.test is not None and not res.test["mse"] < 1e3


def test_fit_predict_and_evaluate_a_float64_model() -> None:
    """The windows are float32; fit / predict / evaluate cast them to the model's dtype (a float64 model used to be
    refused by its own input check)."""
    splits = tbdata.split_series(_periodic(600), 100, 30)
    torch.manual_seed(0)
    m32 = TimeBase(TimeBaseConfig(100, 30, basis_num=3))
    m64 = TimeBase(TimeBaseConfig(100, 30, basis_num=3)).double()
    m64.load_state_dict({k: v.double() for k, v in m32.state_dict().items()})
    res = fit(m64, splits, epochs=2, lr=0.02, seed=7, progress=False)
    assert next(m64.parameters()).dtype == torch.float64 and math.isfinite(res.best_val_mse)
    fit(m32, splits, epochs=2, lr=0.02, seed=7, progress=False)
    p64, p32 = predict(m64, splits.test), predict(m32, splits.test)
    assert p64.dtype == torch.float64 and (p64 - p32.double()).abs().max() < 1e-3  # the same run in two precisions
    x, _ = splits.test.arrays()
    assert predict(m64, x[:5]).dtype == torch.float64
    assert evaluate(m64, splits.test)["mse"] == pytest.approx(evaluate(m32, splits.test)["mse"], rel=1e-3)
