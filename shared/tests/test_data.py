import hashlib
from pathlib import Path

import pytest

from icml25_shared import data


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A registered one-file data set whose file lives in three candidate places."""
    content = b"a,b\n1,2\n"
    sha = hashlib.sha256(content).hexdigest()
    ds = data.register(data.Dataset("toyset", "toy", (data.DataFile("toy.csv", sha, "file:///nowhere"),), "t", "x"))
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ICML25_DATA", raising=False)
    monkeypatch.setattr(data, "bundled_root", lambda: tmp_path / "bundled")
    yield ds, content, sha
    data.REGISTRY.pop("toyset")


def _write(folder: Path, content: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "toy.csv").write_bytes(content)
    return folder


def test_registered_sets():
    for name in ("ETTh1", "ETTh2", "Cora", "CiteSeer", "tinyshakespeare"):
        ds = data.get(name)
        assert all(len(f.sha256) == 64 for f in ds.files)
    assert len(data.get("cora").files) == 8


def test_missing_everywhere_names_file_hash_and_remedy(toy):
    _, _, sha = toy
    with pytest.raises(data.DataNotFoundError) as err:
        data.resolve("toyset")
    msg = str(err.value)
    assert "toy.csv" in msg and sha in msg and "download=True" in msg and "ICML25_DATA" in msg


def test_resolution_order(toy, tmp_path, monkeypatch):
    _, content, _ = toy
    cache = _write(tmp_path / "cache" / "toy", content)
    assert data.resolve("toyset") == cache
    bundled = _write(tmp_path / "bundled" / "toy", content)
    assert data.resolve("toyset") == bundled  # the bundled copy before the cache
    env = _write(tmp_path / "env" / "toy", content)
    monkeypatch.setenv("ICML25_DATA", str(tmp_path / "env"))
    assert data.resolve("toyset") == env  # ICML25_DATA before the cache
    explicit = _write(tmp_path / "explicit", content)
    assert data.resolve("toyset", explicit) == explicit  # explicit path first
    assert data.file_path("toyset", path=explicit / "toy.csv") == explicit / "toy.csv"


def test_explicit_path_does_not_fall_back(toy, tmp_path):
    _, content, _ = toy
    _write(tmp_path / "cache" / "toy", content)
    with pytest.raises(data.DataNotFoundError):
        data.resolve("toyset", tmp_path / "empty")


def test_sha256_mismatch_is_caught(toy, tmp_path, monkeypatch):
    _, content, sha = toy
    _write(tmp_path / "env" / "toy", content + b"tampered")
    monkeypatch.setenv("ICML25_DATA", str(tmp_path / "env"))
    with pytest.raises(data.ChecksumError, match=sha):
        data.resolve("toyset")


def test_download_verifies_and_lands_in_cache(toy, tmp_path, monkeypatch):
    ds, content, _ = toy
    src = tmp_path / "remote.csv"
    src.write_bytes(content)
    data.REGISTRY["toyset"] = data.Dataset(
        "toyset", "toy", (data.DataFile("toy.csv", ds.files[0].sha256, src.as_uri()),), "t", "x"
    )
    with pytest.raises(data.DataNotFoundError):
        data.resolve("toyset")  # never implicitly
    monkeypatch.setenv("ICML25_DOWNLOAD", "1")  # the old environment switch no longer downloads anything
    with pytest.raises(data.DataNotFoundError):
        data.resolve("toyset")
    folder = data.resolve("toyset", download=True)  # what `icml25 reproduce --download` passes
    assert folder == tmp_path / "cache" / "toy" and (folder / "toy.csv").read_bytes() == content
    # a corrupt download is refused and removed
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"wrong")
    data.REGISTRY["toyset"] = data.Dataset(
        "toyset", "toy2", (data.DataFile("toy.csv", ds.files[0].sha256, bad.as_uri()),), "t", "x"
    )
    with pytest.raises(data.ChecksumError):
        data.resolve("toyset", download=True)
    assert not (tmp_path / "cache" / "toy2" / "toy.csv").exists()


def test_copy_to(toy, tmp_path, monkeypatch):
    _, content, _ = toy
    _write(tmp_path / "env" / "toy", content)
    monkeypatch.setenv("ICML25_DATA", str(tmp_path / "env"))
    dest = data.copy_to("toyset", tmp_path / "work")
    assert (dest / "toy" / "toy.csv").read_bytes() == content


def test_bundled_copy_holds_every_registered_file(monkeypatch, tmp_path):
    # the root project installs icml25-datasets: a clone resolves every set offline, sha256-verified, with no
    # ICML25_DATA and an empty cache
    root = data.bundled_root()
    if root is None:
        pytest.skip("icml25-datasets is not installed (package installed without its [data] extra)")
    monkeypatch.delenv("ICML25_DATA", raising=False)
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path / "empty-cache"))
    for name in ("ETTh1", "ETTh2", "Cora", "CiteSeer", "tinyshakespeare"):
        folder = data.resolve(name)
        assert folder.is_relative_to(root)
    assert data.file_path("ETTh1").name == "ETTh1.csv"
    for sub in ("ett", "planetoid"):
        assert (root / sub / "LICENSE").is_file()


def test_not_installed_and_offline_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("ICML25_DATA", raising=False)
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(data, "bundled_root", lambda: None)
    with pytest.raises(data.DataNotFoundError, match="icml25-datasets"):
        data.resolve("ETTh1")
