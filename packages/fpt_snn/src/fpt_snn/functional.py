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

import functools
from typing import NamedTuple

import torch
from torch import Tensor

from fpt_snn.config import DENSE_MAX_T, DENSE_MAX_T_CUDA, PATHS, FPTConfig, auto_chunk_size, validate_decay
from icml25_shared.validate import check_choice, check_int, check_tensor

__all__ = [
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


@functools.lru_cache(maxsize=64)
def _cached_lambda(T: int, decay: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    return lambda_matrix(T, decay, dtype, device)


def _leak_matrix(T: int, decay: float | Tensor, like: Tensor) -> Tensor:
    if isinstance(decay, Tensor):
        return lambda_matrix(T, decay, like.dtype, like.device)
    return _cached_lambda(T, float(decay), like.dtype, like.device)


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


def apply_lambda(
    y: Tensor,
    decay: float | Tensor,
    *,
    path: str = "auto",
    chunk_size: int | None = None,
    kernel: Tensor | None = None,
) -> Tensor:
    """Λ·y for ``y`` of shape [T, M] (the linear recurrence u[t] = λ u[t-1] + y[t], u[-1] = 0).

    ``path="dense"``: one T×T GEMM (best on GPU and for small T); ``"chunked"``: the blocked scan of
    :func:`_chunked_lambda`, O(T·chunk_size) work per column; ``"auto"``: see :meth:`FPTConfig.use_dense`.
    ``chunk_size=None`` picks B ≈ √T (a power of 2 in [16, 64]).
    ``kernel``: an explicit T×T matrix used instead of Λ (its lower triangle; the learnable-kernel variant).
    """
    if y.dim() != 2:
        raise ValueError(f"y must have shape [T, M], got {tuple(y.shape)}")
    T = y.shape[0]
    if kernel is not None:
        if kernel.shape != (T, T):
            raise ValueError(f"kernel must have shape ({T}, {T}) for T={T}, got {tuple(kernel.shape)}")
        return torch.tril(kernel) @ y
    check_choice("path", path, PATHS)
    check_int("chunk_size", chunk_size, min=1, allow_none=True)
    if path == "dense" or (path == "auto" and (T <= DENSE_MAX_T or (y.is_cuda and T <= DENSE_MAX_T_CUDA))):
        return _leak_matrix(T, decay, y) @ y
    return _chunked_lambda(y, decay, chunk_size if chunk_size is not None else auto_chunk_size(T))


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
    """
    T = x.shape[0]
    lam = cfg.leak if decay is None else decay
    theta = cfg.v_threshold
    out_kind = cfg.output if output is None else output
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

    k_max = T if cfg.K == "auto" else int(cfg.K)
    hard = cfg.mode == "hard"
    z = z0
    s: Tensor | None = None
    iterations = 0
    for k in range(k_max):
        if s is not None:  # S⁰ = 0 makes the first reset term vanish
            s_r = s.detach() if cfg.detach_reset else s
            if dense:  # Z^k = Z⁰ - θ A S^(k-1), one fused GEMM
                z = torch.addmm(z0, a_mat, s_r, alpha=-theta)
            else:  # Z^k = Z⁰ + θ S - θ Λ S
                z = torch.add(z0, s_r, alpha=theta).sub_(_chunked_lambda(s_r, lam, block), alpha=theta)
        alpha = cfg.alpha(k)
        s_new = hard_spike(z, alpha, cfg.surrogate_backward) if hard else soft_spike(z, alpha, cfg.surrogate_backward)
        iterations = k + 1
        if cfg.K == "auto" and torch.equal(s_new, s if s is not None else torch.zeros_like(s_new)):
            s = s_new  # a hard fixed point is the LIF solution
            break
        s = s_new
    assert s is not None
    if hard or out_kind == "soft":
        spikes = s
    elif out_kind == "heaviside":
        spikes = straight_through(s, (z >= 0).to(z.dtype))
    elif out_kind == "bernoulli":
        u = torch.rand(s.shape, dtype=s.dtype, device=s.device, generator=generator)
        spikes = straight_through(s, (u < s.detach()).to(s.dtype))
    else:
        raise ValueError(f"output must be 'bernoulli', 'heaviside' or 'soft', got {out_kind!r}")
    if not need_info:
        return spikes, None
    h = z - offset  # the charge H^K = C - θ A S^(K-1)
    return spikes, FPTInfo(h, h - theta * spikes, iterations)


def fpt_lif(
    x_seq: Tensor,
    *,
    tau: float = 2.0,
    decay: float | None = None,
    decay_input: bool = False,
    v_threshold: float = 1.0,
    K: int | str = 3,
    alpha_schedule: float | tuple[float, ...] | None = None,
    mode: str = "soft",
    output: str = "heaviside",
    surrogate_backward: str = "flat_sigmoid",
    detach_reset: bool = False,
    path: str = "auto",
    chunk_size: int | None = None,
    generator: torch.Generator | None = None,
    return_info: bool = False,
) -> Tensor | tuple[Tensor, FPTInfo]:
    """FPT: K fixed-point sweeps of the soft-reset LIF over all T steps at once (the paper's fixed-point iteration).

    Args:
        x_seq: input current ``[T, N, *]`` (floating point).
        tau, decay, decay_input, v_threshold: the LIF (see :func:`lif_reference`).
        K: iterations (int ≥ 1) or ``"auto"`` (hard mode: until the spikes stop changing, at most T).
        alpha_schedule: sigmoid slopes of the soft iterates, one per iteration or one for all; ``None`` is the
            official (2, 6, 12) (cut or extended to K, see :class:`~fpt_snn.config.FPTConfig`).
        mode: ``"soft"`` (σ(α_k·) iterates, official) or ``"hard"`` (Θ iterates, prefix-exact; K = T is exact).
        output: ``"heaviside"`` (deterministic Θ of the last pre-activation, straight-through gradient; the default
            here), ``"bernoulli"`` (the official training output: a sample with straight-through gradient) or
            ``"soft"`` (the probability itself). Hard mode needs ``"heaviside"``.
        surrogate_backward: ``"flat_sigmoid"`` (official) or ``"sigmoid"`` (exact derivative).
        detach_reset: no gradient through the reset term A·S.
        path: ``"auto"``, ``"dense"`` (T×T GEMM) or ``"chunked"`` (blocked scan); ``chunk_size`` its block.
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
        detach_reset=detach_reset,
        path=path,
        chunk_size=chunk_size,
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
