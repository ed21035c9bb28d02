"""Shared test configuration.

Triton reads ``TRITON_INTERPRET`` in more places than the kernels' own decoration (its language patches are set up
when triton is first imported, which torch.optim or transformers may do in an earlier test), so a CPU run turns the
interpreter on for the whole session before anything imports triton. A ``-m gpu`` (or ``-m slow``) selection keeps
the compiled kernels.
"""

from __future__ import annotations

import os


def pytest_configure(config) -> None:
    markexpr = config.getoption("markexpr", default="") or ""
    if "not gpu" in markexpr and "not slow" in markexpr:
        os.environ.setdefault("TRITON_INTERPRET", "1")
