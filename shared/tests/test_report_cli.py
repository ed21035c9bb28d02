import json

import pytest

from icml25_shared import cli
from icml25_shared.report import Claim, ReproResult, save_figure, subplots


def _fake_reproduce(full=False, out_dir=None):
    fig, ax = subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, out_dir, "curve")
    return ReproResult(
        "fake",
        [
            Claim("x beats y", 0.5, 0.4, True, rule="measured <= paper"),
            Claim("z", 1.0, 2.0, False),
            Claim("shown", None, 3, None),
        ],
        settings={"full": full},
        artifacts=[str(path)],
    )


def _crash(full=False, out_dir=None):
    raise RuntimeError("boom")


class _EP:
    def __init__(self, name, fn):
        self.name, self.value, self.dist, self._fn = name, f"tests:{name}", None, fn

    def load(self):
        return self._fn


@pytest.fixture
def fake_eps(monkeypatch):
    eps = {"fake": _EP("fake", _fake_reproduce), "crashy": _EP("crashy", _crash)}
    monkeypatch.setattr(cli, "discover", lambda: eps)
    return eps


def test_list(fake_eps, capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fake" in out and "crashy" in out


def test_reproduce_writes_json_and_plot(fake_eps, tmp_path, capsys):
    assert cli.main(["reproduce", "fake", "--out", str(tmp_path)]) == 0  # a failing claim is not an error
    out = capsys.readouterr().out
    assert "holds" in out and "does not hold" in out
    d = json.loads((tmp_path / "fake" / "result_quick.json").read_text())
    assert d["package"] == "fake" and [c["verdict"] for c in d["claims"]] == ["holds", "does not hold", "shown"]
    assert (tmp_path / "fake" / "curve.png").stat().st_size > 1000
    back = ReproResult.load_json(tmp_path / "fake" / "result_quick.json")
    assert back.claims[0].measured == 0.4 and back.all_hold is False


def test_crash_exits_nonzero_but_runs_the_rest(fake_eps, tmp_path, capsys):
    assert cli.main(["reproduce", "--all", "--full", "--out", str(tmp_path)]) == 1
    assert (tmp_path / "fake" / "result_full.json").exists()
    assert json.loads((tmp_path / "crashy" / "result_full.json").read_text())["claims"][0]["measured"] == "crashed"


def test_usage_errors(fake_eps, tmp_path):
    assert cli.main(["reproduce", "nope", "--out", str(tmp_path)]) == 2
    assert cli.main(["reproduce", "--out", str(tmp_path)]) == 2


def test_real_entry_points_are_discoverable():
    # every installed package registers under the group; the workspace installs at least one
    names = cli.discover()
    assert isinstance(names, dict)
