"""One torch thread for every test, as the library defaults and the reproduction run (tiny tensors: more threads
only add contention on a shared machine); the caller's setting is restored afterwards."""

from __future__ import annotations

import pytest

from icml25_shared.device import torch_threads


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    with torch_threads(1):
        yield
