"""Verdicts over seeds: intervals against closed forms, the third verdict, --seed through the command, skipped
prerequisites, honest counts, seed sweeps and the report of committed results."""

from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest

from icml25_shared import cli
from icml25_shared.report import Claim, ReproResult, counts_text, load_committed, verdict_counts
from icml25_shared.sweep import agree, summarize_seeds
from icml25_shared.verdict import FAILS, HOLDS, INCONCLUSIVE, SHOWN, combine, judge, seed_list, spread, t_quantile


def test_t_quantiles_match_the_incomplete_beta_closed_form():
    # P(|T| <= t) for df = 1 is 2/pi * atan(t); for df = 2 it is t / sqrt(2 + t^2)
    assert 2 / math.pi * math.atan(t_quantile(0.95, 1)) == pytest.approx(0.95, abs=1e-4)
    t2 = t_quantile(0.95, 2)
    assert t2 / math.sqrt(2 + t2**2) == pytest.approx(0.95, abs=1e-4)
    t2 = t_quantile(0.9, 2)
    assert t2 / math.sqrt(2 + t2**2) == pytest.approx(0.9, abs=1e-4)
    assert t_quantile(0.95, 1000) == 1.96
    with pytest.raises(ValueError, match="level"):
        t_quantile(0.5, 3)


def test_spread_is_the_t_interval_of_the_mean():
    vals = [0.70, 0.74, 0.72, 0.69]
    sp = spread(vals, seeds=[3, 4, 5, 6])
    sd = float(np.std(vals, ddof=1))
    half = 3.182 * sd / 2
    assert sp.mean == pytest.approx(np.mean(vals)) and sp.sd == pytest.approx(sd)
    assert (sp.lo, sp.hi) == pytest.approx((np.mean(vals) - half, np.mean(vals) + half))
    assert sp.to_dict()["per_seed"] == {"3": 0.70, "4": 0.74, "5": 0.72, "6": 0.69}
    one = spread([0.5])
    assert (one.lo, one.hi, one.sd) == (0.5, 0.5, 0.0) and one.text() == "0.500"
    assert "± " in sp.text() and "4 seeds" in sp.text()


@pytest.mark.parametrize(
    ("values", "op", "thr", "verdict"),
    [
        ([0.60, 0.61, 0.62], ">=", 0.5, HOLDS),
        ([0.40, 0.41, 0.42], ">=", 0.5, FAILS),
        ([0.45, 0.55, 0.50], ">=", 0.5, INCONCLUSIVE),  # the interval straddles the rule
        ([0.40, 0.41, 0.42], "<", 0.5, HOLDS),
        ([0.5], ">=", 0.5, HOLDS),  # a point exactly at a non-strict rule
        ([0.5], ">", 0.5, FAILS),
    ],
)
def test_judge_uses_the_whole_interval(values, op, thr, verdict):
    assert judge(values, op, thr)[0] == verdict


def test_judge_refuses_bad_input():
    with pytest.raises(ValueError, match="op"):
        judge([1.0], "=>", 0.0)
    with pytest.raises(ValueError, match="finite"):
        judge([1.0, float("nan")], ">=", 0.0)
    with pytest.raises(ValueError, match="empty"):
        judge([], ">=", 0.0)
    with pytest.raises(ValueError, match="threshold"):
        judge([1.0], ">=", float("inf"))
    with pytest.raises(ValueError, match="one entry per value"):
        spread([1.0, 2.0], seeds=[0])


def test_combine_and_seed_list():
    assert combine(HOLDS, HOLDS) == HOLDS
    assert combine(HOLDS, INCONCLUSIVE) == INCONCLUSIVE
    assert combine(INCONCLUSIVE, FAILS, HOLDS) == FAILS
    assert combine(SHOWN) == SHOWN and combine(HOLDS, SHOWN) == HOLDS
    with pytest.raises(ValueError, match="verdicts"):
        combine("maybe")
    assert seed_list(0, 3) == [0, 1, 2] and seed_list(2, 3) == [6, 7, 8]
    assert set(seed_list(1, 4)).isdisjoint(seed_list(0, 4))
    with pytest.raises(ValueError, match="seed"):
        seed_list(-1, 3)


def test_claim_over_seeds_and_a_rule_moved_onto_the_bound_changes_the_verdict():
    # an estimator 0.0003 under an oracle, judged on the distance to the oracle: holds within 0.005 ...
    gaps = [0.0003, 0.0005, 0.0001]
    c = Claim.over_seeds("near the oracle", None, gaps, "<=", 0.005, seeds=[0, 1, 2], rule="oracle - est <= 0.005")
    assert c.verdict == HOLDS and c.holds is True
    assert c.details["seeds"]["per_seed"] == {"0": 0.0003, "1": 0.0005, "2": 0.0001}
    assert "3 seeds" in c.measured and "t-interval" in c.rule
    # ... and a rule placed at the bound itself (distance <= 0) can never be met reliably: never "holds"
    at_bound = Claim.over_seeds("at the oracle", None, gaps, "<=", 0.0, seeds=[0, 1, 2], rule="oracle - est <= 0")
    assert at_bound.verdict == INCONCLUSIVE
    beyond = Claim.over_seeds("past the oracle", None, gaps, "<=", -0.001, seeds=[0, 1, 2], rule="est - oracle >= .001")
    assert beyond.verdict == FAILS
    d = ReproResult("p", [c, at_bound, beyond]).to_dict()
    assert [x["verdict"] for x in d["claims"]] == [HOLDS, INCONCLUSIVE, FAILS]


def test_claim_verdict_consistency_and_counts():
    assert Claim("a", 1, 1, True).verdict == HOLDS
    assert Claim("b", 1, 1, None).verdict == SHOWN
    inc = Claim("c", 1, 1, None, verdict=INCONCLUSIVE)
    assert inc.holds is None
    with pytest.raises(ValueError, match="contradicts"):
        Claim("d", 1, 1, True, verdict=FAILS)
    with pytest.raises(ValueError, match="verdict must be"):
        Claim("e", 1, 1, None, verdict="probably")
    claims = [Claim("a", 1, 1, True), Claim("b", 1, 1, False), inc, Claim("s1", 1, 1, None), Claim("s2", 1, 1, None)]
    assert verdict_counts(claims)[SHOWN] == 2
    assert counts_text(claims) == "1 hold · 1 does not hold · 1 inconclusive · 2 shown"
    # a result with 2 holding and 7 shown claims must not read "2/9 claims hold"
    many = [Claim("h", 1, 1, True)] * 2 + [Claim("x", 1, 1, None)] * 7
    assert counts_text(many) == "2 hold · 0 do not hold · 0 inconclusive · 7 shown"


def test_json_round_trip_keeps_inconclusive(tmp_path):
    r = ReproResult("p", [Claim.over_seeds("t", None, [0.4, 0.6, 0.5], ">=", 0.5, seeds=[0, 1, 2], rule="r")])
    r.seed = 4
    back = ReproResult.load_json(r.save_json(tmp_path / "p" / "result_quick.json"))
    assert back.claims[0].verdict == INCONCLUSIVE and back.seed == 4


FAKE = textwrap.dedent(
    """
    import os
    from icml25_shared.report import Claim, MissingPrerequisite, ReproResult
    from icml25_shared.verdict import seed_list

    def seeded(full, out_dir, *, download=False, seed=0):
        seeds = seed_list(seed, 3)
        vals = [0.6 + 0.01 * s for s in seeds]  # deterministic in the seed
        edge = [0.5 + (0.05 if s % 2 else -0.05) for s in seeds]
        return ReproResult("seeded", [
            Claim.over_seeds("clear", 0.5, vals, ">=", 0.5, seeds=seeds, rule="x >= 0.5", short="clear"),
            Claim.over_seeds("edge", 0.5, edge, ">=", 0.5, seeds=seeds, rule="x >= 0.5", short="edge"),
            Claim("flip", None, seed, seed == 0, short="flip"),
        ], settings={"seeds": seeds}, artifacts=[_plot(out_dir)])

    def _plot(out_dir):
        from icml25_shared.report import save_figure, subplots
        fig, ax = subplots()
        ax.plot([0, 1], [1, 0])
        return str(save_figure(fig, out_dir, "curve"))

    def noseed(full, out_dir, *, download=False):
        return ReproResult("noseed", [Claim("o", 1, 1, True)])

    def needs(full, out_dir, *, download=False, seed=0):
        raise MissingPrerequisite("definitely-not-a-program", "apt-get install it")
    """
)


@pytest.fixture
def fake(fake_reproductions):
    return fake_reproductions("fakeseeded", FAKE, ("seeded", "noseed", "needs"))


def test_seed_reaches_reproduce_and_is_recorded(fake, capsys):
    assert cli.main(["reproduce", "seeded", "--seed", "2", "--out", str(fake)]) == 0
    d = json.loads((fake / "seeded" / "result_quick.json").read_text())
    assert d["seed"] == 2 and d["settings"]["seeds"] == [6, 7, 8]
    assert [c["verdict"] for c in d["claims"]] == [HOLDS, INCONCLUSIVE, FAILS]
    html = (fake / "index.html").read_text()
    assert "inconclusive" in html and "seed 2" in html
    out = capsys.readouterr()
    assert "1 hold · 1 does not hold · 1 inconclusive · 0 shown" in out.err
    # a reproduce without a seed runs at seed 0 and is refused at another seed
    assert cli.main(["reproduce", "noseed", "--out", str(fake)]) == 0
    assert cli.main(["reproduce", "noseed", "--seed", "1", "--out", str(fake)]) == 1


def test_bad_seed_is_a_usage_error(fake):
    with pytest.raises(SystemExit) as e:
        cli.main(["reproduce", "seeded", "--seed", "-1"])
    assert e.value.code == 2


def test_missing_prerequisite_is_skipped_not_crashed(fake, capsys):
    assert cli.main(["reproduce", "needs", "seeded", "--out", str(fake)]) == 0
    d = json.loads((fake / "needs" / "result_quick.json").read_text())
    assert d["crashed"] is False and "definitely-not-a-program" in d["skipped"]
    assert d["claims"][0]["verdict"] == "skipped"
    out = capsys.readouterr()
    assert "skipped" in out.out and "apt-get install it" in out.err
    assert "skipped" in (fake / "index.html").read_text()


def test_sweep_summarises_verdicts_per_seed(fake, capsys):
    assert cli.main(["sweep", "seeded", "--seeds", "0", "1", "--out", str(fake), "-j", "2"]) == 0
    s = json.loads((fake / "seeded" / "seeds_quick.json").read_text())
    assert s["seeds"] == [0, 1]
    by = {c["label"]: c for c in s["claims"]}
    assert by["clear"]["agree"] and by["edge"]["agree"]  # holds / inconclusive never clash
    assert by["flip"]["per_seed"]["0"]["verdict"] == HOLDS and by["flip"]["per_seed"]["1"]["verdict"] == FAILS
    assert not by["flip"]["agree"] and not s["agree"]
    assert (fake / "seeded" / "seed_1" / "result_quick.json").is_file()
    assert "NO" in capsys.readouterr().out


def test_agree_and_summary_refuse_mixed_input():
    assert agree([HOLDS, INCONCLUSIVE, SHOWN]) and not agree([HOLDS, FAILS])
    a, b = ReproResult("a", [Claim("x", 1, 1, True)]), ReproResult("b", [Claim("x", 1, 1, True)])
    with pytest.raises(ValueError, match="one package"):
        summarize_seeds([a, b])
    with pytest.raises(ValueError, match="at least one"):
        summarize_seeds([])


def test_sweep_commit_and_committed_report(fake, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "packages" / "seeded").mkdir(parents=True)
    (repo / "packages" / "seeded" / "pyproject.toml").write_text("[project]\nname='x'\n")
    monkeypatch.chdir(repo)
    assert cli.main(["sweep", "seeded", "--seeds", "0", "1", "--out", str(fake), "--commit"]) == 0
    dest = repo / "packages" / "seeded" / "reproduction" / "quick"
    assert json.loads((dest / "result_quick.json").read_text())["seed"] == 0
    assert json.loads((dest / "seeds.json").read_text())["seeds"] == [0, 1]
    assert [r.package for r in load_committed(repo)] == ["seeded"]
    assert cli.main(["report", "--committed", "--out", str(repo / "report")]) == 0
    assert "seeded" in (repo / "report" / "index.html").read_text()
    page = (repo / "report" / "index.html").read_text()
    assert "data:image" not in page and 'src="../packages/seeded/reproduction/quick/curve.png"' in page  # linked
    assert (dest / "curve.png").is_file()
    assert cli.main(["sweep", "noseed", "--commit", "--out", str(fake)]) == 2  # no packages/noseed here


def test_parts_resume_after_an_interruption_and_refuse_a_changed_fingerprint(tmp_path):
    from icml25_shared.parts import Parts

    calls = []

    def part(name, value, fail=False):
        def fn():
            calls.append(name)
            if fail:
                raise KeyboardInterrupt  # the run is killed inside this part
            return {"value": value, "nan": float("nan"), "arr": np.arange(3)}

        return fn

    parts = Parts(tmp_path / "parts", fingerprint={"n": 8, "seed": 0})
    a = parts.run("a", part("a", 1.5))
    with pytest.raises(KeyboardInterrupt):
        parts.run("b", part("b", 2.5, fail=True))
    assert not parts.done("b") and not list((tmp_path / "parts").glob(".*.tmp"))  # nothing half-written
    again = Parts(tmp_path / "parts", fingerprint={"seed": 0, "n": 8})  # same fingerprint, other key order
    assert again.run("a", part("a", 99.0)) == a and again.reused == ["a"]
    assert again.run("b", part("b", 2.5))["value"] == 2.5 and again.computed == ["b"]
    assert calls == ["a", "b", "b"] and math.isnan(a["nan"]) and a["arr"] == [0, 1, 2]
    other = Parts(tmp_path / "parts", fingerprint={"n": 16, "seed": 0})  # other sizes: never reused
    assert other.run("a", part("a", 3.0))["value"] == 3.0 and other.computed == ["a"]
    (tmp_path / "parts" / "b.json").write_text("{truncated")
    assert not again.done("b") and again.run("b", part("b", 4.0))["value"] == 4.0
    assert again.run("none", lambda: None) is None and again.done("none")
    with pytest.raises(ValueError, match="name"):
        again.run("../escape", part("x", 0))
    with pytest.raises(TypeError, match="JSON-serialisable"):
        again.run("obj", lambda: {"x": object()})
