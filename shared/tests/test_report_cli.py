"""The ``icml25`` command: subprocess per reproduction, stamping, crashes, parallelism, terminal table, HTML report."""

from __future__ import annotations

import json
import os
import textwrap
from html.parser import HTMLParser

import pytest
from rich.console import Console

from icml25_shared import cli
from icml25_shared.report import Claim, ReproResult, claims_table

FAKE = textwrap.dedent(
    """
    import os, time
    from icml25_shared.report import Claim, ReproResult, save_figure, subplots

    def good(full, out_dir, *, download=False):
        t0 = time.time()
        fig, ax = subplots()
        ax.plot([0, 1], [1, 0])
        path = save_figure(fig, out_dir, "curve")
        time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
        return ReproResult(
            "good",
            [
                Claim("x beats y by a wide margin on the long benchmark everyone uses", 0.5, 0.4, True,
                      rule="measured <= paper"),
                Claim("z", 1.0, 2.0, False, short="z claim"),
                Claim("shown <b>not</b> judged", None, 3, None),
            ],
            settings={"full": full, "download": download, "omp": os.environ.get("OMP_NUM_THREADS"),
                      "workers": os.environ.get("ICML25_WORKERS"), "t0": t0, "t1": time.time()},
            artifacts=[str(path)],
        )

    def other(full, out_dir, *, download=False):
        t0 = time.time()
        time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
        return ReproResult("other", [Claim("o", 1, 1, True)], settings={"t0": t0, "t1": time.time()})

    def crash(full, out_dir, *, download=False):
        raise RuntimeError("boom on purpose")

    def die(full, out_dir, *, download=False):
        os._exit(9)

    def wrong(full, out_dir, *, download=False):
        return {"not": "a result"}
    """
)


@pytest.fixture
def fake(fake_reproductions):
    return fake_reproductions("fakerepro", FAKE, ("good", "other", "crash", "die", "wrong"))


def test_list(fake, capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "good" in out and "crash" in out


def test_reproduce_stamps_and_writes_one_json_per_run(fake, capsys):
    assert cli.main(["reproduce", "good", "--out", str(fake), "--download"]) == 0  # a failing claim is no error
    out = capsys.readouterr().out
    assert "holds" in out and "does not hold" in out and "z claim" in out
    d = json.loads((fake / "good" / "result_quick.json").read_text())
    assert d["package"] == "good" and d["mode"] == "quick"
    assert [c["verdict"] for c in d["claims"]] == ["holds", "does not hold", "shown"]
    assert d["runtime_s"] > 0 and d["cpu_s"] > 0 and d["started"] and d["versions"]["icml25-shared"]
    assert d["machine"]["cpus"] >= 1
    # the command, not the package, decides the thread setting and passes download as an argument
    assert d["settings"]["omp"] == "1" and d["settings"]["download"] is True and d["settings"]["full"] is False
    assert d["artifacts"] == ["curve.png"] and (fake / "good" / "curve.png").stat().st_size > 1000
    assert sorted(p.name for p in (fake / "good").glob("*.json")) == ["result_quick.json"]
    back = ReproResult.load_json(fake / "good" / "result_quick.json")
    assert back.claims[0].measured == 0.4 and back.all_hold is False and back.versions == d["versions"]


def test_crashes_exit_nonzero_but_the_rest_runs(fake, capsys):
    assert cli.main(["reproduce", "good", "crash", "die", "wrong", "--full", "--out", str(fake), "-j", "2"]) == 1
    assert json.loads((fake / "good" / "result_full.json").read_text())["crashed"] is False
    for name in ("crash", "die", "wrong"):
        d = json.loads((fake / name / "result_full.json").read_text())
        assert d["crashed"] is True and d["claims"][0]["measured"] == "crashed" and d["mode"] == "full"
    assert "boom on purpose" in (fake / "crash" / "log_full.txt").read_text()
    assert "status 9" in json.loads((fake / "die" / "result_full.json").read_text())["settings"]["error"]
    assert "expected ReproResult" in (fake / "wrong" / "log_full.txt").read_text()
    err = capsys.readouterr().err
    assert "crash crashed" in err and "log_full.txt" in err


def _intervals(root, names):
    return [json.loads((root / n / "result_quick.json").read_text())["settings"] for n in names]


def test_jobs_run_in_parallel_and_share_the_cores(fake, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "1.0")
    assert cli.main(["reproduce", "good", "other", "--out", str(fake), "-j", "2"]) == 0
    a, b = _intervals(fake, ["good", "other"])
    assert a["t0"] < b["t1"] and b["t0"] < a["t1"]  # both ran at once
    from icml25_shared.runner import usable_cpus

    assert a["workers"] == str(max(1, usable_cpus() // 2))
    assert cli.main(["reproduce", "good", "other", "--out", str(fake), "-j", "1"]) == 0
    a, b = _intervals(fake, ["good", "other"])
    assert a["t1"] <= b["t0"] or b["t1"] <= a["t0"]  # one after the other


def test_usage_errors(fake):
    assert cli.main(["reproduce", "nope", "--out", str(fake)]) == 2
    assert cli.main(["reproduce", "--out", str(fake)]) == 2
    assert cli.main(["reproduce", "good", "--all", "--out", str(fake)]) == 2
    assert cli.main(["reproduce", "good", "-j", "0", "--out", str(fake)]) == 2
    assert cli.main(["report", "--out", str(fake / "empty")]) == 2


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.imgs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a":
            self.hrefs.append(a.get("href"))
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        assert tag not in ("script", "link"), "the report must be self-contained, without scripts"

    def handle_data(self, data):
        self.text.append(data)


def test_html_report_has_every_claim_and_plot(fake):
    assert cli.main(["reproduce", "good", "other", "--out", str(fake)]) == 0
    page = (fake / "index.html").read_text()
    parser = _Links()
    parser.feed(page)
    text = " ".join(parser.text)
    claims = json.loads((fake / "claims.json").read_text())
    runs = {r["package"]: r for r in claims["runs"]}
    assert set(runs) == {"good", "other"}
    for run in runs.values():
        for c in run["claims"]:
            assert c["text"] in text  # escaped in the HTML, intact as text
            assert c["verdict"] in text
        for art in run["artifacts"]:
            assert f"{run['package']}/{art}" in parser.hrefs
    assert "<b>not</b>" not in page  # claim text is escaped
    assert len(parser.imgs) == 1 and parser.imgs[0].startswith("data:image/png;base64,")
    # `icml25 report` rebuilds the same report from the result files alone
    (fake / "index.html").unlink()
    assert cli.main(["report", "--out", str(fake)]) == 0 and (fake / "index.html").is_file()


def test_terminal_table_fits_120_columns():
    long = "a claim whose text is far longer than any terminal column could ever hold " * 3
    res = ReproResult("a_package_with_a_long_name", [Claim(long, 123456.789, "0.5 of something long", None)])
    console = Console(width=120, record=True)
    console.print(claims_table([res]))
    text = console.export_text()
    lines = text.splitlines()
    assert lines and all(len(line) <= 120 for line in lines)
    assert "…" in text and len([ln for ln in lines if "a_package" in ln]) == 1  # cut, not wrapped


def test_real_entry_points_are_discoverable():
    names = cli.discover()
    assert "timebase" in names and all(":" in ep.value for ep in names.values())


_BURN_MODULE = """
import time

from icml25_shared.report import Claim, ReproResult


def burn(seconds):
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        pass
    return time.process_time() - t0


def reproduce(full, out_dir, *, download=False, seed=0):
    from joblib import Parallel, delayed

    used = Parallel(n_jobs=2, backend="loky")(delayed(burn)(0.4) for _ in range(2))
    return ReproResult("burner", [Claim("workers burned", None, sum(used), None, short="burn")])
"""


def test_runner_counts_the_cpu_time_of_reusable_worker_pools(tmp_path, monkeypatch):
    """joblib's loky workers outlive the call that used them; the runner stops the pool before reading the
    children's CPU time, so a reproduction that fans out is not undercounted."""
    pytest.importorskip("joblib")
    from icml25_shared import runner

    (tmp_path / "burner_mod.py").write_text(_BURN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = runner.run_in_process("burner", "burner_mod:reproduce", tmp_path / "out")
    burned = res.claims[0].measured
    assert isinstance(burned, float) and burned >= 0.8
    assert res.cpu_s >= burned  # the workers' time is in the total (it was ~0 when they were left running)
