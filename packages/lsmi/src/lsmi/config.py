"""Validated configuration of the LSMI estimator.

The defaults train to convergence with early stopping (batch 256, Adam lr 1e-3, 10 % held out, patience 10, at
most 200 epochs), chosen by measured accuracy against the exact plug-in of the official Gaussian generator at
C = 2, 10, 30 (see the README); :meth:`LSMIConfig.paper` gives the official code's recipe (``cfgs/train.yaml``:
batch 32, lr 1e-3, 30 + 30 epochs, StepLR 15 / 20).
"""

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
        n_kernels: Gaussian kernels per density (KNIFE kernels, or the GMM's components with ``density="gmm"``).
        density: ``"knife"`` (KNIFE trained by Adam, the paper) or ``"gmm"`` (a Gaussian mixture of the same size
            fitted by EM with scikit-learn's ``GaussianMixture``, an optional dependency; the heads still train by
            Adam).
        gmm_covariance: covariance type of the GMM: ``"full"`` (default, as KNIFE), ``"tied"``, ``"diag"`` or
            ``"spherical"``.
        gmm_max_iter: most EM iterations per GMM.
        epochs_clf, epochs_entropy: training epochs of the classifiers and of the KNIFEs (with early stopping:
            the most epochs each may run).
        batch_size: minibatch size of both trainings.
        lr: Adam learning rate of both trainings.
        clf_lr_step, entropy_lr_step: StepLR step sizes (gamma 0.1) in epochs; None: a constant rate.
        validation_fraction: share of the fit samples held out for early stopping: the three heads and two KNIFEs
            train together (one Adam step per batch), each keeps its state of lowest held-out loss, and training
            stops when none improved for ``patience`` epochs. 0: the paper's fixed-epoch recipe, classifiers then
            KNIFEs, on all samples.
        patience: epochs without a held-out improvement before early stopping.
        tol: the smallest drop of a held-out loss (nats) that counts as an improvement.
        prior: ``"empirical"`` (log training label frequencies) or ``"uniform"`` (log C, the official code).
        adjust: ``"mean_shift"`` (the dataset-level shift of the paper, computed on the samples of each
            ``transform`` call: a sample's values depend on the samples scored with it), ``"fit_mean_shift"`` (the
            same shift computed once on the fit samples and applied to every later call: a sample's values depend
            on it alone) or None (raw values).
        standardize: z-score each feature with training statistics (KNIFE's scales are bounded to (e^-1, e)).
        legacy_grad_accumulation: reproduce the official KNIFE loop that never zeroes gradients.
        units: ``"nats"`` or ``"bits"`` for the returned values.
        seed: seed of initialisation and batch order.
        device: torch device (None: ``icml25_shared.device.get_device()``).
        n_threads: torch intra-op threads used by ``fit`` and ``transform`` (the caller's setting is restored
            after); default 1: the models are tiny, and on a busy 2-core machine two threads made a fit 5-25x
            slower. None inherits the global setting.
    """

    n_classes: int
    hidden: int = 64
    n_kernels: int = 5
    density: Literal["knife", "gmm"] = "knife"
    gmm_covariance: Literal["full", "tied", "diag", "spherical"] = "full"
    gmm_max_iter: int = 100
    epochs_clf: int = 200
    epochs_entropy: int = 200
    batch_size: int = 256
    lr: float = 1e-3
    clf_lr_step: int | None = None
    entropy_lr_step: int | None = None
    validation_fraction: float = 0.1
    patience: int = 10
    tol: float = 1e-3
    prior: Literal["empirical", "uniform"] = "empirical"
    adjust: Literal["mean_shift", "fit_mean_shift"] | None = "mean_shift"
    standardize: bool = True
    legacy_grad_accumulation: bool = False
    units: Literal["nats", "bits"] = "nats"
    seed: int = 0
    device: str | None = None
    n_threads: int | None = 1

    def __post_init__(self) -> None:
        self.n_classes = check_int("n_classes", self.n_classes, min=2)
        self.hidden = check_int("hidden", self.hidden, min=1)
        self.n_kernels = check_int("n_kernels", self.n_kernels, min=1)
        self.density = check_choice("density", self.density, ("knife", "gmm"))
        self.gmm_covariance = check_choice("gmm_covariance", self.gmm_covariance, ("full", "tied", "diag", "spherical"))
        self.gmm_max_iter = check_int("gmm_max_iter", self.gmm_max_iter, min=1)
        self.epochs_clf = check_int("epochs_clf", self.epochs_clf, min=0)
        self.epochs_entropy = check_int("epochs_entropy", self.epochs_entropy, min=0)
        self.batch_size = check_int("batch_size", self.batch_size, min=1)
        self.clf_lr_step = check_int("clf_lr_step", self.clf_lr_step, min=1, allow_none=True)
        self.entropy_lr_step = check_int("entropy_lr_step", self.entropy_lr_step, min=1, allow_none=True)
        self.validation_fraction = check_float("validation_fraction", self.validation_fraction, min=0.0, max=0.5)
        self.patience = check_int("patience", self.patience, min=1)
        self.tol = check_float("tol", self.tol, min=0.0)
        self.seed = check_int("seed", self.seed, min=0)
        self.lr = check_float("lr", self.lr, min=0.0, min_open=True)
        self.prior = check_choice("prior", self.prior, ("empirical", "uniform"))
        self.adjust = check_choice("adjust", self.adjust, ("mean_shift", "fit_mean_shift", None))
        self.standardize = check_bool("standardize", self.standardize)
        self.legacy_grad_accumulation = check_bool("legacy_grad_accumulation", self.legacy_grad_accumulation)
        self.units = check_choice("units", self.units, ("nats", "bits"))
        self.n_threads = check_int("n_threads", self.n_threads, min=1, allow_none=True)

    @classmethod
    def paper(cls, n_classes: int, **overrides) -> LSMIConfig:
        """The official code's training recipe (``cfgs/train.yaml``): batch 32, Adam lr 1e-3, 30 epochs of the
        classifiers (StepLR 15, 0.1) then 30 of the KNIFEs (StepLR 20, 0.1), no held-out split."""
        recipe = dict(
            batch_size=32,
            lr=1e-3,
            epochs_clf=30,
            epochs_entropy=30,
            clf_lr_step=15,
            entropy_lr_step=20,
            validation_fraction=0.0,
        )
        return cls(n_classes=n_classes, **{**recipe, **overrides})

    def to_dict(self) -> dict:
        return asdict(self)
