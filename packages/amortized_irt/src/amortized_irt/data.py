"""A sparse taker × item response matrix (the paper's LM × question matrices are block-sparse, each
benchmark answered by a subset of the LMs), stored as CSR entries, never dense."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from icml25_shared.seed import numpy_rng
from icml25_shared.validate import check_array, check_bool, check_float, check_int

__all__ = ["ResponseMatrix"]


def _labels(name: str, labels: Any, n: int) -> np.ndarray:
    if labels is None:
        return np.arange(n)
    arr = np.asarray(labels)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"{name} must be a sequence of length {n}, got shape {arr.shape}")
    return arr


def _indices(name: str, idx: Any) -> np.ndarray:
    """``idx`` as int64 entry indices; float input is accepted only when every value is a whole number (a silent
    cast would truncate 1.6 to 1 and attach a response to the wrong taker or item)."""
    arr = check_array(name, idx, ndim=1, dtype="numeric")
    if arr.dtype.kind == "b":
        raise ValueError(f"{name} must hold integer indices, got a bool array (use np.flatnonzero for a mask)")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name} must hold integer indices, got {arr[k].item()!r} at position {k}")
    return arr.astype(np.int64)


def _selection(name: str, idx: Any, size: int) -> np.ndarray:
    """Row or column indices for a subset: integers in [0, size), each at most once."""
    arr = _indices(name, np.atleast_1d(np.asarray(idx)) if np.ndim(idx) == 0 else idx)
    if len(arr) and (arr.min() < 0 or arr.max() >= size):
        k = int(np.flatnonzero((arr < 0) | (arr >= size))[0])
        raise ValueError(f"{name} must lie in [0, {size}), got {arr[k]} at position {k}")
    uniq, counts = np.unique(arr, return_counts=True)
    if (counts > 1).any():
        dup = int(uniq[counts > 1][0])
        raise ValueError(
            f"{name} must not repeat an index (a repeated item or taker would be an empty duplicate), got {dup} "
            f"{int(counts[counts > 1][0])} times"
        )
    return arr


@dataclass(eq=False)
class ResponseMatrix:
    """Observed responses y_ij ∈ {0, 1} of takers i to items j, in CSR order (by taker, then item).

    Only observed entries are stored: ``rows[k]``, ``cols[k]``, ``values[k]`` (the observation mask O is the set
    of stored entries). ``taker_ids`` / ``item_ids`` label rows and columns; ``scenario`` (optional) labels each item
    with its benchmark. Build with :meth:`from_dense` or :meth:`from_long`.
    """

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    shape: tuple[int, int]
    taker_ids: np.ndarray = field(default=None)  # type: ignore[assignment]
    item_ids: np.ndarray = field(default=None)  # type: ignore[assignment]
    scenario: np.ndarray | None = None

    def __post_init__(self) -> None:
        n, m = (check_int("shape[0]", self.shape[0], min=1), check_int("shape[1]", self.shape[1], min=1))
        self.shape = (n, m)
        self.rows = _indices("rows", self.rows)
        self.cols = _indices("cols", self.cols)
        vals = np.asarray(self.values)
        if not (len(self.rows) == len(self.cols) == len(vals)):
            raise ValueError(
                f"rows, cols and values must have equal lengths, got {len(self.rows)}, {len(self.cols)}, {len(vals)}"
            )
        if vals.size and not np.all((vals == 0) | (vals == 1)):
            bad = vals[~((vals == 0) | (vals == 1))][0]
            raise ValueError(f"responses must be 0 or 1, got {bad.item()!r}")
        if len(self.rows) and (
            self.rows.min() < 0 or self.rows.max() >= n or self.cols.min() < 0 or self.cols.max() >= m
        ):
            raise ValueError(f"entry indices must lie inside shape {self.shape}")
        dr, dc = np.diff(self.rows), np.diff(self.cols)
        if ((dr > 0) | ((dr == 0) & (dc > 0))).all():  # already in CSR order without repeats (from_dense)
            self.values = vals.astype(np.float64)
        else:
            order = np.lexsort((self.cols, self.rows))
            self.rows, self.cols, self.values = self.rows[order], self.cols[order], vals[order].astype(np.float64)
        if len(self.rows) > 1:
            dup = (np.diff(self.rows) == 0) & (np.diff(self.cols) == 0)
            if dup.any():
                k = int(np.flatnonzero(dup)[0])
                raise ValueError(f"entry (taker {self.rows[k]}, item {self.cols[k]}) appears twice")
        self.taker_ids = _labels("taker_ids", self.taker_ids, n)
        self.item_ids = _labels("item_ids", self.item_ids, m)
        if self.scenario is not None:
            self.scenario = _labels("scenario", self.scenario, m)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_dense(
        cls,
        Y: Any,
        missing: float = np.nan,
        *,
        taker_ids: Sequence[Any] | np.ndarray | None = None,
        item_ids: Sequence[Any] | np.ndarray | None = None,
        scenario: Sequence[Any] | np.ndarray | None = None,
        drop_empty: bool = False,
        mask: Any = None,
    ) -> ResponseMatrix:
        """From a dense [N, M] array whose missing entries are NaN (``missing=nan``) or −1 (``missing=-1``);
        ``mask`` (bool [N, M], optional) is the observation mask O: values where it is False are ignored.

        A taker or item with no observed response raises ``ValueError``, or is dropped with a warning when
        ``drop_empty=True``.
        """
        Y = check_array("Y", Y, ndim=2, dtype="numeric", nonempty=True).astype(np.float64)
        drop_empty = check_bool("drop_empty", drop_empty)
        if isinstance(missing, (float, np.floating)) and np.isnan(missing):  # np.float32(nan) as well
            observed = ~np.isnan(Y)
        else:
            code = check_float("missing", missing)
            if np.isnan(Y).any():
                raise ValueError(f"Y contains NaN but missing={code:g}; pass missing=nan or recode the NaNs")
            observed = code != Y
        if mask is not None:
            mask = check_array("mask", mask, shape=Y.shape)
            if mask.dtype != bool:
                raise ValueError(f"mask must be a bool array, got dtype {mask.dtype}")
            observed = observed & mask
        n, m = Y.shape
        tids, iids = _labels("taker_ids", taker_ids, n), _labels("item_ids", item_ids, m)
        scen = None if scenario is None else _labels("scenario", scenario, m)
        keep_r, keep_c = observed.any(axis=1), observed.any(axis=0)
        if not (keep_r.all() and keep_c.all()):
            what = f"{int((~keep_r).sum())} taker(s) and {int((~keep_c).sum())} item(s) have no observed response"
            if not drop_empty:
                first = f"taker {tids[~keep_r][0]!r}" if (~keep_r).any() else f"item {iids[~keep_c][0]!r}"
                raise ValueError(f"Y: {what} (first: {first}); pass drop_empty=True to drop them")
            warnings.warn(f"Y: {what}; dropped (drop_empty=True)", stacklevel=2)
            Y, observed = Y[keep_r][:, keep_c], observed[keep_r][:, keep_c]
            tids, iids = tids[keep_r], iids[keep_c]
            scen = None if scen is None else scen[keep_c]
        r, c = np.nonzero(observed)
        return cls(r, c, Y[r, c], Y.shape, tids, iids, scen)

    @classmethod
    def from_long(
        cls, df: Any, taker: str, item: str, score: str, scenario: str | None = None, *, drop_empty: bool = False
    ) -> ResponseMatrix:
        """From a long table (pandas DataFrame) with one row per observed response: columns ``taker``, ``item``,
        ``score`` (0/1) and optionally ``scenario`` (one label per item)."""
        import pandas as pd

        del drop_empty  # a long table has no empty rows or columns by construction
        for col in (taker, item, score) + ((scenario,) if scenario else ()):
            if col not in df.columns:
                raise ValueError(f"column {col!r} not in the table (columns: {list(df.columns)})")
        scores = np.asarray(df[score], dtype=np.float64)
        if np.isnan(scores).any():
            raise ValueError(f"score column {score!r} contains NaN; drop unobserved rows from a long table")
        r, taker_ids = pd.factorize(df[taker], sort=True)
        c, item_ids = pd.factorize(df[item], sort=True)
        scen = None
        if scenario is not None:
            per_item = pd.Series(np.asarray(df[scenario]), index=c).groupby(level=0).first()
            scen = per_item.sort_index().to_numpy()
        return cls(r, c, scores, (len(taker_ids), len(item_ids)), np.asarray(taker_ids), np.asarray(item_ids), scen)

    # ------------------------------------------------------------------ views
    @property
    def n_takers(self) -> int:
        """N, the number of rows."""
        return self.shape[0]

    @property
    def n_items(self) -> int:
        """M, the number of columns."""
        return self.shape[1]

    @property
    def nnz(self) -> int:
        """Number of observed entries."""
        return len(self.values)

    @property
    def density(self) -> float:
        """Fraction of observed entries."""
        return self.nnz / (self.shape[0] * self.shape[1])

    def to_dense(self, fill: float = np.nan) -> np.ndarray:
        """Dense [N, M] float array with ``fill`` at unobserved entries."""
        out = np.full(self.shape, fill, dtype=np.float64)
        out[self.rows, self.cols] = self.values
        return out

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(responses per taker, responses per item)."""
        return np.bincount(self.rows, minlength=self.shape[0]), np.bincount(self.cols, minlength=self.shape[1])

    def check_nonempty(self) -> None:
        """``ValueError`` naming the first taker or item that has no observed response."""
        per_taker, per_item = self.counts()
        if (per_taker == 0).any():
            raise ValueError(f"taker {self.taker_ids[np.argmax(per_taker == 0)]!r} has no observed response")
        if (per_item == 0).any():
            raise ValueError(f"item {self.item_ids[np.argmax(per_item == 0)]!r} has no observed response")

    def _entries(self, keep: np.ndarray) -> ResponseMatrix:
        return ResponseMatrix(
            self.rows[keep],
            self.cols[keep],
            self.values[keep],
            self.shape,
            self.taker_ids,
            self.item_ids,
            self.scenario,
        )

    def subset_items(self, idx: Any) -> ResponseMatrix:
        """The columns ``idx`` (in that order, each at most once), with their labels."""
        idx = _selection("idx", idx, self.shape[1])
        pos = np.full(self.shape[1], -1, dtype=np.int64)
        pos[idx] = np.arange(len(idx))
        keep = pos[self.cols] >= 0
        scen = None if self.scenario is None else self.scenario[idx]
        return ResponseMatrix(
            self.rows[keep], pos[self.cols[keep]], self.values[keep], (self.shape[0], len(idx)),
            self.taker_ids, self.item_ids[idx], scen,
        )  # fmt: skip

    def subset_takers(self, idx: Any) -> ResponseMatrix:
        """The rows ``idx`` (in that order, each at most once), with their labels."""
        idx = _selection("idx", idx, self.shape[0])
        pos = np.full(self.shape[0], -1, dtype=np.int64)
        pos[idx] = np.arange(len(idx))
        keep = pos[self.rows] >= 0
        return ResponseMatrix(
            pos[self.rows[keep]], self.cols[keep], self.values[keep], (len(idx), self.shape[1]),
            self.taker_ids[idx], self.item_ids, self.scenario,
        )  # fmt: skip

    def with_values(self, values: Any) -> ResponseMatrix:
        """The same observed entries with other 0/1 values (same order as :attr:`values`)."""
        return ResponseMatrix(self.rows, self.cols, values, self.shape, self.taker_ids, self.item_ids, self.scenario)

    # ------------------------------------------------------------------ splits
    def split_entries(self, frac: float = 0.2, seed: int | None = 0) -> tuple[ResponseMatrix, ResponseMatrix]:
        """(train, test): a random ``frac`` of the observed entries held out, same takers and items in both (the
        paper's held-out-entry protocol). Entries are drawn so that every taker and item keeps at least one
        training response."""
        frac = check_float("frac", frac, min=0.0, max=1.0, min_open=True, max_open=True)
        rng = numpy_rng(seed)
        test = rng.random(self.nnz) < frac
        # give back one entry to any taker / item left without training responses
        for idx, n in ((self.rows, self.shape[0]), (self.cols, self.shape[1])):
            left = np.bincount(idx[~test], minlength=n)
            for k in np.flatnonzero(left == 0):
                cand = np.flatnonzero((idx == k) & test)
                if len(cand):
                    test[cand[0]] = False
        return self._entries(~test), self._entries(test)

    def split_items(self, frac: float = 0.2, seed: int | None = 0) -> tuple[np.ndarray, np.ndarray]:
        """(train item indices, test item indices): a random ``frac`` of the items held out (the amortization
        protocol: held-out items are never calibrated on responses). Use :meth:`subset_items` on each."""
        frac = check_float("frac", frac, min=0.0, max=1.0, min_open=True, max_open=True)
        rng = numpy_rng(seed)
        perm = rng.permutation(self.shape[1])
        n_test = max(1, int(round(frac * self.shape[1])))
        return np.sort(perm[n_test:]), np.sort(perm[:n_test])

    def __repr__(self) -> str:
        n, m = self.shape
        return f"ResponseMatrix({n} takers × {m} items, {self.nnz} observed, density {self.density:.3f})"
