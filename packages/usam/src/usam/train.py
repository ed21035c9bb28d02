"""Training of one USAM head (Sec. 4.1): MSE regression of a target from decoder tokens.

The released recipe: SGD with momentum and weight decay 1e-3 (the COCO setting found by SMAC: batch 189, 36 epochs,
lr 0.00871, momentum 0.164); the first 80 % of the rows train and the last 20 % validate (a sequential split, no
shuffling), then the final head is retrained on all rows. Validation reports L1, MSE, R² and the fraction of rows
within 0.1 / 0.05 / 0.01 of the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from icml25_shared.device import torch_threads
from icml25_shared.validate import check_tensor
from usam.config import GAP_TARGETS, USAMConfig
from usam.heads import USAMHead
from usam.targets import encode_gap

__all__ = ["FitResult", "fit_head", "regression_metrics", "training_data"]


@dataclass
class FitResult:
    """A trained head, its validation metrics (on the held-out rows, before retraining on all) and loss history."""

    head: USAMHead
    val: dict[str, float] = field(default_factory=dict)
    train_loss: list[float] = field(default_factory=list)


def regression_metrics(pred: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """L1, MSE, R² and the fractions within 0.1 / 0.05 / 0.01 (the released validation metrics).

    ``pred`` and ``target`` are finite floating tensors of the same shape (a (N, 1) prediction against (N,) targets
    would broadcast to N × N pairs, so shapes must match exactly)."""
    check_tensor("pred", pred, dtype="floating", finite=True, nonempty=True)
    check_tensor("target", target, shape=tuple(pred.shape), dtype="floating", finite=True)
    err = (pred - target).abs()
    var = ((target - target.mean()) ** 2).mean()
    mse = float((err**2).mean())
    return {
        "l1": float(err.mean()),
        "mse": mse,
        "r2": float(1.0 - mse / var) if var > 0 else float("nan"),
        "within_0.1": float((err <= 0.1).float().mean()),
        "within_0.05": float((err <= 0.05).float().mean()),
        "within_0.01": float((err <= 0.01).float().mean()),
    }


def training_data(
    rows: Mapping[str, torch.Tensor], target: str, config: USAMConfig, *, model: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, y) for head ``target`` from a row table (:func:`usam.targets.extract_rows`).

    X: the GT-best mask's token (``train_tokens="best"``) or all three tokens with the row's target repeated
    (``"all"``), cut to ``token_input``; y: the target, gaps offset by ``gap_offset`` and clipped to [0, 1].
    ``model`` reads another model's columns (``tokens_<model>``, ``best_<model>``), e.g. Δ*_Θ from the Tiny model.
    """
    if target not in rows:
        raise ValueError(f"target: column {target!r} not in the rows (have {sorted(rows)})")
    suffix = f"_{model}" if model else ""
    for col in (f"tokens{suffix}", f"best{suffix}"):
        if col not in rows:
            raise ValueError(f"model: no column {col} in the rows (have {sorted(rows)})")
    tokens = rows[f"tokens{suffix}"].float()  # (R, 3, 2d)
    best = rows[f"best{suffix}"]
    d = tokens.shape[-1] // 2
    y = rows[target].float()
    if target in GAP_TARGETS:
        y = encode_gap(y, config.gap_offset)
    if config.train_tokens == "best":
        x = tokens.gather(1, best[:, None, None].expand(-1, 1, tokens.shape[-1]))[:, 0]
    else:
        x = tokens.reshape(-1, tokens.shape[-1])
        y = y.repeat_interleave(tokens.shape[1])
    if config.token_input == "iou":
        x = x[:, :d]
    elif config.token_input == "mask":
        x = x[:, d:]
    return x, y


def _train(x: torch.Tensor, y: torch.Tensor, config: USAMConfig, seed: int) -> tuple[USAMHead, list[float]]:
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    head = USAMHead(x.shape[1], config.hidden)
    if config.optimizer == "sgd":
        opt = torch.optim.SGD(
            head.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
    else:
        opt = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    losses = []
    for _ in range(config.epochs):
        perm = torch.randperm(len(x), generator=g)
        total = 0.0
        for i in range(0, len(x), config.batch_size):
            idx = perm[i : i + config.batch_size]
            loss = torch.nn.functional.mse_loss(head(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / len(x))
    return head.eval(), losses


def fit_head(x: torch.Tensor, y: torch.Tensor, config: USAMConfig | None = None) -> FitResult:
    """Train a :class:`USAMHead` on tokens ``x`` (N, in) and targets ``y`` (N,) in [0, 1] (one torch thread).

    With ``val_fraction > 0`` the last rows validate a head trained on the first ones; with ``full_train`` the
    returned head is then retrained on all rows (same seed), else the validated head is returned.
    """
    config = config if config is not None else USAMConfig()
    check_tensor("x", x, ndim=2, dtype="floating", finite=True, nonempty=True)
    check_tensor("y", y, shape=(x.shape[0],), dtype="floating", finite=True)
    if ((y < 0) | (y > 1)).any():
        raise ValueError("y must lie in [0, 1] (a sigmoid head's target); offset gaps with encode_gap")
    x, y = x.detach().float().cpu(), y.detach().float().cpu()
    with torch_threads(1):
        n_val = int(round(config.val_fraction * len(x)))
        val: dict[str, float] = {}
        if n_val > 0 and len(x) - n_val > 0:
            head, losses = _train(x[:-n_val], y[:-n_val], config, config.seed)
            with torch.no_grad():
                val = regression_metrics(head(x[-n_val:]), y[-n_val:])
            if not config.full_train:
                return FitResult(head, val, losses)
        head, losses = _train(x, y, config, config.seed)
    return FitResult(head, val, losses)
