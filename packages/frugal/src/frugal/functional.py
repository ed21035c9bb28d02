"""FRUGAL's two update rules as pure functions (paper Alg. 1; its Alg. 2 is the SGD-M/SGD pair the theory covers).

For a state-full part ``g`` (the r-dimensional ``down(G)`` or a whole active tensor) with learning rate
``η_p = η·s_p`` one of

.. math::

    \\text{AdamW:}\\; m \\leftarrow \\beta_1 m + (1-\\beta_1) g,\\; v \\leftarrow \\beta_2 v + (1-\\beta_2) g^2,\\;
    u = -\\frac{\\eta_p}{1-\\beta_1^t}\\, \\frac{m}{\\sqrt{v}/\\sqrt{1-\\beta_2^t} + \\epsilon}

    \\text{SGD-M:}\\; b \\leftarrow \\mu b + g,\\; u = -\\eta_p b
    \\qquad
    \\text{Lion:}\\; u = -\\eta_p\\,\\mathrm{sign}(\\beta_1 m + (1-\\beta_1) g),\\;
    m \\leftarrow \\beta_2 m + (1-\\beta_2) g

(``t`` counts the steps since the last reset of the statistics), and for the state-free residual
``R = G - up(down(G))`` with ``η_f = η·s_p·s_f`` one of ``-η_f·sign(R)`` (signSGD, the paper's default),
``-η_f·R`` (SGD) or nothing (GaLore / BAdam). AdamW is torch's arithmetic (``torch.optim.AdamW``,
``foreach=False``) so that at ρ = 1 FRUGAL is AdamW.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["adamw_update", "lion_update", "sgdm_update", "state_free_update"]


def adamw_update(
    grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int, lr: float, beta1: float, beta2: float, eps: float
) -> Tensor:
    """Adam's moments updated in place; returns the update ``u`` (``step`` is the 1-based count since reset)."""
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = math.sqrt(1 - beta2**step)
    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    return (exp_avg / denom).mul_(-lr / bias_correction1)


def sgdm_update(grad: Tensor, momentum_buffer: Tensor, lr: float, momentum: float) -> Tensor:
    """Heavy-ball momentum without dampening (the state-full rule of the paper's Alg. 2, the pair its convergence
    theorem covers); the buffer is updated in place."""
    momentum_buffer.mul_(momentum).add_(grad)
    return momentum_buffer.mul(-lr)


def lion_update(grad: Tensor, exp_avg: Tensor, lr: float, beta1: float, beta2: float) -> Tensor:
    """Lion (Chen et al., 2023): sign of the interpolated momentum; the buffer is updated in place afterwards."""
    direction = exp_avg.mul(beta1).add_(grad, alpha=1 - beta1).sign_()
    exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
    return direction.mul_(-lr)


def state_free_update(residual: Tensor, rule: str, lr: float, *, out: Tensor | None = None) -> Tensor | None:
    """``-lr·sign(R)`` (``"signsgd"``), ``-lr·R`` (``"sgd"``) or ``None`` (``"none"``); ``out`` may be
    ``residual`` itself (computed in place, no extra m×n buffer)."""
    if rule == "none":
        return None
    if rule == "signsgd":
        res = torch.sign(residual, out=out) if out is not None else residual.sign()
        return res.mul_(-lr)
    if rule == "sgd":
        return torch.mul(residual, -lr, out=out) if out is not None else residual.mul(-lr)
    raise ValueError(f"state_free must be one of 'signsgd', 'sgd', 'none', got {rule!r}")
