"""Shared fixtures of the swan tests."""

from __future__ import annotations

import pytest

from icml25_shared import data


@pytest.fixture(scope="session")
def tinyshakespeare_data() -> None:
    """Skip the test when Tiny Shakespeare is nowhere on this machine (a package installed without its ``data``
    extra, offline); with the bundled ``icml25-datasets`` it resolves with no setting."""
    try:
        data.resolve("tinyshakespeare")
    except data.DataNotFoundError as err:
        pytest.skip(f"needs Tiny Shakespeare: pip install 'icml25-swan[data]' (or download it): {err}")
