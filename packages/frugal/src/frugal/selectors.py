"""How FRUGAL chooses the state-full subspace (paper Alg. 1: the projector P_k re-chosen every T steps).

A gradient ``G`` of a matrix ``W ∈ R^{m×n}`` (torch layout ``(out, in)``) is split as

.. math::  G = \\mathrm{up}(\\mathrm{down}(G)) + (G - \\mathrm{up}(\\mathrm{down}(G)))

where ``down`` maps to the r-dimensional state-full coordinates and ``up`` back. Two families:

- projections (``svd``: GaLore's top singular vectors; ``random``: a random orthonormal basis) with
  ``down(G) = Aᵀ G Bᵀ`` and ``up(x) = A x B``, where ``A ∈ R^{m×r}`` (left side) and ``B ∈ R^{r×n}`` (right side)
  have orthonormal columns/rows and one of them may be absent (the identity);
- coordinate subsets (``randperm``, ``columns``, ``rows``, ``randk``): ``down`` gathers entries, ``up`` scatters
  them into zeros. ``randperm`` is GaLore's side rule applied to a random permutation matrix, i.e. a row or column
  subset of size ``round(ρ·dim)``.

The block selector (BAdam-style) activates whole tensors in a fixed or random order: :func:`block_schedule`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icml25_shared.validate import check_choice, check_float, check_int

__all__ = [
    "block_schedule",
    "coordinate_selection",
    "gather",
    "projection_rank",
    "random_projection",
    "resolve_side",
    "scatter",
    "svd_projection",
    "project_down",
    "project_up",
]

_SIDES = ("std", "reverse_std", "left", "right", "full")


def resolve_side(proj_side: str, shape: tuple[int, ...]) -> str:
    """``"left"``, ``"right"`` or ``"full"`` for a matrix of ``shape`` (GaLore's rule: ``"std"`` projects the
    smaller dimension, so a tall ``m ≥ n`` matrix gets ``G Bᵀ`` (right) and a wide one ``Aᵀ G`` (left))."""
    check_choice("proj_side", proj_side, _SIDES)
    m, n = shape
    if proj_side == "std":
        return "right" if m >= n else "left"
    if proj_side == "reverse_std":
        return "left" if m >= n else "right"
    return proj_side


def projection_rank(shape: tuple[int, ...], density: float, side: str, rank: int | None = None) -> int:
    """r of a projection: ``round(ρ·n)`` on the right, ``round(ρ·m)`` on the left, ``round(ρ·min(m, n))`` on both;
    a fixed ``rank`` (GaLore-style groups) is capped at that dimension."""
    m, n = shape
    dim = {"right": n, "left": m, "full": min(m, n)}[side]
    if rank is not None:
        return min(int(rank), dim)
    return int(round(density * dim))


def svd_projection(grad: Tensor, r: int, side: str) -> tuple[Tensor | None, Tensor | None]:
    """GaLore's projector from a thin SVD of ``grad`` in fp32, cast to ``grad``'s dtype: ``A = U[:, :r]`` (left)
    and/or ``B = Vᵀ[:r]`` (right)."""
    u, _, vh = torch.linalg.svd(grad.float(), full_matrices=False)
    left = u[:, :r].to(grad.dtype).contiguous() if side in ("left", "full") else None
    right = vh[:r].to(grad.dtype).contiguous() if side in ("right", "full") else None
    return left, right


def random_projection(
    shape: tuple[int, ...], r: int, side: str, generator: torch.Generator, dtype: torch.dtype, device: torch.device
) -> tuple[Tensor | None, Tensor | None]:
    """A random orthonormal projector (``torch.nn.init.orthogonal_`` drawn from ``generator``): ``A ∈ R^{m×r}``
    with orthonormal columns and/or ``B ∈ R^{r×n}`` with orthonormal rows."""
    m, n = shape
    left = right = None
    if side in ("left", "full"):
        left = torch.nn.init.orthogonal_(torch.empty(m, r), generator=generator) if r > 0 else torch.empty(m, 0)
        left = left.to(device=device, dtype=dtype)
    if side in ("right", "full"):
        right = torch.nn.init.orthogonal_(torch.empty(r, n), generator=generator) if r > 0 else torch.empty(0, n)
        right = right.to(device=device, dtype=dtype)
    return left, right


def project_down(grad: Tensor, left: Tensor | None, right: Tensor | None) -> Tensor:
    """``Aᵀ G Bᵀ`` (an absent side is the identity): the state-full coordinates of ``grad``."""
    out = grad if left is None else left.mT @ grad
    return out if right is None else out @ right.mT


def project_up(x: Tensor, left: Tensor | None, right: Tensor | None) -> Tensor:
    """``A x B``: the r-dimensional ``x`` back in the parameter's space."""
    out = x if left is None else left @ x
    return out if right is None else out @ right


def coordinate_selection(
    selector: str,
    shape: tuple[int, ...],
    density: float,
    generator: torch.Generator,
    device: torch.device,
    *,
    proj_side: str = "std",
    rank: int | None = None,
) -> dict[str, Tensor]:
    """Random coordinate subsets as index tensors (sorted, int64): ``{"rows": ...}``, ``{"cols": ...}``, both, or
    ``{"flat": ...}`` for ``randk``. ``columns``/``rows`` keep ``int(ρ·dim)``, ``randk`` ``int(ρ·numel)`` and
    ``randperm`` ``round(ρ·dim)`` on the side(s) of ``proj_side``."""
    check_choice("selector", selector, ("randperm", "columns", "rows", "randk"))
    check_float("density", density, min=0.0, max=1.0)

    def draw(dim: int, k: int) -> Tensor:
        return torch.randperm(dim, generator=generator)[:k].sort().values.to(device)

    if selector == "randk":
        numel = 1
        for s in shape:
            numel *= s
        return {"flat": draw(numel, int(density * numel))}
    m, n = shape
    if selector == "columns":
        return {"cols": draw(n, int(density * n) if rank is None else min(rank, n))}
    if selector == "rows":
        return {"rows": draw(m, int(density * m) if rank is None else min(rank, m))}
    side = resolve_side(proj_side, shape)
    r = projection_rank(shape, density, side, rank)
    out = {}
    if side in ("left", "full"):
        out["rows"] = draw(m, r)
    if side in ("right", "full"):
        out["cols"] = draw(n, r)
    return out


def gather(grad: Tensor, sel: dict[str, Tensor]) -> Tensor:
    """The selected entries of ``grad`` (``down`` of a coordinate selector)."""
    if "flat" in sel:
        return grad.reshape(-1).index_select(0, sel["flat"])
    out = grad
    if "rows" in sel:
        out = out.index_select(0, sel["rows"])
    if "cols" in sel:
        out = out.index_select(1, sel["cols"])
    return out


def scatter(x: Tensor, sel: dict[str, Tensor], out: Tensor) -> Tensor:
    """Write ``x`` into the selected entries of ``out`` in place (``up`` of a coordinate selector when ``out`` is
    zeros) and return ``out``."""
    if "flat" in sel:
        out.view(-1).index_copy_(0, sel["flat"], x.reshape(-1))
    elif "rows" in sel and "cols" in sel:
        out[sel["rows"][:, None], sel["cols"][None, :]] = x
    elif "rows" in sel:
        out.index_copy_(0, sel["rows"], x)
    else:
        out.index_copy_(1, sel["cols"], x)
    return out


def block_schedule(
    order: str, n_blocks: int, n_active: int, start: int | None, generator: torch.Generator
) -> tuple[list[int], int | None]:
    """Indices of the tensors active for the next ``T`` steps and the next start position.

    ``descending`` starts at the last tensor and walks backwards (the authors' pre-training order), ``ascending``
    forwards, both wrapping around; ``mirror`` activates pairs ``(i, N-1-i)`` symmetric about the middle (needs an
    even ``n_active``); ``random`` draws ``n_active`` tensors without replacement.
    """
    check_choice("block_order", order, ("descending", "ascending", "random", "mirror"))
    check_int("n_blocks", n_blocks, min=1)
    check_int("n_active", n_active, min=0, max=n_blocks)
    if order == "random":
        return sorted(torch.randperm(n_blocks, generator=generator)[:n_active].tolist()), start
    if order == "ascending":
        s = 0 if start is None else start
        return sorted({(s + i) % n_blocks for i in range(n_active)}), (s + n_active) % n_blocks
    if order == "descending":
        s = n_blocks - 1 if start is None else start
        return sorted({(s - i) % n_blocks for i in range(n_active)}), (s - n_active) % n_blocks
    if n_active % 2:
        raise ValueError(f"block_order='mirror' needs an even number of active blocks, got {n_active}")
    half = n_blocks // 2
    if half == 0:
        return [], start
    s = 0 if start is None else start
    active = set()
    for i in range(s, s + n_active // 2):
        j = i % half
        active.update((j, n_blocks - 1 - j))
    return sorted(active), (s + n_active // 2) % half
