"""The paper's two stateless operators, as pure functions batched over leading dimensions.

- :func:`grad_norm` -- GradNorm, paper Algorithm 3: standardise every row of ``G`` (mean 0, population std 1).
- :func:`grad_whitening` -- GradWhitening, paper Algorithm 2: ``(G Gᵀ)^{-1/2} G`` (= ``U Vᵀ`` of the thin SVD),
  by the coupled Newton-Schulz iteration for the inverse square root, its diagonal-substitution variant (NSDS,
  experimental) or an exact SVD (reference).
- :func:`swan_direction` -- the full per-matrix SWAN direction (GradNorm -> GradWhitening -> rescale).

All functions take ``(..., m, n)`` tensors and never touch optimizer state.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from icml25_shared.validate import check_choice, check_float, check_int, check_tensor

__all__ = [
    "WHITENING_METHODS",
    "Whitening",
    "WHITENING_PRESETS",
    "grad_norm",
    "grad_whitening",
    "rescale_to_unit_rms",
    "swan_direction",
    "swan_directions_into",
    "compute_dtype",
]

Whitening = Literal["newton_schulz", "nsds", "svd"]
WHITENING_METHODS: tuple[Whitening, ...] = get_args(Whitening)
#: ``(ns_steps, ns_beta)`` used when they are left as ``None``: (10, 0.8) for Algorithm 2 and (2, 0.4) for its
#: diagonal-substitution variant, the settings re-implementations attribute to the paper (unverified: no official
#: code was released). ``svd`` ignores them.
WHITENING_PRESETS: dict[str, tuple[int, float]] = {"newton_schulz": (10, 0.8), "nsds": (2, 0.4), "svd": (0, 1.0)}


def _check_matrix(name: str, G: Tensor) -> None:
    check_tensor(name, G, dtype="floating")
    if G.dim() < 2:
        raise ValueError(f"{name} must have at least 2 dimensions (..., m, n), got shape {tuple(G.shape)}")


def compute_dtype(dtype: torch.dtype, whiten_dtype: torch.dtype = torch.float32) -> torch.dtype:
    """The wider of a tensor's dtype and ``whiten_dtype``: bf16/fp16 whiten in fp32, fp64 stays fp64."""
    return torch.promote_types(dtype, whiten_dtype)


def grad_norm(G: Tensor, dim: int = -1, eps: float = 1e-8, center: bool = True) -> Tensor:
    """GradNorm (paper Algorithm 3): standardise ``G`` along ``dim``.

    With the default ``dim=-1`` every row of a ``(m, n)`` gradient (one output unit, across its ``n`` inputs) gets
    mean 0 and population standard deviation 1, so ``||Gn||_F = sqrt(m n)`` (for ``eps = 0``)::

        Gn = (G - mean(G, dim)) / sqrt(mean((G - mean(G, dim))^2, dim) + eps)

    Args:
        G: gradient, shape ``(..., m, n)`` (or any shape with at least one dimension along ``dim``).
        dim: the axis to standardise along; ``-1`` is the paper's (rows), ``-2`` the column-wise deviation.
        eps: added inside the square root; a constant row maps to zeros, never NaN, when ``eps > 0``.
        center: subtract the mean first (the paper); ``False`` gives the RMS-only deviation.

    Returns:
        A new tensor of ``G``'s shape and dtype.
    """
    check_tensor("G", G, dtype="floating")
    if G.dim() < 1:
        raise ValueError(f"G must have at least 1 dimension, got shape {tuple(G.shape)}")
    eps = check_float("eps", eps, min=0.0)
    dim = check_int("dim", dim, min=-G.dim(), max=G.dim() - 1)
    Gc = G - G.mean(dim=dim, keepdim=True) if center else G
    var = Gc.square().mean(dim=dim, keepdim=True)
    return Gc * torch.rsqrt(var + eps) if eps > 0 else Gc / var.sqrt()


def _newton_schulz(X: Tensor, ns_steps: int, ns_beta: float) -> Tensor:
    """Coupled Newton-Schulz for ``(X Xᵀ)^{-1/2} X`` on ``(b, m, n)`` with ``m <= n`` and ``||X||_F <= 1``."""
    return torch.bmm(_ns_inverse_root(X, ns_steps, ns_beta), X)


def _ns_inverse_root(X: Tensor, ns_steps: int, ns_beta: float) -> Tensor:
    """``Z ≈ (X Xᵀ)^{-1/2}`` (``(b, m, m)``) by the coupled Newton-Schulz iteration of paper Algorithm 2.

    Y0 = X Xᵀ, Z0 = I;  T = 3 I - Z Y;  Y <- β Y T;  Z <- β T Z.  β is folded into T (β Y T = Y (β T)) and the
    last update of Y, which nothing reads, is skipped. At most five ``m × m`` buffers are alive at once.
    """
    Y = torch.bmm(X, X.transpose(-2, -1))
    eye3b = torch.eye(X.shape[-2], dtype=X.dtype, device=X.device).mul_(3.0 * ns_beta)  # broadcasts over batch
    # k = 0 with Z0 = I: T = 3β I - β Y and Z1 = T (no matmul needed)
    T = torch.add(eye3b, Y, alpha=-ns_beta)
    Z = T
    for _ in range(1, ns_steps):
        Y = torch.bmm(Y, T)
        T = torch.baddbmm(eye3b, Z, Y, beta=1.0, alpha=-ns_beta)
        Z = torch.bmm(T, Z)
    return Z


def _nsds(X: Tensor, ns_steps: int, ns_beta: float) -> Tensor:
    """Newton-Schulz with diagonal substitution (experimental): every ``Z Y`` replaced by its diagonal, so ``Y``
    and ``Z`` stay diagonal (vectors) and the only matrix work is ``diag(X Xᵀ)`` and ``diag(Z) X``."""
    y = X.square().sum(dim=-1)  # diag(X Xᵀ), (b, m)
    z = torch.ones_like(y)
    for _ in range(ns_steps):
        t = ns_beta * (3.0 - z * y)
        y = y * t
        z = t * z
    return X * z.unsqueeze(-1)


def grad_whitening(
    G: Tensor,
    ns_steps: int | None = None,
    ns_beta: float | None = None,
    method: Whitening = "newton_schulz",
    *,
    whiten_dtype: torch.dtype = torch.float32,
    eps: float = 1e-8,
) -> Tensor:
    """GradWhitening (paper Algorithm 2): ``(G Gᵀ)^{-1/2} G``, the orthogonal polar factor ``U Vᵀ`` of ``G``.

    Works on the smaller side (for ``m > n`` it whitens ``Gᵀ`` and transposes back, which is exact since
    ``(G Gᵀ)^{-1/2} G = G (Gᵀ G)^{-1/2}``) and computes in the wider of ``G.dtype`` and ``whiten_dtype``.
    ``G`` is first divided by its Frobenius norm, so the result does not depend on ``G``'s scale.

    Args:
        G: ``(..., m, n)`` real tensor; leading dimensions are a batch.
        ns_steps: Newton-Schulz iterations ``K`` (``None``: the method's preset, 10 or 2 for NSDS).
        ns_beta: the iteration's scale ``β`` in ``(0, 1]`` (``None``: the preset, 0.8 or 0.4 for NSDS);
            ``0.5`` is the classical iteration and converges to ``U Vᵀ``, ``0.8`` trades exactness for speed.
        method: ``"newton_schulz"`` (paper), ``"nsds"`` (diagonal substitution, experimental: after row-wise
            GradNorm it reduces to a multiple of its input) or ``"svd"`` (exact ``U Vᵀ``, slow reference).
        whiten_dtype: lower bound of the compute dtype.
        eps: guards the Frobenius pre-scaling of an all-zero ``G``.

    Returns:
        The whitened tensor, same shape and dtype as ``G``.
    """
    _check_matrix("G", G)
    check_choice("method", method, WHITENING_METHODS)
    preset_steps, preset_beta = WHITENING_PRESETS[method]
    ns_steps = preset_steps if ns_steps is None else ns_steps
    ns_beta = preset_beta if ns_beta is None else ns_beta
    if method != "svd":
        ns_steps = check_int("ns_steps", ns_steps, min=1)
        ns_beta = check_float("ns_beta", ns_beta, min=0.0, max=1.0, min_open=True)
    shape, in_dtype = G.shape, G.dtype
    m, n = shape[-2], shape[-1]
    X = G.reshape(-1, m, n).to(compute_dtype(in_dtype, whiten_dtype))
    transposed = m > n
    if transposed:
        X = X.transpose(-2, -1)
    if method == "svd":
        U, _, Vh = torch.linalg.svd(X, full_matrices=False)
        D = U @ Vh
    else:
        # mandatory pre-scaling: the spectrum of X Xᵀ must lie in (0, 1] for the iteration to converge
        norm = torch.linalg.matrix_norm(X, ord="fro", keepdim=True).clamp_min(eps)
        X = X / norm
        D = _newton_schulz(X, ns_steps, ns_beta) if method == "newton_schulz" else _nsds(X, ns_steps, ns_beta)
    if transposed:
        D = D.transpose(-2, -1)
    return D.reshape(shape).to(in_dtype)


def rescale_to_unit_rms(D: Tensor, eps: float = 1e-30) -> Tensor:
    """``D · sqrt(m n) / ||D||_F`` per matrix: element RMS 1 (an Adam-like per-entry step size); zero stays zero."""
    _check_matrix("D", D)
    mn = D.shape[-1] * D.shape[-2]
    norm = torch.linalg.matrix_norm(D, ord="fro", keepdim=True)
    return D * (math.sqrt(mn) / norm.clamp_min(eps))


# ---------------------------------------------------------------------------------------------------------------
# the in-place pipeline the optimizer runs: transient memory = one copy of the matrices + the whitening buffers
# ---------------------------------------------------------------------------------------------------------------
def _grad_norm_(D: Tensor, dim: int, eps: float, center: bool) -> Tensor:
    """:func:`grad_norm` of a ``(m, n)`` matrix in place. The variance is reduced in slabs of at most ``min(m, n)²``
    elements (the same per-row reductions as ``grad_norm``, so the same values), never a full-size temporary."""
    if center:
        D.sub_(D.mean(dim=dim, keepdim=True))
    other = D.dim() + dim - 1 if dim < 0 else 1 - dim  # the axis the slabs run along (0 or 1 of a matrix)
    length = D.shape[dim]
    step = max(1, min(D.shape) ** 2 // max(length, 1))
    var = torch.cat(
        [D.narrow(other, i, min(step, D.shape[other] - i)).square().mean(dim=dim, keepdim=True)
         for i in range(0, D.shape[other], step)],
        dim=other,
    )  # fmt: skip
    return D.mul_(torch.rsqrt(var + eps)) if eps > 0 else D.div_(var.sqrt())


def _ns_inverse_root_buffered(X: Tensor, ns_steps: int, ns_beta: float) -> Tensor:
    """:func:`_ns_inverse_root` on four rotating ``(b, m, m)`` buffers (``out=`` products, the ``3β I`` added on
    the diagonal in place): the optimizer's path, no autograd. Same iteration, rounding of a separate scale."""
    Y = torch.bmm(X, X.transpose(-2, -1))
    T = torch.mul(Y, -ns_beta)
    T.diagonal(dim1=-2, dim2=-1).add_(3.0 * ns_beta)
    Z = T.clone()
    W = torch.empty_like(Y)
    for _ in range(1, ns_steps):
        torch.bmm(Y, T, out=W)
        Y, W = W, Y
        torch.bmm(Z, Y, out=W)
        W.mul_(-ns_beta).diagonal(dim1=-2, dim2=-1).add_(3.0 * ns_beta)
        T, W = W, T
        torch.bmm(T, Z, out=W)
        Z, W = W, Z
    return Z


def _whiten_(X: Tensor, ns_steps: int, ns_beta: float, method: Whitening, eps: float) -> Tensor:
    """:func:`grad_whitening` of a ``(b, m, n)`` stack with ``m <= n`` in place: the Newton-Schulz inverse root
    ``Z`` (four ``m × m`` buffers) is applied as ``X[:, :, c] <- Z X[:, :, c]`` over blocks of ``m`` columns, so
    the only other temporary is one ``m × m`` block per matrix."""
    if method == "svd":
        U, _, Vh = torch.linalg.svd(X, full_matrices=False)
        return X.copy_(U @ Vh)
    X.div_(torch.linalg.matrix_norm(X, ord="fro", keepdim=True).clamp_min(eps))
    if method == "nsds":
        return X.copy_(_nsds(X, ns_steps, ns_beta))  # elementwise scaling: one temporary of X's size
    Z = _ns_inverse_root_buffered(X, ns_steps, ns_beta)
    m, n = X.shape[-2], X.shape[-1]
    for c in range(0, n, max(m, 1)):
        block = X[..., c : c + m]
        block.copy_(torch.bmm(Z, block))
    return X


def _rescale_(D: Tensor, eps: float = 1e-30) -> Tensor:
    """:func:`rescale_to_unit_rms` in place over the last two dimensions."""
    mn = D.shape[-1] * D.shape[-2]
    return D.mul_(math.sqrt(mn) / torch.linalg.matrix_norm(D, ord="fro", keepdim=True).clamp_min(eps))


def swan_directions_into(
    mats: list[Tensor],
    *,
    normalize: bool = True,
    whiten: bool = True,
    rescale: bool = True,
    ns_steps: int | None = None,
    ns_beta: float | None = None,
    whitening: Whitening = "newton_schulz",
    norm_dim: int = -1,
    norm_center: bool = True,
    eps: float = 1e-8,
    whiten_dtype: torch.dtype = torch.float32,
) -> list[Tensor]:
    """SWAN directions of same-shaped matrices (up to a transpose) through one buffer: the matrices are copied
    once into a ``(b, min(m, n), max(m, n))`` stack in the compute dtype and every stage runs in place on it; the
    returned directions are views of the stack in each matrix's own orientation. Transient memory: the stack plus
    the whitening buffers (four ``min(m, n)²`` matrices per stacked matrix). The inputs are not modified.
    """
    check_choice("whitening", whitening, WHITENING_METHODS)
    check_float("eps", eps, min=0.0)
    m, n = mats[0].shape
    small, large = min(m, n), max(m, n)
    cdtype = compute_dtype(mats[0].dtype, whiten_dtype)
    preset_steps, preset_beta = WHITENING_PRESETS[whitening]
    ns_steps = preset_steps if ns_steps is None else ns_steps
    ns_beta = preset_beta if ns_beta is None else ns_beta
    if whiten and whitening != "svd":
        ns_steps = check_int("ns_steps", ns_steps, min=1)
        ns_beta = check_float("ns_beta", ns_beta, min=0.0, max=1.0, min_open=True)
    stack = torch.empty(len(mats), small, large, dtype=cdtype, device=mats[0].device)
    views = []
    for slot, G in enumerate(mats):
        if tuple(sorted(G.shape)) != (small, large):
            raise ValueError(f"mats must share one shape up to a transpose, got {tuple(G.shape)} and {(m, n)}")
        v = stack[slot].mT if G.shape[0] > G.shape[1] else stack[slot]  # the matrix's own orientation
        v.copy_(G)
        if normalize:
            _grad_norm_(v, norm_dim, eps, norm_center)
        views.append(v)
    if whiten:
        _whiten_(stack, ns_steps, ns_beta, whitening, eps)
    if rescale:
        _rescale_(stack)
    return views


def swan_direction(
    G: Tensor,
    *,
    normalize: bool = True,
    whiten: bool = True,
    rescale: bool = True,
    ns_steps: int | None = None,
    ns_beta: float | None = None,
    whitening: Whitening = "newton_schulz",
    norm_dim: int = -1,
    norm_center: bool = True,
    eps: float = 1e-8,
    whiten_dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The SWAN update direction of paper Algorithm 1 for ``(..., m, n)`` gradients, in the compute dtype (the
    wider of ``G.dtype`` and ``whiten_dtype``): GradNorm, then GradWhitening, then the rescale to element RMS 1.
    Each stage can be switched off (the ablations of the paper's Sec. 5.2)."""
    _check_matrix("G", G)
    if G.dim() == 2 and norm_dim in (-1, -2) and G.numel() and not (torch.is_grad_enabled() and G.requires_grad):
        # the optimizer's in-place pipeline (same values as the stages below, one copy of G)
        return swan_directions_into(
            [G], normalize=normalize, whiten=whiten, rescale=rescale, ns_steps=ns_steps, ns_beta=ns_beta,
            whitening=whitening, norm_dim=norm_dim, norm_center=norm_center, eps=eps, whiten_dtype=whiten_dtype,
        )[0].contiguous()  # fmt: skip
    D = G.to(compute_dtype(G.dtype, whiten_dtype))
    if normalize:
        D = grad_norm(D, dim=norm_dim, eps=eps, center=norm_center)
    if whiten:
        D = grad_whitening(D, ns_steps, ns_beta, whitening, whiten_dtype=whiten_dtype, eps=eps)
    if rescale:
        D = rescale_to_unit_rms(D)
    return D
