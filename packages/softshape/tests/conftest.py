"""Shared test set-up: one torch thread per test module (restored afterwards)."""

import pytest

from icml25_shared.device import torch_threads


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The models are small: on a loaded 2-core machine two intra-op threads make a fit 10-15x slower (OpenMP spin
    waits; GunPoint smoke fit measured 94 s wall with 2 threads vs 6 s with 1)."""
    with torch_threads(1):
        yield
