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
