"""Closed forms of the optimizer-state memory (the memory column of the paper's comparisons).

FRUGAL keeps state only for the r-dimensional state-full part of each projectable matrix: the moments of
``down(G)`` plus what defines the subspace (a projector for ``svd``/``random``, an index tensor for the coordinate
selectors, nothing for blocks). Everything else (embeddings, norms, the LM head) keeps AdamW's two moments.
These functions count bytes from shapes alone, so a test can compare them with what the optimizer really holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from frugal.selectors import projection_rank, resolve_side

__all__ = ["adamw_bytes", "llama_matrix_shapes", "matrix_state_bytes", "model_state_bytes"]

#: moments per state-full entry
_MOMENTS = {"adamw": 2, "sgdm": 1, "lion": 1}


def adamw_bytes(numel: int, element_size: int = 4, *, step_bytes: int = 4) -> int:
    """``torch.optim.AdamW``'s state of one tensor: two moments plus a scalar ``step`` (fp32 by default)."""
    return 2 * numel * element_size + step_bytes


def matrix_state_bytes(
    shape: tuple[int, ...],
    *,
    selector: str,
    density: float,
    proj_side: str = "std",
    state_full: str = "adamw",
    rank: int | None = None,
    active: bool = True,
    element_size: int = 4,
    index_size: int = 8,
    step_bytes: int = 4,
) -> int:
    """State bytes of one projectable tensor (``active``: whether a block is active; other selectors ignore it).

    ``svd``/``random``: moments ``r·max`` (one side), projector ``r·min``; ``full`` side: moments ``r²`` and both
    projectors. Coordinate selectors: moments of the kept entries plus their int64 indices. ``step_bytes`` is
    AdamW's bias-correction counter (absent for SGD-M and Lion).
    """
    k = _MOMENTS[state_full]
    step = step_bytes if state_full == "adamw" else 0
    numel = 1
    for s in shape:
        numel *= s
    if selector == "block":
        return k * numel * element_size + step if active else 0
    if selector == "randk":
        kept = int(density * numel) if rank is None else min(rank, numel)
        return k * kept * element_size + kept * index_size + step
    m, n = shape
    if selector == "columns":
        c = int(density * n) if rank is None else min(rank, n)
        return k * m * c * element_size + c * index_size + step
    if selector == "rows":
        c = int(density * m) if rank is None else min(rank, m)
        return k * c * n * element_size + c * index_size + step
    side = resolve_side(proj_side, shape)
    r = projection_rank(shape, density, side, rank)
    low = {"left": r * n, "right": m * r, "full": r * r}[side]
    if selector == "randperm":
        index = {"left": r, "right": r, "full": 2 * r}[side] * index_size
    else:
        index = {"left": m * r, "right": r * n, "full": m * r + r * n}[side] * element_size
    return k * low * element_size + index + step


def model_state_bytes(
    projectable: Iterable[tuple[int, ...]],
    other: Iterable[tuple[int, ...]],
    *,
    selector: str,
    density: float,
    active: Iterable[bool] | None = None,
    **kwargs: Any,
) -> int:
    """Sum of :func:`matrix_state_bytes` over ``projectable`` shapes and :func:`adamw_bytes` over ``other`` ones
    (``active``: which blocks are active, for the block selector)."""
    shapes = list(projectable)
    flags = [True] * len(shapes) if active is None else list(active)
    total = sum(
        matrix_state_bytes(s, selector=selector, density=density, active=a, **kwargs)
        for s, a in zip(shapes, flags, strict=True)
    )
    for s in other:
        numel = 1
        for d in s:
            numel *= d
        total += adamw_bytes(numel, int(kwargs.get("element_size", 4)), step_bytes=int(kwargs.get("step_bytes", 4)))
    return total


def llama_matrix_shapes(
    vocab: int, hidden: int, intermediate: int, layers: int
) -> tuple[list[tuple[int, int]], list[tuple[int, ...]]]:
    """(projectable shapes, other shapes) of a LLaMA with an untied head: per layer q/k/v/o ``(d, d)``,
    gate/up ``(f, d)``, down ``(d, f)``; embeddings and head ``(V, d)``, two norms per layer and a final one."""
    proj = [(hidden, hidden)] * 4 + [(intermediate, hidden)] * 2 + [(hidden, intermediate)]
    other: list[tuple[int, ...]] = [(vocab, hidden), (vocab, hidden)] + [(hidden,)] * (2 * layers + 1)
    return proj * layers, other
