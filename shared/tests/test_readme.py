"""README generation (claims and performance tables, root summary) and runnable README blocks."""

import json
import sys

import pytest

from icml25_shared import bench, readme
from icml25_shared.report import Claim, ReproResult


def _demo(tmp_path):
    pkg = tmp_path / "packages" / "demo"
    (pkg / "reproduction" / "quick").mkdir(parents=True)
    (pkg / "reproduction" / "full").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text("[project]\nname='x'\n")
    quick = ReproResult(
        "demo",
        [
            Claim.over_seeds("x beats y", 0.5, [0.6, 0.62, 0.61], ">=", 0.5, seeds=[0, 1, 2], rule="r", short="x"),
            Claim("a | pipe", "1 nat", 0.25, None, unit="nats", short="pipe"),
        ],
    )
    full = ReproResult(
        "demo",
        [
            Claim.over_seeds("x beats y", 0.5, [0.4, 0.7, 0.55], ">=", 0.5, seeds=[0, 1, 2], rule="r", short="x"),
            Claim("only | in full", 2.0, 1.0, False, short="full-only"),
        ],
    )
    quick.save_json(pkg / "reproduction" / "quick" / "result_quick.json")
    full.save_json(pkg / "reproduction" / "full" / "result_full.json")
    return pkg, quick


def test_readme_tables_are_generated_and_checked(tmp_path):
    pkg, quick = _demo(tmp_path)
    (pkg / "README.md").write_text(
        f"# demo\n\n{readme.BEGIN}\nstale text\n{readme.END}\n\n{readme.PERF_BEGIN}\nold\n{readme.PERF_END}\nafter\n"
    )
    (tmp_path / "README.md").write_text(f"# root\n{readme.SUMMARY_BEGIN}\n{readme.SUMMARY_END}\n")
    args = ["--root", str(tmp_path)]
    assert readme.main([*args, "--check"]) == 1  # stale
    assert readme.main(args) == 0
    assert readme.main([*args, "--check"]) == 0  # byte-identical when regenerated
    text = (pkg / "README.md").read_text()
    assert text.endswith("after\n") and "stale text" not in text and "\nold\n" not in text
    # one row per judged label, quick and full side by side; the shown-only claim is counted, not listed
    row = next(line for line in text.splitlines() if line.startswith("| x "))
    assert "0.610 ± 0.010" in row and "**holds**" in row and "**inconclusive**" in row
    assert "| full-only | 2 | - | 1 **does not hold** |" in text and "**does not hold**" in text
    assert "0.25 nats" not in text and "1 further figure shown without a verdict" in text
    assert "*No committed benchmark result.*" in text
    root = (tmp_path / "README.md").read_text()
    assert "[demo](packages/demo)" in root and "1 hold · 0 do not hold · 0 inconclusive · 1 shown" in root
    quick.claims[0] = Claim("x beats y", 0.5, 0.4, False, short="x")  # a changed result makes the README stale
    quick.save_json(pkg / "reproduction" / "quick" / "result_quick.json")
    assert readme.main([*args, "--check"]) == 1
    assert readme.main([*args, "nope"]) == 2


def test_performance_rows_merge_by_source_and_render(tmp_path):
    pkg, _ = _demo(tmp_path)
    res = pkg / "benchmarks" / "results"
    row = {"case": "step, N=64", "peer": "peft", "metric": "time", "ratio": 0.8, "lo": 0.75, "hi": 0.85, "load": 1.1}
    bench.write_performance(res, "bench_a.json", [row, {**row, "case": "N=8", "limit": 0.5, "goal": "≤ 0.6×"}])
    bench.write_performance(res, "bench_b.json", [{**row, "case": "other", "ratio": 1.5}], notes=["A note."])
    bench.write_performance(res, "bench_a.json", [{**row, "ratio": 0.7}])  # replaces bench_a's two rows
    data = json.loads((res / "performance.json").read_text())
    assert [(r["case"], r["ratio"], r["source"]) for r in data["rows"]] == [
        ("other", 1.5, "bench_b.json"),
        ("step, N=64", 0.7, "bench_a.json"),
    ]
    table = readme.performance_table_md(pkg)
    # columns nobody filled (limit, goal) are left out; two sources: a source column
    assert "| case | peer | metric | ours / peer | spread | load | source |" in table
    assert "| step, N=64 | peft | time | **0.70×** | 0.75–0.85 | 1.1 | [bench_a.json]" in table
    assert "A note." in table and "limit:" not in table
    bench.write_performance(res, "bench_b.json", [{**row, "limit": 0.5, "goal": "≤ 0.6×"}])
    table = readme.performance_table_md(pkg)
    assert "| spread | limit | goal | load |" in table and "| 0.50 | ≤ 0.6× |" in table and "limit: the best" in table
    with pytest.raises(ValueError, match="missing"):
        bench.write_performance(res, "c.json", [{"case": "x", "peer": "y", "metric": "time", "ratio": 1.0}])
    with pytest.raises(ValueError, match="unknown"):
        bench.write_performance(res, "c.json", [{**row, "speed": 2}])
    with pytest.raises(ValueError, match="finite"):
        bench.write_performance(res, "c.json", [{**row, "ratio": float("nan")}])
    with pytest.raises(TypeError, match="number"):
        bench.write_performance(res, "c.json", [{**row, "ratio": "fast"}])
    with pytest.raises(ValueError, match="file name"):
        bench.write_performance(res, "sub/c.json", [row])
    import numpy as np

    bench.write_performance(res, "c.json", [{**row, "ratio": np.float32(0.5)}])  # numpy scalars are numbers
    # a ratio under 0.005 keeps two significant digits instead of reading 0.00; an exact 0 stays 0.00
    bench.write_performance(res, "c.json", [{**row, "ratio": 0.0014, "lo": 0.0007, "hi": 0.0015, "limit": 0.0}])
    table = readme.performance_table_md(pkg)
    assert "**0.0014×** | 0.0007–0.0015 | 0.00 |" in table


README = """# demo

<!-- icml25:run -->
```python
x = 6 * 7
print("answer", x)
```
<!-- icml25:output -->
```text
answer 42
```

Not run:

```python
raise SystemExit(3)
```

<!-- icml25:run -->
```python
print(f"x is still {x}; pi ~ {22 / 7:.4f}")
```

<!-- icml25:output -->
```text
x is still ...; pi ~ 3.14...
```
"""


def test_readme_blocks_run_in_order_and_compare_output(tmp_path):
    blocks = readme.readme_blocks(README)
    assert [(code.splitlines()[0], exp is not None) for _, code, exp in blocks] == [
        ("x = 6 * 7", True),
        ('print(f"x is still {x}; pi ~ {22 / 7:.4f}")', True),
    ]
    path = tmp_path / "README.md"
    path.write_text(README)
    assert readme.run_readme(path) == []
    assert readme.main(["--run", str(path)]) == 0
    path.write_text(README.replace("answer 42", "answer 43"))
    (problem,) = readme.run_readme(path)
    assert "printed\nanswer 42" in problem and "expected\nanswer 43" in problem
    path.write_text(README.replace("x = 6 * 7", "x = 6 * undefined_name"))
    (problem,) = readme.run_readme(path)
    assert "line 4 failed" in problem and "NameError" in problem
    assert readme.main(["--run", str(path)]) == 1
    path.write_text("# nothing to run\n```python\nprint(1)\n```\n")
    assert "no runnable block" in readme.run_readme(path)[0]
    path.write_text("<!-- icml25:run -->\n```bash\nls\n```\n")
    with pytest.raises(ValueError, match="python"):
        readme.run_readme(path)


def test_readme_blocks_run_in_an_empty_folder_with_this_interpreter(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(
        "<!-- icml25:run -->\n```python\nimport os, sys\nprint(os.listdir('.'), sys.executable)\n```\n"
        f"<!-- icml25:output -->\n```text\n[] {sys.executable}\n```\n"
    )
    assert readme.run_readme(path) == []
