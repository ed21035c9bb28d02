"""Shared fixtures of the timebase tests."""

from __future__ import annotations

import pytest

from icml25_shared import data


@pytest.fixture(scope="session")
def etth1_data() -> None:
    """Skip the test when ETTh1 is nowhere on this machine (a package installed without its ``data`` extra,
    offline); with the bundled ``icml25-datasets`` it resolves with no setting."""
    try:
        data.resolve("ETTh1")
    except data.DataNotFoundError as err:
        pytest.skip(f"needs ETTh1: pip install 'icml25-timebase[data]' (or download it): {err}")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The models are tiny: on a loaded 2-core machine a second intra-op thread only spins (the reproduction runs on
    one thread too)."""
    from icml25_shared.device import torch_threads

    with torch_threads(1):
        yield
