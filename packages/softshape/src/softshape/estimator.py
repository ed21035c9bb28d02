"""``SoftShapeClassifier``: SoftShape as a scikit-learn classifier (fit/predict/predict_proba/score, clone-able,
``check_estimator``-compatible), with per-shape scores and explanations."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import warnings
import weakref
from itertools import chain
from typing import Any, cast

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, column_or_1d, validate_data

from icml25_shared.device import get_device, torch_threads
from icml25_shared.progress import track
from icml25_shared.validate import check_choice, check_float, check_int
from softshape.config import (
    EVAL_SPARSE_MODES,
    GATING_MODES,
    SPARSIFY_MODES,
    EvalSparse,
    Gating,
    SoftShapeConfig,
    Sparsify,
    resolve_shape_size,
)
from softshape.model import SoftShapeNet

__all__ = ["SoftShapeClassifier", "fit_shared_warmup", "to_3d"]

logger = logging.getLogger(__name__)


def _is_ragged(X: Any) -> bool:
    return isinstance(X, (list, tuple)) and len(X) > 0 and all(isinstance(x, np.ndarray) and x.ndim == 2 for x in X)


def _ndim(X: Any) -> int:
    if sp.issparse(X):  # sklearn's own error: sparse input is not supported
        check_array(X, accept_sparse=False, input_name="X")
    try:
        return int(np.asarray(X).ndim)
    except ValueError as err:
        raise ValueError(
            "X must be (n_cases, n_timepoints), (n_cases, n_channels, n_timepoints) or a list of 2-D numpy arrays, "
            f"got a {type(X).__name__} that numpy cannot read as an array ({err})"
        ) from err


def to_3d(X: Any, *, allow_nan: bool, length: int | None = None) -> tuple[np.ndarray, bool]:
    """X as float32 (n, C, T): 3-D arrays pass, 2-D (n, T) becomes (n, 1, T), a list of 2-D (C, T_i) arrays
    (unequal length) is zero-padded at the end to ``length`` (default: the longest) and longer ones truncated.

    Returns ``(X3, was_2d)``. NaN is allowed only when ``allow_nan``; inf never.
    """
    was_2d = False
    if _is_ragged(X):
        arrs = [check_array(x, dtype="float32", ensure_all_finite="allow-nan", input_name="X") for x in X]
        channels = {a.shape[0] for a in arrs}
        if len(channels) != 1:
            raise ValueError(f"X: every series of a list must have the same channel count, got {sorted(channels)}")
        target = length or max(a.shape[1] for a in arrs)
        if any(a.shape[1] > target for a in arrs):
            logger.warning(
                "X: %d series longer than %d time points were truncated", sum(a.shape[1] > target for a in arrs), target
            )
        out = np.zeros((len(arrs), arrs[0].shape[0], target), dtype=np.float32)
        for i, a in enumerate(arrs):
            t = min(target, a.shape[1])
            out[i, :, :t] = a[:, :t]
        X3 = out
    else:
        ndim = _ndim(X)
        if ndim not in (2, 3):
            shape = getattr(X, "shape", None)
            hint = "; Reshape your data with X.reshape(1, -1) for a single series" if ndim == 1 else ""
            raise ValueError(
                f"X must be (n_cases, n_timepoints), (n_cases, n_channels, n_timepoints) or a list of 2-D arrays, "
                f"got an array with {ndim} dimensions (shape {shape}){hint}"
            )
        X3 = check_array(X, dtype="float32", allow_nd=True, ensure_all_finite="allow-nan", input_name="X")
        if X3.ndim == 2:
            X3 = X3[:, None, :]
            was_2d = True
    if np.isinf(X3).any():
        raise ValueError("X contains inf; expected finite values (NaN only with fill_nan=True)")
    if not allow_nan and np.isnan(X3).any():
        raise ValueError(
            "X contains NaN and fill_nan=False; expected finite values (pass fill_nan=True to fill NaN with the "
            "training column means)"
        )
    return np.ascontiguousarray(X3), was_2d


class _Float64Copy:
    """The float64 inference copy of a network, rebuilt whenever the network changes: another network object, or
    any parameter or buffer replaced, moved or modified in place (an optimiser step, ``load_state_dict``, ``.to``),
    seen through each tensor's storage pointer and autograd version counter. Never pickled or deep-copied (a
    pickle carries the weights once; the copy is rebuilt on first use)."""

    def __init__(self) -> None:
        self._ref: weakref.ref | None = None
        self._key: tuple | None = None
        self._net: SoftShapeNet | None = None

    @staticmethod
    def _state(net: SoftShapeNet) -> tuple:
        return tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in chain(net.parameters(), net.buffers()))

    def get(self, net: SoftShapeNet) -> SoftShapeNet:
        key = self._state(net)
        if self._net is None or self._ref is None or self._ref() is not net or self._key != key:
            self._net = copy.deepcopy(net).double().eval()
            self._ref, self._key = weakref.ref(net), key
        return self._net

    def __getstate__(self) -> dict:
        return {"_ref": None, "_key": None, "_net": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __deepcopy__(self, memo: dict) -> _Float64Copy:
        return _Float64Copy()


class SoftShapeClassifier(ClassifierMixin, BaseEstimator):
    """SoftShape (Liu et al., ICML 2025): soft sparse shapes for time-series classification.

    The series is cut into overlapping shapes (``Conv1d`` of width ``shape_size``, stride ``stride``); every layer
    scores the shapes, keeps the top ``1 - sparse_rate_l`` weighted by their scores and fuses the others into one
    token, learns intra-shape patterns with a learnable top-1 router over ``n_experts`` experts and inter-shape
    patterns with an Inception expert; a score-weighted MIL head classifies. Trained with Adam on
    CE + ``aux_weight`` x MoE balance loss, selecting the epoch of minimum validation loss (after warm-up).

    Parameters:
        shape_size: ``"auto"`` (m = clip(round(0.1 T), 4, 64)), an int m, a float ratio of T in (0, 1], or a UCR name
            in the table (see :func:`softshape.ucr_shape_size`).
        stride: stride q (if m <= q the official rule sets q = min(2, m)).
        emb_dim: token width D (multiple of 4).
        depth: number of layers L.
        sparse_rate: final sparse rate rho in [0, 1) (layer l keeps 1 - linspace(0, rho, L)[l]).
        n_experts: ``"n_classes"`` (the paper) or an int.
        top_k: experts per token.
        gating: ``"switch"`` (the gate is the router probability, so the router learns; Switch balance loss) or
            ``"official"`` (the official code: renormalised top-1 gate = 1, the router never learns); see
            :class:`~softshape.layers.SharedMoE`.
        warmup_epochs: epochs trained densely before sparsification starts.
        aux_weight: weight of the MoE balance loss.
        epochs: maximum epochs.
        batch_size: mini-batch size (capped at the training-set size).
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        dropout: dropout rate.
        early_stopping: stop after this many post-warm-up epochs of flat (|delta| <= 1e-4) or rising validation loss;
            ``None`` or 0 disables it.
        validation_fraction: stratified share of the training data held out for model selection (0: none, the last
            epoch is kept).
        eval_sparse: ``"match_train"`` (sparse at inference iff the selected epoch trained sparsely), ``"always"``
            (the official code) or ``"never"``.
        fill_nan: fill NaN with the training column means (all-NaN columns: 1e-6); otherwise NaN raises.
        sparsification: ``"soft"`` (the paper), ``"hard"`` (drop non-kept shapes) or ``"none"`` (ablations). (Not
            called ``sparsify``: that is the name of a method of scikit-learn's linear models.)
        use_moe: ablation switch: run the shared MoE.
        use_inception: ablation switch: run the Inception expert.
        device: ``"cpu"``, ``"cuda"``, ``"auto"`` ...
        random_state: seed (int), ``RandomState`` or ``None``.
        verbose: progress bar over epochs.
        n_threads: torch intra-op threads for fit and inference (the caller's setting is restored afterwards);
            ``None`` keeps the caller's. One by default: the model is small, and on a busy machine more threads
            wait far longer than they compute (an aeon fit earlier in the process can also leave torch at two).

    Attributes:
        classes_: the class labels seen in fit.
        n_channels_: channels C of the training series.
        n_timepoints_: length T of the (padded) training series.
        config_: the resolved :class:`~softshape.config.SoftShapeConfig`.
        network_: the fitted :class:`~softshape.model.SoftShapeNet`.
        history_: per-epoch losses.
        best_epoch_: the selected epoch.
        sparse_inference_: whether inference runs sparsely.
        expert_utilisation_: share of the training tokens routed to each expert by the fitted model, in its
            inference mode (NaN where no layer runs the MoE).
        nan_fill_: the training column means used to fill NaN (with ``fill_nan``).
        n_features_in_: number of features (2-D input only).
    """

    n_features_in_: int  # set by fit on 2-D input (sklearn convention), absent otherwise
    _defer_training: bool  # set only while fit_shared_warmup builds the variants (fit stops after the warm-up)

    def __init__(
        self,
        shape_size: int | float | str = "auto",
        stride: int = 4,
        emb_dim: int = 128,
        depth: int = 2,
        sparse_rate: float = 0.5,
        n_experts: int | str = "n_classes",
        top_k: int = 1,
        gating: Gating = "switch",
        warmup_epochs: int = 150,
        aux_weight: float = 1e-3,
        epochs: int = 500,
        batch_size: int = 512,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        dropout: float = 0.15,
        early_stopping: int | None = 80,
        validation_fraction: float = 0.25,
        eval_sparse: EvalSparse = "match_train",
        fill_nan: bool = False,
        sparsification: Sparsify = "soft",
        use_moe: bool = True,
        use_inception: bool = True,
        device: str = "cpu",
        random_state: int | np.random.RandomState | None = None,
        verbose: bool = False,
        n_threads: int | None = 1,
    ) -> None:
        self.shape_size = shape_size
        self.stride = stride
        self.emb_dim = emb_dim
        self.depth = depth
        self.sparse_rate = sparse_rate
        self.n_experts = n_experts
        self.top_k = top_k
        self.gating = gating
        self.warmup_epochs = warmup_epochs
        self.aux_weight = aux_weight
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.dropout = dropout
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.eval_sparse = eval_sparse
        self.fill_nan = fill_nan
        self.sparsification = sparsification
        self.use_moe = use_moe
        self.use_inception = use_inception
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.n_threads = n_threads

    def _threads(self) -> contextlib.AbstractContextManager[None]:
        # torch's intra-op threads for fit and inference, the caller's count restored afterwards (None: theirs)
        return torch_threads(getattr(self, "n_threads", 1))  # estimators unpickled from before the parameter existed

    # ------------------------------------------------------------------ checks
    def _check_params(self) -> None:
        # sklearn's convention: the constructor stores, fit validates (and leaves the stored values alone)
        check_int("epochs", self.epochs, min=1)
        check_int("n_threads", self.n_threads, min=1, allow_none=True)
        check_int("batch_size", self.batch_size, min=1)
        check_int("warmup_epochs", self.warmup_epochs, min=0)
        check_int("early_stopping", self.early_stopping, min=0, allow_none=True)
        check_float("lr", self.lr, min=0.0, min_open=True)
        check_float("weight_decay", self.weight_decay, min=0.0)
        check_float("aux_weight", self.aux_weight, min=0.0)
        check_float("validation_fraction", self.validation_fraction, min=0.0, max=1.0, max_open=True)
        check_choice("eval_sparse", self.eval_sparse, EVAL_SPARSE_MODES)
        check_choice("sparsification", self.sparsification, SPARSIFY_MODES)
        check_choice("gating", self.gating, GATING_MODES)
        if self.n_experts != "n_classes":
            check_int("n_experts ('n_classes' or an int)", self.n_experts)

    def _validate_X(self, X: Any, *, fitting: bool, y: Any = None) -> tuple[np.ndarray, Any]:
        """(n, C, T) float32 (and y when fitting)."""
        if not _is_ragged(X) and _ndim(X) == 2:
            kw: dict[str, Any] = {"dtype": np.float32, "ensure_all_finite": "allow-nan"}
            if fitting:
                X, y = validate_data(self, X, y, reset=True, **kw)
            else:
                X = validate_data(self, X, reset=False, **kw)
        elif fitting:
            if y is None:
                raise ValueError("SoftShapeClassifier requires y to be passed, but the target y is None")
            if hasattr(self, "n_features_in_"):
                del self.n_features_in_
        length = None if fitting else self.n_timepoints_
        X3, _ = to_3d(X, allow_nan=self.fill_nan, length=length if _is_ragged(X) else None)
        if X3.shape[0] == 0:
            raise ValueError("X has 0 cases; expected at least 1")
        if not fitting:
            if X3.shape[1] != self.n_channels_:
                raise ValueError(f"X has {X3.shape[1]} channels, but the classifier was fitted with {self.n_channels_}")
            if X3.shape[2] != self.n_timepoints_:
                raise ValueError(
                    f"X has {X3.shape[2]} time points, but the classifier was fitted with {self.n_timepoints_} "
                    "(pass unequal-length data as a list of 2-D arrays to pad/truncate)"
                )
        if self.fill_nan and np.isnan(X3).any():
            fill = self.nan_fill_ if not fitting else None
            if fill is not None:
                X3 = np.where(np.isnan(X3), fill[None], X3).astype(np.float32)
        return X3, y

    # --------------------------------------------------------------- training
    def fit(self, X: Any, y: Any) -> SoftShapeClassifier:
        """Train on X (n, C, T), (n, T) or a list of (C, T_i) arrays and labels y (n,)."""
        self._check_params()
        X3, y = self._validate_X(X, fitting=True, y=y)
        y = column_or_1d(y, warn=True)
        if len(y) != X3.shape[0]:
            raise ValueError(f"X and y must have the same length, got len(X)={X3.shape[0]} and len(y)={len(y)}")
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y has only one class ({self.classes_[0]!r}); SoftShape needs at least 2 classes")
        self.n_channels_, self.n_timepoints_ = int(X3.shape[1]), int(X3.shape[2])
        if self.fill_nan:
            with np.errstate(all="ignore"):
                counts = (~np.isnan(X3)).sum(axis=0)
                sums = np.nansum(X3, axis=0)
            self.nan_fill_ = np.where(counts > 0, sums / np.maximum(counts, 1), 1e-6).astype(np.float32)
            X3 = np.where(np.isnan(X3), self.nan_fill_[None], X3).astype(np.float32)
        m = resolve_shape_size(self.shape_size, self.n_timepoints_)
        n_classes = len(self.classes_)
        n_experts = n_classes if self.n_experts == "n_classes" else int(self.n_experts)
        self.config_ = SoftShapeConfig(
            n_timepoints=self.n_timepoints_,
            n_classes=n_classes,
            n_channels=self.n_channels_,
            shape_size=m,
            stride=self.stride,
            emb_dim=self.emb_dim,
            depth=self.depth,
            sparse_rate=self.sparse_rate,
            n_experts=n_experts,
            top_k=self.top_k,
            gating=cast(Gating, self.gating),
            dropout=self.dropout,
            sparsify=cast(Sparsify, self.sparsification),
            use_moe=self.use_moe,
            use_inception=self.use_inception,
        )
        seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
        device = get_device(None if self.device == "auto" else self.device)
        self._device = device
        self._fit_data = (X3, y_enc.astype(np.int64), seed)
        try:
            if not getattr(self, "_defer_training", False):
                with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                    torch.manual_seed(seed)
                    self._train(X3, y_enc.astype(np.int64), seed, device)
        finally:
            if not getattr(self, "_defer_training", False):
                del self._fit_data
        return self

    def _split(self, y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(y)
        n_val = int(round(self.validation_fraction * n))
        if n_val == 0 or n - n_val < 1:
            return np.arange(n), np.arange(0)
        try:
            sss = StratifiedShuffleSplit(n_splits=1, test_size=n_val, random_state=seed)
            tr, va = next(sss.split(np.zeros(n), y))
        except ValueError:  # a class with one member: fall back to a plain random split
            perm = np.random.default_rng(seed).permutation(n)
            tr, va = perm[n_val:], perm[:n_val]
        return np.sort(tr), np.sort(va)

    def _train(
        self,
        X: np.ndarray,
        y: np.ndarray,
        seed: int,
        device: torch.device,
        *,
        resume: dict[str, Any] | None = None,
        stop_at: int | None = None,
    ) -> dict[str, Any] | None:
        """The training loop (on :attr:`n_threads` threads). ``resume`` continues from a state returned by an earlier
        call with ``stop_at`` (which returns the full loop state at the start of epoch ``stop_at`` instead of
        finishing the fit)."""
        with self._threads():
            return self._train_loop(X, y, seed, device, resume=resume, stop_at=stop_at)

    def _train_loop(
        self,
        X: np.ndarray,
        y: np.ndarray,
        seed: int,
        device: torch.device,
        *,
        resume: dict[str, Any] | None,
        stop_at: int | None,
    ) -> dict[str, Any] | None:
        net = SoftShapeNet(self.config_).to(device)
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        tr, va = self._split(y, seed)
        Xtr, ytr = torch.from_numpy(X[tr]).to(device), torch.from_numpy(y[tr]).to(device)
        Xva, yva = torch.from_numpy(X[va]).to(device), torch.from_numpy(y[va]).to(device)
        gen = torch.Generator().manual_seed(seed)
        bs = min(self.batch_size, len(tr))
        warm = self.warmup_epochs
        select_from = warm if self.epochs > warm else 0
        best_loss, best_state, best_epoch, best_sparse = math.inf, None, -1, False
        history: list[dict[str, float]] = []
        flat = rising = 0
        prev_val = None
        start = 0
        if resume is not None:
            net.load_state_dict(resume["net"])
            opt.load_state_dict(copy.deepcopy(resume["opt"]))  # Adam would update the shared tensors in place
            gen.set_state(resume["gen"])
            torch.set_rng_state(resume["rng"])
            history, start = copy.deepcopy(resume["history"]), resume["epoch"]
        bar = track(range(start, self.epochs), "SoftShape fit", disable=not self.verbose)
        for epoch in bar:
            if epoch == stop_at:
                return {
                    "net": copy.deepcopy(net.state_dict()),
                    "opt": copy.deepcopy(opt.state_dict()),
                    "gen": gen.get_state(),
                    "rng": torch.get_rng_state(),
                    "history": copy.deepcopy(history),
                    "epoch": epoch,
                }
            sparse = epoch >= warm
            net.train()
            perm = torch.randperm(len(tr), generator=gen).to(device)
            tot, n_seen = 0.0, 0
            for start in range(0, len(tr), bs):
                idx = perm[start : start + bs]
                out = net(Xtr[idx], sparse=sparse)
                loss = F.cross_entropy(out.logits, ytr[idx]) + self.aux_weight * out.aux_loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                tot += float(loss.detach()) * len(idx)
                n_seen += len(idx)
            rec = {"epoch": epoch, "train_loss": tot / n_seen, "sparse": float(sparse)}
            if len(va) and epoch >= select_from:  # validation only where it can select or stop
                val = self._loss(net, Xva, yva, self._eval_mode(sparse))
                rec["val_loss"] = val
                if val < best_loss:
                    best_loss, best_epoch, best_sparse = val, epoch, sparse
                    best_state = copy.deepcopy(net.state_dict())
                if epoch >= warm and prev_val is not None and self.early_stopping:
                    flat = flat + 1 if abs(val - prev_val) <= 1e-4 else 0
                    rising = rising + 1 if val > prev_val else 0
                prev_val = val
            history.append(rec)
            if self.verbose:
                bar.set_postfix(loss=f"{rec['train_loss']:.4f}", val=f"{rec.get('val_loss', float('nan')):.4f}")
            if self.early_stopping and (flat >= self.early_stopping or rising >= self.early_stopping):
                break
        if best_state is None:  # no validation data: keep the last epoch
            best_epoch, best_sparse = history[-1]["epoch"], bool(history[-1]["sparse"])
        else:
            net.load_state_dict(best_state)
        net.eval()
        self.network_ = net
        self.history_ = history
        self.best_epoch_ = int(best_epoch)
        self.sparse_inference_ = self._eval_mode(best_sparse)
        self._net64 = _Float64Copy()
        self.expert_utilisation_ = self.expert_utilisation(X)
        return None

    def _eval_mode(self, trained_sparse: bool) -> bool:
        if self.eval_sparse == "always":
            return True
        if self.eval_sparse == "never":
            return False
        return trained_sparse

    @torch.no_grad()
    def _loss(self, net: SoftShapeNet, X: torch.Tensor, y: torch.Tensor, sparse: bool) -> float:
        net.eval()
        total = 0.0
        for start in range(0, len(X), 512):
            out = net(X[start : start + 512], sparse=sparse)
            total += float(F.cross_entropy(out.logits, y[start : start + 512], reduction="sum"))
        net.train()
        return total / len(X)

    # -------------------------------------------------------------- inference
    def _check_fitted(self) -> None:
        check_is_fitted(self, "network_")

    def _inference_net(self) -> SoftShapeNet:
        """A float64 copy of the fitted network, so that a case's prediction does not depend on the other cases of
        its batch (float32 convolutions pick batch-size-dependent algorithms, differences ~1e-7). The copy follows
        ``network_``: it is rebuilt after any change of its parameters (an optimiser step in a custom loop,
        ``load_state_dict``) or of the object itself, so predictions are never those of older weights."""
        holder = getattr(self, "_net64", None)
        if not isinstance(holder, _Float64Copy):  # an estimator unpickled from an older version, or set by hand
            return copy.deepcopy(self.network_).double().eval()
        return holder.get(self.network_)

    @torch.no_grad()
    def _run(self, X: Any, *, return_scores: bool = False) -> dict[str, np.ndarray]:
        with self._threads():
            return self._run_batches(X, return_scores=return_scores)

    def _run_batches(self, X: Any, *, return_scores: bool) -> dict[str, np.ndarray]:
        self._check_fitted()
        X3, _ = self._validate_X(X, fitting=False)
        net = self._inference_net()
        dev = next(net.parameters()).device
        parts: dict[str, list[np.ndarray]] = {}
        for start in range(0, len(X3), 512):
            xb = torch.from_numpy(X3[start : start + 512]).to(dev, torch.float64)
            out = net(xb, sparse=self.sparse_inference_, return_scores=return_scores)
            parts.setdefault("logits", []).append(out.logits.cpu().numpy())
            if return_scores:
                parts.setdefault("scores", []).append(out.scores.cpu().numpy())
                parts.setdefault("kept", []).append(out.kept.cpu().numpy())
                parts.setdefault("layer_scores", []).append(out.layer_scores.cpu().numpy())
                parts.setdefault("counts", []).append(out.expert_counts.cpu().numpy()[None])
        res = {k: np.concatenate(v, axis=1 if k == "layer_scores" else 0) for k, v in parts.items()}
        if "counts" in res:
            res["counts"] = res["counts"].sum(0)
        return res

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (n, K) in the order of ``classes_`` (computed in float64: independent of how the
        cases are batched)."""
        logits = self._run(X)["logits"]
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels (n,)."""
        logits = self._run(X)["logits"]
        return self.classes_[logits.argmax(axis=1)]

    def expert_utilisation(self, X: Any) -> np.ndarray:
        """Share of the token slots of ``X`` routed to each expert (E,), summed over the layers that run the MoE, in
        the inference mode of the fitted model; NaN when no layer runs the MoE (dense inference, ``use_moe=False``)."""
        counts = self._run(X, return_scores=True)["counts"].astype(np.float64)
        total = counts.sum()
        return counts / total if total > 0 else np.full_like(counts, np.nan)

    def shape_scores(
        self, X: Any, *, layer: int | str = 1, aggregate: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Contribution scores of the input subsequences ("shapes") and the mask of shapes kept by every
        sparsification.

        The explanation is defined on the input: by default (``layer=1``) the scores the first layer gives to its
        tokens, which are the input subsequences themselves (shape j covers time steps ``[j q, j q + m)``). Deeper
        layers score tokens that the Inception expert has already mixed with their neighbours (kernels up to 39
        tokens wide), so their scores no longer point at one subsequence.

        Args:
            X: series as for :meth:`predict`.
            layer: 1..L, the layer whose input-token scores are returned (NaN for shapes that an earlier layer
                merged into the fused token or dropped), or ``"last"``: each shape's score at the last layer at
                which it was still an individual token.
            aggregate: ``None`` (one score per shape, (n, M)), or ``"mean"`` / ``"max"``: mapped to time positions
                (n, T), each time step getting the mean / max score of the shapes that cover it (NaN for time steps
                no shape covers, i.e. the tail cut by the stride); the kept mask becomes "covered by a kept shape".

        Returns:
            ``(scores, kept)``: (n, M) each, or (n, T) each with ``aggregate``.
        """
        self._check_fitted()
        depth = self.config_.depth
        if layer != "last" and (
            isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 1 <= layer <= depth
        ):
            raise ValueError(f"layer must be an int in [1, {depth}] (the model's depth) or 'last', got {layer!r}")
        if aggregate is not None:
            check_choice("aggregate", aggregate, ("mean", "max"))
        if layer == "last":
            warnings.warn(
                'shape_scores(layer="last") does not localise input subsequences: past layer 1 the scored tokens '
                "are mixed with their neighbours by the Inception expert (on the synthetic bump task its top-1 "
                "shape misses the bump window: IoU 0.0 to 0.26); use the default layer=1 for explanations",
                UserWarning,
                stacklevel=2,
            )
        res = self._run(X, return_scores=True)
        scores = res["scores"] if layer == "last" else res["layer_scores"][int(layer) - 1]
        kept = res["kept"]
        if aggregate is None:
            return scores, kept
        return self._to_time(scores, aggregate), self._to_time(kept.astype(np.float64), "max") > 0

    def _to_time(self, per_shape: np.ndarray, how: str) -> np.ndarray:
        """(n, M) values per shape -> (n, T) per time step: mean or max over the shapes covering each step."""
        m, q, t = self.config_.shape_size, self.config_.stride, self.n_timepoints_
        n_shapes = per_shape.shape[1]
        cover = np.zeros((n_shapes, t), dtype=bool)  # cover[j, s]: shape j covers time step s
        for j in range(n_shapes):
            cover[j, j * q : j * q + m] = True
        vals = np.where(cover[None], per_shape[:, :, None], np.nan)  # (n, M, T)
        covered = cover.any(axis=0)
        out = np.full((per_shape.shape[0], t), np.nan)
        with np.errstate(all="ignore"):
            reduce = np.nanmean if how == "mean" else np.nanmax
            out[:, covered] = reduce(vals[:, :, covered], axis=1)
        return out

    def explain(self, X: Any, top: int = 5, *, layer: int | str = 1) -> np.ndarray:
        """The ``top`` highest-scored shapes of each series (scores of :meth:`shape_scores` at ``layer``, default
        the first layer) as ``(start, end)`` time indices of the input (end exclusive): an int array (n, top, 2),
        highest score first. Shapes without a score at ``layer`` (NaN) rank last."""
        self._check_fitted()
        m_shapes = self.config_.n_shapes
        if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or not 1 <= top <= m_shapes:
            raise ValueError(f"top must be an int in [1, {m_shapes}] (the number of shapes), got {top!r}")
        scores, _ = self.shape_scores(X, layer=layer)
        order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), axis=1, kind="stable")[:, :top]
        start = order * self.config_.stride
        return np.stack([start, start + self.config_.shape_size], axis=-1).astype(np.int64)

    # -------------------------------------------------------------- save/load
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the fitted model (parameters, config, classes, weights) to ``path`` with ``torch.save``."""
        self._check_fitted()
        params = {k: v for k, v in self.get_params().items() if k != "random_state" or not hasattr(v, "rand")}
        meta = {
            "params": params,
            "config": self.config_.to_dict(),
            "classes": self.classes_.tolist(),
            "n_channels": self.n_channels_,
            "n_timepoints": self.n_timepoints_,
            "best_epoch": self.best_epoch_,
            "sparse_inference": self.sparse_inference_,
            "expert_utilisation": [float(v) for v in self.expert_utilisation_],
            "n_features_in": getattr(self, "n_features_in_", None),
        }
        blob: dict[str, Any] = {"meta": json.dumps(meta), "state_dict": self.network_.state_dict()}
        if hasattr(self, "nan_fill_"):
            blob["nan_fill"] = torch.from_numpy(self.nan_fill_)
        torch.save(blob, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], device: str = "cpu") -> SoftShapeClassifier:
        """Read a model written by :meth:`save` (``weights_only`` loading, no pickle)."""
        blob = torch.load(path, map_location=device, weights_only=True)
        meta = json.loads(blob["meta"])
        clf = cls(**meta["params"])
        cfg = meta["config"]
        cfg["inception_kernels"] = tuple(cfg["inception_kernels"])
        clf.config_ = SoftShapeConfig(**cfg)
        clf.network_ = SoftShapeNet(clf.config_).to(device)
        clf.network_.load_state_dict(blob["state_dict"])
        clf.network_.eval()
        clf.classes_ = np.asarray(meta["classes"])
        clf.n_channels_, clf.n_timepoints_ = meta["n_channels"], meta["n_timepoints"]
        clf.best_epoch_, clf.sparse_inference_ = meta["best_epoch"], meta["sparse_inference"]
        clf._net64 = _Float64Copy()
        clf.expert_utilisation_ = np.asarray(meta["expert_utilisation"], dtype=np.float64)
        if meta["n_features_in"] is not None:
            clf.n_features_in_ = meta["n_features_in"]
        if "nan_fill" in blob:
            clf.nan_fill_ = blob["nan_fill"].numpy()
        return clf

    def expected_failed_checks(self) -> dict[str, str]:
        """The scikit-learn estimator checks this estimator may fail, with the reason, for
        ``check_estimator(est, expected_failed_checks=est.expected_failed_checks())`` or
        ``parametrize_with_checks([est], expected_failed_checks=lambda e: e.expected_failed_checks())`` (scikit-learn
        >= 1.6 declares expected failures there; its tags have no such field).

        ``check_classifiers_train`` asks for accuracy > 0.83 on its blobs after one ``fit``: a network needs enough
        epochs for that. It fails with the package's fast test settings (``epochs=2``) and passes with a learning
        configuration (``emb_dim=8, epochs=40, warmup_epochs=5, lr=0.02, dropout=0``); declared whenever fewer than
        35 post-warm-up epochs are configured."""
        if self.epochs - self.warmup_epochs >= 35:
            return {}
        return {
            "check_classifiers_train": (
                f"epochs={self.epochs} (warm-up {self.warmup_epochs}) is too short to reach the accuracy > 0.83 "
                "that the check asks on its blobs; it passes with epochs=40, warmup_epochs=5, lr=0.02"
            )
        }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = bool(self.fill_nan)
        tags.non_deterministic = False
        return tags


# parameters that act only after warm-up (every warm-up epoch is dense, whatever their values; dense layers do not
# apply the MoE, whose parameters are created either way, so use_moe and gating too)
_POST_WARMUP_PARAMS = frozenset({"sparse_rate", "sparsification", "eval_sparse", "early_stopping", "use_moe", "gating"})


def fit_shared_warmup(
    estimator: SoftShapeClassifier, variants: dict[str, dict[str, Any]], X: Any, y: Any
) -> dict[str, SoftShapeClassifier]:
    """Fit several variants of ``estimator`` that differ only in parameters acting after warm-up (``sparse_rate``,
    ``sparsification``, ``eval_sparse``, ``early_stopping``, ``use_moe``, ``gating``), running the shared warm-up
    epochs once.

    Every warm-up epoch is dense and validation starts after warm-up, so the variants' first ``warmup_epochs`` epochs
    are the same computation (same initialisation, batches, dropout draws); the loop state (weights, Adam state,
    batch and dropout generators) is captured at the end of warm-up and each variant continues from a copy. Each
    returned estimator equals ``clone(estimator).set_params(**params).fit(X, y)`` (tested to identical
    ``predict_proba`` on CPU).

    Args:
        estimator: the base (unfitted) classifier.
        variants: name -> parameter overrides (only the keys above).
        X, y: training data as for :meth:`SoftShapeClassifier.fit`.

    Returns:
        name -> fitted classifier, in the order of ``variants``.
    """
    from sklearn.base import clone

    if not variants:
        raise ValueError("variants must name at least one parameter set, got an empty dict")
    for name, params in variants.items():
        bad = sorted(set(params) - _POST_WARMUP_PARAMS)
        if bad:
            raise ValueError(
                f"variants[{name!r}] sets {bad}, which change the warm-up; only {sorted(_POST_WARMUP_PARAMS)} "
                "can share it"
            )
    if isinstance(estimator.random_state, bool) or not isinstance(estimator.random_state, (int, np.integer)):
        raise ValueError(
            f"random_state must be an int to share the warm-up (same seed for every variant), got "
            f"{estimator.random_state!r}"
        )
    ests = {name: cast(SoftShapeClassifier, clone(estimator)).set_params(**params) for name, params in variants.items()}
    warm = estimator.warmup_epochs
    if warm == 0 or estimator.epochs <= warm:  # nothing to share (validation starts at epoch 0)
        return {name: est.fit(X, y) for name, est in ests.items()}
    state: dict[str, Any] | None = None
    for est in ests.values():
        est._defer_training = True
        try:
            est.fit(X, y)  # validation and set-up only
        finally:
            del est._defer_training
        X3, y_enc, seed = est._fit_data
        del est._fit_data
        device = est._device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            if state is None:
                state = est._train(X3, y_enc, seed, device, stop_at=warm)
            est._train(X3, y_enc, seed, device, resume=state)
    return ests
