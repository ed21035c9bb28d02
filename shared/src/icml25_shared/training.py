"""Training helpers shared by the optimizer and language-model packages.

- :func:`warmup_cosine` -- linear warm-up then cosine decay to a floor (swan, frugal, mohd, downscaling).
- :func:`optimizer_state_bytes` -- exact bytes held by an optimizer's state (swan, frugal).
- :func:`count_parameters` -- parameter counts (every package that reports model size).
- :func:`kept_buffers` -- buffers (batch-norm statistics) put back after a measurement (fsl_sage, supercollapse).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "warmup_cosine",
    "warmup_cosine_scheduler",
    "optimizer_state_bytes",
    "count_parameters",
    "tensors_in",
    "adamw_update",
    "kept_buffers",
]


def warmup_cosine(total_steps: int, warmup: float | int = 0.1, final: float = 0.1) -> Callable[[int], float]:
    """LR multiplier for ``LambdaLR``: linear warm-up over ``warmup`` steps (a fraction of ``total_steps`` when a
    float < 1), then cosine from 1 down to ``final`` at ``total_steps``."""
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if not 0.0 <= final <= 1.0:
        raise ValueError(f"final must be in [0, 1], got {final}")
    w = int(round(warmup * total_steps)) if isinstance(warmup, float) else int(warmup)
    if not 0 <= w <= total_steps:
        raise ValueError(f"warmup must give between 0 and total_steps steps, got {warmup}")

    def factor(step: int) -> float:
        if w > 0 and step < w:
            return (step + 1) / w
        progress = min(1.0, (step - w) / max(1, total_steps - w))
        return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def warmup_cosine_scheduler(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup: float | int = 0.1, final: float = 0.1
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` with :func:`warmup_cosine`."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, warmup, final))


def tensors_in(obj: Any) -> Iterable[torch.Tensor]:
    """Every tensor reachable inside nested dicts, lists and tuples."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_in(v)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer, *, min_dim: int = 0) -> int:
    """Bytes of every tensor reachable from ``optimizer.state``, each storage counted once (dedupe by
    ``data_ptr``). ``min_dim=1`` skips scalar tensors such as step counters, whose form differs by library."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors_in(list(optimizer.state.values())):
        if t.dim() < min_dim:
            continue
        key = (t.data_ptr(), t.numel() * t.element_size())
        if key in seen:
            continue
        seen.add(key)
        total += key[1]
    return total


def count_parameters(module: torch.nn.Module, *, trainable_only: bool = False) -> int:
    """Number of parameters of ``module`` (shared parameters counted once)."""
    seen: set[int] = set()
    n = 0
    for p in module.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        n += p.numel()
    return n


def adamw_update(
    state: Any,
    params: list[torch.Tensor],
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    foreach: bool | None = None,
    owner: str = "this optimizer",
) -> None:
    """One step of exactly ``torch.optim.AdamW`` on ``params`` (those with a gradient), keeping its state layout
    (``step`` / ``exp_avg`` / ``exp_avg_sq`` in ``state[p]``) so a state_dict is interchangeable with AdamW's.

    For optimizers that run AdamW on part of the model (swan's and frugal's embeddings, head and norms). Public
    API only: a ``torch.optim.AdamW`` over ``params`` whose per-parameter state entries are the caller's own
    ``state[p]`` dicts takes the step, so the math, the step-counter dtype and the foreach/fused choice are
    whatever the installed torch's AdamW does. Sparse gradients raise a ``RuntimeError`` naming ``owner`` and the
    parameter's shape.
    """
    import torch

    active = []
    for p in params:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            raise RuntimeError(f"{owner} does not support sparse gradients (parameter of shape {tuple(p.shape)})")
        active.append(p)
    if not active:
        return
    inner = torch.optim.AdamW(active, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach)
    for p in active:
        inner.state[p] = state[p]  # the caller's dict: AdamW initialises and updates it in place
    with torch.no_grad():  # callable outside an optimizer's @torch.no_grad() step too
        inner.step()


@contextlib.contextmanager
def kept_buffers(*modules: torch.nn.Module) -> Iterator[None]:
    """Put every buffer of ``modules`` back as it was when the block ends (also on error), in place: a measurement
    that runs a model in training mode (batch-norm running statistics) then leaves its training state unchanged. A
    buffer shared by several modules is saved once."""
    import torch

    saved = {id(b): (b, b.clone()) for m in modules for b in m.buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for b, old in saved.values():
                b.copy_(old)
