"""Hostile-but-realistic use: numpy scalars, unseeded fits, degenerate series and wrong arguments that used to crash
deep in torch/numpy or answer silently."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from timebase import (
    MultiSeasonalTimeBase,
    PatchTST,
    TimeBase,
    TimeBaseConfig,
    fit,
    fit_timebase_least_squares,
    pad_segments,
    predict,
)
from timebase import data as tbdata
from timebase.baselines import DLinear, SeasonalNaive


def _series(length: int = 1200, channels: int = 2, seed: int = 0) -> np.ndarray:
    t = np.arange(length)[:, None]
    rng = np.random.default_rng(seed)
    k = np.arange(1, channels + 1)[None]
    return np.sin(2 * np.pi * t / 24 + k) + 0.2 * rng.standard_normal((length, channels))


@pytest.fixture(scope="module")
def splits() -> tbdata.Splits:
    return tbdata.split_series(_series(), seq_len=48, pred_len=24)


def _model() -> TimeBase:
    torch.manual_seed(0)
    return TimeBase(TimeBaseConfig(seq_len=48, pred_len=24, basis_num=2))


def _fit(splits: tbdata.Splits, **kw) -> list[float]:
    return [h["train_loss"] for h in fit(_model(), splits, epochs=2, lr=0.05, batch_size=32, **kw).history]


def test_fit_takes_a_numpy_seed(splits: tbdata.Splits) -> None:
    assert _fit(splits, seed=np.int64(3)) == _fit(splits, seed=3)  # was "TypeError: an integer is required"
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        _fit(splits, seed=1.5)


def test_unseeded_fit_shuffles_from_torch_global_generator(splits: tbdata.Splits) -> None:
    # seed=None: as a shuffling DataLoader, the order follows torch.manual_seed (it used to be one fixed order)
    runs = []
    for global_seed in (1, 2, 1):
        model = _model()  # the same initial weights every time
        torch.manual_seed(global_seed)
        runs.append([h["train_loss"] for h in fit(model, splits, epochs=2, lr=0.05, batch_size=32, seed=None).history])
    assert runs[0] == runs[2]
    assert runs[0] != runs[1]


def test_training_functions_refuse_bad_arguments(splits: tbdata.Splits) -> None:
    model = _model()
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        predict(model, torch.randn(3, 48, 2), batch_size=0)  # was "range() arg 3 must not be zero"
    with pytest.raises(ValueError, match="no trainable parameters"):
        fit(SeasonalNaive(24, 24), splits, epochs=1)  # was "element 0 of tensors does not require grad"
    with pytest.raises(ValueError, match="ridge must be a float >= 0.0 and finite, got nan"):
        fit_timebase_least_squares(model, splits.train, ridge=float("nan"))  # was a NaN model
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        fit_timebase_least_squares(model, splits.train, chunk=0)
    with pytest.raises(ValueError, match="model must be a TimeBase"):
        fit_timebase_least_squares(DLinear(48, 24), splits.train)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ridge must be a float >= 0.0 and finite"):
        DLinear(48, 24).fit_least_squares(splits.train, ridge=float("nan"))
    with pytest.raises(ValueError, match="dataset has 2 channels, this individual DLinear has n_channels=3"):
        DLinear(48, 24, individual=True, n_channels=3).fit_least_squares(splits.train)  # fitted 2 of 3 silently
    with pytest.raises(ValueError, match="individual must be a bool"):
        DLinear(48, 24, individual="no", n_channels=2)  # type: ignore[arg-type]  # was taken as True
    with pytest.raises(ValueError, match="pred_len must be a positive int, got 0"):
        SeasonalNaive(24)(torch.randn(2, 48, 2), pred_len=0)  # was an empty forecast


def test_dominant_period_on_degenerate_series() -> None:
    t = np.arange(2000)
    s = np.sin(2 * np.pi * t / 4) + 0.1 * np.sin(2 * np.pi * t / 100)
    assert tbdata.dominant_period(s) == 4 and tbdata.dominant_period(s, k=np.int64(2)) == 100
    assert tbdata.dominant_period(s, max_period=50) == 4 and tbdata.dominant_period(s + 0.0, max_period=50.0) == 4
    with pytest.raises(ValueError, match="a constant series has none"):
        tbdata.dominant_period(np.ones((200, 2)))  # the three below were OverflowError: cannot convert inf
    with pytest.raises(ValueError, match="NaN or inf"):
        tbdata.dominant_period(np.where(t == 5, np.nan, s))
    with pytest.raises(ValueError, match="max_period must be a float >= 2.0, got 0"):
        tbdata.dominant_period(s, max_period=0)


def test_scaler_checks_channels_and_nan() -> None:
    rows = _series(300, 3)
    sc = tbdata.StandardScaler().fit(rows)
    y = torch.randn(4, 24, 3, dtype=torch.float64)
    assert torch.allclose(sc.inverse_transform(y), y * torch.tensor(rows.std(0)) + torch.tensor(rows.mean(0)))
    for bad in (np.ones((5, 2)), np.ones(5), torch.ones(2, 5, 4)):
        with pytest.raises(ValueError, match="the 3 channels the scaler was fitted on"):
            (sc.inverse_transform if isinstance(bad, torch.Tensor) else sc.transform)(bad)  # were broadcast errors
    with pytest.raises(ValueError, match="NaN or inf"):
        tbdata.StandardScaler().fit(np.where(np.arange(300)[:, None] == 7, np.nan, rows))  # was a NaN mean


def test_split_series_checks_its_arguments() -> None:
    s = _series(600)
    ref = tbdata.split_series(s, 48, 24, borders=(400, 500, 600))
    alt = tbdata.split_series(s, np.int64(48), np.int64(24), borders=np.array([400, 500, 600]))
    assert torch.equal(ref.test.series, alt.test.series)
    with pytest.raises(ValueError, match=r"borders\[0\] must be an int"):
        tbdata.split_series(s, 48, 24, borders=(400.0, 500.0, 600.0))  # was a slicing TypeError
    with pytest.raises(ValueError, match="scale must be a bool"):
        tbdata.split_series(s, 48, 24, scale="no")  # type: ignore[arg-type]  # was taken as True
    with pytest.raises(ValueError, match="values must be a numeric"):
        tbdata.split_series(np.array([["a", "b"]] * 300), 48, 24)


def test_multi_seasonal_takes_arrays_and_refuses_a_dict() -> None:
    cfg = TimeBaseConfig(seq_len=336, pred_len=48)
    torch.manual_seed(0)
    a = MultiSeasonalTimeBase(cfg, periods=(24, 168), basis_num=(6, 2))
    torch.manual_seed(0)
    b = MultiSeasonalTimeBase(cfg, periods=np.array([24, 168]), basis_num=np.array([6, 2]))  # was a numpy error
    x = torch.randn(2, 336, 3)
    assert b.periods == (24, 168) and torch.equal(a(x), b(x))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="config must be a TimeBaseConfig"):
        MultiSeasonalTimeBase({"seq_len": 336}, periods=(24,))  # type: ignore[arg-type]  # was an AttributeError


def test_pad_segments_and_patchtst_check_their_arguments() -> None:
    x = torch.arange(10.0)[None]
    assert torch.equal(pad_segments(x, np.int64(4)), pad_segments(x, 4))
    for bad in (0, 4.0):
        with pytest.raises(ValueError, match="period_len must be a positive int"):
            pad_segments(x, bad)  # type: ignore[arg-type]  # were ZeroDivisionError / a torch.narrow TypeError
    with pytest.raises(ValueError, match="revin must be a bool"):
        PatchTST(96, 24, 3, revin="no")  # type: ignore[arg-type]  # was taken as True
    with pytest.raises(ValueError, match="dropout must be a float in"):
        PatchTST(96, 24, 3, dropout=1.5)


class _ThreadSpy(torch.nn.Module):
    """Wraps a model and records torch's intra-op thread count at every forward."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.seen = inner, set()
        self.config = inner.config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.add(torch.get_num_threads())
        return self.inner(x)


@pytest.mark.parametrize("n_threads, expect", [(1, {1}), (np.int64(1), {1}), (None, {2})])
def test_fit_and_predict_run_on_n_threads_and_restore_the_callers(splits, n_threads, expect) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the caller's setting
    try:
        spy = _ThreadSpy(_model())
        fit(spy, splits, epochs=1, lr=0.05, batch_size=64, n_threads=n_threads)
        assert spy.seen == expect and torch.get_num_threads() == 2
        spy.seen.clear()
        predict(spy, splits.test, n_threads=n_threads)
        assert spy.seen == expect and torch.get_num_threads() == 2
        with pytest.raises(ValueError, match="n_threads"):
            fit(spy, splits, epochs=1, n_threads=0)
        with pytest.raises(ValueError, match="n_threads"):
            predict(spy, splits.test, n_threads=1.5)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
