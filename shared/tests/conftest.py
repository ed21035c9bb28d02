"""Shared test configuration.

Triton reads ``TRITON_INTERPRET`` in more places than the kernels' own decoration (its language patches are set up
when triton is first imported, which torch.optim or transformers may do in an earlier test), so a CPU run turns the
interpreter on for the whole session before anything imports triton. A ``-m gpu`` (or ``-m slow``) selection keeps
the compiled kernels.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config) -> None:
    markexpr = config.getoption("markexpr", default="") or ""
    if "not gpu" in markexpr and "not slow" in markexpr:
        os.environ.setdefault("TRITON_INTERPRET", "1")


class _EntryPoint:
    def __init__(self, name: str, value: str) -> None:
        self.name, self.value, self.dist = name, value, None


@pytest.fixture
def fake_reproductions(monkeypatch, tmp_path):
    """``install(module_name, source, names)``: write ``source`` as an importable module for the reproduction
    subprocesses and make ``icml25`` discover ``names`` in it; returns the results folder to use."""
    from icml25_shared import cli

    def install(module: str, source: str, names: tuple[str, ...]):
        mods = tmp_path / "mods"
        mods.mkdir(exist_ok=True)
        (mods / f"{module}.py").write_text(source)
        monkeypatch.setenv("PYTHONPATH", str(mods))
        eps = {n: _EntryPoint(n, f"{module}:{n}") for n in names}
        monkeypatch.setattr(cli, "discover", lambda: eps)
        return tmp_path / "results"

    return install
