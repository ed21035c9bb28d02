import pytest

from icml25_shared.device import torch_threads


@pytest.fixture(autouse=True, scope="module")  # module: before module-scoped fits
def _one_torch_thread():
    """The models are tiny: on a loaded 2-core machine two intra-op threads make a fit ~6x slower (spin waits)."""
    with torch_threads(1):
        yield
