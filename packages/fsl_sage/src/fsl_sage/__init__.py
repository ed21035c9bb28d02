"""FSL-SAGE (ICML 2025): federated split learning with smashed-activation gradient estimation.

Clients train their client-side model x_c on a cut-layer gradient estimated by a small auxiliary model x_a,
uploading smashed activations only every q iterations; the server aligns each aux model to its true cut
gradients every l rounds. Baselines (CSE-FSL, SplitFed-v1/v2, FedAvg) share the models and the byte ledger.
"""

from .aggregate import sample_weights, weighted_average
from .algorithms import (
    ALGORITHMS,
    CSEFSL,
    FSLSAGE,
    FedAvg,
    FederatedSplitAlgorithm,
    History,
    RoundRecord,
    SplitFedV1,
    SplitFedV2,
)
from .align import AuxAdamState, RingBuffer, align_aux, align_many_vmap, cut_gradients
from .comm import ByteCounter, expected_bytes, nbytes
from .config import FSLConfig
from .data import client_datasets, dirichlet_partition, iid_partition, load_digits_split
from .metrics import gradient_agreement
from .models import GradScalarAux, SplitModel, digits_cnn_split, resnet18_split, split_module

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
    "align_many_vmap",
    "client_datasets",
    "cut_gradients",
    "digits_cnn_split",
    "dirichlet_partition",
    "expected_bytes",
    "gradient_agreement",
    "iid_partition",
    "load_digits_split",
    "nbytes",
    "resnet18_split",
    "sample_weights",
    "split_module",
    "weighted_average",
]
__version__ = "0.1.0"
