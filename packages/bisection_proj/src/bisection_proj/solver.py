"""The neural solver whose predictions bisection projection repairs (spec §6): the IPNN backbone (ResNet, width
d + 1, 3 blocks, dropout 0.1, sigmoid) predicting the normalised partial variables, trained supervised
(MSE to y* + penalty + objective) or unsupervised (objective + penalty)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from bisection_proj.config import check_positive_int
from bisection_proj.ipnn import ResNet, unwrap
from bisection_proj.problems.base import Problem
from icml25_shared.progress import track

__all__ = ["NNSolver", "train_nn_solver"]


class NNSolver(nn.Module):
    """θ (B, θ_dim) → z (B, d) in [0, 1]^d (``sigmoid=True``)."""

    def __init__(self, theta_dim: int, z_dim: int, hidden: int | None = None, n_layers: int = 3,
                 dropout: float = 0.1, sigmoid: bool = True) -> None:  # fmt: skip
        super().__init__()
        theta_dim, z_dim = check_positive_int("theta_dim", theta_dim), check_positive_int("z_dim", z_dim)
        width = check_positive_int("hidden", hidden) if hidden is not None else z_dim + 1
        self.theta_dim, self.z_dim, self.sigmoid = theta_dim, z_dim, sigmoid
        self.net = ResNet(theta_dim, z_dim, width, n_layers, dropout)

    def forward(self, theta: Tensor) -> Tensor:
        if theta.dim() != 2 or theta.shape[1] != self.theta_dim:
            raise ValueError(f"theta must have shape (B, {self.theta_dim}), got {tuple(theta.shape)}")
        out = self.net(theta)
        return torch.sigmoid(out) if self.sigmoid else out


def train_nn_solver(
    model: nn.Module,
    problem: Problem,
    thetas: Tensor,
    mode: Literal["supervised", "unsupervised"] = "unsupervised",
    labels: Tensor | None = None,
    iters: int = 10_000,
    lr: float = 1e-4,
    batch_size: int = 64,
    lr_step: int = 1000,
    lr_gamma: float = 0.9,
    w_penalty: float | None = None,
    w_objective: float | None = None,
    seed: int = 0,
    progress: bool | None = None,
) -> list[float]:
    """Train the solver; returns the loss per step. Supervised: MSE(y, y*) + 1e-3·Σ|ineq| + 1e-2·f(y) (official
    weights; ``labels`` are full y*). Unsupervised: w_objective·f(y) + w_penalty·Σ|ineq| (defaults 1 and 10)."""
    if mode not in ("supervised", "unsupervised"):
        raise ValueError(f"mode must be 'supervised' or 'unsupervised', got {mode!r}")
    if mode == "supervised" and labels is None:
        raise ValueError("mode='supervised' needs labels (optimal y*, shape (N, n))")
    iters = check_positive_int("iters", iters, allow_zero=True)
    batch_size = check_positive_int("batch_size", batch_size)
    problem.check_theta(thetas, "thetas")
    w_pen = w_penalty if w_penalty is not None else (1e-3 if mode == "supervised" else 10.0)
    w_obj = w_objective if w_objective is not None else (1e-2 if mode == "supervised" else 1.0)
    dtype = next(unwrap(model).parameters()).dtype
    thetas = thetas.to(dtype)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=check_positive_int("lr_step", lr_step), gamma=lr_gamma)
    losses = []
    model.train()
    for _ in track(range(iters), f"NN solver ({mode})", disable=None if progress is None else not progress):
        idx = torch.randint(0, thetas.shape[0], (batch_size,), generator=gen).to(thetas.device)
        theta = thetas[idx]
        y = problem.z_to_y(theta, model(theta))
        loss = w_obj * problem.objective(theta, y).mean() + w_pen * problem.ineq_violation(theta, y).sum(-1).mean()
        if mode == "supervised":
            loss = loss + ((y - labels[idx].to(dtype)) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
