"""The experiments behind ``icml25 reproduce bisection_proj`` and the benchmark: the neural solver whose
predictions bisection projection repairs, the whole NN solver + IPNN + projection pipeline with its measurements,
the IPNN training on the paper's 2-D toy sets and the step count for two split ratios ρ.

The NN solver is the IPNN backbone (ResNet, width d + 1, 3 blocks, dropout 0.1, sigmoid) predicting the
normalised partial variables, trained supervised (MSE to y* + penalty + objective, the official weights) or
unsupervised (objective + penalty), as in the paper's experiments.

>>> from bisection_proj.experiments import PipelineSettings, run_pipeline  # doctest: +SKIP
>>> r = run_pipeline(ConvexQP.random(n=50, n_eq=25, n_ineq=25, seed=0), PipelineSettings())  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from bisection_proj.baselines import cvxpy_projection
from bisection_proj.bisection import BisectionProjector
from bisection_proj.ipnn import IPNN, ResNet, TrainHistory, train_ipnn, unwrap
from bisection_proj.metrics import feasible_mask, optimality_gap
from bisection_proj.problems import Problem, toys
from icml25_shared.progress import track
from icml25_shared.seed import seed_everything
from icml25_shared.validate import check_choice, check_int, check_tensor

__all__ = [
    "NNSolver",
    "train_nn_solver",
    "PipelineSettings",
    "run_pipeline",
    "time_best",
    "train_toys",
    "ratio_steps",
    "infeasible_batch",
]

log = logging.getLogger(__name__)


class NNSolver(nn.Module):
    """θ (B, θ_dim) → z (B, d) in [0, 1]^d (``sigmoid=True``)."""

    def __init__(self, theta_dim: int, z_dim: int, hidden: int | None = None, n_layers: int = 3,
                 dropout: float = 0.1, sigmoid: bool = True) -> None:  # fmt: skip
        super().__init__()
        theta_dim, z_dim = check_int("theta_dim", theta_dim, min=1), check_int("z_dim", z_dim, min=1)
        width = check_int("hidden", hidden, min=1) if hidden is not None else z_dim + 1
        self.theta_dim, self.z_dim, self.sigmoid = theta_dim, z_dim, sigmoid
        self.net = ResNet(theta_dim, z_dim, width, n_layers, dropout)

    def forward(self, theta: Tensor) -> Tensor:
        """θ of another floating dtype (a float64 problem's) is cast to the network's dtype, as :class:`IPNN` does."""
        check_tensor("theta", theta, dtype="floating")
        if theta.dim() != 2 or theta.shape[1] != self.theta_dim:
            raise ValueError(f"theta must have shape (B, {self.theta_dim}), got {tuple(theta.shape)}")
        out = self.net(check_tensor("theta", theta, finite=True).to(self.net.inp.weight.dtype))
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
    mode = check_choice("mode", mode, ("supervised", "unsupervised"))
    if mode == "supervised" and labels is None:
        raise ValueError("mode='supervised' needs labels (optimal y*, shape (N, n))")
    iters = check_int("iters", iters, min=0)
    batch_size = check_int("batch_size", batch_size, min=1)
    problem.check_theta(thetas, "thetas")
    w_pen = w_penalty if w_penalty is not None else (1e-3 if mode == "supervised" else 10.0)
    w_obj = w_objective if w_objective is not None else (1e-2 if mode == "supervised" else 1.0)
    dtype = next(unwrap(model).parameters()).dtype
    problem = problem.in_dtype(dtype)  # train in the network's precision; the caller's problem is not touched
    thetas = thetas.to(dtype)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=check_int("lr_step", lr_step, min=1), gamma=lr_gamma)
    losses = []
    model.train()
    for _ in track(range(iters), f"NN solver ({mode})", disable=None if progress is None else not progress):
        idx = torch.randint(0, thetas.shape[0], (batch_size,), generator=gen).to(thetas.device)
        theta = thetas[idx]
        y = problem.z_to_y(theta, model(theta))
        loss = w_obj * problem.objective(theta, y).mean() + w_pen * problem.ineq_violation(theta, y).sum(-1).mean()
        if mode == "supervised":
            assert labels is not None  # required for mode="supervised" (checked on entry)
            loss = loss + ((y - labels[idx].to(dtype)) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


@dataclass
class PipelineSettings:
    """Sizes of one NN-solver + IPNN + projection run."""

    n_train: int = 4096
    n_test: int = 256
    solver_iters: int = 1000
    solver_lr: float = 1e-3
    solver_hidden: int = 128
    solver_penalty: float = 0.8
    ipnn_iters: int = 1000
    ipnn_lr: float = 1e-3
    ipnn_hidden: int = 128
    steps: int = 30
    ratio: float = 0.5
    seed: int = 0


def time_best(fn: Any, repeats: int = 1) -> tuple[Any, float]:
    """``(fn(), the best wall time of repeats calls in seconds)``."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def run_pipeline(prob: Problem, s: PipelineSettings) -> dict[str, Any]:
    """Train the solver and the IPNN on ``prob``, project the test predictions, and measure feasibility, gaps,
    distances and times. Networks train in float32 (the trainers cast the problem to the network's dtype);
    evaluation, projection and baselines run in float64."""
    t_start = time.perf_counter()
    gen = seed_everything(s.seed)
    thetas = prob.sample_theta(s.n_train + s.n_test, gen)
    train, test = thetas[: s.n_train], thetas[s.n_train :]
    solver = NNSolver(prob.theta_dim, prob.z_dim, hidden=s.solver_hidden)
    train_nn_solver(
        solver,
        prob,
        train,
        iters=s.solver_iters,
        lr=s.solver_lr,
        w_penalty=s.solver_penalty,
        seed=s.seed,
        progress=False,
    )
    ipnn = IPNN(prob.theta_dim, prob.z_dim, hidden=s.ipnn_hidden)
    hist = train_ipnn(ipnn, prob, train, iters=s.ipnn_iters, lr=s.ipnn_lr, seed=s.seed, progress=False)
    y_star, t_solver = time_best(lambda: prob.solve(test))
    log.info("trained and labelled %s in %.1f s", type(prob).__name__, time.perf_counter() - t_start)

    with torch.no_grad():
        (z_raw, ip), t_nn = time_best(lambda: (solver(test.float()), ipnn(test.float())), repeats=3)
    z_raw, ip = z_raw.double(), ip.double()
    y_raw = prob.z_to_y(test, z_raw)
    y_ip = prob.z_to_y(test, ip[:, 0])
    raw_ok = feasible_mask(prob, test, y_raw)
    bad = ~raw_ok
    projector = BisectionProjector(prob, steps=s.steps, ratio=s.ratio)
    (y_bp, info), t_bp_all = time_best(lambda: projector(test, z_raw, ip), repeats=3)
    th_bad, z_bad, ip_bad = test[bad], z_raw[bad], ip[bad]
    _, t_bp = time_best(lambda: projector(th_bad, z_bad, ip_bad), repeats=5)
    y_proj = y_raw.clone()
    t_proj = float("nan")
    if bad.any():
        y_proj_bad, t_proj = time_best(lambda: cvxpy_projection(prob, th_bad, y_raw[bad]))
        y_proj[bad] = y_proj_bad
    gap = lambda y: float(optimality_gap(prob, test, y, y_star).mean())  # noqa: E731
    dist_bp = (y_bp - y_raw).norm(dim=-1)[bad]
    dist_proj = (y_proj - y_raw).norm(dim=-1)[bad]
    return {
        "n_test": s.n_test,
        "n_infeasible": int(bad.sum()),
        "feas_raw": float(raw_ok.float().mean()),
        "feas_bp": float(feasible_mask(prob, test, y_bp).float().mean()),
        "feas_proj": float(feasible_mask(prob, test, y_proj, tol=1e-4).float().mean()),
        "ip_validity": float(feasible_mask(prob, test, y_ip).float().mean()),
        "gap_raw": gap(y_raw),
        "gap_bp": gap(y_bp),
        "gap_proj": gap(y_proj),
        "gap_ip": gap(y_ip),
        "dist_bp": float(dist_bp.mean()) if bad.any() else 0.0,
        "dist_proj": float(dist_proj.mean()) if bad.any() else 0.0,
        "t_nn_s": t_nn,
        "t_bp_infeasible_s": t_bp,
        "t_bp_all_s": t_bp_all,
        "t_proj_infeasible_s": t_proj,
        "t_solver_s": t_solver,
        "speedup_post": t_proj / t_bp if bad.any() else float("nan"),
        "speedup_total": t_solver / (t_nn + t_bp_all),
        "bp_steps": info.steps,
        "history": hist.to_dict(),
        "dist_bp_all": dist_bp.tolist(),
        "dist_proj_all": dist_proj.tolist(),
    }


def train_toys(iters: int, n_theta: int = 2048, seed: int = 0) -> dict[str, TrainHistory]:
    """Train a margin-scheme IPNN (width 64, no sigmoid, float64) on each 2-D toy set (quadratic set, union of
    balls, ring) for ``iters`` steps; the IP validity and γ history of each, by class name."""
    hists = {}
    for prob in (toys.QuadraticSet(), toys.UnionOfBalls(), toys.Ring()):
        gen = seed_everything(seed)
        thetas = prob.sample_theta(n_theta, gen)
        ipnn = IPNN(prob.theta_dim, 2, hidden=64, sigmoid=False).double()
        hists[type(prob).__name__] = train_ipnn(
            ipnn, prob, thetas, iters=iters, lr=1e-3, eval_every=max(1, iters // 25), progress=False
        )
    return hists


def ratio_steps(prob: Problem, rhos: tuple[float, ...] = (0.5, 0.9), seed: int = 1) -> dict[str, Any]:
    """Bisection steps, time and feasibility for each split ratio ρ on 512 random predictions of ``prob`` with its
    analytic interior points (needs ``prob.analytic_interior``); ``seed`` draws θ and the predictions."""
    gen = seed_everything(seed)
    theta = prob.sample_theta(512, gen)
    ip = prob.y_to_z(theta, cast(Any, prob).analytic_interior(theta)).unsqueeze(1)  # documented requirement
    z = torch.rand(512, prob.z_dim, generator=gen, dtype=theta.dtype)
    out = {}
    for rho in rhos:
        proj = BisectionProjector(prob, ratio=rho)
        (_, info), t = time_best(lambda p=proj: p(theta, z, ip), repeats=3)
        out[str(rho)] = {"steps": info.steps, "time_s": t, "feasible": info.feasibility_rate}
    return out


def infeasible_batch(prob: Problem, b: int, seed: int = 0, noise: float = 0.15) -> tuple[Tensor, Tensor, Tensor]:
    """``b`` parameters θ with infeasible predictions z (the analytic interior point + Gaussian noise, clipped to
    the box) and their interior points (b, 1, d), for timing projections without training any network."""
    gen = torch.Generator().manual_seed(seed)
    thetas, zs = [], []
    have = 0
    while have < b:
        th = prob.sample_theta(2 * b, gen)
        z0 = prob.y_to_z(th, cast(Any, prob).analytic_interior(th))
        z = (z0 + noise * torch.randn(z0.shape, generator=gen, dtype=z0.dtype)).clamp(0, 1)
        bad = prob.z_violation(th, z).amax(-1) > 1e-5
        thetas.append(th[bad])
        zs.append(z[bad])
        have += int(bad.sum())
    theta, z = torch.cat(thetas)[:b], torch.cat(zs)[:b]
    ip = prob.y_to_z(theta, cast(Any, prob).analytic_interior(theta)).unsqueeze(1)  # documented requirement
    return theta, z, ip
