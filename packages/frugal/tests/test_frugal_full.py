"""``--full`` on a tiny setup: the lr sweep on the first seed, the extras on every seed, and resumption: a run
interrupted part-way reuses every finished part, recomputes only the rest, and ends with the same result."""

from __future__ import annotations

import dataclasses

import pytest

import frugal.experiments as exp
import frugal.reproduce as rep
from frugal.experiments import FULL_LRS, QUICK
from frugal.reproduce import reproduce
from icml25_shared.data import DataNotFoundError

pytest.importorskip("transformers")
pytest.importorskip("galore_torch")

SMALL = dataclasses.replace(
    QUICK, hidden_size=16, num_hidden_layers=1, intermediate_size=32, seq_len=8, batch_size=2, steps=3,
    update_gap=2, val_batches=1,
)  # fmt: skip
N_SEEDS = 2  # instead of the 5 of --full, to keep the test short
N_SWEEP = sum(len(v) for v in FULL_LRS.values())
N_RUNS = N_SWEEP + 4 + (N_SEEDS - 1) * 7  # first seed: sweep + 4 extras; others: 3 main + 4 extras


REAL_TRAIN = exp.train_tiny_llama


class Interrupt(Exception):
    pass


def _counting(monkeypatch, stop_after: int | None = None) -> list[str]:
    """Patch the training function: record each run's name, raise ``Interrupt`` on run ``stop_after + 1``."""
    calls: list[str] = []

    def train(spec, task):
        if stop_after is not None and len(calls) == stop_after:
            raise Interrupt
        calls.append(f"seed{task.setup.seed}_{spec.slug}")
        return REAL_TRAIN(spec, task)

    monkeypatch.setattr(exp, "train_tiny_llama", train)
    return calls


def _finals(result) -> dict[str, float]:
    return {k: v["val_loss"][-1] for k, v in result.settings["runs"].items()}


def test_full_interrupted_then_resumed_reuses_finished_parts(tmp_path, monkeypatch):
    """Killed inside the second seed, the rerun loads the finished runs and trains only the others; it ends where
    an uninterrupted run ends (the seeds, the two extra claims over them)."""
    monkeypatch.setenv("ICML25_WORKERS", "1")  # in-process runs, so the patch sees every training call
    monkeypatch.setattr(rep, "N_SEEDS_FULL", N_SEEDS)
    monkeypatch.setattr(rep, "plot_val_loss", lambda *a, **k: tmp_path / "p.png")  # plotting: tested in quick mode
    killed_at = N_SWEEP + 5  # inside the second seed
    calls = _counting(monkeypatch, stop_after=killed_at)
    try:
        with pytest.raises(Interrupt):
            reproduce(True, tmp_path / "run", setup=SMALL)
    except DataNotFoundError as err:
        pytest.skip(f"Tiny Shakespeare is not installed (the [data] extra) and we are offline: {err}")
    finished = sorted(p.stem for p in (tmp_path / "run" / "parts").glob("*.json"))
    assert finished == sorted(calls) and len(finished) == killed_at

    calls = _counting(monkeypatch)
    resumed = reproduce(True, tmp_path / "run", setup=SMALL)
    parts = resumed.settings["parts"]
    assert sorted(parts["reused"]) == finished  # nothing finished is trained again ...
    assert sorted(calls) == sorted(parts["computed"]) and len(calls) == N_RUNS - killed_at  # ... the rest is
    assert not set(calls) & set(finished)

    calls = _counting(monkeypatch)
    fresh = reproduce(True, tmp_path / "fresh", setup=SMALL)
    assert len(calls) == N_RUNS and fresh.settings["parts"]["reused"] == []
    assert _finals(resumed) == _finals(fresh)
    assert [c.verdict for c in resumed.claims] == [c.verdict for c in fresh.claims]
    assert resumed.settings["best_lr (first seed)"] == fresh.settings["best_lr (first seed)"]
    assert fresh.settings["seeds"] == [0, 1] and len(fresh.settings["runs"]) == N_RUNS
    assert [c.short for c in fresh.claims[-2:]] == ["FRUGAL-block vs BAdam", "ablation: lm_head needs state"]
    assert all(c.details["seeds"]["n"] == N_SEEDS for c in fresh.claims[-2:])
    assert fresh.claims[0].details["seeds"]["margin_vs_galore"]["n"] == N_SEEDS

    # another setup is another fingerprint: the first run is trained again, not loaded
    _counting(monkeypatch, stop_after=0)
    with pytest.raises(Interrupt):
        reproduce(True, tmp_path / "fresh", setup=dataclasses.replace(SMALL, steps=2))
