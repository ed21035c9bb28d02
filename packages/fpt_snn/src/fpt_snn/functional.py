"""The FPT equations in pure torch (no spikingjelly needed).

The paper's discrete soft-reset LIF (spikingjelly's convention), per neuron, t = 0..T-1, v[-1] = 0::

    h[t] = λ·v[t-1] + x[t]        s[t] = Θ(h[t] - θ)        v[t] = h[t] - θ·s[t]

Unrolling the recurrence, the whole trajectory given the spikes is one lower-triangular product, with
Λ[i, j] = λ^(i-j) for i ≥ j and A = Λ - I (the paper's fixed-point form of the LIF over all T steps)::

    H = Λ X - θ A S,      S = Θ(H - θ)                     (a fixed-point equation in S)

FPT solves it by K parallel (Jacobi) sweeps over all T steps at once, the paper's fixed-point iteration::

    C = Λ X;  S⁰ = 0;  H^k = C - θ·A S^(k-1);  S^k = f_k(H^k - θ)

with f_k = Θ ("hard": prefix-exact, K = T is exactly LIF) or σ(α_k ·) ("soft", the official training rule). K = 1
is Θ(ΛX - θ), the LIF without reset; with a learnable causal Λ and bias it is the parallel spiking neuron (PSN) --
the paper's "existing parallel spiking neurons are special cases".
Layout is spikingjelly's: time first, ``[T, N, *]``; every other axis is an independent neuron column.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, overload

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from fpt_snn.config import (
    DENSE_MAX_T,
    DENSE_MAX_T_CUDA,
    PATHS,
    FPTConfig,
    Impl,
    LambdaPath,
    Mode,
    Output,
    Surrogate,
    auto_chunk_size,
    validate_decay,
)
from icml25_shared.validate import check_choice, check_int, check_tensor

__all__ = [
    "clear_cache",
    "cache_info",
    "lambda_matrix",
    "apply_lambda",
    "lif_reference",
    "fpt_lif",
    "fpt_iterate",
    "FPTInfo",
    "soft_spike",
    "hard_spike",
    "straight_through",
    "flat_slope",
    "mismatch_rate",
    "dependent_steps",
]


# --------------------------------------------------------------------------------------------------------------
# Λ and the two ways of applying it
# --------------------------------------------------------------------------------------------------------------
def lambda_matrix(
    T: int, decay: float | Tensor, dtype: torch.dtype | None = None, device: torch.device | str | None = None
) -> Tensor:
    """The T×T lower-triangular leak matrix Λ[i, j] = λ^(i-j) for i ≥ j, 0 above the diagonal.

    Built from non-negative powers only (no λ^(-t) tricks), so it is finite for any T (entries underflow to 0).
    ``decay`` may be a 0-d tensor (a learnable leak); the result is then differentiable in it.
    """
    check_int("T", T, min=1)
    if isinstance(decay, Tensor):
        if decay.numel() != 1:
            raise ValueError(f"decay must be a scalar, got a tensor of shape {tuple(decay.shape)}")
        dtype = dtype or (decay.dtype if decay.is_floating_point() else torch.get_default_dtype())
        device = device if device is not None else decay.device
        lam = decay.reshape(()).to(dtype=dtype, device=device)
    else:
        validate_decay(decay)
        dtype = dtype or torch.get_default_dtype()
        lam = torch.tensor(float(decay), dtype=dtype, device=device)
    idx = torch.arange(T, device=lam.device)
    d = idx[:, None] - idx[None, :]
    powers = lam ** d.clamp(min=0).to(lam.dtype)
    return torch.where(d >= 0, powers, torch.zeros((), dtype=lam.dtype, device=lam.device))


_CACHE_MAX_ENTRIES = 32
_CACHE_MAX_BYTES = 64 << 20
_cache: OrderedDict[tuple[int, float, torch.dtype, torch.device], Tensor] = OrderedDict()
_cache_bytes = 0
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Drop every cached leak matrix Λ (they are rebuilt on the next forward)."""
    global _cache_bytes
    with _cache_lock:
        _cache.clear()
        _cache_bytes = 0


def cache_info() -> dict[str, int]:
    """``{"entries": n, "bytes": b}`` of the leak-matrix cache (at most 32 entries and 64 MiB, least recently used
    dropped first)."""
    with _cache_lock:
        return {"entries": len(_cache), "bytes": _cache_bytes}


def _cached_lambda(T: int, decay: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Λ for a fixed leak, cached by (T, λ, dtype, device); ``-T`` gives A = Λ - I.

    Built with inference mode off and without autograd, so an entry made during ``torch.inference_mode()`` (a
    validation pass) is an ordinary tensor that a later training step may save for backward; a normal tensor is
    also usable inside inference mode, so one entry serves both.
    """
    global _cache_bytes
    key = (T, decay, dtype, torch.device(device))
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    with torch.inference_mode(False), torch.no_grad():
        mat = lambda_matrix(abs(T), decay, dtype, device)
        if T < 0:  # the strictly lower-triangular A = Λ - I of the reset term
            mat.diagonal().zero_()
    size = mat.numel() * mat.element_size()
    if size > _CACHE_MAX_BYTES:
        return mat
    with _cache_lock:
        if key not in _cache:
            _cache[key] = mat
            _cache_bytes += size
        while len(_cache) > _CACHE_MAX_ENTRIES or _cache_bytes > _CACHE_MAX_BYTES:
            _, old = _cache.popitem(last=False)
            _cache_bytes -= old.numel() * old.element_size()
    return mat


def _leak_matrix(T: int, decay: float | Tensor, like: Tensor) -> Tensor:
    if isinstance(decay, Tensor):
        return lambda_matrix(T, decay, like.dtype, like.device)
    return _cached_lambda(T, float(decay), like.dtype, like.device)


def _dense_pair(T: int, decay: float, like: Tensor) -> tuple[Tensor, Tensor]:
    """Λ and A = Λ - I (strictly lower triangular), both from the cache."""
    lam_mat = _cached_lambda(T, float(decay), like.dtype, like.device)
    a_mat = _cached_lambda(-T, float(decay), like.dtype, like.device)
    return lam_mat, a_mat


def _leak_powers(decay: float | Tensor, n: int, like: Tensor) -> Tensor:
    """[λ^1, ..., λ^n] as a tensor like ``like``."""
    e = torch.arange(1, n + 1, dtype=like.dtype, device=like.device)
    lam = decay.to(like.dtype) if isinstance(decay, Tensor) else torch.tensor(float(decay), dtype=like.dtype)
    return lam.to(like.device) ** e


def _chunked_lambda(y: Tensor, decay: float | Tensor, block: int) -> Tensor:
    """Λ·y for y [T, M] as a two-level scan: B×B GEMMs inside blocks, a carried state across blocks.

    Inside block b (rows s..s+B-1): y_out[s+i] = Σ_{j≤i} λ^(i-j) y[s+j] + λ^(i+1) e_(b-1), where e_b is the output at
    the end of block b. The block ends obey e_b = last_b + λ^B e_(b-1), itself a Λ product over nb = ⌈T/B⌉ blocks
    with leak λ^B. Work O(T·B·M + nb²·M) instead of O(T²·M); only non-negative powers appear.
    """
    T, M = y.shape
    nb = -(-T // block)
    if nb == 1:
        return _leak_matrix(T, decay, y) @ y
    pad = nb * block - T
    yp = torch.nn.functional.pad(y, (0, 0, 0, pad)) if pad else y
    local = torch.matmul(_leak_matrix(block, decay, y), yp.view(nb, block, M))  # [nb, B, M]
    decay_b = decay**block
    ends = _leak_matrix(nb, decay_b, y) @ local[:, -1, :]  # [nb, M], Λ over blocks with leak λ^B
    carry = _leak_powers(decay, block, y)[None, :, None] * ends[:-1, None, :]  # [nb-1, B, M]
    out = torch.cat([local[:1], local[1:] + carry], dim=0).view(nb * block, M)
    return out[:T] if pad else out


def _scan_lambda(y: Tensor, decay: float, *, reverse: bool = False, impl: str = "auto") -> Tensor:
    """Λ·y (or Λᵀ·y with ``reverse``) as the recurrence u[t] = λ u[t-1] + y[t], one time step after the other.

    CUDA tensors go to the shared Triton kernel (``icml25_shared.kernels.linear_scan``) under ``impl="auto"``; on CPU
    it is one in-place axpy per step over all M columns (memory-bound: T·M numbers read and written once).
    """
    T = y.shape[0]
    if impl == "triton" or (impl == "auto" and y.is_cuda):
        from icml25_shared.kernels import linear_scan

        if reverse:
            return linear_scan(y.flip(0), float(decay), impl=impl).flip(0)
        return linear_scan(y, float(decay), impl=impl)
    out = y.clone(memory_format=torch.contiguous_format)
    if reverse:  # (Λᵀ y)[t] = y[t] + λ (Λᵀ y)[t+1]
        for t in range(T - 2, -1, -1):
            out[t].add_(out[t + 1], alpha=decay)
    else:
        for t in range(1, T):
            out[t].add_(out[t - 1], alpha=decay)
    return out


def _apply_path(y: Tensor, decay: float, path: str, block: int, *, reverse: bool = False, impl: str = "auto") -> Tensor:
    """Λ·y or Λᵀ·y (``reverse``) for a fixed float leak on one of the three concrete paths."""
    if path == "dense":
        mat = _leak_matrix(y.shape[0], decay, y)
        return (mat.t() if reverse else mat) @ y
    if path == "scan":
        return _scan_lambda(y, decay, reverse=reverse, impl=impl)
    if reverse:
        return _chunked_lambda(y.flip(0), decay, block).flip(0)
    return _chunked_lambda(y, decay, block)


def apply_lambda(
    y: Tensor,
    decay: float | Tensor,
    *,
    path: LambdaPath = "auto",
    chunk_size: int | None = None,
    kernel: Tensor | None = None,
    transpose: bool = False,
    impl: Impl = "auto",
) -> Tensor:
    """Λ·y for ``y`` of shape [T, M] (the linear recurrence u[t] = λ u[t-1] + y[t], u[-1] = 0); Λᵀ·y (the same
    recurrence run backwards in time, the adjoint FPT's backward needs) with ``transpose``.

    ``path="dense"``: one T×T GEMM (best on GPU and for small T); ``"chunked"``: the blocked scan of
    :func:`_chunked_lambda`, O(T·chunk_size) work per column; ``"scan"``: the recurrence step by step (an in-place
    loop on CPU, the shared Triton kernel on CUDA); ``"auto"``: see :meth:`FPTConfig.resolve_path`.
    ``chunk_size=None`` picks B ≈ √T (a power of 2 in [16, 64]).
    ``kernel``: an explicit T×T matrix used instead of Λ (its lower triangle; the learnable-kernel variant).
    """
    if y.dim() != 2:
        raise ValueError(f"y must have shape [T, M], got {tuple(y.shape)}")
    T = y.shape[0]
    if kernel is not None:
        if kernel.shape != (T, T):
            raise ValueError(f"kernel must have shape ({T}, {T}) for T={T}, got {tuple(kernel.shape)}")
        mat = torch.tril(kernel)
        return (mat.t() if transpose else mat) @ y
    check_choice("path", path, PATHS)
    check_int("chunk_size", chunk_size, min=1, allow_none=True)
    block = chunk_size if chunk_size is not None else auto_chunk_size(T)
    if isinstance(decay, Tensor):  # a learnable leak: differentiable dense or chunked products
        dense = path == "dense" or (path == "auto" and (T <= DENSE_MAX_T or (y.is_cuda and T <= DENSE_MAX_T_CUDA)))
        if transpose:
            y = y.flip(0)
        out = _leak_matrix(T, decay, y) @ y if dense else _chunked_lambda(y, decay, block)
        return out.flip(0) if transpose else out
    decay = validate_decay(decay)
    concrete = FPTConfig(path=path).resolve_path(T, y.shape[1], y.device)
    return _apply_path(y, decay, concrete, block, reverse=transpose, impl=impl)


# --------------------------------------------------------------------------------------------------------------
# spike functions with the official surrogates
# --------------------------------------------------------------------------------------------------------------
def flat_slope(alpha: float) -> float:
    """Slope of the official flat-sigmoid backward: α_b = max(1, α/3)."""
    return max(1.0, alpha / 3.0)


def _flat_sigmoid_grad(grad: Tensor, z: Tensor, alpha_b: float) -> Tensor:
    """grad · α_b σ(α_b z)(1 - σ(α_b z)), with torch's fused sigmoid backward."""
    sb = torch.sigmoid(z * alpha_b)
    return torch.ops.aten.sigmoid_backward(grad, sb).mul_(alpha_b)


class _SoftSpike(torch.autograd.Function):
    """Forward σ(α z); backward the derivative of a flatter sigmoid, α_b σ(α_b z)(1 - σ(α_b z))."""

    @staticmethod
    def forward(ctx, z: Tensor, alpha: float, alpha_b: float) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(z)
        ctx.alpha_b = alpha_b
        return torch.sigmoid(alpha * z)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, None, None]:  # type: ignore[override]
        (z,) = ctx.saved_tensors
        return _flat_sigmoid_grad(grad, z, ctx.alpha_b), None, None


class _HardSpike(torch.autograd.Function):
    """Forward Θ(z) = 1[z ≥ 0] (spikingjelly's convention); backward α_b σ(α_b z)(1 - σ(α_b z))."""

    @staticmethod
    def forward(ctx, z: Tensor, alpha_b: float) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(z)
        ctx.alpha_b = alpha_b
        return (z >= 0).to(z.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, None]:  # type: ignore[override]
        (z,) = ctx.saved_tensors
        return _flat_sigmoid_grad(grad, z, ctx.alpha_b), None


class _StraightThrough(torch.autograd.Function):
    """Forward the sample ``s`` exactly; backward the gradient to the probability ``p`` unchanged (∂s/∂p = 1)."""

    @staticmethod
    def forward(ctx, p: Tensor, s: Tensor) -> Tensor:  # type: ignore[override]
        return s

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        return grad, None


def soft_spike(z: Tensor, alpha: float, surrogate_backward: str = "flat_sigmoid") -> Tensor:
    """σ(α z); with ``"flat_sigmoid"`` the backward uses slope max(1, α/3) (official), with ``"sigmoid"`` the
    exact derivative (plain autograd)."""
    if surrogate_backward == "sigmoid":
        return torch.sigmoid(alpha * z)
    return _SoftSpike.apply(z, alpha, flat_slope(alpha))


def hard_spike(z: Tensor, alpha: float, surrogate_backward: str = "flat_sigmoid") -> Tensor:
    """Θ(z) with a sigmoid surrogate gradient of slope max(1, α/3) (``"flat_sigmoid"``) or α (``"sigmoid"``)."""
    return _HardSpike.apply(z, flat_slope(alpha) if surrogate_backward == "flat_sigmoid" else alpha)


def straight_through(p: Tensor, s: Tensor) -> Tensor:
    """Returns ``s`` (exactly) with the gradient of ``p``."""
    return _StraightThrough.apply(p, s)


# --------------------------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------------------------
def check_input(x_seq: object, *, finite: bool = True) -> Tensor:
    """``x_seq`` when it is a non-empty floating tensor ``[T, N, *]`` (and, with ``finite``, free of NaN/inf)."""
    check_tensor("x_seq", x_seq, dtype="floating")
    if x_seq.dim() < 2:  # type: ignore[union-attr]
        raise ValueError(f"x_seq must have at least 2 dims [T, N, *], got shape {tuple(x_seq.shape)}")  # type: ignore[union-attr]
    return check_tensor("x_seq", x_seq, nonempty=True, finite=finite)


# --------------------------------------------------------------------------------------------------------------
# the sequential ground truth
# --------------------------------------------------------------------------------------------------------------
@overload
def lif_reference(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    surrogate_alpha: float = 4.0,
    detach_reset: bool = False,
    return_membrane: Literal[False] = False,
) -> Tensor: ...
@overload
def lif_reference(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    surrogate_alpha: float = 4.0,
    detach_reset: bool = False,
    return_membrane: Literal[True],
) -> tuple[Tensor, Tensor]: ...
@overload
def lif_reference(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    surrogate_alpha: float = 4.0,
    detach_reset: bool = False,
    return_membrane: bool = False,
) -> Tensor | tuple[Tensor, Tensor]: ...
def lif_reference(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    surrogate_alpha: float = 4.0,
    detach_reset: bool = False,
    return_membrane: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The sequential soft-reset LIF (the module docstring's recurrence), one time step after the other: the ground
    truth FPT's fixed point equals.

    Equal to spikingjelly ``LIFNode(tau, decay_input, v_threshold, v_reset=None)``. Differentiable: the spike uses
    spikingjelly's default surrogate, the derivative of σ(``surrogate_alpha``·z). This is also the "naive autograd
    loop" baseline of the benchmarks.

    Args:
        x_seq: input current, ``[T, N, *]``, floating point.
        tau: membrane time constant > 1 (λ = 1 - 1/τ); ignored when ``decay`` is given.
        decay: leak λ ∈ (0, 1] given directly.
        decay_input: scale the input by 1/τ (= 1 - λ).
        v_threshold: θ > 0.
        surrogate_alpha: slope of the sigmoid surrogate gradient.
        detach_reset: stop the gradient through the reset.
        return_membrane: also return the post-reset membrane ``v_seq`` (spikingjelly's ``v_seq``).

    Returns:
        spikes ``[T, N, *]`` (and ``v_seq`` of the same shape when ``return_membrane``).
    """
    x_seq = check_input(x_seq)
    cfg = FPTConfig(tau=tau, decay=decay, decay_input=decay_input, v_threshold=v_threshold, K=1, alpha_schedule=(1.0,))
    lam, scale, theta = cfg.leak, cfg.input_scale, cfg.v_threshold
    v = torch.zeros_like(x_seq[0])
    spikes, vs = [], []
    for t in range(x_seq.shape[0]):
        h = lam * v + (x_seq[t] * scale if scale != 1.0 else x_seq[t])
        s = _HardSpike.apply(h - theta, surrogate_alpha)
        v = h - theta * (s.detach() if detach_reset else s)
        spikes.append(s)
        vs.append(v)
    out = torch.stack(spikes)
    return (out, torch.stack(vs)) if return_membrane else out


# --------------------------------------------------------------------------------------------------------------
# the FPT iteration
# --------------------------------------------------------------------------------------------------------------
class FPTInfo(NamedTuple):
    """Diagnostics of one FPT solve: the last charge ``h_seq`` (H^K), the post-reset membrane
    ``v_seq`` = H^K - θ·spikes, and the number of iterations run (K, or fewer with ``K="auto"``)."""

    h_seq: Tensor
    v_seq: Tensor
    iterations: int


@dataclass(frozen=True)
class _Plan:
    """Everything the fused FPT solve needs besides the input (a fixed float leak, constant threshold, int K)."""

    decay: float
    scale: float
    theta: float
    K: int
    alphas: tuple[float, ...]
    hard: bool
    output: str
    surrogate: Callable[[Tensor], Tensor] | None
    exact_sigmoid: bool
    detach_reset: bool
    path: str
    block: int
    impl: str
    generator: torch.Generator | None

    def alpha(self, k: int) -> float:
        return self.alphas[min(k, len(self.alphas) - 1)]

    def apply(self, y: Tensor, reverse: bool = False) -> Tensor:
        return _apply_path(y, self.decay, self.path, self.block, reverse=reverse, impl=self.impl)


def _sigmoid_slope_grad(grad: Tensor, z: Tensor, slope: float) -> Tensor:
    """grad · slope·σ(slope·z)(1 - σ(slope·z))."""
    return torch.ops.aten.sigmoid_backward(grad, torch.sigmoid(z * slope)).mul_(slope)


def _surrogate_grad(fn: Callable[[Tensor], Tensor], grad: Tensor, z: Tensor) -> Tensor:
    """grad · fn'(z) for a surrogate spike function: its own backward, whatever surrogate it is."""
    with torch.enable_grad():
        zz = z.detach().requires_grad_(True)
        (dz,) = torch.autograd.grad(fn(zz), zz, grad)
    return dz


def _iterate_spike(p: _Plan, k: int, z: Tensor) -> Tensor:
    """S^k = f_k(Z^k) of sweep k (0-based), forward only."""
    if p.hard:
        return p.surrogate(z) if p.surrogate is not None else (z >= 0).to(z.dtype)
    return torch.sigmoid(z * p.alpha(k))


def _iterate_grad(p: _Plan, k: int, grad: Tensor, z: Tensor) -> Tensor:
    """grad · f_k'(Z^k): the surrogate's gradient for hard sweeps with a surrogate, else the sigmoid backward of
    slope α_k (exact) or max(1, α_k/3) (the official flat surrogate)."""
    if p.hard and p.surrogate is not None:
        return _surrogate_grad(p.surrogate, grad, z)
    a = p.alpha(k)
    return _sigmoid_slope_grad(grad, z, a if p.exact_sigmoid else flat_slope(a))


def _sweeps(x: Tensor, p: _Plan, keep: bool) -> tuple[Tensor, Tensor, list[Tensor]]:
    """The K sweeps (the paper's fixed-point iteration) without autograd: Z^K, S^K and, with ``keep``, every Z^k.

    Z⁰ = scale·Λ X - θ;  Z^k = Z⁰ - θ A S^(k-1) = Z⁰ + θ S^(k-1) - θ Λ S^(k-1)   (A = Λ - I).
    """
    if p.path == "dense":  # Z⁰ and every Z^k as one fused GEMM each: addmm(Z⁰, A, S, alpha=-θ)
        lam_mat, a_mat = _dense_pair(x.shape[0], p.decay, x)
        offset = torch.full((1, 1), -p.theta, dtype=x.dtype, device=x.device)
        z0 = torch.addmm(offset, lam_mat, x, alpha=p.scale)
    else:
        a_mat = None
        z0 = p.apply(x)
        if p.scale != 1.0:
            z0.mul_(p.scale)
        z0.sub_(p.theta)
    z, s, zs = z0, z0, []
    for k in range(p.K):
        if k and a_mat is not None:
            z = torch.addmm(z0, a_mat, s, alpha=-p.theta)
        elif k:
            z = torch.add(z0, s, alpha=p.theta).sub_(p.apply(s), alpha=p.theta)
        s = _iterate_spike(p, k, z)
        if keep:
            zs.append(z)
    return z, s, zs


def _slopes(p: _Plan, n: int, like: Tensor, *, backward: bool) -> Tensor:
    """The sigmoid slopes of sweeps 0..n-1 as an [n, 1] column: α_k (forward, or the exact backward) or the
    official flat max(1, α_k/3) (backward)."""
    vals = [p.alpha(k) if not backward or p.exact_sigmoid else flat_slope(p.alpha(k)) for k in range(n)]
    return torch.tensor(vals, dtype=like.dtype, device=like.device).view(n, 1)


COLUMN_BLOCK = 8192
"""The CPU scan path walks time over blocks of this many columns, so its running [K, block] states stay in cache."""


def _stepwise(x: Tensor, p: _Plan, keep: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """The same K sweeps as :func:`_sweeps`, evaluated time step by time step (the CPU "scan" path).

    Row t of every sweep needs only rows < t of the previous one: Z^k_t = Z⁰_t - θλ U^(k-1)_(t-1) with
    U^k = Λ S^k (since (A S)_t = λ (Λ S)_(t-1)), so one pass over time carries the K running states as one [K, M]
    block and reads X and writes the output once, instead of K full-tensor scans and elementwise passes.
    Returns Z^K, S^K and, with ``keep``, every Z^k as a [T, K, M] tensor.
    """
    T, M = x.shape
    z_last = torch.empty_like(x, memory_format=torch.contiguous_format)
    s_last = torch.empty_like(z_last)
    z_all = x.new_empty(T, p.K, M) if keep else None
    for j in range(0, M, COLUMN_BLOCK):
        cols = slice(j, min(M, j + COLUMN_BLOCK))
        _stepwise_columns(x[:, cols], p, z_last[:, cols], s_last[:, cols], None if z_all is None else z_all[..., cols])
    return z_last, s_last, z_all


def _stepwise_columns(x: Tensor, p: _Plan, z_last: Tensor, s_last: Tensor, z_all: Tensor | None) -> None:
    T, M = x.shape
    lam, theta, K = p.decay, p.theta, p.K
    c = x.new_full((M,), -theta)  # Z⁰_t = scale·(Λ X)_t - θ = λ Z⁰_(t-1) + scale·x_t - θ(1 - λ), Z⁰_(-1) = -θ
    u = x.new_zeros(K, M)  # row k: U^k_(t-1) = (Λ S^k)_(t-1); row 0 stays 0 (S⁰ = 0)
    z_buf = x.new_empty(K, M)
    s_buf = x.new_empty(K, M)
    soft_slopes = None if p.hard else _slopes(p, K, x, backward=False)
    hard_plain = p.hard and p.surrogate is None
    decay_u = u[1:]
    ratio = -theta * lam
    shift = theta * (1.0 - lam)
    for t in range(T):
        c.mul_(lam).add_(x[t], alpha=p.scale).sub_(shift)
        z = z_all[t] if z_all is not None else z_buf
        torch.add(c, u, alpha=ratio, out=z)  # Z^k_t = Z⁰_t - θλ U^(k-1)_(t-1) (the states sit one row down)
        if soft_slopes is not None:
            sk = torch.mul(z, soft_slopes, out=s_buf).sigmoid_()
        elif hard_plain:
            sk = torch.ge(z, 0.0).to(x.dtype)
        else:
            sk = p.surrogate(z)  # type: ignore[misc]
        if K > 1:
            torch.add(sk[: K - 1], decay_u, alpha=lam, out=decay_u)
        z_last[t].copy_(z[K - 1])
        s_last[t].copy_(sk[K - 1])


def _stepwise_backward(x: Tensor, p: _Plan, grad: Tensor) -> Tensor:
    """The adjoint of :func:`_stepwise`, backwards in time: W^k = Λᵀ G_Z^k carried as K running states,
    G_Z^(k-1)_t = -θλ W^k_(t+1) ⊙ f'_(k-1)(Z^(k-1)_t), G_X = scale·Λᵀ Σ_k G_Z^k."""
    T, M = x.shape
    K = p.K
    z_last, _, z_all = _stepwise(x, p, keep=K > 1 and not p.detach_reset)
    g_last = _output_grad(p, grad, z_last)
    del z_last
    gx = torch.empty_like(g_last)
    deriv, slopes = None, None
    if z_all is not None:
        zk = z_all[:, : K - 1]
        if p.hard and p.surrogate is not None:  # the surrogate's own backward, once over all sweeps
            deriv = _surrogate_grad(p.surrogate, torch.ones_like(zk), zk)
        else:  # the sigmoid backward row by row, while the row is in cache
            deriv = zk
            slopes = _slopes(p, K - 1, x, backward=True)
    for j in range(0, M, COLUMN_BLOCK):
        cols = slice(j, min(M, j + COLUMN_BLOCK))
        _stepwise_backward_columns(p, g_last[:, cols], None if deriv is None else deriv[..., cols], slopes, gx[:, cols])
    return gx


def _stepwise_backward_columns(
    p: _Plan, g_last: Tensor, deriv: Tensor | None, slopes: Tensor | None, gx: Tensor
) -> None:
    T, M = g_last.shape
    lam, theta, K = p.decay, p.theta, p.K
    # gx_t = (Λᵀ Σ_k G_Z^k)_t = λ gx_(t+1) + Σ_k G_Z^k_t, accumulated in place; scaled once at the end
    if deriv is None:  # no reset path: G_X = scale·Λᵀ G_Z^K
        gx[T - 1].copy_(g_last[T - 1])
        for t in range(T - 2, -1, -1):
            torch.add(g_last[t], gx[t + 1], alpha=lam, out=gx[t])
    else:
        w = g_last.new_zeros(K - 1, M)  # row j: W^(j+2)_(t+1) = (Λᵀ G_Z^(j+2))_(t+1)
        gz = g_last.new_empty(K - 1, M)  # row j: G_Z^(j+1)_t
        sig = g_last.new_empty(K - 1, M)
        w_last = w[K - 2]
        w_mid = w[: K - 2]
        ratio = -theta * lam
        scaled = None if slopes is None else slopes * ratio
        for t in range(T - 1, -1, -1):
            if slopes is None:
                torch.mul(w, deriv[t], out=gz).mul_(ratio)  # G_Z^(j+1)_t from W^(j+2)_(t+1), j = 0..K-2
            else:
                torch.mul(deriv[t], slopes, out=sig).sigmoid_()
                torch.ops.aten.sigmoid_backward.grad_input(w, sig, grad_input=gz).mul_(scaled)
            if t == T - 1:
                torch.add(g_last[t], gz.sum(0), out=gx[t])
            else:
                torch.add(g_last[t], gx[t + 1], alpha=lam, out=gx[t]).add_(gz.sum(0))
            if K > 2:
                torch.add(gz[1:], w_mid, alpha=lam, out=w_mid)
            torch.add(g_last[t], w_last, alpha=lam, out=w_last)
    if p.scale != 1.0:
        gx.mul_(p.scale)


def _output_grad(p: _Plan, grad: Tensor, z_last: Tensor) -> Tensor:
    """grad · out'(Z^K): the surrogate's gradient for a Heaviside output with a surrogate, else that of S^K (the
    hard iterate, the soft output, or the straight-through Heaviside / Bernoulli of the soft probability)."""
    if p.output == "heaviside" and not p.hard and p.surrogate is not None:
        return _surrogate_grad(p.surrogate, grad, z_last)
    return _iterate_grad(p, p.K - 1, grad, z_last)


def _is_stepwise(x: Tensor, p: _Plan) -> bool:
    return p.path == "scan" and not x.is_cuda and p.impl != "triton"


class _FPTSolve(torch.autograd.Function):
    """The whole K-sweep solve as one autograd node that saves only its input.

    Backward recomputes the K pre-activations Z^k from X (K Λ-products) and runs the adjoint sweep:
    G_Z^K = g·out'(Z^K);  G_Z^(k-1) = f'_(k-1)(Z^(k-1)) ⊙ θ(G_Z^k - Λᵀ G_Z^k);  G_X = scale·Λᵀ Σ_k G_Z^k.
    Between forward and backward nothing but a reference to X is held (autograd through the loop kept ~(K+2)·T·M
    numbers per layer).
    """

    @staticmethod
    def forward(ctx, x: Tensor, p: _Plan) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        z, s, _ = (_stepwise if _is_stepwise(x, p) else _sweeps)(x, p, keep=False)
        if p.hard or p.output == "soft":
            spikes = s
        elif p.output == "heaviside":
            spikes = p.surrogate(z) if p.surrogate is not None else (z >= 0).to(z.dtype)
        else:  # bernoulli: a sample of the last soft iterate
            u = torch.rand(s.shape, dtype=s.dtype, device=s.device, generator=p.generator)
            spikes = (u < s).to(s.dtype)
        ctx.save_for_backward(x)
        ctx.plan = p
        ctx.mark_non_differentiable(z)
        return spikes, z

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor, _grad_z: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        p: _Plan = ctx.plan
        if _is_stepwise(x, p):
            return _stepwise_backward(x, p, grad), None
        _, _, zs = _sweeps(x, p, keep=True)
        last = p.K - 1
        g_z = _output_grad(p, grad, zs[last])
        g_c = g_z
        dense = _dense_pair(x.shape[0], p.decay, x) if p.path == "dense" else None
        if not p.detach_reset:
            for k in range(last, 0, -1):
                zs[k] = None  # type: ignore[call-overload]
                if dense is not None:  # -θ Aᵀ G_Z^k
                    g_s = torch.addmm(g_z, dense[1].t(), g_z, beta=0.0, alpha=-p.theta)
                else:
                    g_s = torch.sub(g_z, p.apply(g_z, reverse=True)).mul_(p.theta)
                g_z = _iterate_grad(p, k - 1, g_s, zs[k - 1])
                g_c = g_c + g_z if k == last else g_c.add_(g_z)
        if dense is not None:
            return torch.addmm(g_c, dense[0].t(), g_c, beta=0.0, alpha=p.scale), None
        g_x = p.apply(g_c, reverse=True)
        return (g_x.mul_(p.scale) if p.scale != 1.0 else g_x), None


def fpt_iterate(
    x: Tensor,
    cfg: FPTConfig,
    *,
    decay: float | Tensor | None = None,
    kernel: Tensor | None = None,
    bias: Tensor | None = None,
    output: str | None = None,
    generator: torch.Generator | None = None,
    need_info: bool = False,
) -> tuple[Tensor, FPTInfo | None]:
    """The FPT solve on a time-major matrix ``x`` [T, M] (no input checks; the building block of
    :func:`fpt_lif` and :class:`fpt_snn.FPTLIFNode`).

    ``decay`` overrides ``cfg.leak`` (a tensor for a learnable leak); ``kernel`` replaces Λ by tril(kernel) and
    ``bias`` (shape [T, 1]) replaces the constant -θ of the pre-activation (the learnable-kernel/PSN variant);
    ``output`` overrides ``cfg.output`` (the module uses it for its eval behaviour). The :class:`FPTInfo` is
    computed only when ``need_info`` (otherwise ``None``).

    A fixed leak with an int K runs the fused solve (:class:`_FPTSolve`: input-only saved activations, Λ·Y on the
    path of :meth:`FPTConfig.resolve_path`); learnable leaks or kernels and ``K="auto"`` run through autograd.
    """
    out_kind = cfg.output if output is None else output
    if out_kind not in ("bernoulli", "heaviside", "soft"):
        raise ValueError(f"output must be 'bernoulli', 'heaviside' or 'soft', got {out_kind!r}")
    if isinstance(decay, Tensor) or kernel is not None or bias is not None or cfg.K == "auto":
        return _fpt_autograd(x, cfg, decay, kernel, bias, out_kind, generator, need_info)
    T, M = x.shape
    plan = _Plan(
        decay=float(cfg.leak if decay is None else decay),
        scale=cfg.input_scale,
        theta=cfg.v_threshold,
        K=int(cfg.K),
        alphas=cfg.alpha_schedule,  # type: ignore[arg-type]
        hard=cfg.mode == "hard",
        output=out_kind,
        surrogate=cfg.surrogate_function,
        exact_sigmoid=cfg.surrogate_backward == "sigmoid",
        detach_reset=cfg.detach_reset,
        path=cfg.resolve_path(T, M, x.device),
        block=cfg.block(T),
        impl=cfg.impl,
        generator=generator,
    )
    spikes, z = _FPTSolve.apply(x, plan)
    if not need_info:
        return spikes, None
    h = z + plan.theta  # the charge H^K = C - θ A S^(K-1)
    return spikes, FPTInfo(h, h - plan.theta * spikes.detach(), plan.K)


class _ResetChain(torch.autograd.Function):
    """Identity forward; backward solves (I + θ Aᵀ D) v = g, A = Λ - I, for the gradient through the reset chain of
    a hard fixed point S* = Θ(Z⁰ - θ A S*) (implicit differentiation: exactly the LIF's BPTT gradient, since A is
    strictly lower triangular), by a backward recurrence in time."""

    @staticmethod
    def forward(ctx, s: Tensor, d: Tensor, theta: float, decay: float) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(d)
        ctx.theta, ctx.decay = theta, decay
        return s.view_as(s)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        (d,) = ctx.saved_tensors
        theta, lam = ctx.theta, ctx.decay
        T = grad.shape[0]
        v = torch.empty_like(grad)
        v[T - 1] = grad[T - 1]
        r = torch.zeros_like(grad[0])
        # v_t = g_t - θ r_t,  r_t = Σ_{s>t} λ^(s-t) D_s v_s = λ (D_{t+1} v_{t+1} + r_{t+1})
        for t in range(T - 2, -1, -1):
            r = (d[t + 1] * v[t + 1] + r) * lam
            v[t] = grad[t] - theta * r
        return v, None, None, None


def _fpt_autograd(
    x: Tensor,
    cfg: FPTConfig,
    decay: float | Tensor | None,
    kernel: Tensor | None,
    bias: Tensor | None,
    out_kind: str,
    generator: torch.Generator | None,
    need_info: bool,
) -> tuple[Tensor, FPTInfo | None]:
    """The K sweeps through autograd: learnable leak (``decay`` a tensor), learnable kernel and bias; ``K="auto"``
    (without a kernel) sweeps without a graph and differentiates the fixed point (:class:`_ResetChain`)."""
    T = x.shape[0]
    lam = cfg.leak if decay is None else decay
    theta = cfg.v_threshold
    sg = cfg.surrogate_function
    if cfg.decay_input and isinstance(lam, Tensor):
        x = x * (1.0 - lam)
        scale = 1.0
    else:
        scale = cfg.input_scale
    dense = kernel is not None or cfg.use_dense(T, x.device)
    block = cfg.block(T)
    if kernel is not None:
        lam_mat = torch.tril(kernel)
    elif dense:
        lam_mat = _leak_matrix(T, lam, x)
    offset = torch.full((1, 1), -theta, dtype=x.dtype, device=x.device) if bias is None else bias

    # Z⁰ = C - θ = Λ X - θ (the pre-activation H - θ; a learnable bias replaces -θ)
    if dense:
        z0 = torch.addmm(offset, lam_mat, x, alpha=scale)
        a_mat = lam_mat - torch.eye(T, dtype=x.dtype, device=x.device)  # A = Λ - I, strictly lower triangular
    else:
        z0 = _chunked_lambda(x, lam, block)
        z0 = (z0.mul_(scale) if scale != 1.0 else z0).add_(offset)

    auto = cfg.K == "auto"
    k_max = T if auto else int(cfg.K)
    hard = cfg.mode == "hard"

    def reset(s_prev: Tensor) -> Tensor:
        """Z^k from S^(k-1): Z⁰ - θ A S^(k-1)."""
        s_r = s_prev.detach() if cfg.detach_reset else s_prev
        if dense:  # one fused GEMM
            return torch.addmm(z0, a_mat, s_r, alpha=-theta)
        return torch.add(z0, s_r, alpha=theta).sub_(_chunked_lambda(s_r, lam, block), alpha=theta)

    def spike(z: Tensor, k: int) -> Tensor:
        if hard:
            return sg(z) if sg is not None else hard_spike(z, cfg.alpha(k), cfg.surrogate_backward)
        return soft_spike(z, cfg.alpha(k), cfg.surrogate_backward)

    z = z0
    s: Tensor | None = None
    iterations = 0
    # K="auto" on a LIF (A strictly lower triangular: a fixed point within T sweeps) finds the fixed point without a
    # graph, then differentiates it exactly (below); a learnable kernel keeps the graph through its sweeps
    implicit = auto and kernel is None
    with torch.no_grad() if implicit else contextlib.nullcontext():
        for k in range(k_max):
            if s is not None:  # S⁰ = 0 makes the first reset term vanish
                z = reset(s)
            s_new = spike(z, k)
            iterations = k + 1
            if auto and torch.equal(s_new, s if s is not None else torch.zeros_like(s_new)):
                s = s_new  # a hard fixed point is the LIF solution
                break
            s = s_new
    assert s is not None
    if implicit:
        # S* (the LIF's spikes; S^T is exact when no sweep repeated earlier) solves S = Θ(Z⁰ - θ A S): one sweep
        # from S* detached gives S* again with the gradient D·(dZ⁰ - θ dA S*), D the surrogate's derivative at Z;
        # the reset chain (I + θ D A)^-1 is applied in backward, so the gradient is BPTT's through the LIF.
        z = reset(s.detach())
        s = spike(z, iterations - 1)
        if not cfg.detach_reset and s.requires_grad:
            d = _surrogate_grad(lambda zz: spike(zz, iterations - 1), torch.ones_like(z), z)
            s = _ResetChain.apply(s, d, theta, float(lam.detach() if isinstance(lam, Tensor) else lam))
    assert s is not None  # _ResetChain.apply is typed Any | None: narrows s again for the code below
    if hard or out_kind == "soft":
        spikes = s
    elif out_kind == "heaviside":
        spikes = sg(z) if sg is not None else straight_through(s, (z >= 0).to(z.dtype))
    else:
        u = torch.rand(s.shape, dtype=s.dtype, device=s.device, generator=generator)
        spikes = straight_through(s, (u < s.detach()).to(s.dtype))
    if not need_info:
        return spikes, None
    h = z - offset  # the charge H^K = C - θ A S^(K-1)
    return spikes, FPTInfo(h, h - theta * spikes, iterations)


@overload
def fpt_lif(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    K: int | Literal["auto"] = 3,
    alpha_schedule: float | tuple[float, ...] | None = None,
    mode: Mode = "soft",
    output: Output = "heaviside",
    surrogate_backward: Surrogate = "flat_sigmoid",
    surrogate_function: Callable[[Tensor], Tensor] | None = None,
    detach_reset: bool = False,
    path: LambdaPath = "auto",
    chunk_size: int | None = None,
    impl: Impl = "auto",
    generator: torch.Generator | None = None,
    return_info: Literal[False] = False,
) -> Tensor: ...
@overload
def fpt_lif(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    K: int | Literal["auto"] = 3,
    alpha_schedule: float | tuple[float, ...] | None = None,
    mode: Mode = "soft",
    output: Output = "heaviside",
    surrogate_backward: Surrogate = "flat_sigmoid",
    surrogate_function: Callable[[Tensor], Tensor] | None = None,
    detach_reset: bool = False,
    path: LambdaPath = "auto",
    chunk_size: int | None = None,
    impl: Impl = "auto",
    generator: torch.Generator | None = None,
    return_info: Literal[True],
) -> tuple[Tensor, FPTInfo]: ...
@overload
def fpt_lif(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    K: int | Literal["auto"] = 3,
    alpha_schedule: float | tuple[float, ...] | None = None,
    mode: Mode = "soft",
    output: Output = "heaviside",
    surrogate_backward: Surrogate = "flat_sigmoid",
    surrogate_function: Callable[[Tensor], Tensor] | None = None,
    detach_reset: bool = False,
    path: LambdaPath = "auto",
    chunk_size: int | None = None,
    impl: Impl = "auto",
    generator: torch.Generator | None = None,
    return_info: bool = False,
) -> Tensor | tuple[Tensor, FPTInfo]: ...
def fpt_lif(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    K: int | Literal["auto"] = 3,
    alpha_schedule: float | tuple[float, ...] | None = None,
    mode: Mode = "soft",
    output: Output = "heaviside",
    surrogate_backward: Surrogate = "flat_sigmoid",
    surrogate_function: Callable[[Tensor], Tensor] | None = None,
    detach_reset: bool = False,
    path: LambdaPath = "auto",
    chunk_size: int | None = None,
    impl: Impl = "auto",
    generator: torch.Generator | None = None,
    return_info: bool = False,
) -> Tensor | tuple[Tensor, FPTInfo]:
    """FPT: K fixed-point sweeps of the soft-reset LIF over all T steps at once (the paper's fixed-point iteration).

    Args:
        x_seq: input current ``[T, N, *]`` (floating point).
        tau: membrane time constant > 1 (λ = 1 - 1/τ); ignored when ``decay`` is given.
        decay: leak λ ∈ (0, 1] given directly.
        decay_input: scale the input by 1/τ (= 1 - λ).
        v_threshold: θ > 0.
        K: iterations (int ≥ 1) or ``"auto"`` (hard mode: until the spikes stop changing, at most T; the gradient
            is then the LIF's BPTT gradient).
        alpha_schedule: sigmoid slopes of the soft iterates, one per iteration or one for all; ``None`` is the
            official (2, 6, 12) (cut or extended to K, see :class:`~fpt_snn.config.FPTConfig`).
        mode: ``"soft"`` (σ(α_k·) iterates, official) or ``"hard"`` (Θ iterates, prefix-exact; K = T is exact).
        output: ``"heaviside"`` (deterministic Θ of the last pre-activation; the default here and in
            :class:`fpt_snn.FPTLIFNode`), ``"bernoulli"`` (the official training output: a sample with
            straight-through gradient) or ``"soft"`` (the probability itself). Hard mode needs ``"heaviside"``.
        surrogate_backward: ``"flat_sigmoid"`` (official) or ``"sigmoid"`` (exact derivative).
        surrogate_function: a spikingjelly surrogate (e.g. ``surrogate.ATan()``): the spike function of the hard
            sweeps and of the Heaviside output, forward its spike, backward its gradient; ``None``: sigmoid surrogates
            as ``surrogate_backward`` says.
        detach_reset: no gradient through the reset term A·S.
        path: ``"auto"``, ``"dense"`` (T×T GEMM), ``"chunked"`` (blocked GEMMs; ``chunk_size`` its block) or
            ``"scan"`` (the recurrence step by step); ``impl`` the scan's kernel on CUDA (``"auto"``: Triton).
        generator: RNG of the Bernoulli output.
        return_info: also return :class:`FPTInfo` (membrane and iteration count).

    Returns:
        spikes of the shape of ``x_seq`` (and :class:`FPTInfo`, reshaped likewise, when ``return_info``).
    """
    x_seq = check_input(x_seq)
    cfg = FPTConfig(
        tau=tau,
        decay=decay,
        decay_input=decay_input,
        v_threshold=v_threshold,
        K=K,
        alpha_schedule=alpha_schedule,  # type: ignore[arg-type]
        mode=mode,
        output=output,
        surrogate_backward=surrogate_backward,
        surrogate_function=surrogate_function,
        detach_reset=detach_reset,
        path=path,
        chunk_size=chunk_size,
        impl=impl,
    )
    shape = x_seq.shape
    spikes, info = fpt_iterate(x_seq.reshape(shape[0], -1), cfg, generator=generator, need_info=return_info)
    spikes = spikes.view(shape)
    if info is None:
        return spikes
    return spikes, FPTInfo(info.h_seq.view(shape), info.v_seq.view(shape), info.iterations)


def mismatch_rate(a: Tensor, b: Tensor) -> float:
    """Fraction of entries where two spike tensors differ."""
    if a.shape != b.shape:
        raise ValueError(f"spike tensors must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    return float((a != b).float().mean())


def dependent_steps(T: int, K: int) -> dict[str, int]:
    """Sequentially dependent steps per layer: T for the LIF recurrence, K for FPT (each a parallel sweep)."""
    return {"lif": check_int("T", T, min=1), "fpt": check_int("K", K, min=1)}  # type: ignore[dict-item]
