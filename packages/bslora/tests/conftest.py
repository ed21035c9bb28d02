"""Fixtures shared by the bslora tests; makes ``bslora_testing`` (tiny models and helpers) importable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib, which does not put test folders on sys.path; the helpers module has a
# package-specific name so that it cannot shadow another package's
sys.path.insert(0, str(Path(__file__).parent))

from bslora_testing import MODES


@pytest.fixture(params=list(MODES))
def mode(request) -> str:
    return request.param
