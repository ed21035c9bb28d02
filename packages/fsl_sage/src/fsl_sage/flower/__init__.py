"""FSL-SAGE and CSE-FSL on Flower (flwr 1.42 Message API); see :mod:`fsl_sage.flower.core`.

``fsl_sage.flower.app`` holds a ``server_app`` and a ``client_app`` configured from ``context.run_config`` for
``flwr run`` on the deployment engine (SuperLink + SuperNodes).
"""

from fsl_sage.flower.core import (
    CSEFSLStrategy,
    DataFn,
    FSLSAGEStrategy,
    ModelFn,
    client_train,
    make_client_app,
    make_server_app,
    payload_bytes_per_round,
    run_server,
    wire_bytes,
)
from fsl_sage.flower.local import LocalGrid

__all__ = [
    "LocalGrid",
    "CSEFSLStrategy",
    "DataFn",
    "FSLSAGEStrategy",
    "ModelFn",
    "client_train",
    "make_client_app",
    "make_server_app",
    "payload_bytes_per_round",
    "run_server",
    "wire_bytes",
]
