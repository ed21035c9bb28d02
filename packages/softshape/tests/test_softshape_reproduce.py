"""The reproduction machinery in reduced form (the whole quick run is marked slow)."""

from __future__ import annotations

import pytest

from softshape.experiments import iou as _iou


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


def test_task_runs_one_thread_and_restores(monkeypatch):
    import torch

    from softshape import experiments as rep

    seen = []
    real = rep.interpretability

    def spy(epochs, n_cases):
        seen.append(torch.get_num_threads())
        return real(epochs, n_cases)

    monkeypatch.setattr(rep, "interpretability", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = rep.run_task("interp", 2, 40)
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert 0.0 <= out["mean_iou"] <= 1.0 and 0.0 <= out["accuracy"] <= 1.0
    assert out["scores"].shape == out["centres"].shape
