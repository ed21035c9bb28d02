"""A small registry of real data sets, resolved offline first and always verified by sha256.

Used by timebase (ETTh1/ETTh2), unifews and eagles (Cora, CiteSeer), swan, frugal, mohd and downscaling (Tiny
Shakespeare).

Resolution order for a data set's files (:func:`resolve`):

1. an explicit ``path`` argument (the data set's folder, or the file itself for one-file sets);
2. ``$ICML25_DATA/<subdir>`` (a folder laid out like the bundled copy);
3. the bundled copy: the ``icml25-datasets`` distribution (the root project and every package's ``[data]`` extra
   install it, so a clone runs offline);
4. the user cache ``$ICML25_CACHE`` or ``~/.cache/icml25``/``<subdir>``;
5. a fetch from the canonical source into the cache, **only** when the caller asks for it through the
   ``download`` argument (``icml25 reproduce --download`` passes it to every reproduction).

Every file found is checked against its sha256; a mismatch raises :class:`ChecksumError`, a missing file raises
:class:`DataNotFoundError` naming the expected file, its hash and how to obtain it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DataFile",
    "Dataset",
    "REGISTRY",
    "DataNotFoundError",
    "ChecksumError",
    "register",
    "get",
    "resolve",
    "file_path",
    "copy_to",
    "sha256sum",
    "cache_dir",
    "bundled_root",
]


class DataNotFoundError(FileNotFoundError):
    """A registered data file is nowhere on this machine."""


class ChecksumError(ValueError):
    """A data file exists but its sha256 differs from the registered one."""


@dataclass(frozen=True)
class DataFile:
    """One file of a data set: its path inside the data set's folder, sha256 and canonical URL."""

    relpath: str
    sha256: str
    url: str


@dataclass(frozen=True)
class Dataset:
    """A registered data set: files under ``subdir`` of the data root."""

    name: str
    subdir: str
    files: tuple[DataFile, ...]
    description: str
    license: str

    def file(self, name: str | None = None) -> DataFile:
        """The file whose relpath (or basename) is ``name``; the only file when ``name`` is None."""
        if name is None:
            if len(self.files) != 1:
                raise ValueError(
                    f"data set {self.name!r} has {len(self.files)} files; name one of {[f.relpath for f in self.files]}"
                )
            return self.files[0]
        for f in self.files:
            if name in (f.relpath, Path(f.relpath).name):
                return f
        raise KeyError(f"data set {self.name!r} has no file {name!r}; files: {[f.relpath for f in self.files]}")


REGISTRY: dict[str, Dataset] = {}


def register(dataset: Dataset) -> Dataset:
    """Add ``dataset`` to the registry (name is case-insensitive)."""
    REGISTRY[dataset.name.lower()] = dataset
    return dataset


def get(name: str) -> Dataset:
    """The registered data set called ``name`` (case-insensitive)."""
    try:
        return REGISTRY[name.lower()]
    except KeyError:
        raise KeyError(f"unknown data set {name!r}; registered: {sorted(REGISTRY)}") from None


_ETT_URL = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/"
_ETT_SHA = {
    "ETTh1": "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066",
    "ETTh2": "a3dc2c597b9218c7ce1cd55eb77b283fd459a1d09d753063f944967dd6b9218b",
}
_PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data/"

register(
    Dataset(
        "ETTh1",
        "ett",
        (DataFile("ETTh1.csv", _ETT_SHA["ETTh1"], _ETT_URL + "ETTh1.csv"),),
        "Electricity transformer temperature, hourly, 17,420 rows x (date + 7 columns)",
        "CC BY-ND 4.0",
    )
)
register(
    Dataset(
        "ETTh2",
        "ett",
        (DataFile("ETTh2.csv", _ETT_SHA["ETTh2"], _ETT_URL + "ETTh2.csv"),),
        "Electricity transformer temperature, hourly, 17,420 rows x (date + 7 columns)",
        "CC BY-ND 4.0",
    )
)

_PLANETOID_SHA = {
    "cora": {
        "allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
        "ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
        "graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
        "test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
        "tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
        "ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
        "x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
        "y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
    },
    "citeseer": {
        "allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
        "ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
        "graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
        "test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
        "tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
        "ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
        "x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
        "y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
    },
}
for _pname, _title, _desc in (
    ("cora", "Cora", "Cora citation graph: 2,708 nodes, 10,556 directed edges, 1,433 features, 7 classes"),
    ("citeseer", "CiteSeer", "CiteSeer citation graph: 3,327 nodes, 3,703 features, 6 classes"),
):
    register(
        Dataset(
            _title,
            f"planetoid/{_title}",
            tuple(
                DataFile(f"raw/ind.{_pname}.{ext}", sha, f"{_PLANETOID_URL}ind.{_pname}.{ext}")
                for ext, sha in _PLANETOID_SHA[_pname].items()
            ),
            _desc + " (Planetoid raw files; torch_geometric.datasets.Planetoid reads them)",
            "MIT",
        )
    )

register(
    Dataset(
        "tinyshakespeare",
        "tinyshakespeare",
        (
            DataFile(
                "input.txt",
                "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            ),
        ),
        "Tiny Shakespeare: 1,115,394 characters of plain text",
        "public domain",
    )
)


def sha256sum(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_dir() -> Path:
    """The user cache: ``$ICML25_CACHE`` or ``~/.cache/icml25``."""
    env = os.environ.get("ICML25_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "icml25"


def _verify(path: Path, df: DataFile, dataset: Dataset) -> Path:
    digest = sha256sum(path)
    if digest != df.sha256:
        raise ChecksumError(
            f"{path} does not match data set {dataset.name!r}: sha256 {digest}, expected {df.sha256}. "
            f"The file is corrupt or a different version; obtain it from {df.url}"
        )
    return path


def _candidates(dataset: Dataset, path: str | os.PathLike[str] | None) -> list[tuple[str, Path]]:
    """Folders that may hold the data set, each with where it came from."""
    out: list[tuple[str, Path]] = []
    if path is not None:
        p = Path(path).expanduser()
        out.append(("explicit path", p.parent if p.is_file() and len(dataset.files) == 1 else p))
        return out  # an explicit path is authoritative: never fall back silently
    env = os.environ.get("ICML25_DATA")
    if env:
        out.append(("ICML25_DATA", Path(env).expanduser() / dataset.subdir))
    bundled = bundled_root()
    if bundled is not None:
        out.append(("bundled icml25-datasets", bundled / dataset.subdir))
    out.append(("user cache", cache_dir() / dataset.subdir))
    return out


def bundled_root() -> Path | None:
    """The folder of the installed ``icml25-datasets`` distribution, or ``None`` when it is not installed."""
    import importlib.util

    if importlib.util.find_spec("icml25_datasets") is None:
        return None
    import icml25_datasets

    return icml25_datasets.root()


def _download(df: DataFile, dest: Path, dataset: Dataset) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        tmp_path = Path(tmp.name)
        with urllib.request.urlopen(df.url, timeout=60) as resp:  # downloads-on-request
            shutil.copyfileobj(resp, tmp)
    try:
        _verify(tmp_path, df, dataset)
    except ChecksumError:
        tmp_path.unlink(missing_ok=True)
        raise
    tmp_path.replace(dest)


def resolve(name: str, path: str | os.PathLike[str] | None = None, *, download: bool = False) -> Path:
    """The verified folder holding every file of data set ``name`` (see the module docstring for the order).

    Raises :class:`DataNotFoundError` when a file is missing everywhere (and ``download`` is False), and
    :class:`ChecksumError` when a file is found but its sha256 differs.
    """
    dataset = get(name)
    tried: list[str] = []
    for origin, folder in _candidates(dataset, path):
        present = [folder / f.relpath for f in dataset.files]
        if all(p.is_file() for p in present):
            for p, f in zip(present, dataset.files, strict=True):
                _verify(p, f, dataset)
            return folder
        missing = [str(p) for p in present if not p.is_file()]
        tried.append(f"{origin}: {folder} (missing {', '.join(Path(m).name for m in missing)})")
    if download and path is None:
        folder = cache_dir() / dataset.subdir
        for f in dataset.files:
            target = folder / f.relpath
            if not target.is_file():
                _download(f, target, dataset)
            _verify(target, f, dataset)
        return folder
    expected = "; ".join(f"{f.relpath} (sha256 {f.sha256}, from {f.url})" for f in dataset.files)
    raise DataNotFoundError(
        f"data set {dataset.name!r} not found. Looked in: {'; '.join(tried)}. Expected files: {expected}. "
        "Install the bundled copy (pip install icml25-datasets, or the package's [data] extra), pass path=..., "
        f"set ICML25_DATA to a folder holding '{dataset.subdir}/', "
        "or pass download=True (icml25 reproduce --download)."  # downloads-on-request
    )


def file_path(
    name: str, filename: str | None = None, path: str | os.PathLike[str] | None = None, *, download: bool = False
) -> Path:
    """The verified path of one file of data set ``name`` (the only file when ``filename`` is None)."""
    dataset = get(name)
    df = dataset.file(filename)
    if path is not None and Path(path).is_file():
        return _verify(Path(path), df, dataset)
    return resolve(name, path, download=download) / df.relpath


def copy_to(
    name: str, dest: str | os.PathLike[str], path: str | os.PathLike[str] | None = None, *, download: bool = False
) -> Path:
    """Copy the verified files of ``name`` into ``dest/<last part of subdir>`` and return ``dest``.

    For libraries that write processed files next to the raw ones (PyG ``Planetoid(root=dest, name="Cora")``
    finds ``dest/Cora/raw`` and skips its download), so the read-only data folder is never written to.
    """
    src = resolve(name, path, download=download)
    dataset = get(name)
    target = Path(dest) / Path(dataset.subdir).name
    for f in dataset.files:
        out = target / f.relpath
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / f.relpath, out)
        out.chmod(0o644)
    return Path(dest)
