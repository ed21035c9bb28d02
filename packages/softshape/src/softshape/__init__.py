"""SoftShape (ICML 2025): learning soft sparse shapes for efficient time-series classification.

``SoftShapeClassifier`` is the scikit-learn estimator; ``SoftShapeNet`` the plain ``nn.Module``; ``soft_sparsify``
the core operation; ``softshape.experiments`` the paper's merged 5-fold protocol and the reproduction's experiments.
``SoftShapeAeonClassifier`` (extra ``[aeon]``) is importable from ``softshape.aeon_adapter``.

Layout: ``config`` · ``layers`` (the paper's parts) · ``model`` (SoftShapeNet) · ``estimator`` (scikit-learn) ·
``aeon_adapter`` (aeon) · ``experiments`` · ``reproduce``.
"""

from importlib.metadata import version

from softshape.config import SoftShapeConfig, auto_shape_size, ucr_shape_size
from softshape.estimator import SoftShapeClassifier
from softshape.layers import ContributionScorer, InceptionExpert, RMSNorm, SharedMoE, soft_sparsify
from softshape.model import SoftShapeNet, SoftShapeOutput

__all__ = [
    "SoftShapeClassifier",
    "SoftShapeNet",
    "SoftShapeOutput",
    "SoftShapeConfig",
    "soft_sparsify",
    "ucr_shape_size",
    "auto_shape_size",
    "SharedMoE",
    "InceptionExpert",
    "ContributionScorer",
    "RMSNorm",
]

__version__ = version("icml25-softshape")
