r"""Segmented (grouped) matmul: each row times the weight of its own group, in one call.

.. math::

    y_i = s \, x_i W_{g_i} \qquad (i = 1..N;\ x \in \mathbb{R}^{N \times K},\ W \in \mathbb{R}^{G \times K \times M},
    \ g_i \in \{-1, 0, .., G-1\})

with :math:`y_i = 0` for rows whose group is ``-1`` ("no group": the base model's rows in a mixed-adapter batch). The
low-rank form is LoRA with one adapter per row, as punica's and S-LoRA's SGMV serve mixed batches:

.. math::

    y_i = s \, (x_i A_{g_i}) B_{g_i} \qquad
    (A \in \mathbb{R}^{G \times K \times R},\ B \in \mathbb{R}^{G \times R \times M})

The Triton kernel sorts the rows by group once (a stable sort; skipped with ``group_sorted=True``) and runs a tile
schedule of ``BLOCK_M`` rows that never straddle two groups, built on the device without a host sync; each tile is a
dense GEMM against its group's weight read through its strides (any layout: peft's ``(G, R, K)`` factors pass as
``A.transpose(1, 2)`` without a copy). Backward: ``dx = s dy W_g^T`` is the same kernel on the transposed weight's
strides, ``dW_g = s x_g^T dy_g`` one reduction per group over its rows. The torch reference loops over the groups.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from icml25_shared.kernels._dispatch import dtype_reason, kernels, use_triton
from icml25_shared.validate import check_bool, check_float, check_tensor

__all__ = [
    "grouped_matmul",
    "grouped_lora",
    "grouped_matmul_reference",
    "grouped_lora_reference",
    "GroupedMatmul",
]


# ------------------------------------------------------------------------------------------------------------------
# the definition
# ------------------------------------------------------------------------------------------------------------------
def grouped_matmul_reference(x: Tensor, weight: Tensor, group: Tensor, scale: float = 1.0) -> Tensor:
    """``y[i] = scale * x[i] @ weight[group[i]]`` (0 where ``group[i] == -1``): one matmul per group present.

    Plain torch, differentiable by autograd; the test oracle of :func:`grouped_matmul`.
    """
    y = x.new_zeros(x.shape[0], weight.shape[2])
    for g in torch.unique(group).tolist():
        if g < 0:
            continue
        rows = (group == g).nonzero().view(-1)
        y = y.index_copy(0, rows, x.index_select(0, rows) @ weight[g])
    return y * scale


def grouped_lora_reference(x: Tensor, A: Tensor, B: Tensor, group: Tensor, scale: float = 1.0) -> Tensor:
    """``y[i] = scale * (x[i] @ A[group[i]]) @ B[group[i]]`` (0 where ``group[i] == -1``), one group at a time."""
    return grouped_matmul_reference(grouped_matmul_reference(x, A, group), B, group, scale)


# ------------------------------------------------------------------------------------------------------------------
# the row order shared by the forward and backward passes
# ------------------------------------------------------------------------------------------------------------------
class _Schedule:
    """Rows sorted by group: ``perm`` (sorted position -> row; ``None`` when already sorted) and ``seg`` (``G + 1``
    starts: group ``g`` occupies sorted positions ``seg[g]:seg[g+1]``; the ``-1`` rows come first, ``0:seg[0]``).
    Built once per call and shared by both matmuls of the low-rank form and by their backward."""

    def __init__(self, group: Tensor, num_groups: int, group_sorted: bool) -> None:
        g = group.long()
        if group_sorted:
            self.perm, gs = None, g.contiguous()
        else:
            gs, perm = torch.sort(g, stable=True)
            self.perm = perm
        self.G, self.n = num_groups, g.numel()
        self.seg = torch.searchsorted(gs, torch.arange(num_groups + 1, device=g.device, dtype=torch.long))
        self._tiles: dict[int, Tensor] = {}
        self._bounds: list[int] | None = None

    def bounds(self) -> list[int]:
        """``seg`` on the host (the torch path; one sync, once)."""
        if self._bounds is None:
            self._bounds = self.seg.tolist()
        return self._bounds

    def block_m(self) -> int:
        """Rows per tile: the smallest of 16, 32, 64, 128 that holds an average group."""
        avg = self.n / max(1, self.G)
        return next((b for b in (16, 32, 64) if avg <= b), 128)

    def tiles(self, block_m: int, *, triton: bool = False) -> Tensor:
        """``[T, 3]`` int64 rows ``(group, first, end)`` in sorted positions, one per tile of ``block_m`` rows.

        Segment 0 holds the ``-1`` rows (written as zeros), segment ``j`` group ``j - 1``; ``T`` is the host-known
        bound ``ceil(N / block_m) + G + 1`` and the tiles past the last real one are ``(-2, 0, 0)`` (no-ops). With
        ``triton`` (and up to 1,024 groups) one small kernel writes it; else a dozen torch ops do."""
        if block_m not in self._tiles:
            n_tiles = -(-self.n // block_m) + self.G + 1
            if triton and self.G < 1024:
                self._tiles[block_m] = kernels("segmm").tiles(self.seg, n_tiles, block_m)
            else:
                self._tiles[block_m] = self._tiles_torch(block_m, n_tiles)
        return self._tiles[block_m]

    def _tiles_torch(self, block_m: int, n_tiles: int) -> Tensor:
        ends = self.seg
        starts = torch.cat([ends.new_zeros(1), ends[:-1]])
        per = (ends - starts + block_m - 1) // block_m
        tile_end = per.cumsum(0)
        tile_start = tile_end - per
        t = torch.arange(n_tiles, device=ends.device)
        s = torch.searchsorted(tile_end, t, right=True)
        valid = s <= self.G
        sc = s.clamp(max=self.G)
        first = starts[sc] + (t - tile_start[sc]) * block_m
        zero = torch.zeros_like(t)
        cols = [
            torch.where(valid, sc - 1, zero - 2),
            torch.where(valid, first, zero),
            torch.where(valid, ends[sc], zero),
        ]
        return torch.stack(cols, dim=1).contiguous()


def _forward(x: Tensor, w: Tensor, sched: _Schedule, scale: float, triton: bool) -> Tensor:
    """``scale * x[i] @ w[g_i]`` on ``sched``'s row order (``w`` any strides)."""
    y = torch.empty(x.shape[0], w.shape[2], dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    if triton:
        bm = sched.block_m()
        kernels("segmm").forward(x, w, y, sched.perm, sched.tiles(bm, triton=True), bm, scale)
        return y
    b = sched.bounds()
    xs = x if sched.perm is None else x.index_select(0, sched.perm)
    ys = y if sched.perm is None else torch.empty_like(y)
    ys[: b[0]] = 0
    for g in range(sched.G):
        if b[g + 1] > b[g]:
            torch.mm(xs[b[g] : b[g + 1]], w[g], out=ys[b[g] : b[g + 1]])
    if scale != 1.0:
        ys.mul_(scale)
    if sched.perm is not None:
        y.index_copy_(0, sched.perm, ys)
    return y


def _weight_grad(x: Tensor, dy: Tensor, sched: _Schedule, scale: float, dtype: torch.dtype, triton: bool) -> Tensor:
    """``dW[g] = scale * x_g^T dy_g`` (zero for groups without rows)."""
    G, K, M = sched.G, x.shape[1], dy.shape[1]
    if triton and x.shape[0] > 0 and K * M > 0:
        dw = torch.empty(G, K, M, dtype=dtype, device=x.device)
        kernels("segmm").weight_grad(x, dy, dw, sched.perm, sched.seg, scale)
        return dw
    dw = torch.zeros(G, K, M, dtype=dtype, device=x.device)
    if x.shape[0] == 0:
        return dw
    b = sched.bounds()
    xs = x if sched.perm is None else x.index_select(0, sched.perm)
    ds = dy if sched.perm is None else dy.index_select(0, sched.perm)
    for g in range(G):
        if b[g + 1] > b[g]:
            dw[g] = (xs[b[g] : b[g + 1]].t() @ ds[b[g] : b[g + 1]]).mul_(scale).to(dtype)
    return dw


class GroupedMatmul(torch.autograd.Function):
    """``y = scale * x[i] @ weight[g_i]`` with its backward (``dx`` through the transposed weight's strides, ``dW``
    per group), on the Triton kernels or in torch. ``apply(x, weight, schedule, scale, use_triton)``; call
    :func:`grouped_matmul` rather than this directly."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, sched: _Schedule, scale: float, triton: bool) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weight if ctx.needs_input_grad[0] else None)
        ctx.sched, ctx.scale, ctx.triton, ctx.w_dtype = sched, scale, triton, weight.dtype
        return _forward(x, weight, sched, scale, triton)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = _forward(dy, weight.transpose(1, 2), ctx.sched, ctx.scale, ctx.triton)
        if ctx.needs_input_grad[1]:
            dw = _weight_grad(x, dy, ctx.sched, ctx.scale, ctx.w_dtype, ctx.triton)
        return dx, dw, None, None, None


# ------------------------------------------------------------------------------------------------------------------
# the public functions
# ------------------------------------------------------------------------------------------------------------------
def _rows(x: object, group: object) -> tuple[Tensor, Tensor, tuple[int, ...]]:
    """``x (..., K)`` as ``(N, K)`` rows and ``group`` as ``(N,)``: ``group`` has ``x``'s leading shape, or a
    prefix of it (one id per request of a ``(batch, tokens, K)`` input, repeated over its tokens)."""
    check_tensor("x", x, dtype="floating")
    assert isinstance(x, Tensor)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., K) with at least one row dimension, got shape {tuple(x.shape)}")
    lead = tuple(x.shape[:-1])
    check_tensor("group", group, dtype="integer", device=x.device)
    assert isinstance(group, Tensor)
    if group.dim() == 0 or tuple(group.shape) != lead[: group.dim()]:
        raise ValueError(
            f"group must have shape {lead} or a prefix of it (one id per row of x, or per leading index), "
            f"got shape {tuple(group.shape)}"
        )
    if group.dim() < len(lead):
        group = group.reshape(tuple(group.shape) + (1,) * (len(lead) - group.dim())).expand(lead)
    return x.reshape(-1, x.shape[-1]), group.reshape(-1), lead


def _check_ids(group: Tensor, num_groups: int, group_sorted: bool) -> None:
    if group.numel() == 0:
        return
    lo, hi = group.aminmax()
    unsorted = (group[1:] < group[:-1]).any() if group_sorted else torch.zeros((), dtype=torch.bool)
    lo_v, hi_v, uns = torch.stack([lo.long(), hi.long(), unsorted.long().to(lo.device)]).tolist()
    if lo_v < -1 or hi_v >= num_groups:
        raise ValueError(
            f"group ids must lie in [-1, {num_groups}) (-1: a row without a group, {num_groups} weights), "
            f"got ids from {lo_v} to {hi_v}"
        )
    if uns:
        raise ValueError("group must be non-decreasing when group_sorted=True, got ids out of order")


def grouped_matmul(
    x: Tensor,
    weight: Tensor,
    group: Tensor,
    *,
    scale: float = 1.0,
    group_sorted: bool = False,
    check_ids: bool = True,
    impl: str = "auto",
) -> Tensor:
    """``y[i] = scale * x[i] @ weight[group[i]]``, zero rows where ``group[i] == -1``.

    Args:
        x: ``(N, K)`` floating, any strides; or ``(..., K)``, every leading index a row.
        weight: ``(G, K, M)``, the dtype and device of ``x``, any strides (``W.transpose(1, 2)`` of a ``(G, M, K)``
            stack is read in place).
        group: ``(N,)`` integer ids in ``[-1, G)``: one per row, shaped like ``x``'s leading dimensions or a
            prefix of them (``x (batch, tokens, K)`` with ``group (batch,)``: one id per request, for all its
            tokens).
        scale: a constant factor folded into the kernel.
        group_sorted: the ids are non-decreasing (skips the sort).
        check_ids: check the id range (and the order, with ``group_sorted``): one host sync; pass ``False`` in a
            hot loop whose ids are known good.
        impl: ``"auto"`` (Triton for CUDA float32/float16/bfloat16 tensors, torch otherwise), ``"torch"`` or
            ``"triton"``.

    Returns:
        ``(..., M)`` (``x``'s leading shape) in ``x``'s dtype, differentiable in ``x`` and ``weight``.
    """
    x2, group, lead = _rows(x, group)
    check_tensor("weight", weight, ndim=3, dtype=x2.dtype, device=x2.device)
    if weight.shape[1] != x2.shape[1] or weight.shape[0] < 1:
        raise ValueError(
            f"weight must have shape (G >= 1, {x2.shape[1]}, M) for x of shape {tuple(x.shape)}, "
            f"got {tuple(weight.shape)}"
        )
    scale = check_float("scale", scale)
    group_sorted = check_bool("group_sorted", group_sorted)
    if check_bool("check_ids", check_ids):
        _check_ids(group, weight.shape[0], group_sorted)
    triton = use_triton("grouped_matmul", impl, [x2, weight, group], why_not=dtype_reason(x2.dtype))
    sched = _Schedule(group, weight.shape[0], group_sorted)
    return GroupedMatmul.apply(x2, weight, sched, scale, triton).view(*lead, weight.shape[2])


def grouped_lora(
    x: Tensor,
    A: Tensor,
    B: Tensor,
    group: Tensor,
    *,
    scale: float = 1.0,
    group_sorted: bool = False,
    check_ids: bool = True,
    impl: str = "auto",
) -> Tensor:
    """``y[i] = scale * (x[i] @ A[group[i]]) @ B[group[i]]`` (LoRA, one adapter per row), zero where ``group[i]``
    is ``-1``: a shrink and an expand segmented matmul sharing one row schedule.

    Args:
        x: ``(N, K)`` or ``(..., K)``.
        A: ``(G, K, R)`` down projections; peft's ``lora_A`` weights stacked ``(G, R, K)`` pass as
            ``A.transpose(1, 2)`` (read through the strides, no copy).
        B: ``(G, R, M)`` up projections (peft's stacked ``(G, M, R)``: ``B.transpose(1, 2)``).
        group: as in :func:`grouped_matmul`.
        scale: as in :func:`grouped_matmul`.
        group_sorted: as in :func:`grouped_matmul`.
        check_ids: as in :func:`grouped_matmul`.
        impl: as in :func:`grouped_matmul`.

    Returns:
        ``(..., M)`` in ``x``'s dtype, differentiable in ``x``, ``A`` and ``B``.
    """
    x2, group, lead = _rows(x, group)
    check_tensor("A", A, ndim=3, dtype=x2.dtype, device=x2.device)
    check_tensor("B", B, ndim=3, dtype=x2.dtype, device=x2.device)
    if A.shape[1] != x2.shape[1] or A.shape[0] < 1 or A.shape[2] < 1:
        raise ValueError(
            f"A must have shape (G >= 1, {x2.shape[1]}, R >= 1) for x of shape {tuple(x.shape)}, got {tuple(A.shape)}"
        )
    if B.shape[:2] != A.shape[::2]:
        raise ValueError(f"B must have shape ({A.shape[0]}, {A.shape[2]}, M) for A of shape {tuple(A.shape)}, "
                         f"got {tuple(B.shape)}")  # fmt: skip
    scale = check_float("scale", scale)
    group_sorted = check_bool("group_sorted", group_sorted)
    if check_bool("check_ids", check_ids):
        _check_ids(group, A.shape[0], group_sorted)
    triton = use_triton("grouped_lora", impl, [x2, A, B, group], why_not=dtype_reason(x2.dtype))
    sched = _Schedule(group, A.shape[0], group_sorted)
    z = GroupedMatmul.apply(x2, A, sched, 1.0, triton)
    return GroupedMatmul.apply(z, B, sched, scale, triton).view(*lead, B.shape[2])
