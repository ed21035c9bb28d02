"""Cost-accounted comparison of a baseline and its downscaled candidates: quality (e.g. bits per character, per
domain), FLOPs per token, weight bytes, J/token and CO2e per token (:func:`downscaling.profile`), the Pareto
front of quality against FLOPs/token, each candidate's uneven degradation (worst-domain / mean-domain quality
loss: the paper's "uneven degradation"), and lifetime compute at ``served_tokens`` with the break-even
served tokens against the baseline (inference dominates a deployed model's cost)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
from torch import nn

from downscaling.profiling import profile
from icml25_shared.validate import check_float

__all__ = ["Report", "bpc_evaluator", "report"]


def bpc_evaluator(val: Any) -> Callable[[nn.Module], dict[str, float]]:
    """An ``evaluate`` for :func:`report`: bits per token on ``val`` -- a list of ``(x, y)`` batches, or a dict of
    domain -> such a list (one figure per domain).

    Args:
        val: ``(x, y)`` batches, or domain name -> such batches.

    Returns:
        A function of a model returning domain -> bits per token (``"all"`` for a plain list).
    """
    from downscaling.experiments import bpc

    domains = val if isinstance(val, dict) else {"all": val}
    return lambda model: {d: bpc(model, b) for d, b in domains.items()}


@dataclass
class Report:
    """A ``pandas.DataFrame`` (one row per model, baseline first) and its markdown / HTML renderings."""

    frame: Any

    def markdown(self) -> str:
        return self.frame.to_markdown(index=False, floatfmt=".4g") if _has_tabulate() else self.frame.to_string()

    def html(self) -> str:
        return self.frame.to_html(index=False, float_format=lambda v: f"{v:.4g}")


class _Cost(NamedTuple):
    """One model's figures the Pareto front and the break-even column compare."""

    quality: float
    flops_per_token: float
    train_flops: float


def _has_tabulate() -> bool:
    import importlib.util

    return importlib.util.find_spec("tabulate") is not None


def report(
    baseline: nn.Module,
    candidates: dict[str, nn.Module],
    evaluate: Callable[[nn.Module], float | dict[str, float]],
    served_tokens: float = 0.0,
    *,
    batch: torch.Tensor | None = None,
    train_flops: dict[str, float] | None = None,
    energy: Literal["auto", "measure", "estimate"] = "estimate",
    region: str | None = None,
    n_runs: int = 3,
) -> Report:
    """Profile and evaluate ``baseline`` and every candidate (module docstring); lower quality numbers are better.
    ``train_flops`` (name -> FLOPs, ``"baseline"`` included) adds lifetime compute and break-even columns.

    Args:
        baseline: the reference model (first row).
        candidates: name -> downscaled model.
        evaluate: model -> quality (lower is better), one number or domain -> number.
        served_tokens: inference tokens for the lifetime-compute column, ≥ 0.
        batch: ``(B, T)`` token ids to profile on; default a fixed ``(2, 32)`` batch of ids 0 and 1.
        train_flops: model name -> training FLOPs, ``"baseline"`` included.
        energy: passed to :func:`downscaling.profile`.
        region: carbon-intensity region, passed to :func:`downscaling.profile`.
        n_runs: timed forwards per model.

    Returns:
        The :class:`Report`.

    Raises:
        ValueError: negative ``served_tokens`` or ``candidates`` not a dict.
    """
    served = check_float("served_tokens", served_tokens, min=0.0)
    if not isinstance(candidates, dict):
        raise ValueError(f"candidates must be a dict of name -> model, got {type(candidates).__name__}")
    if batch is None:
        batch = torch.randint(0, 2, (2, 32), generator=torch.Generator().manual_seed(0))
    import pandas as pd

    models = {"baseline": baseline, **candidates}
    rows: list[dict[str, Any]] = []
    costs: list[_Cost] = []
    base_q: dict[str, float] | None = None
    for name, m in models.items():
        q = evaluate(m)
        q = q if isinstance(q, dict) else {"all": float(q)}
        if base_q is None:
            base_q = q
        p = profile(m, batch, energy=energy, region=region, n_runs=n_runs, train_flops=False)
        deltas = [q[d] - base_q[d] for d in q]
        mean_d = sum(deltas) / len(deltas)
        row = {"model": name, "quality": sum(q.values()) / len(q), **{f"quality[{d}]": v for d, v in q.items()},
               "flops_per_token": p.flops_per_token_fwd, "weight_bytes": p.weight_bytes,
               "joules_per_token": p.joules_per_token, "co2e_g_per_token": p.co2e_g_per_token,
               "energy_measured": p.measured, "params": p.params,
               "uneven_degradation": max(deltas) / mean_d if mean_d > 0 else math.nan}  # fmt: skip
        tf = train_flops.get(name, math.nan) if train_flops is not None else math.nan
        if train_flops is not None:
            row["train_flops"] = tf
            row["lifetime_flops"] = tf + p.flops_per_token_fwd * served
        rows.append(row)
        costs.append(_Cost(row["quality"], p.flops_per_token_fwd, tf))
    df = pd.DataFrame(rows)
    df["pareto"] = [
        not any(
            (o.quality <= r.quality and o.flops_per_token <= r.flops_per_token)
            and (o.quality < r.quality or o.flops_per_token < r.flops_per_token)
            for o in costs
        )
        for r in costs
    ]
    if train_flops is not None:
        b = costs[0]
        df["break_even_served"] = [
            (r.train_flops - b.train_flops) / (b.flops_per_token - r.flops_per_token)
            if r.flops_per_token < b.flops_per_token else math.inf
            for r in costs
        ]  # fmt: skip
    return Report(df)
