"""The paper's experiments at CPU scale: TimeBase vs DLinear on ETTh1/ETTh2, and the PatchTST reducer.

Every run follows the official protocol (:func:`timebase.fit` with the per-horizon presets of the official
scripts; look-back 720, the Time-Series-Library splits and train-only scaling of :func:`timebase.data.ett`)::

    from timebase.data import ett
    from timebase.experiments import train_timebase

    splits = ett("ETTh1", seq_len=720, pred_len=96)
    run = train_timebase(splits, "ETTh1", 96, seed=0)  # {"mse": ..., "mae": ..., "best_epoch": ..., ...}

Real data comes from ``icml25_shared.data`` (the bundled ``icml25-datasets`` copy, sha256-verified); every
function that reads it takes ``download`` and raises :class:`icml25_shared.data.DataNotFoundError` when the files
are nowhere on the machine.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from icml25_shared.report import save_figure, subplots
from timebase.baselines import DLinear, SeasonalNaive
from timebase.config import TimeBaseConfig, training_preset
from timebase.data import Splits, ett
from timebase.model import TimeBase
from timebase.reducer import PatchTST
from timebase.trainer import evaluate, fit

__all__ = [
    "Setup",
    "complexity",
    "ett_table",
    "headline",
    "mean",
    "patchtst_reducer",
    "plot_ett_table",
    "plot_headline",
    "train_dlinear",
    "train_timebase",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Setup:
    """Seeds, epochs and the grid of the reproduction (the defaults); tests run smaller ones."""

    seeds: tuple[int, ...] = (0, 1, 2)
    """Training seeds; results are means over them (training at the official learning rates is noisy)."""
    epochs: int | None = None
    """Cap on the official 30 epochs (``None``: the official schedule with early stopping)."""
    horizons: tuple[int, ...] = (96, 192, 336, 720)
    """Forecast horizons of the full table (paper Table 10)."""
    datasets: tuple[str, ...] = ("ETTh1", "ETTh2")
    """Data sets of the full table."""
    patch_epochs: int | None = 5
    """Epochs of the PatchTST runs with and without the reducer (``None``: 30)."""


def mean(runs: list[dict[str, Any]], key: str) -> float:
    """Mean of ``key`` over runs."""
    return statistics.fmean(r[key] for r in runs)


def train_timebase(splits: Splits, dataset: str, horizon: int, seed: int, epochs: int | None = None) -> dict[str, Any]:
    """TimeBase with the official preset for ``(dataset, horizon)``, trained with the official protocol; test
    MSE/MAE of the best-validation epoch, plus the validation curve."""
    torch.manual_seed(seed)
    model = TimeBase(TimeBaseConfig.preset(dataset, horizon))
    kw = training_preset(dataset, horizon)
    if epochs is not None:
        kw["epochs"] = epochs
    res = fit(model, splits, seed=seed, **kw)
    assert res.test is not None
    return {
        "seed": seed,
        **res.test,
        "best_epoch": res.best_epoch,
        "epochs_run": res.epochs_run,
        "seconds": res.seconds,
        "val_curve": [h["val_mse"] for h in res.history],
    }


def train_dlinear(splits: Splits, horizon: int, seed: int, epochs: int | None = None) -> dict[str, Any]:
    """DLinear trained like the Time-Series-Library runs (Adam, lr 0.005, batch 32, patience 5)."""
    torch.manual_seed(seed)
    model = DLinear(splits.train.seq_len, horizon)
    res = fit(model, splits, seed=seed, lr=0.005, batch_size=32, epochs=epochs or 30, patience=5)
    assert res.test is not None
    return {"seed": seed, **res.test, "best_epoch": res.best_epoch, "seconds": res.seconds}


def headline(setup: Setup = Setup(), *, download: bool = False) -> dict[str, Any]:
    """ETTh1, T=720, H=96: TimeBase (official preset, ``setup.seeds``), DLinear's closed-form least-squares fit
    (the best DLinear on the training split under MSE) and the seasonal-naive forecast, on the test split."""
    splits = ett("ETTh1", seq_len=720, pred_len=96, download=download)
    dl = DLinear(720, 96).fit_least_squares(splits.train)
    dl_test = evaluate(dl, splits.test)
    naive = evaluate(SeasonalNaive(24, 96), splits.test)
    runs = [train_timebase(splits, "ETTh1", 96, s, setup.epochs) for s in setup.seeds]
    tb_cfg = TimeBaseConfig.preset("ETTh1", 96)
    return {
        "timebase_runs": runs,
        "timebase_config": tb_cfg,
        "dlinear_closed_form": dl_test,
        "seasonal_naive": naive,
        "timebase_params": tb_cfg.num_parameters(),
        "dlinear_params": dl.num_parameters(),
    }


def complexity() -> dict[str, Any]:
    """Exact parameter and MAC counts at T=720: TimeBase for H=96/192/336/720 on ETTh1 (C=7), and TimeBase vs
    DLinear on Electricity (C=321, H=720, paper Table 3)."""
    horizons = (96, 192, 336, 720)
    elec = TimeBaseConfig(720, 720)
    return {
        "params": [TimeBaseConfig(720, h).num_parameters() for h in horizons],
        "macs_etth1": [TimeBaseConfig(720, h).macs(7) for h in horizons],
        "electricity_params": elec.num_parameters(),
        "electricity_macs": elec.macs(321),
        "dlinear_params_720": DLinear(720, 720).num_parameters(),
        "dlinear_macs_720": DLinear(720, 720).macs(321),
    }


def ett_table(setup: Setup = Setup(), *, download: bool = False) -> dict[str, dict[str, Any]]:
    """``"<dataset>/<horizon>"`` -> TimeBase runs, trained DLinear runs and DLinear's closed form, over the grid of
    ``setup`` (paper Table 10 / Table 2)."""
    table: dict[str, dict[str, Any]] = {}
    for name in setup.datasets:
        for h in setup.horizons:
            splits = ett(name, seq_len=720, pred_len=h, download=download)
            table[f"{name}/{h}"] = {
                "timebase": [train_timebase(splits, name, h, s, setup.epochs) for s in setup.seeds],
                "dlinear": [train_dlinear(splits, h, s, setup.epochs) for s in setup.seeds],
                "dlinear_closed_form": evaluate(DLinear(720, h).fit_least_squares(splits.train), splits.test),
            }
            cell = table[f"{name}/{h}"]
            log.info("%s H=%d: TimeBase MSE %.4f, DLinear MSE %.4f (mean of %d seeds)", name, h,
                     mean(cell["timebase"], "mse"), mean(cell["dlinear"], "mse"), len(setup.seeds))  # fmt: skip
    return table


def patchtst_reducer(
    seeds: tuple[int, ...], epochs: int | None, *, download: bool = False
) -> dict[str, dict[str, float]]:
    """PatchTST with and without the TimeBase reducer on ETTh1, H=96 (paper Sec. 4, Table 4 setting: patch 24,
    R=8): mean test MSE over ``seeds``, MACs and parameters of each."""
    splits = ett("ETTh1", seq_len=720, pred_len=96, download=download)
    out = {}
    for label, r in (("PatchTST", None), ("PatchTST+TimeBase", 8)):
        mses = []
        for s in seeds:
            torch.manual_seed(s)
            model = PatchTST(720, 96, 7, patch_len=24, stride=24, basis_num=r)
            res = fit(model, splits, seed=s, lr=5e-4, batch_size=128, epochs=epochs or 30, patience=3)
            assert res.test is not None
            mses.append(res.test["mse"])
        out[label] = {"mse": statistics.fmean(mses), "macs": model.macs(), "params": model.num_parameters()}
        log.info("%s: MSE %.4f, %d MACs", label, out[label]["mse"], out[label]["macs"])
    return out


def plot_headline(h: dict[str, Any], out_dir: str | Path) -> Path:
    """Test MSE of seasonal naive, DLinear and TimeBase (paper's Table 10 marked) and TimeBase's validation
    curves, for the :func:`headline` experiment."""
    runs, dl_test, naive = h["timebase_runs"], h["dlinear_closed_form"], h["seasonal_naive"]
    tb_mse = mean(runs, "mse")
    fig, axes = subplots(1, 2, figsize=(12, 4.2))
    names = ["seasonal naive", "DLinear (LS)", "TimeBase"]
    vals = [naive["mse"], dl_test["mse"], tb_mse]
    axes[0].bar(names, vals, color=["0.6", "tab:orange", "tab:blue"])
    axes[0].errorbar([2], [tb_mse], yerr=[statistics.pstdev([r["mse"] for r in runs])], color="k", capsize=4)
    axes[0].scatter([1, 2], [0.378, 0.349], color="k", marker="x", zorder=3, label="paper (Table 10)")
    for i, v in enumerate(vals):
        axes[0].text(i, v, f"{v:.3f}", ha="center", va="bottom")
    axes[0].set_ylabel("test MSE (normalised)")
    axes[0].set_title(f"ETTh1, T=720, H=96 ({h['timebase_params']} vs {h['dlinear_params']:,} params)")
    axes[0].legend()
    for r in runs:
        axes[1].plot(range(1, len(r["val_curve"]) + 1), r["val_curve"], marker="o", label=f"seed {r['seed']}")
    axes[1].set_xlabel("epoch")
    axes[1].set_ylabel("validation MSE")
    axes[1].set_title("TimeBase training (official ETTh1 H=96 preset)")
    axes[1].legend()
    return save_figure(fig, out_dir, "etth1_h96_quick")


def plot_ett_table(table: dict[str, dict[str, Any]], setup: Setup, out_dir: str | Path) -> Path:
    """Test MSE against the horizon, TimeBase and trained DLinear, one pair of lines per data set."""
    fig, ax = subplots(1, 1, figsize=(8, 4.2))
    for name in setup.datasets:
        tb = [mean(table[f"{name}/{h}"]["timebase"], "mse") for h in setup.horizons]
        dl = [mean(table[f"{name}/{h}"]["dlinear"], "mse") for h in setup.horizons]
        ax.plot(setup.horizons, tb, marker="o", label=f"{name} TimeBase")
        ax.plot(setup.horizons, dl, marker="s", linestyle="--", label=f"{name} DLinear")
    ax.set_xlabel("horizon H")
    ax.set_ylabel("test MSE")
    ax.set_title("TimeBase vs DLinear, T=720 (means over seeds)")
    ax.legend()
    return save_figure(fig, out_dir, "ett_full")
