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
import functools
import logging
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import clone
from sklearn.model_selection import StratifiedKFold

from icml25_shared.device import torch_threads, worker_count
from icml25_shared.metrics import accuracy
from icml25_shared.parts import Parts
from icml25_shared.report import save_figure, subplots
from icml25_shared.seed import numpy_rng
from icml25_shared.validate import check_int
from softshape.config import SoftShapeConfig, resolve_shape_size, ucr_shape_size
from softshape.estimator import SoftShapeClassifier, fit_shared_warmup
from softshape.model import SoftShapeNet

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
    "layer_step_times",
    "timing_net",
    "efficiency",
    "iou",
    "interpretability",
    "run_task",
    "reproduction_tasks",
    "run_tasks",
    "FitRows",
    "plot_accuracy",
    "plot_steps",
    "efficiency_ratios",
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

        outs = cast(list, Parallel(n_jobs=n_jobs)(delayed(run)(f) for f in chosen))
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

    # aeon's annotation allows a third element (the metadata) only returned when return_metadata=True
    X, y = cast("tuple[np.ndarray, np.ndarray]", load_classification(name, split="train"))
    Xt, yt = cast("tuple[np.ndarray, np.ndarray]", load_classification(name, split="test"))
    return X, y, Xt, yt


@functools.lru_cache(maxsize=16)
def fold_data(name: str, fold: int, split_seed: int = 42) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Outer train and test part of one fold of the paper's protocol (NaN filled from train, z-normalised);
    ``split_seed`` seeds the stratified split (42: the reproduction's base seed 0)."""
    X, y, Xt, yt = load_ucr(name)
    Xa, ya = np.concatenate([X, Xt]), np.concatenate([y, yt])
    tr, te = protocol_folds(ya, N_FOLDS, split_seed)[fold]
    X_tr, X_te = prepare(Xa[tr], Xa[te], znorm=True)
    return X_tr, ya[tr], X_te, ya[te]


def fit_group(
    name: str, fold: int, variants: dict[str, dict[str, Any]], params: dict[str, Any], split_seed: int = 42
) -> list[dict]:
    """Fit the variants of one (data set, fold) under the paper's protocol; variants that differ only after warm-up
    share it (``fit_shared_warmup``), the others are fitted alone. Runs in a joblib worker."""
    X_tr, y_tr, X_te, y_te = fold_data(name, fold, split_seed)
    rows = []
    if variants.keys() == {"minirocket"}:
        from aeon.classification.convolution_based import MiniRocketClassifier

        t0 = time.perf_counter()
        est: Any = MiniRocketClassifier(random_state=params.get("random_state", 0), n_jobs=1).fit(X_tr, y_tr)
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
        row = {"dataset": name, "fold": fold, "variant": v, "accuracy": acc, "n_test": len(y_te), "fit_s": fit_s[v]}
        if isinstance(est, SoftShapeClassifier):  # share of the training tokens per expert (NaN: no MoE ran)
            row["expert_utilisation"] = [round(float(u), 4) for u in est.expert_utilisation_]
        rows.append(row)
    return rows


def _timing_batch(name: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The training batch of the step timings: the estimator's inner training part of fold 0 (75 % of the
    outer-train part, 120 GunPoint / 657 ItalyPowerDemand series), labels encoded; returns (x, y, n_classes)."""
    X_tr, y_tr, _, _ = fold_data(name, 0)
    n_batch = int(round(0.75 * len(y_tr)))
    classes, y_enc = np.unique(y_tr[:n_batch], return_inverse=True)
    return (
        torch.from_numpy(np.ascontiguousarray(X_tr[:n_batch])),
        torch.from_numpy(y_enc.astype(np.int64)),
        len(classes),
    )


def timing_net(name: str, depth: int, sparse_rate: float, n_classes: int, seed: int = 0) -> SoftShapeNet:
    """A freshly initialised SoftShapeNet for data set ``name`` at the paper's width (D = 128, m from the UCR table,
    q = 4, E = n_classes) and a router spread over the experts (W_g ~ N(0, 1), as after training, so the
    vectorised multi-expert dispatch runs; the zero-initialised router would send every token to expert 0)."""
    X_tr, _, _, _ = fold_data(name, 0)
    t = X_tr.shape[-1]
    cfg = SoftShapeConfig(
        n_timepoints=t,
        n_classes=n_classes,
        n_channels=X_tr.shape[1],
        shape_size=resolve_shape_size(ucr_shape_size(name), t),
        depth=depth,
        sparse_rate=sparse_rate,
    )
    torch.manual_seed(seed)
    net = SoftShapeNet(cfg).train()
    with torch.no_grad():
        net.moe.w_gate.normal_(std=1.0)
    return net


def _interleaved(fns: dict[str, Any], rounds: int, base: str) -> dict[str, Any]:
    """Time every callable once per round (order rotating; one warm-up round first), so slow phases of a shared
    machine hit every variant alike. Per variant: median and minimum seconds, the median of the per-round ratios to
    ``base`` and the ratio of minima; the load average before and after."""
    load_before = os.getloadavg()[0]
    names = list(fns)
    for v in names:  # warm-up round (allocator, first-call overheads)
        fns[v]()
    times: dict[str, list[float]] = {v: [] for v in names}
    for i in range(rounds):
        k = i % len(names)
        for v in names[k:] + names[:k]:
            t0 = time.perf_counter()
            fns[v]()
            times[v].append(time.perf_counter() - t0)
    out: dict[str, Any] = {"rounds": rounds}
    for v in names:
        out[v] = {
            "median_s": float(np.median(times[v])),
            "min_s": float(np.min(times[v])),
            "ratio_median_of_rounds": float(np.median(np.asarray(times[v]) / np.asarray(times[base]))),
            "ratio_of_minima": float(np.min(times[v]) / np.min(times[base])),
            "per_round_s": [float(t) for t in times[v]],
        }
    out["load_before"], out["load_after"] = load_before, os.getloadavg()[0]
    return out


def step_times(name: str, rates: dict[str, Any], rounds: int, depth: int = 2, base: str = "dense") -> dict[str, Any]:
    """Whole-model train-step time (forward, backward, Adam) of each variant on the fold-0 training batch of
    ``name``, interleaved; ``rates``: variant -> sparse rate, or -> config overrides (e.g. ``{"sparse_rate": 0.0,
    "moe_in_dense": True}``), with a ``base`` entry, the reference (default ``"dense"``). Every variant starts from
    the same weights (:func:`timing_net`)."""
    _, steps, (_, yb) = train_steps(name, rates, depth)
    out = _interleaved(steps, rounds, base)
    return {"dataset": name, "depth": depth, "batch": len(yb), **out}


def train_steps(
    name: str, rates: dict[str, Any], depth: int = 2
) -> tuple[dict[str, SoftShapeNet], dict[str, Callable[[], None]], tuple[torch.Tensor, torch.Tensor]]:
    """One train step (forward, backward, Adam) per variant on the fold-0 training batch of ``name``, every variant
    from the same weights (:func:`timing_net`); ``rates`` as in :func:`step_times`. Returns the networks, the step
    callables and the batch ``(x, y)``."""
    xb, yb, n_classes = _timing_batch(name)
    ref = timing_net(name, depth, 0.0, n_classes)
    nets, opts = {}, {}
    for v, r in rates.items():
        net = copy.deepcopy(ref)
        net.config = dataclasses.replace(net.config, **(r if isinstance(r, dict) else {"sparse_rate": r}))
        nets[v], opts[v] = net, torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(v: str) -> Callable[[], None]:
        def run() -> None:
            out = nets[v](xb, sparse=True)
            loss = F.cross_entropy(out.logits, yb) + 1e-3 * out.aux_loss
            opts[v].zero_grad(set_to_none=True)
            loss.backward()
            opts[v].step()

        return run

    return nets, {v: step(v) for v in rates}, (xb, yb)


def step_flops(name: str, depth: int, overrides: dict[str, Any]) -> int:
    """Matmul and convolution FLOPs (``torch.utils.flop_counter``) of one train step (forward + backward) on the
    fold-0 training batch of ``name``, for the :func:`timing_net` of ``depth`` with config ``overrides``: an exact,
    load-independent count beside the step times."""
    from torch.utils.flop_counter import FlopCounterMode

    xb, yb, n_classes = _timing_batch(name)
    net = timing_net(name, depth, 0.0, n_classes)
    net.config = dataclasses.replace(net.config, **overrides)
    with FlopCounterMode(display=False) as fc:
        out = net(xb, sparse=True)
        (F.cross_entropy(out.logits, yb) + 1e-3 * out.aux_loss).backward()
    return int(fc.get_total_flops())


def layer_step_times(
    name: str, depth: int, rounds: int, sparse_rate: float = 0.5, *, moe_reference: bool = True
) -> dict[str, Any]:
    """Per-layer step time (forward + backward of one layer) at every sparsified layer of the soft model of
    ``depth`` layers: the layer at its keep ratio r_l (soft sparsification, MoE, Inception) against the same layer
    on the same input tokens at r = 1 as the dense model runs it (no MoE: ``"dense"``) and at r = 1 with the MoE
    (``"dense_moe"``: the cost of sparsification alone; only with ``moe_reference``). Input tokens: the soft model's
    own input to that layer."""
    xb, _, n_classes = _timing_batch(name)
    net = timing_net(name, depth, sparse_rate, n_classes)
    ratios = net.config.keep_ratios
    with_moe = dataclasses.replace(net.config, moe_in_dense=True)
    without = net.config
    res: dict[str, Any] = {"dataset": name, "depth": depth, "keep_ratios": ratios, "layers": {}}
    with torch.no_grad():
        z = net.embed_shapes(xb)
        inputs = []
        for layer, r in enumerate(ratios):
            inputs.append(z.detach())
            z = F.gelu(net.layer(layer, z, r)[0])

    def run(layer: int, r: float, moe_in_dense: bool) -> Any:
        def f() -> None:
            net.config = with_moe if moe_in_dense else without
            out, aux, _, _, _ = net.layer(layer, inputs[layer], r)
            net.zero_grad(set_to_none=True)
            (out.mean() + 1e-3 * aux).backward()
            net.config = without

        return f

    for layer, r in enumerate(ratios):
        if r >= 1.0:
            continue
        fns = {"soft": run(layer, r, False), "dense": run(layer, 1.0, False)}
        if moe_reference:
            fns["dense_moe"] = run(layer, 1.0, True)
        timed = _interleaved(fns, rounds, "dense")
        timed["tokens_in"] = int(inputs[layer].shape[1])
        if moe_reference:
            timed["soft_over_dense_moe"] = float(timed["soft"]["median_s"] / timed["dense_moe"]["median_s"])
        res["layers"][f"layer {layer + 1}"] = timed
    return res


EFFICIENCY_VARIANTS = {
    "dense": {"sparse_rate": 0.0},
    "soft": {"sparse_rate": 0.5},
    "dense_moe": {"sparse_rate": 0.0, "moe_in_dense": True},
    "soft_moe": {"sparse_rate": 0.5, "moe_in_dense": True},
}


def efficiency(
    name: str,
    rounds: int,
    depths: tuple[int, ...] = (2, 3),
    moe_reference: bool = True,
    per_layer: bool = True,
    timed: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Claim 1's measurements on ``name`` at each depth: whole-model step times of the four
    :data:`EFFICIENCY_VARIANTS` (soft rho = 0.5 and dense rho = 0, each as the official code runs them -- the MoE
    only in sparsified layers -- and with the MoE in every layer, ``moe_in_dense``: like with like), their counted
    FLOPs, the FLOP floor of a sparsification that starts at layer 2 (the depth-1 model's FLOPs over the depth-d
    dense model's: every layer after the first free), and with ``per_layer`` the per-layer step times (soft layer
    vs the dense model's layer, and vs the same layer with the MoE with ``moe_reference``). ``timed``: the variants
    whose step times are measured (default all four; every variant's FLOPs are counted)."""
    flops = {d: {v: step_flops(name, d, o) for v, o in EFFICIENCY_VARIANTS.items()} for d in depths}
    variants = {v: o for v, o in EFFICIENCY_VARIANTS.items() if timed is None or v in timed}
    floor1 = {moe: step_flops(name, 1, {"moe_in_dense": moe}) for moe in (False, True)}
    return {
        "dataset": name,
        "whole": {d: step_times(name, variants, rounds, depth=d, base=next(iter(variants))) for d in depths},
        "flops": flops,
        "flop_floor": {
            d: {"dense": floor1[False] / flops[d]["dense"], "dense_moe": floor1[True] / flops[d]["dense_moe"]}
            for d in depths
        },
        "layers": {d: layer_step_times(name, d, rounds, moe_reference=moe_reference) for d in depths}
        if per_layer
        else {},
    }


def iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union


def occlude(X: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """``X`` (n, C, T) with each series' span ``[start, end)`` (``spans`` (n, 2)) replaced by the straight line
    between the values just outside it (the span's shape removed, the level kept)."""
    out = np.array(X, dtype=np.float64, copy=True)
    t = out.shape[-1]
    for i, (a, b) in enumerate(np.asarray(spans, dtype=np.int64)):
        left = out[i, :, a - 1] if a > 0 else out[i, :, b] if b < t else out[i, :, a]
        right = out[i, :, b] if b < t else left
        w = (np.arange(a, b) - (a - 1)) / (b - a + 1)
        out[i, :, a:b] = left[:, None] + (right - left)[:, None] * w[None, :]
    return out.astype(np.asarray(X).dtype)


def faithfulness(
    est: SoftShapeClassifier, X: np.ndarray, label: Any, *, n_random: int = 5, random_state: int = 0
) -> dict[str, float]:
    """Occlusion check of the explanation: mean |change of P(label)| when the top-1 explained span of each series is
    occluded (:func:`occlude`), and when a random span of the same length is (``n_random`` per series, starts
    uniform over the shape positions); ``margin`` = top - random (> 0: the explanation points at what the
    prediction uses)."""
    k = int(np.flatnonzero(est.classes_ == label)[0])
    p0 = est.predict_proba(X)[:, k]
    top = est.explain(X, top=1)[:, 0]
    d_top = np.abs(est.predict_proba(occlude(X, top))[:, k] - p0)
    rng = numpy_rng(random_state)
    m, q, n_shapes = est.config_.shape_size, est.config_.stride, est.config_.n_shapes
    d_rand = []
    for _ in range(n_random):
        start = rng.integers(0, n_shapes, size=len(X)) * q
        spans = np.stack([start, start + m], axis=1)
        d_rand.append(np.abs(est.predict_proba(occlude(X, spans))[:, k] - p0))
    top_mean, rand_mean = float(d_top.mean()), float(np.mean(d_rand))
    return {"delta_top": top_mean, "delta_random": rand_mean, "margin": top_mean - rand_mean}


def interpretability(epochs: int, n_cases: int, seed: int = 0) -> dict[str, Any]:
    """Fit on synthetic bump data (data and model seeded with ``seed``); IoU of each class-1 test series' top-1
    shape with the known window, for the explanation as defined (layer-1 scores: ``explain(X, top=1)``) and,
    beside it, the former definition (``layer="last"``); the occlusion check of :func:`faithfulness` (the top span
    vs random spans, and the true window as a reference)."""
    X, y, window = bump_dataset(n_cases=n_cases, n_timepoints=64, window=(24, 40), noise=0.1, random_state=seed)
    est = SoftShapeClassifier(
        shape_size=16, stride=4, epochs=epochs, warmup_epochs=epochs // 3, batch_size=32, random_state=seed
    )
    n_train = int(0.75 * n_cases)
    est.fit(X[:n_train], y[:n_train])
    Xte, yte = X[n_train:], y[n_train:]
    pos = Xte[yte == 1]
    spans = est.explain(pos, top=1)[:, 0]
    ious = np.array([iou(tuple(s), window) for s in spans])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # layer="last" warns that it does not localise
        last_spans = est.explain(pos, top=1, layer="last")[:, 0]
    last_ious = np.array([iou(tuple(s), window) for s in last_spans])
    scores, _ = est.shape_scores(pos)
    faith = faithfulness(est, pos, 1, random_state=seed)
    p0 = est.predict_proba(pos)[:, 1]
    true_span = np.tile(np.asarray(window), (len(pos), 1))
    faith["delta_true_window"] = float(np.abs(est.predict_proba(occlude(pos, true_span))[:, 1] - p0).mean())
    return {
        "seed": seed,
        "mean_iou": float(ious.mean()),
        "share_iou_gt_0.5": float((ious > 0.5).mean()),
        "mean_iou_last_layer_definition": float(last_ious.mean()),
        "score_spread": float(np.mean(scores.max(1) - scores.min(1))),
        "accuracy": float(est.score(Xte, yte)),
        "faithfulness": faith,
        "n_series": len(pos),
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
    variants, params)``, ``("efficiency", name, rounds, depths)``, ``("steps", name, rates, rounds)`` or
    ``("interp", epochs, n_cases)``."""
    with torch_threads(1):
        if kind == "fit":
            return fit_group(*args)
        if kind == "efficiency":
            return efficiency(*args)
        if kind == "steps":
            return step_times(*args)
        return interpretability(*args)


def reproduction_tasks(
    schedule: dict[str, Any],
    shared: dict[str, dict[str, Any]],
    separate: dict[str, dict[str, Any]],
    rates: dict[str, float] | None,
    interp: tuple[int, int],
    *,
    by_fold: bool,
    seed: int = 0,
    interp_seeds: list[int] | None = None,
) -> list[tuple[Any, ...]]:
    """The units of work of a reproduction, for :func:`run_tasks`: per (data set, fold) one shared-warm-up fit of the
    ``shared`` variants and one fit per ``separate`` variant (``schedule``: datasets, folds, epochs, warmup, early,
    batch, step_rounds, depths, per_layer), one MiniRocket fit per (data set, fold), claim 1's step timings per data
    set (whole model at each of ``depths``, per layer when ``per_layer``), a sparse-rate sweep of the step time at
    ``rates`` (when given) and one interpretability run ``interp = (epochs, n_cases)`` per seed of ``interp_seeds``
    (default ``[seed]``). ``seed``: the models' ``random_state`` and the fold split's seed ``42 + seed``.
    ``by_fold``: fold by fold (a run cut short holds whole folds); otherwise longest data set first."""

    def params(name: str) -> dict[str, Any]:
        keys = {"epochs": "epochs", "warmup_epochs": "warmup", "early_stopping": "early", "batch_size": "batch"}
        return {**{k: schedule[v] for k, v in keys.items()}, "random_state": seed, "shape_size": ucr_shape_size(name)}

    split = 42 + seed
    folds, names = schedule["folds"], schedule["datasets"]
    pairs = [(f, n) for f in folds for n in names] if by_fold else [(f, n) for n in names[::-1] for f in folds]
    tasks: list[tuple[Any, ...]] = []
    for f, name in pairs:
        tasks.append(("fit", name, f, shared, params(name), split))
        tasks += [("fit", name, f, {v: extra}, params(name), split) for v, extra in separate.items()]
    eff = (schedule["step_rounds"], tuple(schedule["depths"]), schedule["moe_reference"], schedule["per_layer"],
           schedule.get("timed"))  # fmt: skip
    tasks += [("efficiency", name, *eff) for name in names]
    if rates:
        tasks += [("steps", name, rates, schedule["step_rounds"]) for name in names]
    tasks += [("interp", *interp, s) for s in (interp_seeds or [seed])]
    # MiniRocket last: after aeon's MiniRocket has run in a process, torch's CPU time there grows about 15-fold
    # (measured: a 2.2 CPU-s timing took 31 CPU-s), which would inflate the timings and the quick budget
    mini = {"random_state": seed}
    return [*tasks, *[("fit", name, f, {"minirocket": {}}, mini, split) for name in names for f in folds]]


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


def task_name(task: tuple[Any, ...]) -> str:
    """A file-safe name of one task of :func:`reproduction_tasks` (the part it is stored as in a resumable run)."""
    kind = task[0]
    if kind == "fit":
        variants = list(task[3])
        return f"fit_{task[1]}_fold{task[2]}_{variants[0] if len(variants) == 1 else 'shared'}"
    if kind in ("efficiency", "steps"):
        return f"{kind}_{task[1]}"
    return f"interp_seed{task[3]}"


def run_tasks(tasks: list[tuple[Any, ...]], n_jobs: int | None = None, parts: Parts | None = None) -> list[Any]:
    """Run :func:`run_task` on every task with ``n_jobs`` joblib workers (default
    :func:`icml25_shared.device.worker_count`), in task order; each finished fit is logged. With ``parts`` the tasks
    run one after the other in this process, each stored as part :func:`task_name` when it finishes and read back
    instead of run when it finished before (a resumable run); results are then as stored (JSON: lists for arrays,
    string keys)."""
    outs = []
    with torch_threads(1):  # the main process does no torch work, but keep it to one thread too
        if parts is not None:
            results: Any = (parts.run(task_name(t), functools.partial(run_task, *t)) for t in tasks)
        else:
            from joblib import Parallel, delayed

            n_jobs = worker_count() if n_jobs is None else n_jobs
            results = Parallel(n_jobs=n_jobs, return_as="generator")(delayed(run_task)(*t) for t in tasks)
        for t, o in zip(tasks, results, strict=True):
            outs.append(o)
            if t[0] == "fit":
                logger.info("finished %s", o)
    return outs


def _datasets(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["dataset"] for r in rows))


def plot_accuracy(rows: list[dict[str, Any]], variants: list[str], out_dir: Path) -> str:
    """Mean test accuracy of every variant and MiniRocket per data set."""
    names, sets = [*variants, "minirocket"], _datasets(rows)
    fig, ax = subplots(1, 1, figsize=(8, 3.5))
    width = 0.8 / len(names)
    for j, v in enumerate(names):
        vals = [np.mean([r["accuracy"] for r in rows if r["dataset"] == d and r["variant"] == v]) for d in sets]
        ax.bar(np.arange(len(sets)) + j * width, vals, width, label=v)
    ax.set_xticks(np.arange(len(sets)) + 0.4 - width / 2, sets)
    ax.set_ylim(0.5, 1.0)
    ax.set_ylabel("test accuracy (merged folds)")
    ax.legend(fontsize=8, ncol=2)
    return str(save_figure(fig, out_dir, "accuracy"))


def efficiency_ratios(eff: dict[str, Any]) -> dict[str, float]:
    """Claim 1's ratios of one data set: ``depth d: whole model`` (soft / dense as the official code runs them),
    ``depth d: whole model, MoE in every layer`` (soft / dense, both with the MoE in every layer: like with like),
    the counted-FLOP ratios and floors, and per layer ``depth d: layer l`` (and ``... (vs dense + MoE)``)."""
    out: dict[str, float] = {}
    for d, whole in eff["whole"].items():
        if "soft" in whole and "dense" in whole:
            out[f"depth {d}: whole model"] = round(whole["soft"]["ratio_median_of_rounds"], 3)
        if "soft_moe" in whole:
            sm = np.median(np.asarray(whole["soft_moe"]["per_round_s"]) / np.asarray(whole["dense_moe"]["per_round_s"]))
            out[f"depth {d}: whole model, MoE in every layer"] = round(float(sm), 3)
        if "flops" in eff:
            fl = eff["flops"][d]
            out[f"depth {d}: FLOPs"] = round(fl["soft"] / fl["dense"], 3)
            out[f"depth {d}: FLOPs, MoE in every layer"] = round(fl["soft_moe"] / fl["dense_moe"], 3)
            out[f"depth {d}: FLOP floor, MoE in every layer"] = round(eff["flop_floor"][d]["dense_moe"], 3)
        for name, lay in eff.get("layers", {}).get(d, {}).get("layers", {}).items():
            out[f"depth {d}: {name}"] = round(lay["soft"]["ratio_median_of_rounds"], 3)
            if "soft_over_dense_moe" in lay:
                out[f"depth {d}: {name} (vs dense + MoE)"] = round(lay["soft_over_dense_moe"], 3)
    return out


def plot_steps(effs: dict[str, dict[str, Any]], out_dir: Path, threshold: float = 0.85) -> str:
    """Step-time ratios soft / dense per data set: whole model and each sparsified layer, at each depth."""
    fig, ax = subplots(1, 1, figsize=(8, 3.4))
    width = 0.8 / max(1, len(effs))
    labels: list[str] = []
    for j, (name, eff) in enumerate(effs.items()):
        ratios = {k: v for k, v in efficiency_ratios(eff).items() if "vs dense + MoE" not in k and "FLOP" not in k}
        labels = list(ratios)
        ax.bar(np.arange(len(ratios)) + j * width, list(ratios.values()), width, label=name)
    ax.axhline(threshold, color="k", ls="--", lw=1, label=f"claim line {threshold}")
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels, rotation=20, fontsize=7)
    ax.set_ylabel("step time soft / dense (median)")
    ax.legend(fontsize=8)
    return str(save_figure(fig, out_dir, "step_time"))


def plot_rates(
    rows: list[dict[str, Any]], sweeps: dict[str, dict[str, Any]], rates: dict[str, float], out_dir: Path
) -> str:
    """Accuracy and step time relative to the dense model against the sparse rate, per data set."""
    fig, axes = subplots(1, 2, figsize=(9, 3.2))
    for d in _datasets(rows):
        vals = [np.mean([r["accuracy"] for r in rows if r["dataset"] == d and r["variant"] == v]) for v in rates]
        axes[0].plot(list(rates.values()), vals, marker="o", label=d)
        steps = [sweeps[d][v]["ratio_median_of_rounds"] for v in rates]
        axes[1].plot(list(rates.values()), steps, marker="o", label=d)
    axes[0].set_xlabel("sparse rate")
    axes[0].set_ylabel("test accuracy")
    axes[1].set_xlabel("sparse rate")
    axes[1].set_ylabel("step time / dense")
    axes[0].legend(fontsize=8)
    return str(save_figure(fig, out_dir, "sparse_rate"))
