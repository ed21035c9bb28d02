"""FSL-SAGE (ICML 2025): federated split learning with smashed-activation gradient estimation.

Clients train their client-side model x_c on a cut-layer gradient estimated by a small auxiliary model x_a,
uploading smashed activations only every q iterations; the server aligns each aux model to its true cut
gradients every l rounds. Baselines (CSE-FSL, SplitFed-v1/v2, FedAvg) share the models and the byte ledger.

Layout: ``config`` (FSLConfig) · the paper's parts: ``models`` (split models and the gradient estimator),
``align`` (alignment and its schedule, Alg. 3), ``aggregate`` (Alg. 2), ``comm`` (byte ledger and closed form) ·
``runner`` (the shared round loop) · ``sage`` (FSL-SAGE, Alg. 1-3) · ``baselines`` · ``flower/`` (Flower apps) ·
``experiments`` · ``reproduce``.
"""

from importlib.metadata import version

from fsl_sage.aggregate import sample_weights, weighted_average
from fsl_sage.align import (
    AuxAdamState,
    RingBuffer,
    align_aux,
    align_client,
    align_many_vmap,
    cut_gradients,
    is_alignment_round,
)
from fsl_sage.baselines import CSEFSL, FedAvg, SplitFedV1, SplitFedV2
from fsl_sage.comm import ByteCounter, expected_bytes, nbytes
from fsl_sage.config import FSLConfig
from fsl_sage.data import client_datasets, dirichlet_partition, iid_partition, load_digits_split
from fsl_sage.experiments import ALGORITHMS
from fsl_sage.metrics import gradient_agreement
from fsl_sage.models import GradScalarAux, SplitModel, digits_cnn_split, resnet18_split, split_module
from fsl_sage.runner import FederatedSplitAlgorithm, History, RoundRecord
from fsl_sage.sage import FSLSAGE

__all__ = [
    "ALGORITHMS",
    "AuxAdamState",
    "ByteCounter",
    "CSEFSL",
    "FSLConfig",
    "FSLSAGE",
    "FedAvg",
    "FederatedSplitAlgorithm",
    "GradScalarAux",
    "History",
    "RingBuffer",
    "RoundRecord",
    "SplitFedV1",
    "SplitFedV2",
    "SplitModel",
    "align_aux",
    "align_client",
    "align_many_vmap",
    "client_datasets",
    "cut_gradients",
    "digits_cnn_split",
    "dirichlet_partition",
    "expected_bytes",
    "gradient_agreement",
    "iid_partition",
    "is_alignment_round",
    "load_digits_split",
    "nbytes",
    "resnet18_split",
    "sample_weights",
    "split_module",
    "weighted_average",
]
__version__ = version("icml25-fsl-sage")
