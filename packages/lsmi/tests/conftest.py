import pytest
import torch


@pytest.fixture(autouse=True, scope="module")  # module: before module-scoped fits
def _one_torch_thread():
    """The models are tiny: on a loaded 2-core machine two intra-op threads make a fit ~6x slower (spin waits)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
