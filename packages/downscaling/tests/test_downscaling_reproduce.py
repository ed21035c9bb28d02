"""The reproduction runs end to end on a shrunken setup and returns judged claims with short labels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from downscaling.experiments import QUICK, ModelSize
from downscaling.reproduce import reproduce
from icml25_shared.data import DataNotFoundError


@pytest.mark.slow  # trains four tiny models on Tiny Shakespeare
def test_reproduce_tiny_setup(tmp_path):
    setup = replace(QUICK, large=ModelSize(2, 32, 64), small=ModelSize(1, 16, 32), large_steps=4, val_batches=2,
                    calib_windows=4)  # fmt: skip
    try:
        res = reproduce(False, tmp_path, setup=setup)
    except DataNotFoundError as err:
        pytest.skip(f"Tiny Shakespeare not available: {err}")
    assert [len(c.short) <= 32 for c in res.claims] == [True] * 3
    assert all(isinstance(c.holds, bool) for c in res.claims)
    assert res.claims[0].details["flopcounter_equals_analytic"]
    assert (tmp_path / "pareto.png").exists()
