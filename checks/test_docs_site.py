"""The documentation site renders in a real browser: headless Chromium (Debian's ``chromium``) loads the built home
page and one package page and the test reads what it rendered (the DOM after scripts ran, and a screenshot).

Runs wherever Chromium is installed (``.ci/run`` installs it when it can) and skips elsewhere. The site is the one
``.ci/run`` built (``ICML25_SITE``) or is built here with ``mkdocs build --strict``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    given = os.environ.get("ICML25_SITE")
    if given and (Path(given) / "index.html").is_file():
        return Path(given)
    pytest.importorskip("mkdocs", reason="the docs dependency group is not installed (uv sync --group docs)")
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp / 'profile'}", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _dom(page: Path, tmp: Path) -> str:
    proc = _chromium("--virtual-time-budget=5000", "--dump-dom", page.as_uri(), tmp=tmp)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_home_page_renders_with_the_package_table_and_navigation(site, tmp_path):
    dom = _dom(site / "index.html", tmp_path)
    assert "<title>icml25</title>" in dom or "icml25" in dom.split("</title>")[0]
    assert 'href="packages/swan/"' in dom and 'href="packages/timebase/"' in dom  # the table links the pages
    assert "md-nav" in dom and "Reproduction report" in dom  # Material's navigation was rendered
    shot = tmp_path / "home.png"
    proc = _chromium("--window-size=1280,900", f"--screenshot={shot}", (site / "index.html").as_uri(), tmp=tmp_path)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    from PIL import Image

    img = Image.open(shot).convert("L")
    lo, hi = img.getextrema()
    assert hi - lo > 100  # text on a background, not a blank page
    assert len(set(img.resize((64, 48)).getdata())) > 8


def test_a_package_page_renders_its_readme_and_api_reference(site, tmp_path):
    dom = _dom(site / "packages" / "swan" / "index.html", tmp_path)
    assert "API reference" in dom
    assert 'id="swan.optimizer.SWAN"' in dom or "swan.optimizer.SWAN" in dom  # a rendered mkdocstrings object
    assert "Reproduced claims" in dom and "<table>" in dom
