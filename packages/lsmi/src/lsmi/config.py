"""Validated configuration of the LSMI estimator (defaults: the official code's, spec section 8)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["LSMIConfig"]


def _pos_int(name: str, v: Any, minimum: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {v!r}")


@dataclass
class LSMIConfig:
    """Hyper-parameters of :class:`lsmi.LSMIEstimator`.

    Attributes:
        n_classes: number of label values C (>= 2).
        hidden: width of the three MLP classifiers (Linear-ReLU-Linear-ReLU-Linear).
        n_kernels: Gaussian kernels per KNIFE entropy estimator.
        epochs_clf, epochs_entropy: training epochs of the classifiers and of the KNIFEs.
        batch_size: minibatch size of both trainings.
        lr: Adam learning rate of both trainings.
        clf_lr_step, entropy_lr_step: StepLR step sizes (gamma 0.1) in epochs.
        prior: ``"empirical"`` (log training label frequencies) or ``"uniform"`` (log C, the official code).
        adjust: ``"mean_shift"`` (the dataset-level shift of the paper) or None (raw values).
        standardize: z-score each feature with training statistics (KNIFE's scales are bounded to (e^-1, e)).
        legacy_grad_accumulation: reproduce the official KNIFE loop that never zeroes gradients.
        units: ``"nats"`` or ``"bits"`` for the returned values.
        seed: seed of initialisation and batch order.
        device: torch device (None: ``icml25_shared.device.get_device()``).
    """

    n_classes: int
    hidden: int = 64
    n_kernels: int = 5
    epochs_clf: int = 30
    epochs_entropy: int = 30
    batch_size: int = 32
    lr: float = 1e-3
    clf_lr_step: int = 15
    entropy_lr_step: int = 20
    prior: str = "empirical"
    adjust: str | None = "mean_shift"
    standardize: bool = True
    legacy_grad_accumulation: bool = False
    units: str = "nats"
    seed: int = 0
    device: str | None = None

    def __post_init__(self) -> None:
        _pos_int("n_classes", self.n_classes, 2)
        _pos_int("hidden", self.hidden)
        _pos_int("n_kernels", self.n_kernels)
        _pos_int("epochs_clf", self.epochs_clf, 0)
        _pos_int("epochs_entropy", self.epochs_entropy, 0)
        _pos_int("batch_size", self.batch_size)
        _pos_int("clf_lr_step", self.clf_lr_step)
        _pos_int("entropy_lr_step", self.entropy_lr_step)
        _pos_int("seed", self.seed, 0)
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if self.prior not in ("empirical", "uniform"):
            raise ValueError(f"prior must be 'empirical' or 'uniform', got {self.prior!r}")
        if self.adjust not in ("mean_shift", None):
            raise ValueError(f"adjust must be 'mean_shift' or None, got {self.adjust!r}")
        if self.units not in ("nats", "bits"):
            raise ValueError(f"units must be 'nats' or 'bits', got {self.units!r}")

    def to_dict(self) -> dict:
        return asdict(self)
