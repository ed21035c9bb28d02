"""MkDocs hook: the site is built from the repository's own files, nothing is copied by hand.

Pages: the root README (home), one page per package (its README plus an API reference generated from the
docstrings with mkdocstrings), icml25-shared (its README plus the API of every module), the bundled data sets,
CONTRIBUTING and a page for the reproduction report. Pages keep their README's place in the repository
(``packages/<name>/README.md`` becomes ``packages/<name>/index.md``), so every relative link in a README keeps
working: a link to a README becomes a link to its page, and a link to any other committed file (benchmark results,
plots, the HTML reproduction report and the plots it links) adds that file to the site unchanged. A link to a
file that does not exist is left as it is, and ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import ast
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
_LINK = re.compile(r"(\]\(|(?:href|src)=\")([^)\"\s]+)")
_SKIP = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#|/)", re.I)
_MAX_STATIC = 5_000_000  # bytes: a committed artefact larger than this is not published


def _module_all(init: Path) -> list[str]:
    """The names in a module's ``__all__`` (read from the source, nothing imported)."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(e) for e in getattr(node.value, "elts", [])]
    return []


def _defined_in(init: Path, package: str) -> dict[str, str]:
    """Where each name ``__init__`` imports comes from (lazy imports inside ``__getattr__`` included)."""
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package):
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _package_api(name: str) -> str:
    init = ROOT / "packages" / name / "src" / name / "__init__.py"
    names = [n for n in _module_all(init) if not n.startswith("_") and n != "__version__"]
    where = _defined_in(init, name)
    lines = ["", "## API reference", "", f"Generated from the docstrings of `{name}` (its `__all__`).", ""]
    for n in names:
        target = where.get(n, f"{name}.{n}")
        module, _, obj = target.rpartition(".")
        if _top_level(ROOT / "packages" / name / "src", module, obj):
            lines.append(f"::: {target}\n    options:\n      heading_level: 3\n")
        else:  # built on first access (a subclass of a heavy optional import): no static docstring to render
            lines.append(f"### `{n}`\n\nCreated on first access in `{module}` (see its docstring in the source).\n")
    return "\n".join(lines)


def _top_level(src: Path, module: str, obj: str) -> bool:
    """Whether ``obj`` is defined or imported at the top level of ``module`` (read statically)."""
    parts = module.split(".")
    path = src.joinpath(*parts)
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not path.is_file():
        return False
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.name == obj:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", None) == obj for t in targets):
                return True
        if isinstance(node, ast.ImportFrom | ast.Import) and any((a.asname or a.name) == obj for a in node.names):
            return True
    return False


def _shared_api() -> str:
    src = ROOT / "shared" / "src" / "icml25_shared"
    mods = sorted(p.stem for p in src.glob("*.py") if not p.stem.startswith("_") and p.stem not in ("cli", "runner"))
    lines = ["", "## API reference", ""]
    for m in [*mods, "kernels"]:
        lines.append(f"::: icml25_shared.{m}\n    options:\n      heading_level: 3\n      show_submodules: false\n")
    return "\n".join(lines)


# repository path of the source -> (page path in the site, text appended)
def _pages() -> dict[str, tuple[str, str]]:
    pages = {
        "README.md": ("index.md", ""),
        "CONTRIBUTING.md": ("contributing.md", ""),
        "shared/README.md": ("shared/index.md", _shared_api()),
        "shared/datasets/README.md": ("shared/datasets/index.md", ""),
    }
    for name in PACKAGES:
        pages[f"packages/{name}/README.md"] = (f"packages/{name}/index.md", _package_api(name))
    return pages


REPORT_PAGE = """# Reproduction report

Every package's committed quick and `--full` results — each claim with its rule, the paper's figure next to the
measured one, the verdict, runtimes, versions and plots — in one page built by `icml25 report --committed`:

**[Open the reproduction report](reproduction/index.html)**

Rebuild it from a checkout with `uv run icml25 report --committed`; run the reproductions yourself with
`uv run icml25 reproduce --all` (see the [home page](index.md)).
"""


def _rewrite(text: str, repo_path: str, page_path: str, pages: dict[str, tuple[str, str]], static: set[str]) -> str:
    """Map README links to pages; collect the other committed files the text links to."""
    src_dir = posixpath.dirname(repo_path)
    page_dir = posixpath.dirname(page_path)
    by_repo = {k: v[0] for k, v in pages.items()}

    def fix(m: re.Match[str]) -> str:
        target = m.group(2)
        if _SKIP.match(target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(src_dir, path)) if path else repo_path
        if (ROOT / resolved).is_dir() and (ROOT / resolved / "README.md").is_file():
            resolved = posixpath.join(resolved, "README.md")
        if resolved in by_repo:
            new = posixpath.relpath(by_repo[resolved], page_dir or ".")
            return m.group(1) + new + (f"#{anchor}" if anchor else "")
        f = ROOT / resolved
        if f.is_file() and not resolved.startswith("..") and f.stat().st_size <= _MAX_STATIC:
            static.add(resolved)
        return m.group(0)

    return _LINK.sub(fix, text)


def on_files(files: Files, config: Any) -> Files:
    pages = _pages()
    static: set[str] = set()
    for repo_path, (page_path, extra) in pages.items():
        text = (ROOT / repo_path).read_text(encoding="utf-8") + extra
        files.append(File.generated(config, page_path, content=_rewrite(text, repo_path, page_path, pages, static)))
    files.append(File.generated(config, "report.md", content=REPORT_PAGE))
    static.add("reproduction/index.html")
    done: set[str] = set()
    while static - done:
        path = sorted(static - done)[0]
        done.add(path)
        if path.endswith(".html"):  # the report links its plots by relative path
            _rewrite((ROOT / path).read_text(encoding="utf-8"), path, path, {}, static)
        if files.get_file_from_path(path) is None:
            files.append(File.generated(config, path, abs_src_path=str(ROOT / path)))
    return files


def on_config(config: Any) -> Any:
    config["nav"] = [
        {"Home": "index.md"},
        {"Packages": [{name: f"packages/{name}/index.md"} for name in PACKAGES]},
        {"icml25-shared": ["shared/index.md", {"Bundled data sets": "shared/datasets/index.md"}]},
        {"Reproduction report": "report.md"},
        {"Contributing": "contributing.md"},
    ]
    return config
