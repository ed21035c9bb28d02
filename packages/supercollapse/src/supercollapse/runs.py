"""Loss curves as a validated tidy frame (`Runs`) with parquet / CSV I/O.

One row per logged point of one training run. Required columns::

    run_id    any hashable label (str or int), one per training run
    size      model size p (parameter count), > 0, constant within a run
    seed      seed label, constant within a run
    schedule  LR-schedule label (str), constant within a run
    step      optimizer step, strictly increasing within a run
    compute   compute spent so far (any unit, e.g. FLOPs = 6·p·t or PFLOPs), > 0, strictly increasing within a run
    loss      test loss, finite

Optional columns: ``tokens`` (samples or tokens seen), ``lr`` (the applied learning rate), ``noise_trace`` (the
preconditioned gradient-noise trace of Sec. 4 measured at that point), ``tau`` (the intrinsic time Σ_k η_k).
Any further columns are kept as they are.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from icml25_shared.validate import ArgumentTypeError

__all__ = ["Runs", "REQUIRED_COLUMNS", "OPTIONAL_COLUMNS"]

REQUIRED_COLUMNS = ("run_id", "size", "seed", "schedule", "step", "compute", "loss")
OPTIONAL_COLUMNS = ("tokens", "lr", "noise_trace", "tau")
_PER_RUN = ("size", "seed", "schedule")


def _parquet_engine() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError as err:  # pyarrow missing, or built against another numpy
        raise ImportError(
            f"parquet I/O needs pyarrow (pip install 'icml25-supercollapse[parquet]'); importing it failed: {err}"
        ) from err


class Runs:
    """A validated collection of loss curves (see the module docstring for the schema).

    Build with :meth:`from_frame` (a ``pandas.DataFrame`` or a mapping of equal-length arrays); every check raises
    ``ValueError`` naming the column, the run and the offending value. Rows are sorted by ``(run_id, step)``.
    """

    def __init__(self, frame: pd.DataFrame | Mapping[str, Any]) -> None:
        self._frame = _validate(frame)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame | Mapping[str, Any]) -> Runs:
        """Validate and wrap a tidy frame (copied; the caller's frame is not modified)."""
        return cls(frame)

    @classmethod
    def concat(cls, parts: list[Runs | pd.DataFrame]) -> Runs:
        """Merge several collections (e.g. the shards of a distributed sweep) into one."""
        frames = [p.frame if isinstance(p, Runs) else pd.DataFrame(p) for p in parts]
        if not frames:
            raise ValueError("parts must hold at least one Runs or DataFrame, got an empty list")
        return cls(pd.concat(frames, ignore_index=True))

    # -- access ---------------------------------------------------------------------------------------------------
    @property
    def frame(self) -> pd.DataFrame:
        """The validated frame (a copy)."""
        return self._frame.copy()

    def __len__(self) -> int:
        return len(self._frame)

    def __repr__(self) -> str:
        return (
            f"Runs({self.n_runs} runs, {len(self)} points, sizes={self.sizes.tolist()}, "
            f"schedules={sorted(map(str, self.schedules))})"
        )

    @property
    def n_runs(self) -> int:
        return int(self._frame["run_id"].nunique())

    @property
    def sizes(self) -> np.ndarray:
        """Sorted distinct model sizes."""
        return np.sort(np.asarray(self._frame["size"].unique()))

    @property
    def schedules(self) -> list[str]:
        return sorted(self._frame["schedule"].unique().tolist())

    def has(self, column: str) -> bool:
        """Whether the optional ``column`` is present."""
        return column in self._frame.columns

    def groups(self) -> Iterator[tuple[Any, pd.DataFrame]]:
        """``(run_id, rows of that run sorted by step)`` for every run."""
        yield from self._frame.groupby("run_id", sort=True)

    def meta(self) -> pd.DataFrame:
        """One row per run: ``run_id, size, seed, schedule, n_points, final_step, final_compute, final_loss``."""
        g = self._frame.groupby("run_id", sort=True)
        out = g[list(_PER_RUN)].first()
        out["n_points"] = g.size()
        last = g.tail(1).set_index("run_id")
        out["final_step"] = last["step"]
        out["final_compute"] = last["compute"]
        out["final_loss"] = last["loss"]
        return out.reset_index()

    def where(self, **conditions: Any) -> Runs:
        """The runs whose columns match: ``where(schedule="const")``, ``where(size=[1e4, 4e4])`` (a list or
        tuple means "one of"), ``where(seed=lambda s: s < 3)`` (a callable is applied to the column)."""
        mask = np.ones(len(self._frame), dtype=bool)
        for col, cond in conditions.items():
            if col not in self._frame.columns:
                raise ValueError(f"where: unknown column {col!r}; columns are {list(self._frame.columns)}")
            values = self._frame[col]
            if callable(cond):
                mask &= np.asarray(cond(values), dtype=bool)
            elif isinstance(cond, (list, tuple, set, np.ndarray, pd.Index)):
                mask &= values.isin(list(cond)).to_numpy()
            else:
                mask &= (values == cond).to_numpy()
        if not mask.any():
            raise ValueError(f"where({conditions}) selects no rows")
        return Runs(self._frame.loc[mask])

    # -- I/O ------------------------------------------------------------------------------------------------------
    def to_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write as CSV (floats in round-trip precision, so reading back is lossless; ``run_id`` and ``seed`` labels
        read back as ints when every label of the column is a canonical int such as ``7``, else as strings, so
        ``"001"`` stays ``"001"``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._frame.to_csv(path, index=False, float_format="%.17g")
        return path

    def to_parquet(self, path: str | os.PathLike[str]) -> Path:
        """Write as parquet (needs the ``parquet`` extra, pyarrow)."""
        _parquet_engine()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._frame.to_parquet(path, index=False)
        return path

    def save(self, path: str | os.PathLike[str]) -> Path:
        """``to_parquet`` for a ``.parquet`` suffix, else ``to_csv``."""
        return self.to_parquet(path) if str(path).endswith(".parquet") else self.to_csv(path)

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str]) -> Runs:
        """Read one CSV file, or merge every ``*.csv`` in a directory (the shards of a sweep)."""
        files = _files(path, ".csv")
        return cls(pd.concat([_read_csv(f) for f in files], ignore_index=True))

    @classmethod
    def from_parquet(cls, path: str | os.PathLike[str]) -> Runs:
        """Read one parquet file, or merge every ``*.parquet`` in a directory (the shards of a sweep)."""
        _parquet_engine()
        files = _files(path, ".parquet")
        return cls(pd.concat([pd.read_parquet(f) for f in files], ignore_index=True))

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Runs:
        """Read a ``.parquet`` / ``.csv`` file, or a directory of shards of either kind."""
        p = Path(path)
        if p.is_dir():
            parts = sorted(p.glob("*.parquet"))
            if parts:
                return cls.from_parquet(p)
            return cls.from_csv(p)
        return cls.from_parquet(p) if p.suffix == ".parquet" else cls.from_csv(p)


_LABELS = ("run_id", "seed", "schedule")


def _label_column(values: pd.Series) -> pd.Series:
    """A label column read as text, back to ints when every label is an int written canonically (``7``, ``-3``):
    ``"001"`` stays the string it was written from (a numeric parse would turn it into 1 and merge it with "1")."""
    text = values.astype(str)
    if all(s.lstrip("-").isdigit() and s == str(int(s)) for s in text.unique()):
        return text.astype(np.int64)
    return text


def _read_csv(path: Path) -> pd.DataFrame:
    head = pd.read_csv(path, nrows=0).columns
    df = pd.read_csv(path, dtype={c: str for c in _LABELS if c in head})
    for c in ("run_id", "seed"):
        if c in df.columns:
            df[c] = _label_column(cast(pd.Series, df[c]))
    if "schedule" in df.columns:
        df["schedule"] = df["schedule"].astype(str)
    return df


def _files(path: str | os.PathLike[str], suffix: str) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob(f"*{suffix}"))
        if not files:
            raise ValueError(f"path {str(p)!r} is a directory without any *{suffix} file")
        return files
    if not p.is_file():
        raise ValueError(f"path {str(p)!r} does not exist")
    return [p]


def _validate(frame: Any) -> pd.DataFrame:
    if isinstance(frame, Runs):
        return frame.frame
    if not isinstance(frame, pd.DataFrame):
        if not isinstance(frame, Mapping):
            raise ArgumentTypeError(f"frame must be a pandas DataFrame or a mapping of arrays, got {type(frame)}")
        frame = pd.DataFrame(dict(frame))
    df = frame.copy()
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"frame is missing required column(s) {missing}; it has {list(df.columns)}")
    if len(df) == 0:
        raise ValueError("frame has no rows")
    for col in ("size", "step", "compute", "loss", *[c for c in OPTIONAL_COLUMNS if c in df.columns]):
        try:
            values = cast(pd.Series, pd.to_numeric(df[col]))  # a Series in, a Series out
            df[col] = values if col == "step" else values.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"column {col!r} must be numeric: {err}") from err
        values = df[col].to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if col in ("lr", "noise_trace", "tau", "tokens"):
            bad &= ~np.isnan(values)  # optional columns may be NaN where not measured, never infinite
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"column {col!r} must be finite, got {values[i]} at run_id {df['run_id'].iloc[i]!r}, "
                f"step {df['step'].iloc[i]}"
            )
    if not np.all(np.equal(np.mod(df["step"].to_numpy(dtype=np.float64), 1), 0)):
        raise ValueError("column 'step' must hold integers")
    df["step"] = df["step"].astype(np.int64)
    df["schedule"] = df["schedule"].astype(str)
    for col in ("size", "compute"):
        v = df[col].to_numpy()
        if (v <= 0).any():
            i = int(np.flatnonzero(v <= 0)[0])
            raise ValueError(f"column {col!r} must be > 0, got {v[i]} at run_id {df['run_id'].iloc[i]!r}")
    dup = df.duplicated(["run_id", "step"])
    if dup.any():
        row = df[dup].iloc[0]
        raise ValueError(f"duplicate (run_id, step) = ({row['run_id']!r}, {row['step']})")
    df = df.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)
    for col in _PER_RUN:
        n = df.groupby("run_id")[col].nunique()
        if (n > 1).any():
            rid = n.index[np.flatnonzero(n.to_numpy() > 1)[0]]
            vals = sorted(map(str, df.loc[df["run_id"] == rid, col].unique()))
            raise ValueError(f"column {col!r} must be constant within a run; run_id {rid!r} has {vals}")
    same_run = df["run_id"].to_numpy()[1:] == df["run_id"].to_numpy()[:-1]
    dc = np.diff(df["compute"].to_numpy())
    bad = same_run & (dc <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0]) + 1
        raise ValueError(
            f"column 'compute' must be strictly increasing within a run; run_id {df['run_id'].iloc[i]!r} goes "
            f"from {df['compute'].iloc[i - 1]} to {df['compute'].iloc[i]} at step {df['step'].iloc[i]}"
        )
    return df
