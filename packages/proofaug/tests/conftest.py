"""Shared fixtures: one Coq backend per test module (coqtop is started once and rewound with ``BackTo``, final
checks in its warm checker process); tests
that need Coq skip with the reason when ``coqtop`` is not installed (``.ci/run`` installs Debian's ``coq``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from proofaug.backends.coq import CoqBackend, coq_available

try:
    from icml25_shared.device import torch_threads
except ImportError:  # pragma: no cover - torch_threads lives in every icml25-shared
    torch_threads = None

needs_coq = pytest.mark.skipif(not coq_available(), reason="coqtop not installed (apt-get install coq)")


@pytest.fixture(scope="module")
def coq():
    if not coq_available():
        pytest.skip("coqtop not installed (apt-get install coq)")
    backend = CoqBackend(fresh_check=False)  # warm checker; the fresh-coqc path has its own tests
    yield backend
    backend.close()


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests run torch on one thread, the caller's setting restored (only torch users pay its import: the tiny
    GPT-2 proposer test imports it, and ``TransformersProposer`` itself generates on one thread)."""
    if torch_threads is None or "torch" not in sys.modules:
        yield
        return
    with torch_threads(1):
        yield
