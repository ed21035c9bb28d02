"""Verdicts that survive another seed: intervals over seeds and a third verdict, *inconclusive*.

A claim whose measured figure varies with the seed is measured on several seeds and judged on the two-sided
t-interval of the mean (:func:`judge`): it **holds** when the whole interval satisfies the rule, it **does not
hold** when the whole interval violates it, and it is **inconclusive** when the interval straddles the rule. With
one value (a deterministic figure) the interval is the point itself.

Seeds: ``icml25 reproduce NAME --seed N`` hands ``seed=N`` to the package's ``reproduce``; a reproduction that
measures a noisy figure on ``n`` seeds uses :func:`seed_list` (``N*n ... N*n + n - 1``), so that two base seeds
never share a run and ``--seed 0`` keeps the first seed of today's figures.

Verdict strings (also in ``claims.json``): :data:`HOLDS`, :data:`FAILS`, :data:`INCONCLUSIVE`, :data:`SHOWN`,
:data:`SKIPPED`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "HOLDS",
    "FAILS",
    "INCONCLUSIVE",
    "SHOWN",
    "SKIPPED",
    "VERDICTS",
    "Spread",
    "spread",
    "judge",
    "combine",
    "seed_list",
    "t_quantile",
]

HOLDS = "holds"
FAILS = "does not hold"
INCONCLUSIVE = "inconclusive"
SHOWN = "shown"
SKIPPED = "skipped"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, SHOWN, SKIPPED)

_OPS = (">=", ">", "<=", "<")

# two-sided Student t quantiles t_{1 - (1 - level)/2, df} for df = 1..30 at the levels used here
_T = {
    0.95: (
        12.706,
        4.303,
        3.182,
        2.776,
        2.571,
        2.447,
        2.365,
        2.306,
        2.262,
        2.228,
        2.201,
        2.179,
        2.160,
        2.145,
        2.131,
        2.120,
        2.110,
        2.101,
        2.093,
        2.086,
        2.080,
        2.074,
        2.069,
        2.064,
        2.060,
        2.056,
        2.052,
        2.048,
        2.045,
        2.042,
    ),  # fmt: skip
    0.9: (
        6.314,
        2.920,
        2.353,
        2.132,
        2.015,
        1.943,
        1.895,
        1.860,
        1.833,
        1.812,
        1.796,
        1.782,
        1.771,
        1.761,
        1.753,
        1.746,
        1.740,
        1.734,
        1.729,
        1.725,
        1.721,
        1.717,
        1.714,
        1.711,
        1.708,
        1.706,
        1.703,
        1.701,
        1.699,
        1.697,
    ),  # fmt: skip
}
_Z = {0.95: 1.960, 0.9: 1.645}


def t_quantile(level: float, df: int) -> float:
    """Two-sided Student-t critical value for ``level`` (0.9 or 0.95) and ``df`` degrees of freedom (normal past 30)."""
    if level not in _T:
        raise ValueError(f"level must be one of {sorted(_T)}, got {level!r}")
    if not isinstance(df, (int, np.integer)) or df < 1:
        raise ValueError(f"df must be a positive int, got {df!r}")
    return _T[level][df - 1] if df <= 30 else _Z[level]


@dataclass(frozen=True)
class Spread:
    """Values measured over seeds and their summary: mean, sample s.d., and the interval ``[lo, hi]`` of the mean."""

    values: tuple[float, ...]
    seeds: tuple[int, ...]
    mean: float
    sd: float
    lo: float
    hi: float
    level: float

    @property
    def n(self) -> int:
        """How many values."""
        return len(self.values)

    def text(self, digits: int = 3, unit: str = "") -> str:
        """``"0.352 ± 0.011 [0.325, 0.379], 3 seeds"`` (one value: the value alone)."""
        u = f" {unit.strip()}" if unit and unit.strip() else ""
        if self.n == 1:
            return f"{self.mean:.{digits}f}{u}"
        return (
            f"{self.mean:.{digits}f} ± {self.sd:.{digits}f}{u} "
            f"[{self.lo:.{digits}f}, {self.hi:.{digits}f}], {self.n} seeds"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary, with the per-seed values keyed by seed."""
        return {
            "per_seed": {str(s): v for s, v in zip(self.seeds, self.values)},
            "n": self.n,
            "mean": self.mean,
            "sd": self.sd,
            "interval": [self.lo, self.hi],
            "level": self.level,
            "method": "point" if self.n == 1 else "t-interval of the mean",
        }


def _as_values(values: Iterable[float], name: str = "values") -> tuple[float, ...]:
    try:
        vals = tuple(float(v) for v in values)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be an iterable of numbers, got {values!r}") from err
    if not vals:
        raise ValueError(f"{name} must hold at least one value, got an empty sequence")
    bad = [v for v in vals if not math.isfinite(v)]
    if bad:
        raise ValueError(f"{name} must be finite, got {bad[0]!r} among {list(vals)!r}")
    return vals


def spread(values: Iterable[float], seeds: Sequence[int] | None = None, *, level: float = 0.95) -> Spread:
    """Mean, s.d. and the two-sided t-interval of the mean at ``level`` (a point for one value)."""
    vals = _as_values(values)
    if seeds is None:
        seeds = tuple(range(len(vals)))
    seeds = tuple(int(s) for s in seeds)
    if len(seeds) != len(vals):
        raise ValueError(f"seeds must have one entry per value ({len(vals)}), got {len(seeds)}: {list(seeds)!r}")
    mean = float(np.mean(vals))
    if len(vals) == 1:
        t_quantile(level, 1)  # validates level
        return Spread(vals, seeds, mean, 0.0, mean, mean, level)
    sd = float(np.std(vals, ddof=1))
    half = t_quantile(level, len(vals) - 1) * sd / math.sqrt(len(vals))
    return Spread(vals, seeds, mean, sd, mean - half, mean + half, level)


def _satisfies(x: float, op: str, threshold: float) -> bool:
    return {">=": x >= threshold, ">": x > threshold, "<=": x <= threshold, "<": x < threshold}[op]


def judge(
    values: Iterable[float],
    op: str,
    threshold: float,
    *,
    seeds: Sequence[int] | None = None,
    level: float = 0.95,
) -> tuple[str, Spread]:
    """Judge ``mean(values) <op> threshold`` on the interval of the mean.

    Returns ``(verdict, spread)``: :data:`HOLDS` when both ends of the interval satisfy the rule, :data:`FAILS`
    when neither does, :data:`INCONCLUSIVE` when the interval straddles it.
    """
    if op not in _OPS:
        raise ValueError(f"op must be one of {_OPS}, got {op!r}")
    thr = float(threshold)
    if not math.isfinite(thr):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    sp = spread(values, seeds, level=level)
    lo_ok, hi_ok = _satisfies(sp.lo, op, thr), _satisfies(sp.hi, op, thr)
    if lo_ok and hi_ok:
        return HOLDS, sp
    if not lo_ok and not hi_ok:
        return FAILS, sp
    return INCONCLUSIVE, sp


def combine(*verdicts: str) -> str:
    """A compound claim's verdict: does not hold if any part fails, else inconclusive if any part is, else holds.

    Parts that are only shown or skipped do not count; with no judged part the result is :data:`SHOWN`.
    """
    for v in verdicts:
        if v not in VERDICTS:
            raise ValueError(f"verdicts must be among {VERDICTS}, got {v!r}")
    judged = [v for v in verdicts if v in (HOLDS, FAILS, INCONCLUSIVE)]
    if not judged:
        return SHOWN
    if FAILS in judged:
        return FAILS
    if INCONCLUSIVE in judged:
        return INCONCLUSIVE
    return HOLDS


def seed_list(seed: int, n: int) -> list[int]:
    """The ``n`` seeds a run at base ``seed`` uses: ``seed*n ... seed*n + n - 1`` (disjoint between base seeds)."""
    from icml25_shared.validate import check_int

    base = int(check_int("seed", seed, min=0))  # type: ignore[arg-type]
    count = int(check_int("n", n, min=1))  # type: ignore[arg-type]
    return [base * count + k for k in range(count)]
