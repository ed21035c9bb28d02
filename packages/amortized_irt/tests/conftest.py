"""One torch thread for every test, as the library defaults and the reproduction run; makes
``amortized_irt_testing`` (seeded data sets) importable (pytest runs with --import-mode=importlib)."""

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
