"""Timing and peak memory of callables, and interleaved A/B comparisons reported as ratios.

Used by every package's ``benchmarks/``. On CUDA the clock is read after ``torch.cuda.synchronize`` and memory is
``torch.cuda.max_memory_allocated``; on CPU memory is the peak resident set size above the level before the call,
sampled from a background thread.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Timing",
    "Comparison",
    "measure",
    "compare",
    "round_robin",
    "paired",
    "Log",
    "save_results",
    "write_performance",
    "PERFORMANCE_KEYS",
    "peak_memory",
    "current_rss",
]


@dataclass
class Timing:
    """Wall-clock seconds of repeated calls."""

    times: list[float] = field(repr=False)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.times) if len(self.times) > 1 else 0.0

    @property
    def min(self) -> float:
        return min(self.times)

    def to_dict(self) -> dict[str, float]:
        return {
            "median_s": self.median,
            "mean_s": self.mean,
            "stdev_s": self.stdev,
            "min_s": self.min,
            "repeats": len(self.times),
        }


@dataclass
class Comparison:
    """Two callables timed in one interleaved run; ``ratio`` = median(b) / median(a) (> 1: a is faster)."""

    name_a: str
    name_b: str
    a: Timing
    b: Timing

    @property
    def ratio(self) -> float:
        return self.b.median / self.a.median

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.name_a,
            "b": self.name_b,
            "time_a": self.a.to_dict(),
            "time_b": self.b.to_dict(),
            "ratio_b_over_a": self.ratio,
        }


def paired(ours: Timing | Sequence[float], peer: Timing | Sequence[float]) -> dict[str, Any]:
    """The per-round ratios ours / peer of two callables timed in the same rounds (``round_robin``/``compare``):
    ``ratio`` their median, ``lo`` / ``hi`` their extremes, ``ratio_rounds`` the ratios themselves (the spread of a
    performance row). Raises ``ValueError`` on rounds of unequal count or none, and on a time that is not positive
    and finite."""
    a = ours.times if isinstance(ours, Timing) else list(ours)
    b = peer.times if isinstance(peer, Timing) else list(peer)
    if not a or len(a) != len(b):
        raise ValueError(f"paired needs the same number (>= 1) of rounds on both sides, got {len(a)} and {len(b)}")
    bad = [t for t in (*a, *b) if not (t > 0 and math.isfinite(t))]
    if bad:
        raise ValueError(f"paired needs positive, finite times, got {bad[0]!r} (a clock too coarse for the call?)")
    r = [x / y for x, y in zip(a, b, strict=True)]
    return {"ratio": statistics.median(r), "lo": min(r), "hi": max(r), "ratio_rounds": r}


def _sync(device: Any) -> None:
    if device is None:
        return
    from icml25_shared.device import synchronize

    synchronize(device)


def measure(fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 10, device: Any = None) -> Timing:
    """Time ``fn()`` ``repeats`` times after ``warmup`` untimed calls (synchronising ``device`` around each)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return Timing(times)


def compare(
    fn_a: Callable[[], Any],
    fn_b: Callable[[], Any],
    *,
    names: tuple[str, str] = ("a", "b"),
    warmup: int = 2,
    repeats: int = 10,
    device: Any = None,
) -> Comparison:
    """Time two callables alternately (a, b, b, a, ...) so that machine drift hits both alike."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        fn_a()
        fn_b()
    ta: list[float] = []
    tb: list[float] = []
    for i in range(repeats):
        order = ((fn_a, ta), (fn_b, tb)) if i % 2 == 0 else ((fn_b, tb), (fn_a, ta))
        for fn, out in order:
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            out.append(time.perf_counter() - t0)
    return Comparison(names[0], names[1], Timing(ta), Timing(tb))


def round_robin(
    fns: dict[str, Callable[[], Any]],
    *,
    repeats: int = 10,
    warmup: int = 0,
    device: Any = None,
    clock: Callable[[], float] = time.perf_counter,
    order: str = "rotate",
    between: Callable[[], Any] | None = None,
    seed: int = 0,
) -> dict[str, Timing]:
    """Time several callables once per round, so that machine drift hits all of them alike; ``warmup`` untimed rounds
    first. The N-way :func:`compare`.

    ``order="rotate"``: round r starts at the r-th callable (each keeps the same predecessor, so what one leaves in
    the caches always meets the same next one); ``"shuffle"``: a fresh permutation every round (seeded by ``seed``),
    so no callable always follows the same one. ``between``: run untimed before every timed call (e.g. the work
    that precedes the timed part in real use, or a cache flush), so that every callable starts from the same state.
    ``clock`` reads the time (wall clock by default; ``time.thread_time`` counts only this thread's CPU time, which
    keeps ratios readable on a loaded CPU; never for CUDA work)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    if order not in ("rotate", "shuffle"):
        raise ValueError(f"order must be 'rotate' or 'shuffle', got {order!r}")
    import random

    rng = random.Random(seed)
    names = list(fns)
    for _ in range(warmup):
        for k in names:
            fns[k]()
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(repeats):
        if order == "rotate":
            seq = names[r % len(names) :] + names[: r % len(names)]
        else:
            seq = rng.sample(names, len(names))
        for k in seq:
            if between is not None:
                between()
            _sync(device)
            t0 = clock()
            fns[k]()
            _sync(device)
            times[k].append(clock() - t0)
    return {k: Timing(v) for k, v in times.items()}


def current_rss() -> int:
    """Resident set size of this process in bytes (Linux ``/proc``; ``resource`` peak elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def peak_memory(fn: Callable[[], Any], *, device: Any = None, interval: float = 0.001) -> int:
    """Peak memory in bytes that one call of ``fn()`` adds: CUDA allocator peak on a CUDA ``device``, otherwise
    the peak RSS above the level before the call (sampled every ``interval`` seconds)."""
    import gc

    gc.collect()
    if device is not None and str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    base = current_rss()
    peak = base
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, current_rss())
            stop.wait(interval)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        fn()
    finally:
        peak = max(peak, current_rss())
        stop.set()
        t.join()
    return int(max(0, peak - base))


class Log:
    """Print a benchmark's table line by line and keep the lines for :func:`save_results`.

    >>> log = Log()
    >>> log("ratio 1.50x")
    ratio 1.50x
    >>> log.lines
    ['ratio 1.50x']
    """

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: Any) -> None:
        text = str(text)
        print(text, flush=True)
        self.lines.append(text)


def _to_json(obj: Any) -> Any:
    """``json`` fallback for the values benchmarks produce: NumPy scalars and arrays, 0-d or small torch tensors,
    paths. Anything else is a ``TypeError`` naming its type (never a silent ``str``)."""
    if isinstance(obj, Path):
        return str(obj)
    mod = type(obj).__module__
    # ndarray and NumPy scalars (np.float32(1).tolist() -> 1.0)
    if (mod == "numpy" or mod.startswith("numpy.")) and hasattr(obj, "tolist"):
        return obj.tolist()
    if mod == "torch" and hasattr(obj, "detach"):
        return obj.detach().cpu().tolist()
    raise TypeError(f"save_results: cannot write a {type(obj).__module__}.{type(obj).__qualname__} as JSON")


def save_results(out: Any, results: Any, lines: Any) -> Path:
    """Write a benchmark's ``results`` as indented JSON at ``out`` and its printed table ``lines`` (a list of
    strings or a :class:`Log`) beside it (same name, ``.log``), creating the folder; returns the JSON path. NumPy
    scalars/arrays and torch tensors in ``results`` are written as numbers/lists. Benchmarks commit both under
    ``benchmarks/results/`` and the README's figures are copied from them."""
    import json

    if isinstance(lines, Log):
        lines = lines.lines
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=_to_json) + "\n", encoding="utf-8")
    out.with_suffix(".log").write_text("\n".join(lines).lstrip() + "\n", encoding="utf-8")
    return out


PERFORMANCE_KEYS = ("case", "peer", "metric", "ratio", "lo", "hi", "limit", "goal", "load", "source")
"""The fields of one row of ``benchmarks/results/performance.json`` (``lo``, ``hi``, ``limit``, ``goal`` may be
``None``)."""


def write_performance(
    results_dir: Any, source: str, rows: list[dict[str, Any]], *, notes: list[str] | None = None
) -> Path:
    """Merge ``rows`` measured by the benchmark whose committed result is ``source`` (a file name in
    ``results_dir``) into ``results_dir/performance.json``, replacing that source's earlier rows, and return the path.

    Each row has the fields :data:`PERFORMANCE_KEYS` except ``source`` (filled in): ``case`` (what was measured),
    ``peer`` (the library/method compared against, run at its fastest), ``metric`` (``"time"``, ``"peak memory"``,
    ...), ``ratio`` = ours / peer (< 1: ours is cheaper), ``lo``/``hi`` its spread over rounds, ``limit`` the best
    ratio a perfect implementation of the method could reach on this input, ``goal`` (text), ``load`` the machine's
    1-minute load during the run. ``python -m icml25_shared.readme`` renders the file as the README's performance
    table. ``notes`` (short sentences) replace the file's notes when given.
    """
    import json
    import math

    if not isinstance(source, str) or not source or "/" in source:
        raise ValueError(f"source must be a file name in results_dir, got {source!r}")
    clean = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"rows[{i}] must be a dict, got {type(row).__name__}")
        unknown = set(row) - set(PERFORMANCE_KEYS)
        missing = {"case", "peer", "metric", "ratio", "load"} - set(row)
        if unknown or missing:
            raise ValueError(f"rows[{i}]: unknown fields {sorted(unknown)}, missing {sorted(missing)}")
        out = {k: row.get(k) for k in PERFORMANCE_KEYS}
        out["source"] = source
        for k in ("ratio", "lo", "hi", "limit", "load"):
            v = out[k]
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) and not hasattr(v, "__float__"):
                raise TypeError(f"rows[{i}].{k} must be a number, got {v!r}")
            v = float(v)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"rows[{i}].{k} must be a finite number >= 0, got {v!r}")
            out[k] = v
        if out["ratio"] is None or out["load"] is None:
            raise ValueError(f"rows[{i}]: ratio and load are required, got {out['ratio']!r}, {out['load']!r}")
        clean.append(out)
    path = Path(results_dir) / "performance.json"
    data: dict[str, Any] = {"rows": [], "notes": []}
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
    data["rows"] = [r for r in data.get("rows", []) if r.get("source") != source] + clean
    if notes is not None:
        data["notes"] = list(notes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
