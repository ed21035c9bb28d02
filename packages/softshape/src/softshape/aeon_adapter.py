"""``SoftShapeAeonClassifier``: SoftShape behind aeon's ``BaseClassifier`` (extra ``[aeon]``), so that aeon's
benchmarking and pipeline tools can compare it with MiniRocket, RDST, ..."""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from aeon.classification.base import BaseClassifier
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("SoftShapeAeonClassifier needs aeon: pip install 'icml25-softshape[aeon]'") from err

from softshape.config import EvalSparse, Gating, Sparsify
from softshape.estimator import SoftShapeClassifier

__all__ = ["SoftShapeAeonClassifier"]


class SoftShapeAeonClassifier(BaseClassifier):
    """aeon ``BaseClassifier`` wrapper around :class:`~softshape.SoftShapeClassifier`.

    Takes every keyword argument of that class, with the same defaults (tested), so that aeon's tools can run the
    ablations (``sparsification``, ``use_moe``, ``use_inception``, ``gating``, ...). aeon converts the input to
    (n_cases, n_channels, n_timepoints) numpy; unequal-length collections arrive as a list of 2-D arrays and are
    zero-padded.
    """

    _tags = {
        "capability:multivariate": True,
        "capability:unequal_length": True,
        "capability:missing_values": False,
        "algorithm_type": "deeplearning",
        "X_inner_type": ["numpy3D", "np-list"],
        "python_dependencies": "torch",
        "non_deterministic": False,
        "cant_pickle": False,
    }

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
        random_state: int | None = None,
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
        super().__init__()
        if fill_nan:  # aeon checks for NaN before _fit; the inner estimator fills them
            self.set_tags(**{"capability:missing_values": True})

    def _estimator(self) -> SoftShapeClassifier:
        return SoftShapeClassifier(**self.get_params())

    def _fit(self, X: Any, y: np.ndarray) -> SoftShapeAeonClassifier:
        self.estimator_ = self._estimator().fit(X, y)
        return self

    def _predict_proba(self, X: Any) -> np.ndarray:
        proba = self.estimator_.predict_proba(X)
        # aeon orders columns by self.classes_ (np.unique of y), the same order as the inner estimator's classes_
        return proba

    def _predict(self, X: Any) -> np.ndarray:
        return self.estimator_.predict(X)

    @classmethod
    def _get_test_params(cls, parameter_set: str = "default") -> dict[str, Any]:
        """Small settings for aeon's estimator checks."""
        return {"emb_dim": 16, "epochs": 4, "warmup_epochs": 2, "random_state": 0}
