"""TimeBase module: exact complexity, shapes, padding, equivariance, affinity, individual mode, the regulariser,
save/load and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from timebase import MultiSeasonalTimeBase, TimeBase, TimeBaseConfig, orthogonal_loss, pad_segments
from timebase.baselines import DLinear


def assert_close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Like torch.testing.assert_close (which costs seconds of lazy imports on first use)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    err = float((a.detach() - b.detach()).abs().max()) if a.numel() else 0.0
    tol = atol + rtol * float(b.detach().abs().max()) if b.numel() else atol
    assert err <= tol, f"max abs error {err:.3g} > {tol:.3g}"


def official_forward(model: TimeBase, x: torch.Tensor) -> torch.Tensor:
    """A literal transcription of the official forward (official padding), shared weights."""
    cfg = model.config
    b, t, c = x.shape
    n, m, p = cfg.seg_num_x, cfg.seg_num_y, cfg.period_len
    x = x.permute(0, 2, 1)
    pad = n * p - t
    if pad:
        s = (n - 1) * p
        x = torch.cat([x, x[..., s - pad : s]], dim=-1)
    x = x.reshape(b, c, n, p).permute(0, 1, 3, 2).reshape(b * c, p, n)
    mu = x.mean(dim=-1, keepdim=True)
    x = x - mu
    w1, b1 = model.basis_extract.weight, model.basis_extract.bias
    w2, b2 = model.segment_forecast.weight, model.segment_forecast.bias
    basis = x @ w1.T + b1
    y = basis @ w2.T + b2 + mu
    y = y.reshape(b, c, p, m).permute(0, 1, 3, 2).reshape(b, c, m * p).permute(0, 2, 1)
    return y[:, : cfg.pred_len, :]


@pytest.mark.parametrize(
    ("horizon", "params", "macs"), [(96, 214, 34272), (192, 242, 38304), (336, 284, 44352), (720, 396, 60480)]
)
def test_parameter_and_mac_counts_match_the_paper(horizon: int, params: int, macs: int) -> None:
    cfg = TimeBaseConfig(seq_len=720, pred_len=horizon, period_len=24, basis_num=6)
    model = TimeBase(cfg)
    assert model.num_parameters() == cfg.num_parameters() == params
    assert model.macs(n_channels=7) == macs
    # Thm 3.1: (R/P) T + ((R+1)/P) H + R when P divides T and H
    assert params == 6 / 24 * 720 + 7 / 24 * horizon + 6


def test_complexity_electricity_nonmultiple_and_individual() -> None:
    assert TimeBaseConfig(720, 720).macs(321) == 2_773_440  # paper Table 3: 2.77M
    cfg = TimeBaseConfig(seq_len=100, pred_len=30, period_len=24, basis_num=3)
    assert (cfg.seg_num_x, cfg.seg_num_y, cfg.pad) == (5, 2, 20)
    assert TimeBase(cfg).num_parameters() == 26
    ind = TimeBase(cfg.replace(individual=True, n_channels=7))
    assert ind.num_parameters() == 26 * 7
    dl = DLinear(720, 96)
    assert dl.num_parameters() == 138_432 and DLinear(720, 720).num_parameters() == 1_038_240
    assert dl.macs(321) == 321 * 2 * 720 * 96


@pytest.mark.parametrize(("b", "t", "c", "h"), [(3, 720, 7, 96), (1, 100, 1, 30), (2, 48, 3, 5), (4, 50, 2, 24)])
def test_shapes(b: int, t: int, c: int, h: int) -> None:
    model = TimeBase(TimeBaseConfig(seq_len=t, pred_len=h, basis_num=2))
    y, aux = model(torch.randn(b, t, c), return_aux=True)
    assert y.shape == (b, h, c)
    assert aux.basis.shape == (b * c, 24, 2) and aux.orth_loss.ndim == 0


def test_padding_modes_on_unique_entries() -> None:
    t, p = 100, 24  # N = 5, pad = 20, r = 4
    x = torch.arange(t, dtype=torch.float32)[None]
    s, pad, r = 4 * p, 20, t % p
    off = pad_segments(x, p, "official")
    ali = pad_segments(x, p, "aligned")
    assert torch.equal(off, torch.cat([x, x[..., s - pad : s]], dim=-1))
    assert torch.equal(ali, torch.cat([x[..., r : r + pad], x], dim=-1))
    # aligned: every entry of a phase row has the same t mod P; and the grid ends at t = T - 1
    rows = ali.reshape(5, p).T
    assert bool(((rows - rows[:, :1]) % p == 0).all()) and ali[0, -1] == t - 1
    x96 = torch.randn(2, 3, 96)
    assert torch.equal(pad_segments(x96, p, "official"), x96) and torch.equal(pad_segments(x96, p, "aligned"), x96)


@pytest.mark.parametrize("t", [96, 100, 730])
def test_official_mode_equals_the_official_forward(t: int) -> None:
    torch.manual_seed(0)
    cfg = TimeBaseConfig(seq_len=t, pred_len=40, basis_num=3, pad_mode="official")
    model = TimeBase(cfg)
    x = torch.randn(4, t, 3)
    assert_close(model(x), official_forward(model, x), rtol=1e-5, atol=1e-5)
    aligned = TimeBase(cfg.replace(pad_mode="aligned"))
    aligned.load_state_dict(model.state_dict())
    if t % 24 == 0:
        assert_close(aligned(x), model(x), rtol=0, atol=1e-6)
    else:
        assert not torch.allclose(aligned(x), model(x), atol=1e-3)


@pytest.mark.parametrize("t", [96, 100])
def test_periodic_equivariance(t: int) -> None:
    torch.manual_seed(1)
    p, h = 24, 50
    model = TimeBase(TimeBaseConfig(seq_len=t, pred_len=h, basis_num=3))
    x = torch.randn(3, t, 2, dtype=torch.float64)
    model.double()
    g = torch.randn(p, 2, dtype=torch.float64)
    steps = torch.arange(t + h)
    s = g[steps % p]  # (T + H, C) P-periodic
    assert_close(model(x + s[:t]), model(x) + s[t:], rtol=0, atol=1e-5)
    # window-mean variant: equivariant to constant shifts only
    flat = TimeBase(TimeBaseConfig(seq_len=t, pred_len=h, basis_num=3, period_norm=False)).double()
    shift = torch.tensor([3.0, -1.5], dtype=torch.float64)
    assert_close(flat(x + shift), flat(x) + shift, rtol=0, atol=1e-5)


def test_pure_period_sinusoid_forecast_with_t100() -> None:
    """T = 100 is not a multiple of P = 24: with aligned padding a P-periodic series (zero biases: f(0) = 0) is
    forecast exactly; the official padding is phase-shifted by pad = 20 steps and is not."""
    t, h, p = 100, 30, 24
    steps = torch.arange(t + h, dtype=torch.float64)
    series = torch.sin(2 * math.pi * steps / p) + 0.5 * torch.cos(4 * math.pi * steps / p)
    x, target = series[:t].reshape(1, t, 1), series[t:].reshape(1, h, 1)
    errors = {}
    for mode in ("aligned", "official"):
        model = TimeBase(TimeBaseConfig(seq_len=t, pred_len=h, basis_num=3, pad_mode=mode)).double()
        with torch.no_grad():
            model.basis_extract.bias.zero_()
            model.segment_forecast.bias.zero_()
        errors[mode] = float(((model(x).detach() - target) ** 2).mean())
    assert errors["aligned"] < 1e-20
    assert errors["official"] > 0.1


def test_as_affine_reproduces_forward() -> None:
    torch.manual_seed(2)
    for cfg in (
        TimeBaseConfig(seq_len=100, pred_len=30, basis_num=3),
        TimeBaseConfig(seq_len=96, pred_len=48, basis_num=2, period_norm=False),
        TimeBaseConfig(seq_len=72, pred_len=20, basis_num=2, individual=True, n_channels=3),
    ):
        model = TimeBase(cfg)
        a, c = model.as_affine()
        x = torch.randn(5, cfg.seq_len, 3)
        if cfg.individual:
            y = torch.einsum("btc,cth->bhc", x, a) + c.T
        else:
            y = torch.einsum("btc,th->bhc", x, a) + c[:, None]
        assert_close(y, model(x), rtol=1e-5, atol=1e-5)


def test_individual_mode_tied_perturbed_and_loop() -> None:
    torch.manual_seed(3)
    cfg = TimeBaseConfig(seq_len=100, pred_len=30, basis_num=3)
    shared = TimeBase(cfg)
    ind = TimeBase(cfg.replace(individual=True, n_channels=4))
    with torch.no_grad():
        ind.basis_extract.weight.copy_(shared.basis_extract.weight.expand(4, -1, -1))
        ind.basis_extract.bias.copy_(shared.basis_extract.bias.expand(4, -1))
        ind.segment_forecast.weight.copy_(shared.segment_forecast.weight.expand(4, -1, -1))
        ind.segment_forecast.bias.copy_(shared.segment_forecast.bias.expand(4, -1))
    x = torch.randn(3, 100, 4)
    assert_close(ind(x), shared(x), rtol=1e-5, atol=1e-6)
    ind = TimeBase(cfg.replace(individual=True, n_channels=4))  # fresh, untied
    x2 = x.clone()
    x2[:, :, 2] += torch.randn(3, 100)
    diff = (ind(x2) - ind(x)).abs().amax(dim=(0, 1))
    assert diff[2] > 1e-3 and torch.all(diff[[0, 1, 3]] == 0)
    # the batched contraction equals the per-channel loop of the official code
    for j in range(4):
        single = TimeBase(cfg)
        with torch.no_grad():
            single.basis_extract.weight.copy_(ind.basis_extract.weight[j])
            single.basis_extract.bias.copy_(ind.basis_extract.bias[j])
            single.segment_forecast.weight.copy_(ind.segment_forecast.weight[j])
            single.segment_forecast.bias.copy_(ind.segment_forecast.bias[j])
        assert_close(ind(x)[:, :, j], single(x[:, :, j : j + 1])[:, :, 0], rtol=1e-5, atol=1e-6)


def test_orthogonal_loss() -> None:
    q, _ = torch.linalg.qr(torch.randn(24, 6, dtype=torch.float64))
    scaled = q * torch.tensor([1.0, 2, 3, 4, 5, 6], dtype=torch.float64)  # orthogonal, not orthonormal columns
    assert float(orthogonal_loss(scaled[None])) < 1e-12
    basis = torch.randn(5, 24, 6, dtype=torch.float64, requires_grad=True)
    fro = orthogonal_loss(basis)
    assert float(fro.detach()) > 0
    gram = basis[0].T @ basis[0]
    off = gram - torch.diag(torch.diag(gram))
    assert_close(orthogonal_loss(basis[:1]), torch.linalg.matrix_norm(off))
    assert_close(orthogonal_loss(basis[:1], "fro2"), orthogonal_loss(basis[:1], "fro") ** 2)
    assert torch.autograd.gradcheck(lambda b: orthogonal_loss(b, "fro"), (basis,))
    assert torch.autograd.gradcheck(lambda b: orthogonal_loss(b, "fro2"), (basis,))
    # zero off-diagonal part: finite (zero) gradient, not NaN
    z = scaled[None].clone().requires_grad_(True)
    orthogonal_loss(z).backward()
    assert torch.isfinite(z.grad).all()


def test_regulariser_enters_training_loss_only() -> None:
    torch.manual_seed(4)
    cfg = TimeBaseConfig(seq_len=96, pred_len=24, basis_num=3, orth_weight=0.5)
    model = TimeBase(cfg)
    x, y = torch.randn(8, 96, 2), torch.randn(8, 24, 2)
    loss, pred = model.training_loss(x, y)
    _, aux = model(x, return_aux=True)
    mse = torch.nn.functional.mse_loss(pred, y)
    assert_close(loss, mse + 0.5 * aux.orth_loss)
    assert_close(model(x), pred)


def test_save_load_round_trip(tmp_path) -> None:
    torch.manual_seed(5)
    cfg = TimeBaseConfig(seq_len=100, pred_len=30, basis_num=3, individual=True, n_channels=2, orth_norm="fro2")
    model = TimeBase(cfg)
    x = torch.randn(3, 100, 2)
    loaded = TimeBase.from_pretrained(model.save_pretrained(tmp_path / "m"))
    assert loaded.config == cfg
    assert torch.equal(loaded(x), model(x))
    fresh = TimeBase(cfg)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh(x), model(x))


def test_multi_seasonal_is_sum_of_components() -> None:
    torch.manual_seed(6)
    cfg = TimeBaseConfig(seq_len=336, pred_len=48, basis_num=2)
    ms = MultiSeasonalTimeBase(cfg, periods=(24, 168))
    x = torch.randn(2, 336, 3)
    y0 = ms.components[0](x)
    comp1 = ms.components[1]
    _, mu = comp1.segments(x)
    y1 = comp1(x) - mu.expand(-1, comp1.config.seg_num_y, -1, -1).reshape(2, -1, 3)[:, :48]
    assert_close(ms(x), y0 + y1)
    assert (
        ms.num_parameters() == TimeBase(cfg).num_parameters() + TimeBase(cfg.replace(period_len=168)).num_parameters()
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"period_len": 0}, "period_len"),
        ({"period_len": -24}, "period_len"),
        ({"basis_num": 0}, "basis_num"),
        ({"basis_num": 31}, "basis_num must be <= seg_num_x"),
        ({"seq_len": 20}, "seq_len must be >= period_len"),
        ({"pred_len": 0}, "pred_len"),
        ({"pred_len": -5}, "pred_len"),
        ({"individual": True}, "n_channels"),
        ({"pad_mode": "left"}, "pad_mode"),
        ({"orth_norm": "l1"}, "orth_norm"),
        ({"orth_weight": float("nan")}, "orth_weight"),
        ({"seq_len": 720.0}, "seq_len"),
    ],
)
def test_bad_config_raises(kwargs: dict, match: str) -> None:
    base = {"seq_len": 720, "pred_len": 96}
    with pytest.raises(ValueError, match=match):
        TimeBaseConfig(**{**base, **kwargs})


def test_bad_input_raises() -> None:
    model = TimeBase(TimeBaseConfig(seq_len=96, pred_len=24, basis_num=3))
    with pytest.raises(ValueError, match="seq_len=96"):
        model(torch.randn(2, 95, 3))
    with pytest.raises(ValueError, match="floating dtype"):
        model(torch.ones(2, 96, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \(batch, seq_len=96"):
        model(torch.randn(96, 3))
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = torch.randn(2, 96, 3)
        x[1, 50, 2] = bad
        with pytest.raises(ValueError, match="NaN or inf"):
            model(x)
    short_h = TimeBase(
        TimeBaseConfig(seq_len=96, pred_len=5, basis_num=3)
    )  # cropped phases: the input is checked directly
    x = torch.randn(1, 96, 1)
    x[0, 95, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        short_h(x)
    ind = TimeBase(TimeBaseConfig(seq_len=96, pred_len=24, basis_num=3, individual=True, n_channels=3))
    with pytest.raises(ValueError, match="n_channels=3"):
        ind(torch.randn(2, 96, 4))
    with pytest.raises(ValueError, match="torch.Tensor"):
        model([[1.0]])


def _counted_macs(model: torch.nn.Module, x: torch.Tensor) -> int:
    """MACs of one forward counted by torch's FlopCounterMode (2 FLOPs per multiply-accumulate)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops() // 2


@pytest.mark.parametrize(("horizon", "channels"), [(96, 7), (192, 7), (336, 7), (720, 7), (720, 321)])
def test_macs_formula_equals_the_counted_macs(horizon: int, channels: int) -> None:
    """The config's C*P*(N*R + R*M) against the multiply-accumulates torch actually runs for one sample."""
    from timebase.baselines import DLinear

    model = TimeBase(TimeBaseConfig(720, horizon))
    assert model.macs(channels) == _counted_macs(model, torch.randn(1, 720, channels))
    dl = DLinear(720, horizon)
    assert dl.macs(channels) == _counted_macs(dl, torch.randn(1, 720, channels))
    ms = MultiSeasonalTimeBase(TimeBaseConfig(720, horizon), periods=(24, 168))
    assert ms.macs(channels) == _counted_macs(ms, torch.randn(1, 720, channels))


def test_multi_seasonal_default_periods_at_t720_clip_basis_num() -> None:
    """P = 168 at T = 720 gives N = 5 segments, fewer than the default R = 6: R is clipped per component."""
    ms = MultiSeasonalTimeBase(TimeBaseConfig(720, 96), periods=(24, 168))
    assert ms.basis_nums == (6, 5)
    assert [c.config.basis_num for c in ms.components] == [6, 5]
    assert ms(torch.randn(2, 720, 7)).shape == (2, 96, 7)
    assert MultiSeasonalTimeBase(TimeBaseConfig(720, 96), periods=(24, 168), basis_num=(4, 3)).basis_nums == (4, 3)
    with pytest.raises(ValueError, match="basis_num must be <= seg_num_x"):
        MultiSeasonalTimeBase(TimeBaseConfig(720, 96), periods=(24, 168), basis_num=6)
    with pytest.raises(ValueError, match="one R per period"):
        MultiSeasonalTimeBase(TimeBaseConfig(720, 96), periods=(24, 168), basis_num=(6,))
    with pytest.raises(ValueError, match="periods"):
        MultiSeasonalTimeBase(TimeBaseConfig(720, 96), periods=())


def test_input_dtype_must_match_the_model() -> None:
    from timebase import PatchTST
    from timebase.baselines import DLinear

    for model in (
        TimeBase(TimeBaseConfig(96, 24, basis_num=3)),
        DLinear(96, 24),
        PatchTST(96, 24, 3, patch_len=8, stride=8),
    ):
        with pytest.raises(ValueError, match=r"x has dtype torch.float64 but the model's parameters are torch.float32"):
            model(torch.randn(2, 96, 3, dtype=torch.float64))
        assert model.double()(torch.randn(2, 96, 3, dtype=torch.float64)).dtype == torch.float64


def test_multi_seasonal_save_load_round_trip(tmp_path) -> None:
    torch.manual_seed(8)
    ms = MultiSeasonalTimeBase(TimeBaseConfig(336, 48, basis_num=2), periods=(24, 168), basis_num=(2, 1))
    x = torch.randn(2, 336, 3)
    loaded = MultiSeasonalTimeBase.from_pretrained(ms.save_pretrained(tmp_path / "ms"))
    assert loaded.periods == (24, 168) and loaded.basis_nums == (2, 1) and loaded.config == ms.config
    assert torch.equal(loaded(x), ms(x))
    with pytest.raises(ValueError, match="holds a MultiSeasonalTimeBase"):
        TimeBase.from_pretrained(tmp_path / "ms")
    TimeBase(TimeBaseConfig(336, 48)).save_pretrained(tmp_path / "single")
    with pytest.raises(ValueError, match="single-period TimeBase"):
        MultiSeasonalTimeBase.from_pretrained(tmp_path / "single")


def test_last_value_refuses_2d_and_nan_input() -> None:
    from timebase.baselines import LastValue

    lv = LastValue(4)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, seq_len >= 1, channels\), got \(2, 10\)"):
        lv(torch.randn(2, 10))
    x = torch.randn(2, 10, 3)
    x[1, -1, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf at its last step"):
        lv(x)
    x[1, -1, 0] = 0.5
    assert torch.equal(lv(x), x[:, -1:].expand(-1, 4, -1))
