"""LSMI (Yang, Wang & Hu, ICML 2025): sample-wise redundancy, uniqueness and synergy of two modalities."""

from importlib.metadata import version

from lsmi.config import LSMIConfig
from lsmi.estimator import Interactions, LSMIEstimator, mlp_classifier
from lsmi.functional import DiscreteLSMI, lsmi_discrete, lsmi_from_terms, mean_shift, pmi
from lsmi.knife import KNIFE, GaussianMixtureDensity, StackedKNIFE

__all__ = [
    "LSMIConfig",
    "LSMIEstimator",
    "Interactions",
    "KNIFE",
    "StackedKNIFE",
    "GaussianMixtureDensity",
    "DiscreteLSMI",
    "lsmi_discrete",
    "lsmi_from_terms",
    "mean_shift",
    "pmi",
    "mlp_classifier",
]
__version__ = version("icml25-lsmi")
