"""The --full reproduction resumes from its stored parts, and a reused part gives the same claims."""

import pytest

import dp_ts_ucb.reproduce as rep

pytest.importorskip("matplotlib")

TINY = [("C", 600, 4, (0.0, 1.0)), ("A", 600, 4, (1.0,))]


def test_full_resumes_without_redoing_finished_parts(tmp_path, monkeypatch):
    calls: list[list[float]] = []
    real = rep.run_instance
    kill = True

    def counting(means, *args):
        calls.append(means)
        if means == rep.INSTANCES["A"] and kill:
            raise KeyboardInterrupt("killed")
        return real(means, *args)

    monkeypatch.setattr(rep, "run_instance", counting)
    with pytest.raises(KeyboardInterrupt):
        rep.reproduce(True, tmp_path, plan=TINY)
    assert calls == [rep.INSTANCES["C"], rep.INSTANCES["A"]]
    assert (tmp_path / "parts" / "C_T600.json").is_file() and not (tmp_path / "parts" / "A_T600.json").exists()

    calls.clear()
    kill = False
    res = rep.reproduce(True, tmp_path, plan=TINY)
    assert calls == [rep.INSTANCES["A"]]  # instance C is read back, not simulated again
    assert res.settings["parts"] == {"reused": ["C_T600"], "computed": ["A_T600"]}

    calls.clear()
    again = rep.reproduce(True, tmp_path, plan=TINY)
    assert calls == [] and again.settings["parts"]["reused"] == ["C_T600", "A_T600"]
    assert [c.measured for c in again.claims] == [c.measured for c in res.claims]
    assert [c.verdict for c in again.claims] == [c.verdict for c in res.claims]

    # another seed is another fingerprint: nothing is reused
    calls.clear()
    other = rep.reproduce(True, tmp_path, plan=TINY, seed=1)
    assert len(calls) == 2 and other.settings["parts"]["reused"] == []


def test_stored_instance_reads_back_identically():
    from dp_ts_ucb.experiments import instance_from_dict, instance_to_dict, run_instance

    inst = run_instance(rep.INSTANCES["C"], 600, 4, (0.0, 1.0), seed=3)
    back = instance_from_dict(instance_to_dict(inst))
    assert list(back.results) == list(inst.results) and back.mts_b == inst.mts_b and back.mts_by_b == inst.mts_by_b
    for k, r in inst.results.items():
        assert back.results[k].to_dict() == r.to_dict()
        assert (back.results[k].regret == r.regret).all() and back.results[k].pulls.dtype == r.pulls.dtype
    assert back.mts is back.results[next(k for k in inst.results if k.startswith("M-TS"))]
