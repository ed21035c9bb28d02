r"""Masked CSR SpMM: a sparse matrix with some of its edges switched off, times a dense matrix.

.. math::

    \text{out} = (A \odot M) X, \qquad \text{out}_r = \sum_{e \in \text{row } r,\ m_e} a_e \, X_{\text{col}_e}

for a CSR matrix ``A`` (structure :class:`CSR`, built and checked once; values ``a`` per call) and a per-edge keep
mask ``m``: a boolean ``keep``, a score against a threshold (``m_e = [score_e >= threshold]``, evaluated on the fly
inside the kernel), or both (and-ed). No CSR is rebuilt per call: pruning an edge is a mask, not a new structure
(unifews' pruned propagation; PyG's ``spmm`` on a sparsified subgraph).

Backward: :math:`\partial X = (A \odot M)^T \partial\text{out}` (the same kernel over the transposed structure,
built once per :class:`CSR` and kept) and :math:`\partial a_e = m_e \langle \partial\text{out}_{\text{row}_e},
X_{\text{col}_e} \rangle` (one dot per kept edge). The mask and score get no gradient (a hard threshold).
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from icml25_shared.kernels._dispatch import TRITON_DTYPES, dtype_reason, kernels, use_triton
from icml25_shared.validate import ArgumentTypeError, check_float, check_int, check_tensor

__all__ = ["CSR", "masked_spmm", "masked_spmm_reference", "MaskedSpMM"]


class CSR:
    """The sparsity structure of an ``n_rows x n_cols`` matrix in compressed sparse row form, checked once.

    ``crow`` (``n_rows + 1``): row ``r``'s entries are ``crow[r]:crow[r+1]``; ``col`` (``nnz``): their columns.
    Values, masks and scores are per-call tensors in this entry order. The row of each entry and the transposed
    structure (for the backward) are built on first use and kept.

    Args:
        crow: integer row pointer, starting at 0, non-decreasing, ending at ``nnz``.
        col: integer columns in ``[0, n_cols)``, on ``crow``'s device.
        shape: ``(n_rows, n_cols)``; ``n_rows`` must be ``len(crow) - 1``.
        check: verify the pointer and the column range (one host sync).
    """

    def __init__(self, crow: Tensor, col: Tensor, shape: tuple[int, int], *, check: bool = True) -> None:
        if not isinstance(shape, (tuple, list)) or len(shape) != 2:
            raise ArgumentTypeError(f"shape must be a pair (n_rows, n_cols), got {shape!r}")
        n_rows, n_cols = check_int("shape[0]", shape[0], min=0), check_int("shape[1]", shape[1], min=0)
        check_tensor("crow", crow, ndim=1, shape=(n_rows + 1,), dtype="integer")
        check_tensor("col", col, ndim=1, dtype="integer", device=crow.device)
        if crow.dtype != col.dtype:  # torch's CSR tensors (the torch path) need one index dtype
            crow, col = crow.long(), col.long()
        self.crow, self.col = crow.contiguous(), col.contiguous()
        self.shape = (n_rows, n_cols)
        self.nnz = int(col.numel())
        self.order: Tensor | None = None
        self._row: Tensor | None = None
        self._t: tuple[CSR, Tensor] | None = None
        if check:
            self._check()

    def _check(self) -> None:
        crow, col = self.crow, self.col
        n_rows, n_cols = self.shape
        steps = crow.diff()
        z = torch.zeros((), dtype=torch.long, device=crow.device)
        lo, hi = col.aminmax() if self.nnz else (z, z)
        first, last, min_step, lo_v, hi_v = torch.stack(
            [crow[0].long(), crow[-1].long(), steps.min().long() if n_rows else z, lo.long(), hi.long()]
        ).tolist()
        if first != 0 or last != self.nnz:
            raise ValueError(
                f"crow must be a CSR row pointer from 0 to nnz = len(col) = {self.nnz}, got {first} to {last}"
            )
        if min_step < 0:
            bad = int((steps < 0).nonzero()[0])
            raise ValueError(f"crow must be non-decreasing (a CSR row pointer), got crow[{bad + 1}] < crow[{bad}]")
        if self.nnz and (lo_v < 0 or hi_v >= n_cols):
            raise ValueError(f"col must lie in [0, {n_cols}) (n_cols), got columns from {lo_v} to {hi_v}")

    @classmethod
    def from_coo(cls, row: Tensor, col: Tensor, shape: tuple[int, int]) -> CSR:
        """The CSR of COO entries ``(row[k], col[k])``, sorted by row (stable); ``.order`` holds the permutation,
        so per-entry tensors in COO order map to CSR order as ``values[csr.order]``.

        For a PyG ``edge_index`` (messages ``src -> dst``, ``out[dst] += w x[src]``):
        ``CSR.from_coo(edge_index[1], edge_index[0], (n, n))``.
        """
        check_tensor("row", row, ndim=1, dtype="integer")
        check_tensor("col", col, ndim=1, shape=(row.numel(),), dtype="integer", device=row.device)
        n_rows = check_int("shape[0]", shape[0], min=0)
        if row.numel():
            lo, hi = row.aminmax()
            if int(lo) < 0 or int(hi) >= n_rows:
                raise ValueError(f"row must lie in [0, {n_rows}) (n_rows), got rows from {int(lo)} to {int(hi)}")
        order = torch.argsort(row, stable=True)
        crow = torch.searchsorted(row[order].long(), torch.arange(n_rows + 1, device=row.device))
        csr = cls(crow, col[order].long(), shape)
        csr.order = order
        return csr

    @classmethod
    def from_sparse(cls, adj: Tensor) -> tuple[CSR, Tensor]:
        """``(structure, values)`` of a ``torch.sparse_csr_tensor`` (or of a COO tensor, converted)."""
        if not isinstance(adj, Tensor) or adj.layout not in (torch.sparse_csr, torch.sparse_coo) or adj.dim() != 2:
            raise ArgumentTypeError(
                f"adj must be a 2-D torch.sparse_csr (or sparse_coo) tensor, got "
                f"{type(adj).__name__} with layout {getattr(adj, 'layout', None)}"
            )
        if adj.layout == torch.sparse_coo:
            adj = adj.coalesce().to_sparse_csr()
        return cls(adj.crow_indices(), adj.col_indices(), tuple(adj.shape)), adj.values()  # type: ignore[arg-type]

    @property
    def device(self) -> torch.device:
        return self.crow.device

    @property
    def row(self) -> Tensor:
        """``(nnz,)`` the row of each entry (built once)."""
        if self._row is None:
            counts = self.crow.diff()
            self._row = torch.repeat_interleave(
                torch.arange(self.shape[0], device=self.device), counts, output_size=self.nnz
            )
        return self._row

    def transposed(self) -> tuple[CSR, Tensor]:
        """``(CSR of A^T, eid)``: entry ``k`` of the transpose is entry ``eid[k]`` of this matrix (built once)."""
        if self._t is None:
            eid = torch.argsort(self.col, stable=True)
            crow_t = torch.searchsorted(self.col[eid], torch.arange(self.shape[1] + 1, device=self.device))
            self._t = (CSR(crow_t, self.row[eid], (self.shape[1], self.shape[0]), check=False), eid)
        return self._t

    def __repr__(self) -> str:
        return f"CSR(shape={self.shape}, nnz={self.nnz}, device={self.device})"


# ------------------------------------------------------------------------------------------------------------------
# the definition
# ------------------------------------------------------------------------------------------------------------------
def _mask(keep: Tensor | None, score: Tensor | None, thr: Tensor | None) -> Tensor | None:
    """The effective keep mask (``None``: every edge). Scores are compared with the threshold in the wider of
    float32 and the score's dtype (what the kernel does for float32/float16/bfloat16 scores)."""
    m = keep
    if score is not None:
        assert thr is not None
        cmp_dtype = torch.promote_types(score.dtype, torch.float32)
        s = score.to(cmp_dtype) >= thr.to(cmp_dtype)
        m = s if m is None else m & s
    return m


def masked_spmm_reference(
    csr: CSR,
    values: Tensor,
    x: Tensor,
    *,
    keep: Tensor | None = None,
    score: Tensor | None = None,
    threshold: float | Tensor | None = None,
) -> Tensor:
    """``out[r] = sum over kept entries e of row r of values[e] * x[col[e]]``: a gather, a scale and an
    ``index_add`` over the entries. Plain torch, differentiable by autograd; the test oracle of :func:`masked_spmm`."""
    thr = None
    if threshold is not None:
        thr = threshold if isinstance(threshold, Tensor) else torch.tensor(float(threshold), dtype=torch.float64)
    m = _mask(keep, score, thr)
    w = values if m is None else torch.where(m, values, torch.zeros((), dtype=values.dtype, device=values.device))
    msg = w.unsqueeze(1) * x.index_select(0, csr.col)
    return x.new_zeros(csr.shape[0], x.shape[1]).index_add(0, csr.row, msg)


def _csr_matmul(crow: Tensor, col: Tensor, w: Tensor, shape: tuple[int, int], x: Tensor) -> Tensor:
    with warnings.catch_warnings():
        # torch flags CSR tensors "beta" once per process; the product used here is stable since torch 2.0
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        a = torch.sparse_csr_tensor(crow, col, w, shape, check_invariants=False)
    return a @ x


def _torch_spmm(csr: CSR, w: Tensor, x: Tensor, eid: Tensor | None = None) -> Tensor:
    """``A_w @ x`` in torch (``w`` already masked; read through ``eid`` when given)."""
    if eid is not None:
        w = w.index_select(0, eid)
    if csr.nnz == 0:
        return x.new_zeros(csr.shape[0], x.shape[1])
    if x.dtype in (torch.float32, torch.float64):
        return _csr_matmul(csr.crow, csr.col, w, csr.shape, x)
    msg = w.unsqueeze(1) * x.index_select(0, csr.col)
    return x.new_zeros(csr.shape[0], x.shape[1]).index_add_(0, csr.row, msg)


class MaskedSpMM(torch.autograd.Function):
    """``out = (A ⊙ M) x`` with gradients for the edge values and ``x``, on the Triton kernels or in torch.
    ``apply(values, x, csr, keep, score, threshold_tensor, use_triton)``; call :func:`masked_spmm` rather than this."""

    @staticmethod
    def forward(ctx, values, x, csr, keep, score, thr, triton):  # type: ignore[override]
        ctx.save_for_backward(values, x if ctx.needs_input_grad[0] else None, keep, score, thr)
        ctx.csr, ctx.triton = csr, triton
        n_rows, F = csr.shape[0], x.shape[1]
        if triton:
            out = torch.empty(n_rows, F, dtype=x.dtype, device=x.device)
            if n_rows and F:
                kernels("spmm").spmm(csr.crow, csr.col, None, values, _u8(keep), score, thr, x, out)
            return out
        m = _mask(keep, score, thr)
        w = values if m is None else torch.where(m, values, torch.zeros((), dtype=values.dtype, device=values.device))
        return _torch_spmm(csr, w, x)

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):  # type: ignore[override]
        values, x, keep, score, thr = ctx.saved_tensors
        csr: CSR = ctx.csr
        dval = dx = None
        if ctx.needs_input_grad[1]:
            csr_t, eid = csr.transposed()
            if ctx.triton:
                dx = torch.empty(csr.shape[1], dout.shape[1], dtype=dout.dtype, device=dout.device)
                if dx.numel():
                    kernels("spmm").spmm(csr_t.crow, csr_t.col, eid, values, _u8(keep), score, thr, dout, dx)
            else:
                m = _mask(keep, score, thr)
                w = values if m is None else torch.where(m, values, torch.zeros((), dtype=values.dtype))
                dx = _torch_spmm(csr_t, w, dout, eid)
        if ctx.needs_input_grad[0]:
            if ctx.triton:
                dval = torch.empty_like(values)
                if dval.numel():
                    kernels("spmm").edge_grad(csr.row, csr.col, _u8(keep), score, thr, dout, x, dval)
            else:
                m = _mask(keep, score, thr)
                dval = (dout.index_select(0, csr.row) * x.index_select(0, csr.col)).sum(1).to(values.dtype)
                if m is not None:
                    dval = torch.where(m, dval, torch.zeros((), dtype=dval.dtype, device=dval.device))
        return dval, dx, None, None, None, None, None


def _u8(keep: Tensor | None) -> Tensor | None:
    return None if keep is None else keep.view(torch.uint8)


def masked_spmm(
    csr: CSR,
    values: Tensor,
    x: Tensor,
    *,
    keep: Tensor | None = None,
    score: Tensor | None = None,
    threshold: float | Tensor | None = None,
    impl: str = "auto",
) -> Tensor:
    """``out = (A ⊙ M) @ x`` for the CSR matrix ``A`` with entries ``values`` and the per-entry keep mask ``M``.

    Args:
        csr: the structure (:class:`CSR`; ``CSR.from_coo`` / ``CSR.from_sparse`` build one), reused across calls.
        values: ``(nnz,)`` entries in CSR order, the dtype and device of ``x``; differentiable.
        x: ``(n_cols, F)`` floating, any strides; differentiable.
        keep: ``(nnz,)`` bool, ``True`` keeps the entry.
        score: ``(nnz,)`` floating; with ``threshold``, the entry is kept when ``score >= threshold`` (compared in
            float32, or float64 for float64 scores). Combined with ``keep`` by "and".
        threshold: a float or a 0-d tensor (a tensor computed on the device, e.g. a multiple of a mean score,
            costs no host sync).
        impl: ``"auto"`` (Triton for CUDA float32/float16/bfloat16 tensors, torch otherwise), ``"torch"`` or
            ``"triton"``.

    Returns:
        ``(n_rows, F)`` in ``x``'s dtype.
    """
    if not isinstance(csr, CSR):
        raise ArgumentTypeError(
            f"csr must be an icml25_shared.kernels.CSR (CSR.from_coo, CSR.from_sparse or CSR(crow, col, shape) "
            f"build one), got {type(csr).__name__}"
        )
    nnz, n_cols = csr.nnz, csr.shape[1]
    check_tensor("x", x, ndim=2, dtype="floating")
    if x.shape[0] != n_cols:
        raise ValueError(f"x must have shape ({n_cols}, F) for a CSR of shape {csr.shape}, got {tuple(x.shape)}")
    check_tensor("x", x, device=csr.device)
    check_tensor("values", values, ndim=1, shape=(nnz,), dtype=x.dtype, device=x.device)
    if keep is not None:
        check_tensor("keep", keep, ndim=1, shape=(nnz,), dtype="bool", device=x.device)
    if (score is None) != (threshold is None):
        raise ValueError("score and threshold go together: pass both (keep score >= threshold) or neither")
    thr = None
    if score is not None:
        check_tensor("score", score, ndim=1, shape=(nnz,), dtype="floating", device=x.device)
        if isinstance(threshold, Tensor):
            check_tensor("threshold", threshold, shape=(), dtype="floating", device=x.device)
            thr = threshold.detach().reshape(1)
        else:
            value = check_float("threshold", threshold, allow_inf=True)
            thr = torch.full((1,), value, dtype=torch.float64, device=x.device)
    why_not = dtype_reason(x.dtype)
    if why_not is None and score is not None and score.dtype not in TRITON_DTYPES:
        why_not = f"the Triton kernel takes float32, float16 or bfloat16 scores, got {score.dtype}"
    triton = use_triton("masked_spmm", impl, [values, x], why_not=why_not)
    return MaskedSpMM.apply(values, x, csr, keep, score, thr, triton)
