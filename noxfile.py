"""Per-package sessions in isolated venvs (uv backend), plus lint.

uv run nox -l                      # list sessions
uv run nox -s "tests(timebase)"    # one package alone: proves it installs and works by itself
uv run nox -s "core(bslora)"       # the same without its optional extras (tests needing one must skip)
uv run nox -s "bench(swan)"        # that package's benchmarks/bench_*.py
uv run nox -s "oldest(swan)"      # on the oldest versions it declares (every `>=` bound pinned)
uv run nox -s "wheel(swan)"     # wheels of icml25-shared and swan into an empty venv: import, README quick start
uv run nox -s docs typecheck readmes
uv run nox -s shared lint
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
# write .pyc at install time: with PYTHONDONTWRITEBYTECODE set, torch otherwise recompiles on every import
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
nox.options.sessions = ["shared", "tests", "lint"]

ROOT = Path(__file__).parent
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
PYTHON = "3.11"
# packages tested on the oldest versions they declare (every `>=` bound of runtime + test requirements)
OLDEST = ["swan"]


def _env() -> dict[str, str]:
    # real data comes from the bundled icml25-datasets (installed through a package's `data` extra)
    return {"ICML25_PROGRESS": "0"}


def _extras(package: str) -> dict[str, list[str]]:
    meta = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
    return meta.get("optional-dependencies", {})


def _with_extras(package: str, *extras: str) -> list[str]:
    """`-e packages/<package>[extras present]`, plus the local icml25-datasets when the `data` extra is asked."""
    have = [e for e in extras if e in _extras(package)]
    spec = f"packages/{package}" + (f"[{','.join(have)}]" if have else "")
    return (["-e", "shared/datasets"] if "data" in have else []) + ["-e", spec]


@nox.session(python=PYTHON)
def shared(session: nox.Session) -> None:
    """icml25-shared's tests, with only it (and torch) installed."""
    session.install("-e", "shared[torch]", "pytest")
    session.run("pytest", "shared/tests", *session.posargs, env=_env())


@nox.session(python=PYTHON)
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """One package's tests in its own venv: that package, its test (and data) extras and icml25-shared only."""
    session.install("-e", "shared", *_with_extras(package, "test", "data"), "pytest")
    session.run("pytest", f"packages/{package}/tests", *session.posargs, env=_env())


def _core_test_requirements(package: str) -> list[str]:
    """The package's `test` extra minus everything that one of its other (optional) extras brings."""
    extras = _extras(package)
    optional = {req for name, reqs in extras.items() if name != "test" for req in reqs}
    return [req for req in extras.get("test", []) if req not in optional]


@nox.session(python=PYTHON)
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
def core(session: nox.Session, package: str) -> None:
    """One package without its optional extras (and without the bundled data): tests that need one must skip."""
    session.install("-e", "shared", "-e", f"packages/{package}", "pytest", *_core_test_requirements(package))
    session.run("pytest", f"packages/{package}/tests", *session.posargs, env=_env())


def _lower_bounds(package: str) -> list[str]:
    """`name==X` for every `name>=X` among the package's runtime dependencies and its `test` extra."""
    meta = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
    pins = []
    for req in meta["dependencies"] + meta.get("optional-dependencies", {}).get("test", []):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)\s*", req)
        if m:
            pins.append(f"{m.group(1)}=={m.group(2)}")
    return pins


@nox.session(python=PYTHON)
@nox.parametrize("package", OLDEST, ids=OLDEST)
def oldest(session: nox.Session, package: str) -> None:
    """One package's tests on the oldest versions it declares: every `>=` bound of its runtime and test
    requirements pinned (torch, NumPy, transformers, ...)."""
    pins = _lower_bounds(package)
    session.install("-e", "shared", *_with_extras(package, "test", "data"), "pytest", *pins)
    session.run("python", "-c", "import numpy, torch; print('torch', torch.__version__, 'numpy', numpy.__version__)")
    session.run("pytest", f"packages/{package}/tests", *session.posargs, env=_env())


@nox.session(python=PYTHON)
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
def bench(session: nox.Session, package: str) -> None:
    """Run a package's benchmarks (timing against its peer in one run, reported as ratios)."""
    session.install("-e", "shared", *_with_extras(package, "test", "data"))
    scripts = sorted((ROOT / "packages" / package / "benchmarks").glob("bench_*.py"))
    if not scripts:
        session.skip(f"packages/{package}/benchmarks has no bench_*.py")
    for script in scripts:
        session.run("python", str(script), *session.posargs, env=_env())


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


REPORT_STACK = {"rich", "matplotlib", "tqdm"}
_NO_REPORT_STACK = f"""
import importlib.metadata as m, re, sys
stack = {sorted(REPORT_STACK)!r}
own = {{"icml25-shared", "icml25-datasets"}}  # a package may declare one itself (supercollapse plots: matplotlib)
def name(req):
    return re.split(r"[\\s\\[<>=!~;(]", req, maxsplit=1)[0].lower().replace("_", "-")
dists = {{d.metadata["Name"].lower().replace("_", "-"): d for d in m.distributions()}}
bad = []
for lib in stack:
    if lib not in dists:
        continue
    why = sorted(n for n, d in dists.items() if any(name(r) == lib and "extra ==" not in r for r in d.requires or []))
    third = [n for n in why if n not in own]
    print(f"{{lib}}: installed, required by {{why or 'nothing (pulled in directly)'}}")
    if not third:
        bad.append(lib)
sys.exit(f"report stack installed through icml25 itself: {{bad}}" if bad else 0)
"""


@nox.session(python=PYTHON)
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
def wheel(session: nox.Session, package: str) -> None:
    """Build the wheels of icml25-shared (and icml25-datasets when the package reads data) and of one package,
    install them into an empty venv (no workspace, no editable installs), check that nothing from the report stack
    came with them, import the package and run its README's runnable blocks against the installed wheels."""
    dist = Path(session.create_tmp()) / "dist"
    if dist.exists():
        for old in dist.glob("*.whl"):
            old.unlink()
    sources = ["shared", f"packages/{package}"]
    data = "data" in _extras(package)
    if data:
        sources.append("shared/datasets")
    for src in sources:
        session.run("uv", "build", "--wheel", "--quiet", "--out-dir", str(dist), str(ROOT / src), external=True)
    wheels = sorted(str(w) for w in dist.glob("*.whl"))
    name = f"icml25_{package}"
    pkg_wheel = next(w for w in wheels if Path(w).name.startswith(name + "-"))
    others = [w for w in wheels if w != pkg_wheel]
    session.install(*others, pkg_wheel + ("[data]" if data else ""))
    # nothing from the report stack may come through icml25-shared or the package itself; a third-party dependency
    # that needs one (transformers needs tqdm, flwr needs rich) is that library's requirement, and is named
    session.run("python", "-c", _NO_REPORT_STACK, package)
    session.run("python", "-c", f"import {package}; print({package}.__name__, {package}.__version__)")
    readme = str(ROOT / "packages" / package / "README.md")
    session.run("python", "-m", "icml25_shared.readme", "--run", readme, env=_env())


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site: mkdocs build --strict (broken links, missing references, docstring errors fail)."""
    # mkdocstrings reads the sources statically (mkdocs.yml lists every src/), so nothing of the workspace is installed
    session.install("mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings-python>=1.10")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(Path(session.create_tmp()) / "site"), env=_env())


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """basedpyright in basic mode over shared/src and every packages/*/src (the root pyproject configures it)."""
    session.install("-e", "shared[torch,report]", *[a for p in PACKAGES for a in ("-e", f"packages/{p}[test]")])
    session.install("basedpyright")
    session.run("basedpyright")


@nox.session(python=PYTHON)
def readmes(session: nox.Session) -> None:
    """Every package README's runnable blocks, with the workspace installed; and the generated tables up to date."""
    session.install("-e", "shared[torch,report]", "-e", "shared/datasets")
    session.install(*[a for p in PACKAGES for a in ("-e", f"packages/{p}")])
    session.run("python", "-m", "icml25_shared.readme", "--check", env=_env())
    readmes_ = [str(ROOT / "packages" / p / "README.md") for p in PACKAGES]
    session.run("python", "-m", "icml25_shared.readme", "--run", *readmes_, env=_env())
