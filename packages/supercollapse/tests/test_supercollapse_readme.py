"""The README's quick start runs and prints what the README says (through icml25_shared.readme, as CI runs it), and
the longer examples in ``examples/`` run as written and print the figures they quote in ``# → ...`` comments (to
2 %, so that another BLAS may round differently)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from icml25_shared.readme import readme_blocks, run_readme

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def _same(quoted: str, line: str) -> bool:
    """The same words, and numbers equal to 2 % (or 1e-4)."""
    if _NUM.sub("#", quoted) != _NUM.sub("#", line):
        return False
    return all(
        float(a) == pytest.approx(float(b), rel=0.02, abs=1e-4)
        for a, b in zip(_NUM.findall(quoted), _NUM.findall(line))
    )


def test_readme_quick_start_runs_and_prints_what_it_says():
    assert readme_blocks(README.read_text(encoding="utf-8"))  # the quick start is marked runnable
    assert run_readme(README) == []


def test_examples_exist():
    assert {p.name for p in EXAMPLES} >= {"noise_schedule.py", "train_sweep.py"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    code = path.read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(path), "exec"), {"__name__": "__main__"})
    printed = out.getvalue().splitlines()
    for quoted in re.findall(r"# → (.+)", code):
        assert any(_same(quoted.strip(), line.strip()) for line in printed), (
            f"{path.name} says {quoted!r} but printed:\n" + "\n".join(printed)
        )
    for png in re.findall(r'savefig\("([^"]+)"\)', code):
        assert (tmp_path / png).exists()
