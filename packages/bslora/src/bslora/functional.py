"""The three shape transformations T_m of BSLoRA as pure functions (slice, Kronecker, gate).

Each ``*_delta`` returns the **unscaled** ``out x in`` update of one shared branch for one module; ``kron_apply``
and ``slice_apply`` / ``gate_apply`` are the matching forward paths that never build the ``out x in`` matrix.
Shapes follow ``nn.Linear``: ``A`` is ``(r, n_in)``, ``B`` is ``(n_out, r)``.
"""

from __future__ import annotations

import torch

__all__ = [
    "slice_offset",
    "slice_delta",
    "slice_factors",
    "slice_apply",
    "kron_delta",
    "kron_factors",
    "kron_apply",
    "kron_apply_rows",
    "gate_scalar",
    "gate_delta",
    "gate_factors",
    "gate_apply",
    "gate_apply_rows",
]


def slice_offset(shared: int, size: int, align: str = "center") -> int:
    """Start of a module's window of length ``size`` in a shared side of length ``shared``.

    ``"center"``: ``floor((shared - size) / 2)`` (the official code); ``"start"``: 0.
    """
    if size > shared:
        raise ValueError(f"window size {size} exceeds the shared size {shared}")
    if align == "center":
        return (shared - size) // 2
    if align == "start":
        return 0
    raise ValueError(f"align must be 'center' or 'start', got {align!r}")


def slice_factors(
    A: torch.Tensor, B: torch.Tensor, in_features: int, out_features: int, align: str = "center"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Slice sharing (SS): the module's factors ``(A[:, c:c+in], B[c':c'+out, :])`` (views, no copy)."""
    c = slice_offset(A.shape[1], in_features, align)
    co = slice_offset(B.shape[0], out_features, align)
    return A[:, c : c + in_features], B[co : co + out_features, :]


def slice_delta(
    A: torch.Tensor, B: torch.Tensor, in_features: int, out_features: int, align: str = "center"
) -> torch.Tensor:
    """SS update ``B[c':c'+out] @ A[:, c:c+in]`` of shape ``(out, in)``."""
    a, b = slice_factors(A, B, in_features, out_features, align)
    return b @ a


def slice_apply(
    x: torch.Tensor, A: torch.Tensor, B: torch.Tensor, out_features: int, align: str = "center"
) -> torch.Tensor:
    """``x @ slice_delta(...).T`` without forming the update: ``(x @ A_win.T) @ B_win.T``."""
    a, b = slice_factors(A, B, x.shape[-1], out_features, align)
    return (x @ a.t()) @ b.t()


def _check_kron(A: torch.Tensor, B: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != 2 or a.shape[0] != 1:
        raise ValueError(f"KE sampler a must have shape (1, in/S), got {tuple(a.shape)}")
    if b.dim() != 2 or b.shape[1] != 1:
        raise ValueError(f"KE sampler b must have shape (out/S, 1), got {tuple(b.shape)}")
    if A.shape[0] != B.shape[1]:
        raise ValueError(f"A {tuple(A.shape)} and B {tuple(B.shape)} have different ranks")


def kron_factors(
    A: torch.Tensor, B: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Kronecker extension (KE): the explicit factors ``(a ⊗ A, b ⊗ B)``, shapes ``(r, in)`` and ``(out, r)``."""
    _check_kron(A, B, a, b)
    return torch.kron(a, A), torch.kron(b, B)


def kron_delta(A: torch.Tensor, B: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """KE update ``(b ⊗ B)(a ⊗ A) = (b a) ⊗ (B A)`` (mixed-product rule), shape ``(out, in)``."""
    _check_kron(A, B, a, b)
    return torch.kron(b @ a, B @ A)


def kron_apply(x: torch.Tensor, A: torch.Tensor, B: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``x @ kron_delta(A, B, a, b).T`` without materialising a Kronecker product.

    ``(a ⊗ A) x = A (Σ_j a_j x_j)`` over the ``in/S`` blocks ``x_j`` of ``x``; ``(b ⊗ B) z`` stacks ``b_i (B z)``.
    """
    S = A.shape[1]
    X = x.reshape(*x.shape[:-1], x.shape[-1] // S, S)  # (..., in/S, S)
    z = torch.einsum("...js,j->...s", X, a[0]) @ A.t()  # (..., r)
    u = z @ B.t()  # (..., S)
    return (b[:, 0, None] * u[..., None, :]).reshape(*x.shape[:-1], b.shape[0] * B.shape[0])


def kron_apply_rows(
    x: torch.Tensor, A: torch.Tensor, B: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    """:func:`kron_apply` with one adapter per row (mixed batches): ``x (n, T, in)``, ``A (n, r, S)``,
    ``B (n, S, r)``, ``a (n, 1, in/S)``, ``b (n, out/S, 1)`` -> ``(n, T, out)``."""
    n, T, fin = x.shape
    S = A.shape[2]
    t = torch.einsum("ntjs,nj->nts", x.reshape(n, T, fin // S, S), a[:, 0])  # (a ⊗ A) x = A (Σ_j a_j x_j)
    u = torch.bmm(torch.bmm(t, A.transpose(1, 2)), B.transpose(1, 2))  # (n, T, S)
    return (b[:, None, :, 0, None] * u[:, :, None, :]).reshape(n, T, b.shape[1] * S)


def gate_scalar(A: torch.Tensor, B: torch.Tensor, v_in: torch.Tensor, u_out: torch.Tensor) -> torch.Tensor:
    """GT: the scalar ``u_out^T B A v_in`` (shape ``()``) that multiplies the rank-1 map ``v_out u_in^T``."""
    return (u_out @ (B @ (A @ v_in))).reshape(())


def gate_delta(
    A: torch.Tensor,
    B: torch.Tensor,
    u_in: torch.Tensor,
    v_in: torch.Tensor,
    u_out: torch.Tensor,
    v_out: torch.Tensor,
) -> torch.Tensor:
    """Gate transformation (GT) update ``(u_out^T B A v_in) · v_out u_in^T`` of shape ``(out, in)``: rank ≤ 1.

    Weights are stored as the official bias-free linear maps: ``u_in (1, in)``, ``v_in (G, 1)``, ``u_out (1, G)``,
    ``v_out (out, 1)``; the forward is ``x -> v_in (u_in x) -> B A · -> v_out (u_out ·)``.
    """
    return gate_scalar(A, B, v_in, u_out) * (v_out @ u_in)


def gate_factors(
    A: torch.Tensor,
    B: torch.Tensor,
    u_in: torch.Tensor,
    v_in: torch.Tensor,
    u_out: torch.Tensor,
    v_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GT as a rank-1 LoRA: ``(c · u_in, v_out)`` with shapes ``(1, in)``, ``(out, 1)``."""
    return gate_scalar(A, B, v_in, u_out) * u_in, v_out


def gate_apply(
    x: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    u_in: torch.Tensor,
    v_in: torch.Tensor,
    u_out: torch.Tensor,
    v_out: torch.Tensor,
) -> torch.Tensor:
    """``x @ gate_delta(...).T`` as ``c (x · u_in) v_out``: O(in + out) per token plus O(r G) once."""
    t = x @ u_in[0]  # (...)
    return (gate_scalar(A, B, v_in, u_out) * t)[..., None] * v_out[:, 0]


def gate_apply_rows(
    x: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    u_in: torch.Tensor,
    v_in: torch.Tensor,
    u_out: torch.Tensor,
    v_out: torch.Tensor,
) -> torch.Tensor:
    """:func:`gate_apply` with one adapter per row: ``x (n, T, in)`` and every other tensor stacked per row
    (``A (n, r, G)``, ``B (n, G, r)``, ``u_in (n, 1, in)``, ``v_in (n, G, 1)``, ``u_out (n, 1, G)``,
    ``v_out (n, out, 1)``) -> ``(n, T, out)``."""
    c = torch.bmm(u_out, torch.bmm(B, torch.bmm(A, v_in)))  # (n, 1, 1): u_out^T B A v_in per row
    return c * torch.bmm(x, u_in.transpose(1, 2)) * v_out.transpose(1, 2)
