"""Fixtures shared by the bslora tests."""

from __future__ import annotations

import pytest
from bslora.testing import MODES


@pytest.fixture(params=list(MODES))
def mode(request) -> str:
    return request.param
