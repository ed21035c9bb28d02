"""Validated configuration of the LSMI estimator (defaults: the official code's ``cfgs/train.yaml``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = ["LSMIConfig"]


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
    prior: Literal["empirical", "uniform"] = "empirical"
    adjust: Literal["mean_shift"] | None = "mean_shift"
    standardize: bool = True
    legacy_grad_accumulation: bool = False
    units: Literal["nats", "bits"] = "nats"
    seed: int = 0
    device: str | None = None

    def __post_init__(self) -> None:
        self.n_classes = check_int("n_classes", self.n_classes, min=2)
        self.hidden = check_int("hidden", self.hidden, min=1)
        self.n_kernels = check_int("n_kernels", self.n_kernels, min=1)
        self.epochs_clf = check_int("epochs_clf", self.epochs_clf, min=0)
        self.epochs_entropy = check_int("epochs_entropy", self.epochs_entropy, min=0)
        self.batch_size = check_int("batch_size", self.batch_size, min=1)
        self.clf_lr_step = check_int("clf_lr_step", self.clf_lr_step, min=1)
        self.entropy_lr_step = check_int("entropy_lr_step", self.entropy_lr_step, min=1)
        self.seed = check_int("seed", self.seed, min=0)
        self.lr = check_float("lr", self.lr, min=0.0, min_open=True)
        self.prior = check_choice("prior", self.prior, ("empirical", "uniform"))
        self.adjust = check_choice("adjust", self.adjust, ("mean_shift", None))
        self.standardize = check_bool("standardize", self.standardize)
        self.legacy_grad_accumulation = check_bool("legacy_grad_accumulation", self.legacy_grad_accumulation)
        self.units = check_choice("units", self.units, ("nats", "bits"))

    def to_dict(self) -> dict:
        return asdict(self)
