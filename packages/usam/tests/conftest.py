"""One torch thread for every test (the library default); puts the test helpers (``usam_testing``) on the path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from icml25_shared.device import torch_threads

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    with torch_threads(1):
        yield
