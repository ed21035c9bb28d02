"""Experiments of ``icml25 reproduce softshape`` and the benchmark: the paper's evaluation protocol, aeon's bundled
UCR sets, synthetic data with a known discriminative window, the fits, the interleaved step timing, the
interpretability check, the worker pool that runs them, and the plots.

The paper's protocol merges the UCR TRAIN and TEST files and runs a stratified 5-fold split (seed 42); inside each
fold the remainder is split 3:1 into train/validation (60/20/20 overall) and the test accuracy is read at the epoch
of minimum validation loss. Here the outer folds are made by :func:`cv_protocol`; the inner 3:1 split and the
min-val-loss selection happen inside :class:`~softshape.SoftShapeClassifier` (``validation_fraction=0.25``), while
peers without a validation step (MiniRocket) are fitted on the whole outer-train part. The merged protocol gives
higher accuracies than the standard split: never compare its numbers with published train/test numbers.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import clone
from sklearn.model_selection import StratifiedKFold

from icml25_shared.device import torch_threads, worker_count
from icml25_shared.metrics import accuracy
from icml25_shared.report import save_figure, subplots
from icml25_shared.seed import numpy_rng
from icml25_shared.validate import check_int
from softshape.config import ucr_shape_size
from softshape.estimator import SoftShapeClassifier, fit_shared_warmup

__all__ = [
    "znormalize",
    "fill_nan_train_means",
    "protocol_folds",
    "prepare",
    "cv_protocol",
    "standard_split",
    "CVResult",
    "bump_dataset",
    "DATASETS",
    "N_FOLDS",
    "load_ucr",
    "fold_data",
    "fit_group",
    "step_times",
    "iou",
    "interpretability",
    "run_task",
    "reproduction_tasks",
    "run_tasks",
    "FitRows",
    "plot_accuracy",
    "plot_steps",
    "plot_rates",
    "plot_interpretability",
]

logger = logging.getLogger(__name__)

DATASETS = ("GunPoint", "ItalyPowerDemand")
N_FOLDS = 5


# ---------------------------------------------------------------------------------------------------------------
# the paper's protocol


def znormalize(X: np.ndarray) -> np.ndarray:
    """Z-normalise every series and channel over time (std 0 -> 1), as the paper's data loader does."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=-1, keepdims=True)
    std = X.std(axis=-1, keepdims=True)
    return ((X - mean) / np.where(std == 0, 1.0, std)).astype(np.float32)


def fill_nan_train_means(X_train: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Fill NaN in every array with the column (channel, time) means of ``X_train`` only (1e-6 where a column is
    all NaN): no statistic of the other arrays leaks into the filling."""
    X_train = np.asarray(X_train, dtype=np.float64)
    with np.errstate(all="ignore"):
        counts = (~np.isnan(X_train)).sum(axis=0)
        means = np.where(counts > 0, np.nansum(X_train, axis=0) / np.maximum(counts, 1), 1e-6)
    return tuple(np.where(np.isnan(a), means[None], a) for a in (X_train, *others))


def protocol_folds(y: np.ndarray, n_folds: int = 5, random_state: int = 42) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train+val, test) index pairs of the paper's outer StratifiedKFold(n_folds, shuffle, random_state)."""
    n_folds = check_int("n_folds", n_folds, min=2)
    skf = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=random_state)
    return [(tr, te) for tr, te in skf.split(np.zeros(len(y)), y)]


@dataclass
class CVResult:
    """Per-fold accuracies and fit times of one estimator under one protocol."""

    accuracies: list[float]
    fit_seconds: list[float]
    predict_seconds: list[float]
    folds: list[int] = field(default_factory=list)

    @property
    def mean_accuracy(self) -> float:
        return float(np.mean(self.accuracies))

    def to_dict(self) -> dict[str, Any]:
        return {
            "accuracies": self.accuracies,
            "mean_accuracy": self.mean_accuracy,
            "fit_seconds": self.fit_seconds,
            "predict_seconds": self.predict_seconds,
            "folds": self.folds,
        }


def _fit_score(estimator: Any, X_tr: np.ndarray, y_tr: np.ndarray, X_te: np.ndarray, y_te: np.ndarray) -> tuple:
    t0 = time.perf_counter()
    estimator.fit(X_tr, y_tr)
    t1 = time.perf_counter()
    pred = estimator.predict(X_te)
    t2 = time.perf_counter()
    return accuracy(np.asarray(pred), np.asarray(y_te)), t1 - t0, t2 - t1


def prepare(X_tr: np.ndarray, X_te: np.ndarray, znorm: bool) -> tuple[np.ndarray, np.ndarray]:
    X_tr, X_te = np.asarray(X_tr, dtype=np.float64), np.asarray(X_te, dtype=np.float64)
    if np.isnan(X_tr).any() or np.isnan(X_te).any():
        X_tr, X_te = fill_nan_train_means(X_tr, X_te)
    if znorm:
        X_tr, X_te = znormalize(X_tr), znormalize(X_te)
    return X_tr.astype(np.float32), X_te.astype(np.float32)


def cv_protocol(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    estimator: Any,
    n_folds: int = 5,
    random_state: int = 42,
    *,
    folds: list[int] | None = None,
    znorm: bool = True,
    n_jobs: int | None = None,
) -> CVResult:
    """The paper's protocol: merge train and test, stratified ``n_folds``-fold (shuffle, ``random_state``), fit a
    clone of ``estimator`` on each outer-train part and report the test-fold accuracy.

    NaN are filled with the outer-train column means (no leakage) and every series is z-normalised. ``folds``
    restricts the run to some fold indices (quick mode); ``n_jobs`` fans the folds out with joblib.
    """
    X = np.concatenate([np.asarray(X_train), np.asarray(X_test)])
    y = np.concatenate([np.asarray(y_train), np.asarray(y_test)])
    pairs = protocol_folds(y, n_folds, random_state)
    chosen = list(range(n_folds)) if folds is None else list(folds)
    for f in chosen:
        if not 0 <= f < n_folds:
            raise ValueError(f"folds must hold indices in [0, {n_folds}), got {f}")

    def run(f: int) -> tuple:
        tr, te = pairs[f]
        X_tr, X_te = prepare(X[tr], X[te], znorm)
        return _fit_score(clone(estimator), X_tr, y[tr], X_te, y[te])

    if n_jobs in (None, 1):
        outs = [run(f) for f in chosen]
    else:
        from joblib import Parallel, delayed

        outs = Parallel(n_jobs=n_jobs)(delayed(run)(f) for f in chosen)
    return CVResult([o[0] for o in outs], [o[1] for o in outs], [o[2] for o in outs], chosen)


def standard_split(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    estimator: Any,
    *,
    znorm: bool = True,
) -> CVResult:
    """Fit a clone of ``estimator`` on the standard TRAIN file and score it on TEST (same preprocessing)."""
    X_tr, X_te = prepare(X_train, X_test, znorm)
    acc, fit_s, pred_s = _fit_score(clone(estimator), X_tr, np.asarray(y_train), X_te, np.asarray(y_test))
    return CVResult([acc], [fit_s], [pred_s], [0])


# ---------------------------------------------------------------------------------------------------------------
# synthetic data with a known discriminative window (the interpretability check)


def bump_dataset(
    n_cases: int = 200,
    n_timepoints: int = 128,
    window: tuple[int, int] = (56, 72),
    amplitude: float = 3.0,
    noise: float = 0.3,
    random_state: int | None = 0,
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Random walks (step std ``noise``) of two balanced classes; class 1 carries a Gaussian bump of height
    ``amplitude`` centred in ``window`` = [start, end). Returns ``(X (n, 1, T) float32, y (n,) int, window)``."""
    start, end = window
    if not 0 <= start < end <= n_timepoints:
        raise ValueError(f"window must satisfy 0 <= start < end <= n_timepoints={n_timepoints}, got {window}")
    rng = numpy_rng(random_state)
    y = np.arange(n_cases) % 2
    rng.shuffle(y)
    walks = np.cumsum(rng.normal(0.0, noise, size=(n_cases, n_timepoints)), axis=1)
    walks -= walks.mean(axis=1, keepdims=True)
    t = np.arange(n_timepoints)
    centre, width = 0.5 * (start + end - 1), (end - start) / 4.0
    bump = amplitude * np.exp(-0.5 * ((t - centre) / width) ** 2)
    X = walks + y[:, None] * bump[None]
    return X[:, None, :].astype(np.float32), y.astype(np.int64), (start, end)


# ---------------------------------------------------------------------------------------------------------------
# the reproduction's units of work


def load_ucr(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from aeon.datasets import load_classification

    X, y = load_classification(name, split="train")
    Xt, yt = load_classification(name, split="test")
    return X, y, Xt, yt


def fold_data(name: str, fold: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Outer train and test part of one fold of the paper's protocol (NaN filled from train, z-normalised)."""
    X, y, Xt, yt = load_ucr(name)
    Xa, ya = np.concatenate([X, Xt]), np.concatenate([y, yt])
    tr, te = protocol_folds(ya, N_FOLDS, 42)[fold]
    X_tr, X_te = prepare(Xa[tr], Xa[te], znorm=True)
    return X_tr, ya[tr], X_te, ya[te]


def fit_group(name: str, fold: int, variants: dict[str, dict[str, Any]], params: dict[str, Any]) -> list[dict]:
    """Fit the variants of one (data set, fold) under the paper's protocol; variants that differ only after warm-up
    share it (``fit_shared_warmup``), the others are fitted alone. Runs in a joblib worker."""
    X_tr, y_tr, X_te, y_te = fold_data(name, fold)
    rows = []
    if variants.keys() == {"minirocket"}:
        from aeon.classification.convolution_based import MiniRocketClassifier

        t0 = time.perf_counter()
        est: Any = MiniRocketClassifier(random_state=0, n_jobs=1).fit(X_tr, y_tr)
        fitted, fit_s = {"minirocket": est}, {"minirocket": time.perf_counter() - t0}
    elif len(variants) > 1:
        t0 = time.perf_counter()
        fitted = fit_shared_warmup(SoftShapeClassifier(**params), variants, X_tr, y_tr)
        fit_s = dict.fromkeys(fitted, (time.perf_counter() - t0) / len(fitted))  # shared: the group's mean
    else:
        ((v, extra),) = variants.items()
        t0 = time.perf_counter()
        fitted = {v: SoftShapeClassifier(**{**params, **extra}).fit(X_tr, y_tr)}
        fit_s = {v: time.perf_counter() - t0}
    for v, est in fitted.items():
        acc = float(np.mean(np.asarray(est.predict(X_te)) == np.asarray(y_te)))
        rows.append(
            {"dataset": name, "fold": fold, "variant": v, "accuracy": acc, "n_test": len(y_te), "fit_s": fit_s[v]}
        )
    return rows


def step_times(name: str, params: dict[str, Any], rates: dict[str, float], rounds: int) -> dict[str, Any]:
    """Train-step time (forward, backward, Adam) of the model at each sparse rate on the same full batch of fold 0,
    measured interleaved: every round runs one step per rate (order rotating), so slow phases of a shared machine
    hit every rate alike. Ratios vs rate 0 per round; medians and minima over rounds; load average before/after."""
    X_tr, y_tr, _, _ = fold_data(name, 0)
    n_batch = int(round(0.75 * len(y_tr)))  # the estimator's inner 3:1 split: the batch is 75 % of outer-train
    n_batch = min(n_batch, params["batch_size"])
    est = SoftShapeClassifier(**{**params, "epochs": 1, "warmup_epochs": 0, "validation_fraction": 0.0})
    est.fit(X_tr[:n_batch], y_tr[:n_batch])
    xb = torch.from_numpy(np.ascontiguousarray(X_tr[:n_batch], dtype=np.float32))
    yb = torch.from_numpy(np.searchsorted(est.classes_, y_tr[:n_batch]).astype(np.int64))

    nets, opts = {}, {}
    for v, r in rates.items():
        net = copy.deepcopy(est.network_).train()
        net.config = dataclasses.replace(net.config, sparse_rate=r)
        nets[v], opts[v] = net, torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(v: str) -> float:
        t0 = time.perf_counter()
        out = nets[v](xb, sparse=True)
        loss = F.cross_entropy(out.logits, yb) + 1e-3 * out.aux_loss
        opts[v].zero_grad(set_to_none=True)
        loss.backward()
        opts[v].step()
        return time.perf_counter() - t0

    load_before = os.getloadavg()[0]
    names = list(rates)
    for v in names:  # warm-up round (allocator, first-call overheads)
        step(v)
    times: dict[str, list[float]] = {v: [] for v in names}
    for i in range(rounds):
        k = i % len(names)
        for v in names[k:] + names[:k]:
            times[v].append(step(v))
    base = times["dense"]
    out: dict[str, Any] = {"dataset": name, "batch": n_batch, "rounds": rounds}
    for v in names:
        out[v] = {
            "median_s": float(np.median(times[v])),
            "min_s": float(np.min(times[v])),
            "ratio_median_of_rounds": float(np.median(np.asarray(times[v]) / np.asarray(base))),
            "ratio_of_minima": float(np.min(times[v]) / np.min(base)),
        }
    out["load_before"], out["load_after"] = load_before, os.getloadavg()[0]
    return out


def iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union


def interpretability(epochs: int, n_cases: int) -> dict[str, Any]:
    """Fit on synthetic bump data; IoU of each class-1 test series' top-1 shape with the known window."""
    X, y, window = bump_dataset(n_cases=n_cases, n_timepoints=64, window=(24, 40), noise=0.1, random_state=0)
    est = SoftShapeClassifier(
        shape_size=16, stride=4, epochs=epochs, warmup_epochs=epochs // 3, batch_size=32, random_state=0
    )
    n_train = int(0.75 * n_cases)
    est.fit(X[:n_train], y[:n_train])
    Xte, yte = X[n_train:], y[n_train:]
    pos = Xte[yte == 1]
    spans = est.explain(pos, top=1)[:, 0]
    ious = np.array([iou(tuple(s), window) for s in spans])
    scores, _ = est.shape_scores(pos[:1])
    return {
        "mean_iou": float(ious.mean()),
        "share_iou_gt_0.5": float((ious > 0.5).mean()),
        "accuracy": float(est.score(Xte, yte)),
        "series": pos[0, 0],
        "scores": scores[0],
        "centres": np.arange(scores.shape[1]) * est.config_.stride + est.config_.shape_size / 2,
        "span": tuple(int(v) for v in spans[0]),
        "window": window,
    }


def plot_interpretability(res: dict[str, Any], out_dir: Path) -> str:
    """A class-1 series with the bump window, the top-scored shape and the shape scores."""
    fig, ax = subplots(1, 1, figsize=(7, 3.2))
    ax.plot(res["series"], color="k", lw=1, label="series (class 1)")
    ax.axvspan(*res["window"], color="tab:green", alpha=0.25, label="bump window")
    ax.axvspan(*res["span"], color="tab:red", alpha=0.25, label="top shape")
    ax2 = ax.twinx()
    ax2.plot(res["centres"], res["scores"], color="tab:blue", lw=1, ls="--")
    ax2.set_ylabel("shape score", color="tab:blue")
    ax.set_xlabel("time")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"Synthetic bump: mean top-1 IoU {res['mean_iou']:.2f}, accuracy {res['accuracy']:.2f}")
    return str(save_figure(fig, out_dir, "interpretability"))


def run_task(kind: str, *args: Any) -> Any:
    """One unit of work for the worker pool, with one torch thread (restored afterwards): ``("fit", name, fold,
    variants, params)``, ``("steps", name, params, rates, rounds)`` or ``("interp", epochs, n_cases)``."""
    with torch_threads(1):
        if kind == "fit":
            return fit_group(*args)
        if kind == "steps":
            return step_times(*args)
        return interpretability(*args)


def reproduction_tasks(
    schedule: dict[str, Any],
    shared: dict[str, dict[str, Any]],
    separate: dict[str, dict[str, Any]],
    rates: dict[str, float],
    interp: tuple[int, int],
    *,
    by_fold: bool,
) -> list[tuple[Any, ...]]:
    """The units of work of a reproduction, for :func:`run_tasks`: per (data set, fold) one shared-warm-up fit of the
    ``shared`` variants and one fit per ``separate`` variant (``schedule``: folds, epochs, warmup, early, batch,
    step_rounds), one MiniRocket fit per (data set, fold), one step timing per data set at ``rates`` and one
    interpretability run ``interp = (epochs, n_cases)``. ``by_fold``: fold by fold (a run cut short holds whole
    folds); otherwise longest data set first, so that two workers finish together."""

    def params(name: str) -> dict[str, Any]:
        keys = {"epochs": "epochs", "warmup_epochs": "warmup", "early_stopping": "early", "batch_size": "batch"}
        return {**{k: schedule[v] for k, v in keys.items()}, "random_state": 0, "shape_size": ucr_shape_size(name)}

    folds = schedule["folds"]
    pairs = [(f, n) for f in folds for n in DATASETS] if by_fold else [(f, n) for n in DATASETS[::-1] for f in folds]
    tasks: list[tuple[Any, ...]] = []
    for f, name in pairs:
        tasks.append(("fit", name, f, shared, params(name)))
        tasks += [("fit", name, f, {v: extra}, params(name)) for v, extra in separate.items()]
    tasks += [("fit", name, f, {"minirocket": {}}, {}) for name in DATASETS for f in folds]  # numba JIT cached
    tasks += [("steps", name, params(name), rates, schedule["step_rounds"]) for name in DATASETS]
    return [*tasks, ("interp", *interp)]


class FitRows:
    """The fit rows of a run (``dataset``, ``fold``, ``variant``, ``accuracy``, ``n_test``, ``fit_s``) and their
    summaries; ``name=None`` means every data set."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def select(self, name: str | None, variant: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["variant"] == variant and (name is None or r["dataset"] == name)]

    def accuracy(self, name: str | None, variant: str) -> float:
        """Accuracy averaged over the matching (set, fold) rows."""
        return float(np.mean([r["accuracy"] for r in self.select(name, variant)]))

    def pooled(self, variant: str) -> float:
        """Accuracy pooled over all test cases of every set (each test case counts once)."""
        s = self.select(None, variant)
        return float(sum(r["accuracy"] * r["n_test"] for r in s) / sum(r["n_test"] for r in s))

    def fit_seconds(self, name: str | None, variant: str) -> float:
        return float(np.mean([r["fit_s"] for r in self.select(name, variant)]))


def run_tasks(tasks: list[tuple[Any, ...]], n_jobs: int | None = None) -> list[Any]:
    """Run :func:`run_task` on every task with ``n_jobs`` joblib workers (default
    :func:`icml25_shared.device.worker_count`), in task order; each finished fit is logged."""
    from joblib import Parallel, delayed

    n_jobs = worker_count() if n_jobs is None else n_jobs
    outs = []
    with torch_threads(1):  # the main process does no torch work, but keep it to one thread too
        results = Parallel(n_jobs=n_jobs, return_as="generator")(delayed(run_task)(*t) for t in tasks)
        for t, o in zip(tasks, results, strict=True):
            outs.append(o)
            if t[0] == "fit":
                logger.info("finished %s", o)
    return outs


def plot_accuracy(rows: list[dict[str, Any]], variants: list[str], out_dir: Path) -> str:
    """Mean test accuracy of every variant and MiniRocket per data set."""
    names = [*variants, "minirocket"]
    fig, ax = subplots(1, 1, figsize=(8, 3.5))
    width = 0.8 / len(names)
    for j, v in enumerate(names):
        vals = [np.mean([r["accuracy"] for r in rows if r["dataset"] == d and r["variant"] == v]) for d in DATASETS]
        ax.bar(np.arange(len(DATASETS)) + j * width, vals, width, label=v)
    ax.set_xticks(np.arange(len(DATASETS)) + 0.4 - width / 2, DATASETS)
    ax.set_ylim(0.5, 1.0)
    ax.set_ylabel("test accuracy (merged folds)")
    ax.legend(fontsize=8, ncol=2)
    return str(save_figure(fig, out_dir, "accuracy"))


def plot_steps(steps: dict[str, dict[str, Any]], rates: dict[str, float], out_dir: Path) -> str:
    """Median train-step time at each sparse rate per data set."""
    fig, ax = subplots(1, 1, figsize=(5, 3.2))
    x = np.arange(len(steps))
    width = 0.8 / len(rates)
    for j, (v, r) in enumerate(rates.items()):
        ax.bar(x + j * width, [1e3 * s[v]["median_s"] for s in steps.values()], width, label=f"sparse rate {r}")
    ax.set_xticks(x + 0.4 - width / 2, list(steps))
    ax.set_ylabel("train step (ms, median, 1 thread)")
    ax.legend(fontsize=8)
    return str(save_figure(fig, out_dir, "step_time"))


def plot_rates(
    rows: list[dict[str, Any]], steps: dict[str, dict[str, Any]], rates: dict[str, float], out_dir: Path
) -> str:
    """Accuracy and step time relative to the dense model against the sparse rate, per data set."""
    fig, axes = subplots(1, 2, figsize=(9, 3.2))
    for d in DATASETS:
        vals = [np.mean([r["accuracy"] for r in rows if r["dataset"] == d and r["variant"] == v]) for v in rates]
        axes[0].plot(list(rates.values()), vals, marker="o", label=d)
        axes[1].plot(list(rates.values()), [steps[d][v]["ratio_median_of_rounds"] for v in rates], marker="o", label=d)
    axes[0].set_xlabel("sparse rate")
    axes[0].set_ylabel("test accuracy")
    axes[1].set_xlabel("sparse rate")
    axes[1].set_ylabel("step time / dense")
    axes[0].legend(fontsize=8)
    return str(save_figure(fig, out_dir, "sparse_rate"))
