"""The interior-point network (IPNN, paper Sec. 4) and its training.

Architecture (official ``NoiseResNet``): Linear(θ_dim, h) → n_layers × [x + Linear∘ReLU∘Linear(x), Dropout]
→ Linear(h, m·d) → NoiseModule → Sigmoid, output (B, m, d). In training mode the noise module perturbs the
logits by γ·ε; the ``margin`` scheme minimises the violation of the perturbed point while maximising log γ, which
pushes the IP toward the deep interior. The ``eccentricity`` scheme (older code, closer to the paper's text)
instead minimises a soft range of boundary distances along random rays.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from bisection_proj.config import IPNNConfig, NoiseKind
from bisection_proj.problems.base import Problem
from icml25_shared.progress import track
from icml25_shared.validate import check_choice, check_float, check_int, check_tensor

__all__ = [
    "ResBlock",
    "ResNet",
    "NoiseModule",
    "IPNN",
    "TrainHistory",
    "train_ipnn",
    "margin_loss",
    "ray_boundary",
    "validity_rate",
    "unwrap",
]

log = logging.getLogger(__name__)


class ResBlock(nn.Module):
    """x + Linear(ReLU(Linear(x)))."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class ResNet(nn.Module):
    """Linear(in, h) → n_layers × [ResBlock(h), Dropout] → Linear(h, out); the backbone of the IPNN and of the
    NN solver."""

    def __init__(self, in_dim: int, out_dim: int, width: int, n_layers: int = 3, dropout: float = 0.1) -> None:
        super().__init__()
        self.inp = nn.Linear(in_dim, width)
        self.blocks = nn.ModuleList([ResBlock(width) for _ in range(n_layers)])
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(width, out_dim)

    def forward(self, x: Tensor) -> Tensor:
        h = self.inp(x)
        for blk in self.blocks:
            h = self.drop(blk(h))
        return self.out(h)


class NoiseModule(nn.Module):
    """Training-time perturbation with a (learnable) margin γ = exp(log γ): ``out + γ·ε`` or ``out·(1 + γ·ε)``,
    ε ~ N(0, I); the identity in eval mode."""

    def __init__(self, margin_init: float = 1e-3, learn_margin: bool = True, noise: NoiseKind = "add") -> None:
        super().__init__()
        log_gamma = torch.tensor(math.log(margin_init))
        if learn_margin:
            self.log_gamma = nn.Parameter(log_gamma)
        else:
            self.register_buffer("log_gamma", log_gamma)
        self.noise = noise

    @property
    def gamma(self) -> Tensor:
        return self.log_gamma.exp()

    def forward(self, out: Tensor, eps: Tensor | None = None) -> Tensor:
        if not self.training:
            return out
        if eps is None:
            eps = torch.randn_like(out)
        g = self.gamma.to(out.dtype)
        return out + g * eps if self.noise == "add" else out * (1 + g * eps)


class IPNN(nn.Module):
    """θ (B, θ_dim) → m interior points (B, m, d) in the normalised space (``sigmoid=True``) or in R^d."""

    def __init__(self, theta_dim: int, z_dim: int, n_ip: int = 1, hidden: int | None = None, n_layers: int = 3,
                 dropout: float = 0.1, margin_init: float = 1e-3, learn_margin: bool = True,
                 noise: NoiseKind = "add", sigmoid: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.config = IPNNConfig(theta_dim, z_dim, n_ip, hidden, n_layers, dropout, margin_init, learn_margin,
                                 noise, sigmoid)  # fmt: skip
        c = self.config
        self.net = ResNet(c.theta_dim, c.n_ip * c.z_dim, c.width, c.n_layers, c.dropout)
        self.noise = NoiseModule(c.margin_init, c.learn_margin, c.noise)

    @classmethod
    def from_config(cls, config: IPNNConfig) -> IPNN:
        return cls(**config.to_dict())

    @property
    def gamma(self) -> float:
        """The current margin γ."""
        return float(self.noise.gamma.detach())

    def forward(self, theta: Tensor, eps: Tensor | None = None) -> Tensor:
        """``eps`` (B, m·d): explicit noise for the training-mode perturbation (random when None).

        θ of another floating dtype (a float64 problem's ``sample_theta`` for the float32 network) is cast to the
        network's dtype; the output is in the network's dtype."""
        c = self.config
        check_tensor("theta", theta, dtype="floating")
        if theta.dim() != 2 or theta.shape[1] != c.theta_dim:
            raise ValueError(f"theta must have shape (B, {c.theta_dim}), got {tuple(theta.shape)}")
        check_tensor("theta", theta, finite=True)
        theta = theta.to(self.net.inp.weight.dtype)
        if eps is not None:
            eps = check_tensor("eps", eps, shape=(theta.shape[0], c.n_ip * c.z_dim), dtype="floating").to(theta.dtype)
        out = self.noise(self.net(theta), eps)
        if c.sigmoid:
            out = torch.sigmoid(out)
        return out.reshape(theta.shape[0], c.n_ip, c.z_dim)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a ``DistributedDataParallel`` wrapper (or the module itself)."""
    return model.module if hasattr(model, "module") and isinstance(model.module, nn.Module) else model


def _ip_violation(problem: Problem, theta: Tensor, ip: Tensor) -> Tensor:
    """(B, m, n_ineq) violations of the interior points."""
    return problem.violation_fn(theta)(ip)


def margin_loss(ipnn: nn.Module, problem: Problem, theta: Tensor, eps: Tensor | None = None) -> Tensor:
    """The ``margin`` scheme's loss: mean violation of the noisy IPs − 0.01·log10 γ (call in train mode)."""
    ip = ipnn(theta, eps)
    pen = _ip_violation(problem, theta, ip).mean()
    core: Any = unwrap(ipnn)  # an IPNN (its noise layer holds log γ)
    return pen - 0.01 * core.noise.log_gamma / math.log(10.0)


@torch.no_grad()
def ray_boundary(problem: Problem, theta: Tensor, centre: Tensor, directions: Tensor, iters: int = 10,
                 tol: float = 1e-5, init: float = 1.0) -> Tensor:  # fmt: skip
    """Step lengths t (B, m, n) to the boundary along rays ``centre + t·u`` by doubling/halving (the
    ``eccentricity`` scheme of the older official code): start with
    [lo, hi] = [0, init]; a feasible trial t = hi sets lo = t, hi = 2·hi; an infeasible one hi = (lo + hi)/2.

    ``centre`` (B, m, d), ``directions`` (B, m, n, d); returns ``lo``, the last length checked feasible."""
    b, m, n, d = directions.shape
    fn = problem.violation_fn(theta)
    lo = centre.new_zeros(b, m, n)
    hi = torch.full_like(lo, init)
    for _ in range(iters):
        pts = centre.unsqueeze(2) + hi.unsqueeze(-1) * directions
        ok = fn(pts.reshape(b, m * n, d)).amax(-1).reshape(b, m, n) <= tol
        lo, hi = torch.where(ok, hi, lo), torch.where(ok, 2 * hi, (lo + hi) / 2)
    return lo


def _soft_max(x: Tensor, omega: float, dim: int = -1) -> Tensor:
    return torch.logsumexp(omega * x, dim=dim) / omega


def eccentricity_loss(ipnn: nn.Module, problem: Problem, theta: Tensor, step: int, labels: Tensor | None,
                      n_dirs: int = 10, w_pen: float = 10.0, w_ecc: float = 1.0,
                      generator: torch.Generator | None = None) -> Tensor:  # fmt: skip
    """The ``eccentricity`` scheme's loss (older official code; Def. 4.1 made soft): ½·MSE toward the labels on
    infeasible IPs + w_pen·violation +
    m·w_ecc·ECC, ECC = softmax_ω(d) − softmin_ω(d) over boundary distances d_j = ‖ŷ − b_j‖ on ``n_dirs`` random
    rays (boundary points detached), ω = (step + 1)/5; with several IPs, a soft-min over IPs per direction."""
    ip = ipnn(theta)  # (B, m, d)
    b, m, d = ip.shape
    viol = _ip_violation(problem, theta, ip)  # (B, m, n_c)
    feasible = viol.amax(-1) <= 1e-5
    pen = viol.sum(-1).mean()
    loss = w_pen * pen
    if labels is not None:  # rows of NaN labels (random θ) take no MSE term
        has = ~torch.isnan(labels).any(-1, keepdim=True).unsqueeze(1)
        bad = ((~feasible).unsqueeze(-1) & has).to(ip.dtype)
        loss = loss + 0.5 * (((ip - labels.nan_to_num().unsqueeze(1)) ** 2) * bad).mean()
    u = torch.randn(b, 1, n_dirs, d, generator=generator, dtype=ip.dtype, device="cpu").to(ip.device)
    u = u.expand(b, m, n_dirs, d)  # the same directions for every IP (soft-min over IPs per direction)
    u = u / u.norm(dim=-1, keepdim=True)
    t = ray_boundary(problem, theta, ip.detach(), u)
    bnd = ip.detach().unsqueeze(2) + t.unsqueeze(-1) * u  # (B, m, n, d)
    dist = (ip.unsqueeze(2) - bnd).norm(dim=-1)  # gradient w.r.t. ŷ only
    omega = (step + 1) / 5.0
    if m > 1:
        dist = -_soft_max(-dist, omega, dim=1).unsqueeze(1)  # soft-min over IPs per direction
        feas = feasible.any(1, keepdim=True)
    else:
        feas = feasible
    ecc = _soft_max(dist, omega) + _soft_max(-dist, omega)  # softmax(d) − softmin(d)
    ecc = (ecc * feas.to(ecc.dtype)).sum() / feas.sum().clamp_min(1)
    return loss + m * w_ecc * ecc


@torch.no_grad()
def validity_rate(ipnn: nn.Module, problem: Problem, theta: Tensor, tol: float = 1e-5) -> float:
    """Share of θ whose IPs (eval mode, all m of them) have violation <= tol."""
    was = ipnn.training
    ipnn.eval()
    ip = ipnn(theta)
    ipnn.train(was)
    return float((_ip_violation(problem, theta, ip).amax(-1) <= tol).all(-1).float().mean())


@dataclass
class TrainHistory:
    """Monitored quantities of IPNN training, one entry per evaluation."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    validity: list[float] = field(default_factory=list)
    gamma: list[float] = field(default_factory=list)
    eccentricity: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, list[Any]]:
        return {k: list(v) for k, v in self.__dict__.items()}


def train_ipnn(
    ipnn: nn.Module,
    problem: Problem,
    thetas: Tensor,
    scheme: Literal["margin", "eccentricity"] = "margin",
    iters: int = 10_000,
    lr: float = 1e-4,
    batch_size: int = 64,
    lr_step: int = 1000,
    lr_gamma: float = 0.9,
    weight_decay: float | None = None,
    labels: Tensor | None = None,
    pretrain_iters: int = 0,
    eval_every: int | None = None,
    val_thetas: Tensor | None = None,
    track_eccentricity: bool = False,
    seed: int = 0,
    progress: bool | None = None,
) -> TrainHistory:
    """Train an IPNN (possibly wrapped in ``DistributedDataParallel``; each rank then passes its own ``thetas``).

    ``scheme="margin"`` (default, official code): loss = mean violation of the noisy IPs − 0.01·log10 γ;
    AdamW(lr, weight decay 1e-5), StepLR(lr_step, lr_gamma). ``scheme="eccentricity"``: ``labels`` (normalised
    optimal z, (N, d), optional) drive ``pretrain_iters`` of MSE, then the loss of :func:`eccentricity_loss` on
    batches mixing random θ with training θ; AdamW(betas (0.99, 0.999), weight decay 1e-6). With ``labels`` and
    ``pretrain_iters`` the margin scheme also pre-trains by MSE with log γ frozen. Returns a :class:`TrainHistory`
    evaluated every ``eval_every`` steps on ``val_thetas`` (default: the first 512 training θ).

    ``seed`` seeds the batch sampler (and the eccentricity scheme's random θ and rays); dropout and the training
    noise draw from torch's global RNG, so call ``torch.manual_seed`` first for a repeatable run.
    """
    scheme = check_choice("scheme", scheme, ("margin", "eccentricity"))
    iters = check_int("iters", iters, min=0)
    batch_size = check_int("batch_size", batch_size, min=1)
    lr_step = check_int("lr_step", lr_step, min=1)
    pretrain_iters = check_int("pretrain_iters", pretrain_iters, min=0)
    lr = check_float("lr", lr, min=0.0, min_open=True)
    problem.check_theta(thetas, "thetas")
    if thetas.shape[0] == 0:
        raise ValueError("thetas must hold at least one parameter vector, got 0 rows")
    lr_gamma = check_float("lr_gamma", lr_gamma, min=0.0, min_open=True)
    weight_decay = check_float("weight_decay", weight_decay, min=0.0, allow_none=True)
    seed = check_int("seed", seed, min=0)
    if labels is not None:
        check_tensor("labels", labels, shape=(thetas.shape[0], problem.z_dim), dtype="floating")
    if val_thetas is not None:
        problem.check_theta(val_thetas, "val_thetas")
    core: Any = unwrap(ipnn)  # an IPNN (its noise layer holds log γ)
    dtype = next(core.parameters()).dtype
    problem = problem.in_dtype(dtype)  # train in the network's precision; the caller's problem is not touched
    thetas = thetas.to(dtype)
    val = (val_thetas if val_thetas is not None else thetas[:512]).to(dtype)
    eval_every = eval_every or max(1, (iters + pretrain_iters) // 20)
    gen = torch.Generator().manual_seed(seed)
    if weight_decay is None:
        weight_decay = 1e-5 if scheme == "margin" else 1e-6
    betas = (0.9, 0.999) if scheme == "margin" else (0.99, 0.999)
    opt = torch.optim.AdamW(ipnn.parameters(), lr=lr, betas=betas, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=lr_step, gamma=lr_gamma)
    hist = TrainHistory()
    log_gamma = core.noise.log_gamma

    def evaluate(step: int, loss: float) -> None:
        hist.step.append(step)
        hist.loss.append(loss)
        hist.validity.append(validity_rate(ipnn, problem, val))
        hist.gamma.append(float(core.noise.gamma.detach()))
        if track_eccentricity:
            from bisection_proj.metrics import eccentricity

            core.eval()
            with torch.no_grad():
                ip = core(val[:64])
            core.train()
            ratio, _ = eccentricity(problem, val[:64], ip[:, 0], n_dirs=16)
            fin = ratio[torch.isfinite(ratio)]
            hist.eccentricity.append(float(fin.mean()) if fin.numel() else float("nan"))

    evaluate(0, float("nan"))
    ipnn.train()
    total = pretrain_iters + iters
    bar = track(range(total), f"IPNN ({scheme})", disable=None if progress is None else not progress)
    loss_val = float("nan")
    for step in bar:
        idx = torch.randint(0, thetas.shape[0], (batch_size,), generator=gen).to(thetas.device)
        theta = thetas[idx]
        pre = step < pretrain_iters and labels is not None
        if isinstance(log_gamma, nn.Parameter):
            log_gamma.requires_grad_(not pre)
        if pre and labels is not None:  # (pre already implies labels)
            ip = ipnn(theta)
            loss = ((ip - labels[idx].to(dtype).unsqueeze(1)) ** 2).mean()
        elif scheme == "margin":
            loss = margin_loss(ipnn, problem, theta)
        else:
            rnd = problem.sample_theta(batch_size // 2, gen).to(device=thetas.device, dtype=dtype)
            theta_mix = torch.cat([theta[: batch_size - rnd.shape[0]], rnd])
            lab = None
            if labels is not None:  # random θ have no labels: MSE only on the training half
                lab = torch.cat([labels[idx[: batch_size - rnd.shape[0]]].to(dtype), torch.full_like(
                    labels[idx[: rnd.shape[0]]].to(dtype), float("nan"))])  # fmt: skip
            loss = eccentricity_loss(ipnn, problem, theta_mix, step - pretrain_iters, lab, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        loss_val = float(loss.detach())
        if (step + 1) % eval_every == 0 or step + 1 == total:
            evaluate(step + 1, loss_val)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(validity=hist.validity[-1], gamma=hist.gamma[-1])
    if isinstance(log_gamma, nn.Parameter):
        log_gamma.requires_grad_(True)
    ipnn.eval()
    return hist
