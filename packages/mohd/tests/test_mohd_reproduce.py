"""The reproduction end to end at a few steps (claims built, plot written, same seed -> same losses)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from icml25_shared.data import DataNotFoundError
from mohd.experiments import QUICK, quick_models, train
from mohd.reproduce import reproduce

TINY = dataclasses.replace(QUICK, steps=2, warmup=1, seeds=(0, 1), eval_batches=1, eval_points=1, batch=4)


def _corpus():
    from icml25_shared.text import CharCorpus

    try:
        return CharCorpus.tinyshakespeare()
    except DataNotFoundError as err:  # installed without the [data] extra and offline
        pytest.skip(f"Tiny Shakespeare not available: {err}")


def test_reproduce_runs_and_judges(tmp_path):
    _corpus()
    result = reproduce(False, tmp_path, setup=TINY)
    assert [c.short for c in result.claims][:3] == [
        "activated params (measured)",
        "M128 < V64 (expansion)",
        "M64 ~ V64 at half activation",
    ]
    assert result.claims[0].holds is True  # structural: exact at any training length
    assert all(len(c.short) <= 32 for c in result.claims)
    assert (tmp_path / "val_loss.png").exists()


def test_same_seed_same_losses():
    corpus = _corpus()
    spec = quick_models()[2]
    a, b = train(spec, TINY, corpus, 0), train(spec, TINY, corpus, 0)
    assert a.train_loss == b.train_loss and a.val_loss == b.val_loss
    assert train(spec, TINY, corpus, 1).train_loss != a.train_loss


@pytest.mark.slow
def test_full_mode_runs_at_a_few_steps(tmp_path):
    _corpus()
    setup = dataclasses.replace(TINY, layers=1, context=16, steps=1)
    result = reproduce(True, tmp_path, setup=setup)
    shorts = [c.short for c in result.claims]
    assert "M384 (3x) < V128 (expansion)" in shorts and "M64 ~ V64 at half activation" in shorts
    assert "Mixtral 4e top-1" in result.settings["table"]


def _runs(**finals):
    from mohd.experiments import RunResult

    return {n: [RunResult(n, s, [0, 1], [9.0, v], [], 1, 1, 0.0) for s, v in enumerate(vs)] for n, vs in finals.items()}


def test_expansion_verdict_comes_from_the_interval_over_seeds():
    """Every seed's d > 0 is not enough: a spread that puts the interval across 0 is inconclusive; a tight positive
    spread holds; a tight negative one does not hold."""
    from mohd.reproduce import _expansion_claim

    seeds = [0, 1, 2]
    wide = _expansion_claim(_runs(V64=[2.0, 2.05, 2.0], M128=[1.999, 2.0, 1.998]), "V64", "M128", "2x", seeds)
    assert wide.verdict == "inconclusive" and wide.holds is None
    assert wide.details["seeds"]["interval"][0] < 0 < wide.details["seeds"]["interval"][1]
    tight = _expansion_claim(_runs(V64=[2.0, 2.01, 2.02], M128=[1.95, 1.961, 1.969]), "V64", "M128", "2x", seeds)
    assert tight.verdict == "holds" and "3 seeds" in tight.measured
    worse = _expansion_claim(_runs(V64=[2.0, 2.01, 2.02], M128=[2.05, 2.061, 2.069]), "V64", "M128", "2x", seeds)
    assert worse.verdict == "does not hold"


def test_seed_selects_disjoint_training_seeds(tmp_path, monkeypatch):
    """``reproduce(seed=s)`` trains on ``seed_list(s, n)``: seed 0 keeps today's seeds, seed 1 new ones."""
    import mohd.reproduce as rep

    seen = {}

    def fake_run_all(specs, setup, corpus, parts=None):
        seen["seeds"] = setup.seeds
        return _runs(**{s.name: [2.0 + 0.01 * i for i in range(len(setup.seeds))] for s in specs})

    monkeypatch.setattr(rep, "run_all", fake_run_all)
    monkeypatch.setattr(rep, "plot_curves", lambda *a, **k: tmp_path / "val_loss.png")
    _corpus()
    rep.reproduce(False, tmp_path, setup=dataclasses.replace(TINY, seeds=(0, 1, 2)), seed=0)
    assert seen["seeds"] == (0, 1, 2)
    rep.reproduce(False, tmp_path, setup=dataclasses.replace(TINY, seeds=(0, 1, 2)), seed=1)
    assert seen["seeds"] == (3, 4, 5)


def test_full_run_resumes_from_its_finished_parts(tmp_path, monkeypatch):
    """A run killed during its third (model, seed) unit leaves two parts; the rerun trains only the missing units,
    returns what a run without parts returns, and a changed setup recomputes every unit."""
    import mohd.experiments as ex
    from icml25_shared.parts import Parts

    corpus = _corpus()
    specs = ex.quick_models()[:2]  # V64, V32
    setup = dataclasses.replace(TINY, layers=1, context=16, seeds=(0, 1))
    real, calls = ex.train, []

    def counting(spec, st, c, seed, kill_at=None):
        calls.append((spec.name, seed))
        if len(calls) == kill_at:
            raise KeyboardInterrupt
        return real(spec, st, c, seed)

    monkeypatch.setattr(ex, "train", lambda *a: counting(*a, kill_at=3))
    with pytest.raises(KeyboardInterrupt):
        ex.run_all(specs, setup, corpus, Parts(tmp_path / "parts"))
    assert sorted(p.name for p in (tmp_path / "parts").glob("*.json")) == ["V64_seed0.json", "V64_seed1.json"]

    monkeypatch.setattr(ex, "train", counting)
    calls.clear()
    parts = Parts(tmp_path / "parts")
    resumed = ex.run_all(specs, setup, corpus, parts)
    assert calls == [("V32", 0), ("V32", 1)]
    assert parts.reused == ["V64_seed0", "V64_seed1"] and parts.computed == ["V32_seed0", "V32_seed1"]
    fresh = ex.run_all(specs, setup, corpus)
    for name in ("V64", "V32"):
        assert [r.val_loss for r in resumed[name]] == [r.val_loss for r in fresh[name]]
        assert [r.train_loss for r in resumed[name]] == [r.train_loss for r in fresh[name]]

    calls.clear()
    ex.run_all(specs, dataclasses.replace(setup, steps=3), corpus, Parts(tmp_path / "parts"))
    assert len(calls) == 4  # another setup: no stored part matches its fingerprint


def test_part_names_are_file_safe():
    from mohd.experiments import full_models, part_name

    names = [part_name(s, 3) for s in full_models()]
    assert "M384_3x_seed3" in names and "M128_scaling_none_seed3" in names
    assert len(set(names)) == len(names)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal without CUDA")
def test_paper_scale_refuses_without_cuda(tmp_path, capsys):
    from icml25_shared.report import MissingPrerequisite
    from mohd.__main__ import main

    with pytest.raises(MissingPrerequisite, match="CUDA"):
        reproduce(True, tmp_path, scale="paper")
    with pytest.raises(SystemExit) as err:
        main(["--scale", "paper", "--out", str(tmp_path)])
    assert err.value.code == 2 and "CUDA" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before anything ran
    with pytest.raises(ValueError, match="scale"):
        reproduce(True, tmp_path, scale="gpu")  # type: ignore[arg-type]


def test_main_runs_the_cpu_scale_and_prints_the_verdicts(tmp_path, monkeypatch, capsys):
    import icml25_shared.runner as runner
    from icml25_shared.report import Claim, ReproResult
    from mohd.__main__ import main

    seen = {}

    def fake_run(name, target, out_dir, **kwargs):
        seen.update(name=name, target=target, out_dir=out_dir, **kwargs)
        return ReproResult("mohd", [Claim("a claim", None, "1.0", True, short="claim short")])

    monkeypatch.setattr(runner, "run_in_process", fake_run)
    assert main(["--scale", "cpu", "--out", str(tmp_path), "--seed", "2"]) == 0
    assert seen["target"] == "mohd.reproduce:reproduce" and seen["full"] is True and seen["seed"] == 2
    assert seen["out_dir"] == tmp_path / "mohd"
    out = capsys.readouterr().out
    assert "holds" in out and "claim short: 1.0" in out and "result_full.json" in out


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"batch": 0}, "batch must be a positive int, got 0"),  # crashed in a reshape of 0 elements
        ({"eval_points": 0}, "eval_points must be a positive int"),  # evaluated at step 0 only, without a word
        ({"warmup": 3}, r"warmup must be an int in \[0, 2\], got 3"),
        ({"lr": float("nan")}, "lr must be a float > 0.0 and finite"),
        ({"seeds": ()}, "seeds must hold at least one seed"),  # trained seed 0 anyway
    ],
)
def test_setup_validates_its_fields(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, **change)
    same = dataclasses.replace(TINY, batch=np.int64(4), lr=np.float32(0.5), seeds=(np.int64(0),))
    assert type(same.batch) is int and type(same.lr) is float and same.seeds == (0,)
