"""Every library a workspace package declares imports in the workspace environment.

Package tests skip when an optional library is missing (``pytest.importorskip``), so a dependency that installs
but cannot be imported — pyarrow built for NumPy 2 beside NumPy 1.26 broke scikit-learn and Ray imports this way —
would otherwise turn whole test files into silent skips. Distributions that are not installed are reported, not
failed (an extra the environment does not sync)."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import tomllib
import warnings
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PYPROJECTS = [ROOT / "shared" / "pyproject.toml", *sorted((ROOT / "packages").glob("*/pyproject.toml"))]


def _declared() -> dict[str, set[str]]:
    """Distribution name (normalised) -> the workspace projects that declare it (runtime or any extra)."""
    out: dict[str, set[str]] = {}
    for path in PYPROJECTS:
        meta = tomllib.loads(path.read_text())["project"]
        reqs = list(meta.get("dependencies", []))
        for extra in meta.get("optional-dependencies", {}).values():
            reqs += extra
        for text in reqs:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            name = req.name.lower().replace("_", "-")
            if not name.startswith("icml25"):
                out.setdefault(name, set()).add(meta["name"])
    return out


def _top_modules() -> dict[str, list[str]]:
    """Distribution name (normalised) -> its importable top-level modules."""
    out: dict[str, list[str]] = {}
    for module, dists in md.packages_distributions().items():
        if (
            not module.isidentifier()
            or module.startswith("_")
            or module in {"tests", "test", "docs", "examples", "benchmarks"}
        ):
            continue
        for dist in dists:
            out.setdefault(dist.lower().replace("_", "-"), []).append(module)
    return out


DECLARED = _declared()
MODULES = _top_modules()


def test_every_workspace_package_is_installed():
    for path in PYPROJECTS[1:]:
        name = tomllib.loads(path.read_text())["project"]["name"]
        md.distribution(name)  # raises PackageNotFoundError


@pytest.mark.parametrize("dist", sorted(DECLARED))
def test_declared_dependency_imports(dist):
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        pytest.skip(f"{dist} (declared by {', '.join(sorted(DECLARED[dist]))}) is not installed here")
    modules = sorted(set(MODULES.get(dist, [])))
    assert modules, f"{dist} is installed but provides no importable top-level module"
    for module in modules:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                importlib.import_module(module)
            except Exception as err:  # an installed dependency that cannot be imported is the failure
                pytest.fail(
                    f"{dist} (declared by {', '.join(sorted(DECLARED[dist]))}): import {module} failed: {err!r}"
                )
