"""Data downscaling (Sorscher et al. 2022, "Beyond neural scaling laws", Sec. 2-3): score every example with a
proxy, keep a fraction. With abundant data keeping the *hard* examples beats random; with scarce data keeping the
*easy* ones does (their teacher-student perceptron theory, Sec. 2).

Scorers: :class:`ProxyLoss` (the mean next-token loss of a small proxy model), :class:`EL2N` (Paul et al. 2021:
‖softmax(z) − onehot(y)‖₂ averaged over tokens), :class:`Random` (seeded uniform scores: the baseline).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import numpy as np
import torch
from torch import nn

from icml25_shared.validate import check_choice, check_float, check_int

__all__ = ["EL2N", "ProxyLoss", "Random", "SelectResult", "select_data"]


def _windows(dataset: Any) -> torch.Tensor:
    if isinstance(dataset, np.ndarray):
        dataset = torch.from_numpy(dataset)
    if isinstance(dataset, (list, tuple)):
        if not dataset:
            raise ValueError("dataset must hold at least one example, got an empty list")
        dataset = torch.stack([torch.as_tensor(d) for d in dataset])
    if not isinstance(dataset, torch.Tensor) or dataset.ndim != 2 or dataset.dtype.is_floating_point:
        raise ValueError(f"dataset must be an (n, T) integer tensor of token windows, got {type(dataset).__name__}")
    if dataset.shape[0] == 0 or dataset.shape[1] < 2:
        raise ValueError(f"dataset must have n >= 1 windows of T >= 2 tokens, got shape {tuple(dataset.shape)}")
    return dataset.long()


class _ModelScorer:
    def __init__(self, model: nn.Module, batch_size: int = 64) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.batch_size = check_int("batch_size", batch_size, min=1)

    @torch.no_grad()
    def __call__(self, windows: torch.Tensor, seed: int = 0) -> torch.Tensor:
        from downscaling.flops import _forward

        was = self.model.training
        self.model.eval()
        out = []
        for i in range(0, windows.shape[0], self.batch_size):
            w = windows[i : i + self.batch_size]
            logits = _forward(self.model, w[:, :-1]).double()
            out.append(self._score(logits, w[:, 1:]))
        self.model.train(was)
        return torch.cat(out)

    def _score(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class ProxyLoss(_ModelScorer):
    """Mean next-token cross-entropy of each window under a proxy model (higher = harder)."""

    def _score(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ce = nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none")
        return ce.mean(1)


class EL2N(_ModelScorer):
    """Error L2 norm (Paul et al. 2021, eq. 2): ‖softmax(z_t) − onehot(y_t)‖₂ averaged over the window's tokens."""

    def _score(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        err = torch.softmax(logits, -1) - nn.functional.one_hot(y, logits.shape[-1]).double()
        return err.norm(dim=-1).mean(1)


class Random:
    """Seeded uniform scores (the random-selection baseline)."""

    def __call__(self, windows: torch.Tensor, seed: int = 0) -> torch.Tensor:
        return torch.rand(windows.shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


class SelectResult(NamedTuple):
    """The kept windows, their indices into the dataset (ascending) and every window's score."""

    data: torch.Tensor
    indices: torch.Tensor
    scores: torch.Tensor


def select_data(
    dataset: Any,
    scorer: Any = None,
    keep: float = 0.5,
    mode: Literal["hard", "easy"] = "hard",
    seed: int = 0,
) -> SelectResult:
    """Keep ``round(keep · n)`` (at least 1) of the ``(n, T)`` token windows ``dataset``: the highest-scoring
    (``hard``) or lowest-scoring (``easy``); ties broken by index, so that at ``keep = 0.5`` with even n the hard
    and easy selections are complementary.

    Args:
        dataset: ``(n, T)`` token windows (tensor or array).
        scorer: maps ``(windows, seed)`` to one score per window: :class:`ProxyLoss`, :class:`EL2N` or
            :class:`Random` (the default).
        keep: fraction kept, in (0, 1].
        mode: ``"hard"`` keeps the highest scores, ``"easy"`` the lowest.
        seed: passed to the scorer.

    Returns:
        The kept windows, their indices and every window's score.
    """
    windows = _windows(dataset)
    keep = check_float("keep", keep, min=0.0, max=1.0, min_open=True)
    mode = check_choice("mode", mode, ("hard", "easy"))
    seed = check_int("seed", seed, min=0)
    scorer = scorer if scorer is not None else Random()
    scores = scorer(windows, seed)
    n = windows.shape[0]
    k = max(1, int(round(keep * n)))
    order = torch.argsort(scores, stable=True)  # easy first
    idx = order[:k] if mode == "easy" else order[n - k :]
    idx = torch.sort(idx).values
    return SelectResult(windows[idx], idx, scores)
