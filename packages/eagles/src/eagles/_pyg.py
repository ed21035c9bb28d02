"""Import torch_geometric once, silencing only torch's ``torch.jit.script`` deprecation notice it triggers."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    # torch >= 2.10 deprecates torch.jit.script, which torch_geometric 2.8 still calls at import time
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*deprecated", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*deprecated", category=DeprecationWarning)
    import torch_geometric
    import torch_geometric.data
    import torch_geometric.nn
    import torch_geometric.utils  # noqa: F401
