"""A minimal μP rule for Adam (paper Sec. 2): per-tensor ``lr = base_lr · base_fan_in / fan_in``.

Relative to a base width (128 in the paper), a tensor whose fan-in grows with the width gets its LR divided by
``width / base_width``; tensors with a width-independent fan-in (the input embedding) keep ``base_lr``. The no-μP
ablation of the paper freezes every width at the LR μP gives one width (384): ``freeze_at=384``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from icml25_shared.validate import check_float, check_int

__all__ = ["adam_param_groups"]


def adam_param_groups(
    model: nn.Module,
    base_lr: float,
    base_width: int = 128,
    *,
    width: int | None = None,
    freeze_at: int | None = None,
    base_model: nn.Module | None = None,
) -> list[dict[str, Any]]:
    """Parameter groups for ``torch.optim.Adam``/``AdamW`` with μP learning rates.

    Args:
        model: the model; its width is ``width`` or ``model.width``.
        base_lr: the LR at the base width.
        base_width: the width at which every tensor uses ``base_lr``.
        freeze_at: use this width in the ratio instead of the model's (the no-μP ablation).
        base_model: the same architecture at ``base_width``; when given, ``base_fan_in`` is read from its tensor
            of the same name (exact for any architecture). Without it a fan-in that is a multiple of the width
            counts as proportional to the width.

    Every tensor gets its own group with ``lr`` and a ``name``; schedulers scale each group's ``lr``.
    """
    base_lr = check_float("base_lr", base_lr, min=0, min_open=True)
    base_width = check_int("base_width", base_width, min=1)
    w = width if width is not None else getattr(model, "width", None)
    w = check_int("width", w, min=1)
    eff = check_int("freeze_at", freeze_at, min=1) if freeze_at is not None else w
    base_shapes = {n: p.shape for n, p in base_model.named_parameters()} if base_model is not None else None
    groups = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        fan_in = p.shape[1] if p.ndim >= 2 else 1
        if base_shapes is not None:
            if name not in base_shapes:
                raise ValueError(f"base_model has no parameter {name!r}")
            b = base_shapes[name]
            base_fan_in = b[1] if len(b) >= 2 else 1
            scaled = fan_in != base_fan_in
            ratio = (fan_in / base_fan_in if freeze_at is None else eff / base_width) if scaled else 1.0
        else:
            ratio = eff / base_width if (p.ndim >= 2 and fan_in % w == 0) else 1.0
        groups.append({"params": [p], "lr": base_lr / ratio, "name": name})
    return groups
