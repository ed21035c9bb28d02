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
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

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
    patch_epochs: int | None = 3
    """Epochs of the PatchTST runs with and without the reducer (``None``: 30)."""
    dlinear_trained: bool = False
    """Also train DLinear (Time-Series-Library protocol, same seeds) in every cell of the full table; off by default:
    at 3-6 CPU-s per epoch over up to 30 epochs it costs several times TimeBase's whole grid, and its closed-form
    fit is the stronger baseline on these splits."""


Part = Callable[[str, Callable[[], Any]], Any]
"""``part(name, fn)``: ``fn()``, or its stored result (:class:`icml25_shared.parts.Parts.run` of a resumable run)."""


def _compute(name: str, fn: Callable[[], Any]) -> Any:
    return fn()


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


def headline(setup: Setup = Setup(), *, download: bool = False, part: Part = _compute) -> dict[str, Any]:
    """ETTh1, T=720, H=96: TimeBase (official preset, ``setup.seeds``), DLinear's closed-form least-squares fit
    (the best DLinear on the training split under MSE) and the seasonal-naive forecast, on the test split. ``part``
    runs each training (a resumable run stores it; the full table reuses these ETTh1 H=96 runs)."""
    splits = ett("ETTh1", seq_len=720, pred_len=96, download=download)
    dl = DLinear(720, 96).fit_least_squares(splits.train)
    dl_test = evaluate(dl, splits.test)
    naive = evaluate(SeasonalNaive(24, 96), splits.test)
    runs = [
        part(_run_name("timebase", "ETTh1", 96, s), partial(train_timebase, splits, "ETTh1", 96, s, setup.epochs))
        for s in setup.seeds
    ]
    tb_cfg = TimeBaseConfig.preset("ETTh1", 96)
    return {
        "timebase_runs": runs,
        "timebase_config": tb_cfg,
        "dlinear_closed_form": dl_test,
        "seasonal_naive": naive,
        "timebase_params": tb_cfg.num_parameters(),
        "dlinear_params": dl.num_parameters(),
    }


def _run_name(model: str, dataset: str, horizon: int, seed: int) -> str:
    return f"{model}_{dataset}_H{horizon}_seed{seed}"


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


def ett_table(setup: Setup = Setup(), *, download: bool = False, part: Part = _compute) -> dict[str, dict[str, Any]]:
    """``"<dataset>/<horizon>"`` -> TimeBase runs (``setup.seeds``), DLinear's closed form and, when
    ``setup.dlinear_trained``, trained DLinear runs, over the grid of ``setup`` (paper Table 10 / Table 2). ``part``
    runs each training (a resumable run stores every finished one)."""
    table: dict[str, dict[str, Any]] = {}
    for name in setup.datasets:
        for h in setup.horizons:
            splits = ett(cast(Any, name), seq_len=720, pred_len=h, download=download)
            cell = {
                "timebase": [
                    part(_run_name("timebase", name, h, s), partial(train_timebase, splits, name, h, s, setup.epochs))
                    for s in setup.seeds
                ],
                "dlinear_closed_form": evaluate(DLinear(720, h).fit_least_squares(splits.train), splits.test),
            }
            if setup.dlinear_trained:
                cell["dlinear"] = [
                    part(_run_name("dlinear", name, h, s), partial(train_dlinear, splits, h, s, setup.epochs))
                    for s in setup.seeds
                ]
            table[f"{name}/{h}"] = cell
            log.info("%s H=%d: TimeBase MSE %.4f (mean of %d seeds), DLinear closed form %.4f", name, h,
                     mean(cell["timebase"], "mse"), len(setup.seeds), cell["dlinear_closed_form"]["mse"])  # fmt: skip
    return table


def patchtst_reducer(
    seeds: tuple[int, ...], epochs: int | None, *, download: bool = False, part: Part = _compute
) -> dict[str, dict[str, float]]:
    """PatchTST with and without the TimeBase reducer on ETTh1, H=96 (paper Sec. 4, Table 4 setting: patch 24,
    R=8): mean test MSE over ``seeds``, MACs and parameters of each. ``part`` runs each training."""
    splits = ett("ETTh1", seq_len=720, pred_len=96, download=download)
    out = {}
    for label, r in (("PatchTST", None), ("PatchTST+TimeBase", 8)):
        runs = [
            part(f"{'patchtst' if r is None else 'patchtst_reduced'}_seed{s}", partial(_train_patchtst, splits, r, s,
                                                                                          epochs))
            for s in seeds
        ]  # fmt: skip
        out[label] = {"mse": statistics.fmean(x["mse"] for x in runs), "macs": runs[0]["macs"],
                      "params": runs[0]["params"]}  # fmt: skip
        log.info("%s: MSE %.4f, %d MACs", label, out[label]["mse"], out[label]["macs"])
    return out


def _train_patchtst(splits: Splits, basis_num: int | None, seed: int, epochs: int | None) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = PatchTST(720, 96, 7, patch_len=24, stride=24, basis_num=basis_num)
    res = fit(model, splits, seed=seed, lr=5e-4, batch_size=128, epochs=epochs or 30, patience=3)
    assert res.test is not None
    return {"mse": res.test["mse"], "macs": model.macs(), "params": model.num_parameters(), "epochs": res.epochs_run}


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
    """Test MSE against the horizon, TimeBase (mean of seeds) and DLinear's closed form (and trained DLinear when
    the table has it), one set of lines per data set."""
    fig, ax = subplots(1, 1, figsize=(8, 4.2))
    for name in setup.datasets:
        cells = [table[f"{name}/{h}"] for h in setup.horizons]
        ax.plot(setup.horizons, [mean(c["timebase"], "mse") for c in cells], marker="o", label=f"{name} TimeBase")
        ax.plot(setup.horizons, [c["dlinear_closed_form"]["mse"] for c in cells], marker="s", linestyle="--",
                label=f"{name} DLinear (closed form)")  # fmt: skip
        if all("dlinear" in c for c in cells):
            ax.plot(setup.horizons, [mean(c["dlinear"], "mse") for c in cells], marker="^", linestyle=":",
                    label=f"{name} DLinear (trained)")  # fmt: skip
    ax.set_xlabel("horizon H")
    ax.set_ylabel("test MSE")
    ax.set_title("TimeBase vs DLinear, T=720 (TimeBase: mean over seeds)")
    ax.legend()
    return save_figure(fig, out_dir, "ett_full")
