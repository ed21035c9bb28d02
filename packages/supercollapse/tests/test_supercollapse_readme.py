"""Every Python block of the README runs as written (a block whose first line is ``# sketch`` is skipped), and the
figures it quotes in ``# → ...`` comments are what it prints (to 2 %, so that another BLAS may round differently)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def _same(quoted: str, line: str) -> bool:
    """The same words, and numbers equal to 2 % (or 1e-4)."""
    if _NUM.sub("#", quoted) != _NUM.sub("#", line):
        return False
    return all(
        float(a) == pytest.approx(float(b), rel=0.02, abs=1e-4)
        for a, b in zip(_NUM.findall(quoted), _NUM.findall(line))
    )


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_runnable_blocks():
    blocks = _blocks()
    runnable = [b for b in blocks if not b.startswith("# sketch")]
    assert len(runnable) >= 3 and len(runnable) == len(blocks)  # every block is runnable today


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    block = _blocks()[index]
    if block.startswith("# sketch"):
        pytest.skip("marked as a sketch")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, f"README.md block {index}", "exec"), {"__name__": f"readme_block_{index}"})
    printed = out.getvalue().splitlines()
    for quoted in re.findall(r"# → (.+)", block):
        assert any(_same(quoted.strip(), line.strip()) for line in printed), (
            f"README block {index} says {quoted!r} but printed:\n" + "\n".join(printed)
        )
    for png in re.findall(r'savefig\("([^"]+)"\)', block):
        assert (tmp_path / png).exists()
