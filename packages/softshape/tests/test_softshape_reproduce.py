"""The reproduction machinery in reduced form (the whole quick run is marked slow)."""

from __future__ import annotations

import pytest
from softshape.reproduce import _iou


def test_iou_closed_form():
    assert _iou((0, 16), (0, 16)) == 1.0
    assert _iou((4, 20), (0, 16)) == pytest.approx(12 / 20)
    assert _iou((20, 36), (0, 16)) == 0.0


@pytest.mark.slow
def test_quick_reproduction_runs(tmp_path):
    pytest.importorskip("aeon")
    from softshape.reproduce import reproduce

    res = reproduce(full=False, out_dir=tmp_path)
    assert len(res.claims) == 5
    assert all(c.measured is not None for c in res.claims)
    assert (tmp_path / "accuracy.png").exists() and (tmp_path / "interpretability.png").exists()
