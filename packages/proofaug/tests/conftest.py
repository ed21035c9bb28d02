"""Shared fixtures: one Coq backend per test module (coqtop is started once and rewound with ``BackTo``, final
checks in its warm checker process); tests
that need Coq skip with the reason when ``coqtop`` is not installed (``.ci/run`` installs Debian's ``coq``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from proofaug.backends.coq import CoqBackend, coq_available

needs_coq = pytest.mark.skipif(not coq_available(), reason="coqtop not installed (apt-get install coq)")


@pytest.fixture(scope="module")
def coq():
    if not coq_available():
        pytest.skip("coqtop not installed (apt-get install coq)")
    backend = CoqBackend(fresh_check=False)  # warm checker; the fresh-coqc path has its own tests
    yield backend
    backend.close()
