import pytest
import torch

from fsl_sage import digits_cnn_split
from icml25_shared.device import torch_threads


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tiny models: one torch thread, as the reproduction runs (two threads on a loaded 2-core machine mostly add
    synchronisation)."""
    with torch_threads(1):
        yield


@pytest.fixture
def tiny_data():
    """3 clients of 37 samples (B = 8 → four batches of 8 and a short one of 5), digits-shaped, plus eval data."""
    g = torch.Generator().manual_seed(0)
    xs = [torch.rand(37, 1, 8, 8, generator=g) for _ in range(3)]
    ys = [torch.randint(0, 10, (37,), generator=g) for _ in range(3)]
    ev = (torch.rand(40, 1, 8, 8, generator=g), torch.randint(0, 10, (40,), generator=g))
    return list(zip(xs, ys)), ev


@pytest.fixture
def digits_models():
    torch.manual_seed(0)
    return digits_cnn_split()


@pytest.fixture
def small_cfg():
    return {
        "rounds": 4,
        "batch_size": 8,
        "server_update_interval": 2,
        "align_interval": 2,
        "align_epochs": 2,
        "align_batch_size": 16,
        "buffer_size": 20,
        "seed": 0,
    }


def pytest_configure(config):
    # Ray (the slow run_simulation tests) leaves /dev/null file objects to the garbage collector; pytest reports
    # them at session end, outside any test's warning filters. Ignore exactly that, nothing else.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:Exception ignored in. <_io.FileIO name='/dev/null':pytest.PytestUnraisableExceptionWarning",
    )
