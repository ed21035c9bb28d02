"""The official training protocol as ``fit`` / ``predict`` / ``evaluate`` (official scripts and logs).

Adam on MSE + lambda_orth * L_orth, up to 30 epochs, learning rate lr * 0.8^max(0, epoch - 4) (epoch 1-indexed),
early stopping with patience 5 on validation MSE, best checkpoint restored; train batches shuffled, no batch
dropped anywhere. Works for any ``nn.Module`` mapping (B, T, C) to (B, H, C) (DLinear, PatchTST); models with a
``training_loss(x, y)`` method (TimeBase) use it, so the regulariser enters the training loss only.
"""

from __future__ import annotations

import copy
import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from icml25_shared.device import torch_threads
from icml25_shared.progress import track
from icml25_shared.seed import seed_everything
from icml25_shared.validate import check_choice, check_float, check_int
from timebase.data import Splits, WindowDataset

__all__ = ["fit", "predict", "evaluate", "FitResult", "lr_factor", "Adam"]

log = logging.getLogger(__name__)


def lr_factor(epoch: int, decay: float = 0.8, decay_start: int = 4) -> float:
    """The "type3" schedule: epoch ``epoch`` (1-indexed) runs at lr * decay^max(0, epoch - decay_start)."""
    return decay ** max(0, epoch - decay_start)


@dataclass
class FitResult:
    """What :func:`fit` did: per-epoch history, the restored best epoch and the final metrics."""

    best_epoch: int
    best_val_mse: float
    epochs_run: int
    history: list[dict[str, float]] = field(default_factory=list)
    test: dict[str, float] | None = None
    seconds: float = 0.0


class Adam:
    """Adam (Kingma & Ba) with torch.optim.Adam's defaults and update, for the few parameters of these models.

    Why not ``torch.optim.Adam``: constructing any ``torch.optim.Optimizer`` imports ``torch._dynamo`` on first
    use (seconds on an idle 2-core machine, tens of seconds on a loaded one), more than a whole TimeBase training
    run; the update here is the same arithmetic (tested against the closed form and against torch's Adam).
    Pass ``optimizer="torch"`` to :func:`fit` to use torch's.
    """

    def __init__(
        self, params: list[nn.Parameter], lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.param_groups = [{"lr": lr}]
        self.betas, self.eps, self.step_count = betas, eps, 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        b1, b2 = self.betas
        lr = self.param_groups[0]["lr"]
        bc1, bc2 = 1 - b1**self.step_count, 1 - b2**self.step_count
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            if p.grad is None:
                continue
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(self.eps)
            p.addcdiv_(m, denom, value=-lr / bc1)


def _model_device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _model_dtype(model: nn.Module) -> torch.dtype:
    p = next(model.parameters(), None)
    return p.dtype if p is not None else torch.get_default_dtype()


def _loss(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    train_loss = getattr(model, "training_loss", None)
    if callable(train_loss):
        return cast("tuple[Tensor, Tensor]", train_loss(x, y))[0]
    return nn.functional.mse_loss(model(x), y)


@torch.no_grad()
def evaluate(model: nn.Module, dataset: WindowDataset, batch_size: int = 2048) -> dict[str, float]:
    """MSE and MAE of ``model`` over every window, step and channel of ``dataset`` (plain metrics, no
    regulariser), accumulated in float64."""
    was_training = model.training
    model.eval()
    device, dtype = _model_device(model), _model_dtype(model)
    se = ae = 0.0
    count = 0
    try:
        for x, y in dataset.batches(batch_size):  # windows are float32: cast to the model's dtype
            x, y = x.to(device, dtype), y.to(device, dtype)
            err = (model(x) - y).double()
            se += float(err.square().sum())
            ae += float(err.abs().sum())
            count += err.numel()
    finally:
        model.train(was_training)
    return {"mse": se / count, "mae": ae / count}


@torch.no_grad()
def predict(
    model: nn.Module, data: Tensor | WindowDataset, batch_size: int = 2048, *, n_threads: int | None = 1
) -> Tensor:
    """Forecasts for a window tensor (B, T, C) or for every window of a :class:`WindowDataset` (n, H, C), in the
    model's dtype (the windows are cast to it: a float64 model forecasts float32 windows in float64).
    ``n_threads``: torch intra-op threads while forecasting (default 1: these models are small, and on a shared
    machine more threads mostly wait; the caller's setting is restored afterwards); None leaves torch's setting."""
    batch_size = check_int("batch_size", batch_size, min=1)
    threads = torch_threads(check_int("n_threads", n_threads, min=1, allow_none=True))
    if not isinstance(data, (Tensor, WindowDataset)):
        raise ValueError(f"data must be a torch.Tensor (B, T, C) or a WindowDataset, got {type(data).__name__}")
    if isinstance(data, Tensor) and not data.is_floating_point():
        raise ValueError(f"data must be a floating tensor (B, T, C), got dtype {data.dtype}")
    was_training = model.training
    model.eval()
    device, dtype = _model_device(model), _model_dtype(model)
    try:
        with threads:
            if isinstance(data, WindowDataset):
                return torch.cat([model(x.to(device, dtype)).cpu() for x, _ in data.batches(batch_size)])
            return torch.cat(
                [model(data[i : i + batch_size].to(device, dtype)) for i in range(0, max(len(data), 1), batch_size)]
            )
    finally:
        model.train(was_training)


def _check_model_fits_splits(model: nn.Module, splits: Splits) -> None:
    """The model's look-back T and horizon H must be the splits' (else a broadcast warning, then an opaque error
    deep in the loss): read from ``model.config`` / ``model.seq_len``, ``model.pred_len`` where the model has them,
    else from one forward pass on a training window (in eval mode, before any seeding)."""
    t, h = splits.train.seq_len, splits.train.pred_len
    cfg = getattr(model, "config", model)
    seq_len, pred_len = getattr(cfg, "seq_len", None), getattr(cfg, "pred_len", None)
    if seq_len is None or pred_len is None:
        x, _ = splits.train[0]
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model(x.unsqueeze(0).to(_model_device(model), _model_dtype(model)))
        finally:
            model.train(was)
        seq_len, pred_len = t, out.shape[1] if out.ndim == 3 else None
    if (seq_len, pred_len) != (t, h):
        raise ValueError(
            f"the model forecasts H={pred_len} steps from T={seq_len} but the splits hold windows of T={t}, H={h}: "
            f"build the model with seq_len={t}, pred_len={h} (or the splits with the model's lengths)"
        )


def _warn_if_diverged(best_val: float, splits: Splits, lr: float) -> None:
    """Warn when even the best validation MSE is not finite or is over 10x that of forecasting zero (the training
    mean, the data being standardised on the training rows): the run diverged, usually from too large an lr."""
    zero = float(splits.val.series[splits.val.seq_len :].double().square().mean())
    if not math.isfinite(best_val) or best_val > 10 * max(zero, 1e-12):
        warnings.warn(
            f"fit diverged: the best validation MSE {best_val:.3g} is over 10x that of the zero forecast "
            f"({zero:.3g}); lower lr (got {lr})",
            RuntimeWarning,
            stacklevel=3,
        )


def fit(
    model: nn.Module,
    splits: Splits,
    *,
    epochs: int = 30,
    lr: float = 0.1,
    batch_size: int = 64,
    patience: int = 5,
    seed: int | None = 2023,
    decay: float = 0.8,
    decay_start: int = 4,
    eval_batch_size: int = 2048,
    evaluate_test: bool = True,
    progress: bool | None = None,
    optimizer: Literal["adam", "torch"] = "adam",
    n_threads: int | None = 1,
) -> FitResult:
    """Train ``model`` in place with the official protocol and restore its best-validation weights.

    ``seed`` seeds python/numpy/torch and the shuffling generator (same seed and same initial weights give the
    same run); ``seed=None`` seeds nothing and draws the shuffling seed from torch's global generator, as a
    shuffling ``DataLoader`` does (``torch.manual_seed`` before the call makes it repeatable). The windows (float32)
    are cast to the model's dtype, so a ``model.double()`` trains in float64.
    ``progress``: draw a bar over epochs (``None``: the project default, quiet in CI).
    ``n_threads``: torch intra-op threads while training and evaluating (default 1: the models are small, and on a
    shared machine more threads mostly wait; the caller's setting is restored afterwards); None leaves torch's.
    """
    import time

    threads = torch_threads(check_int("n_threads", n_threads, min=1, allow_none=True))

    if not isinstance(splits, Splits):
        raise ValueError(f"splits must be a timebase.data.Splits, got {type(splits).__name__}")
    epochs, batch_size = check_int("epochs", epochs, min=1), check_int("batch_size", batch_size, min=1)
    patience = check_int("patience", patience, min=1)
    check_float("lr", lr, min=0.0, min_open=True)
    check_float("decay", decay, min=0.0, max=1.0, min_open=True)
    check_int("decay_start", decay_start, min=0)
    seed = check_int("seed", seed, min=0, allow_none=True)  # numpy integers too (torch.Generator takes ints only)
    check_int("eval_batch_size", eval_batch_size, min=1)
    check_choice("optimizer", optimizer, ("adam", "torch"))  # built-in Adam or torch.optim.Adam
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"model ({type(model).__name__}) has no trainable parameters: nothing to fit")
    _check_model_fits_splits(model, splits)

    with threads:  # one torch thread by default, the caller's count restored after
        t0 = time.perf_counter()
        gen = torch.Generator()
        if seed is not None:
            seed_everything(seed)
            gen.manual_seed(seed)
        else:  # as torch's DataLoader does: the shuffling seed comes from torch's global generator (a bare
            # torch.Generator() starts from one fixed seed, so every unseeded fit shuffled in the same order)
            gen.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        device, dtype = _model_device(model), _model_dtype(model)
        params = list(model.parameters())
        opt: Any = Adam(params, lr) if optimizer == "adam" else torch.optim.Adam(params, lr=lr)
        best_state = copy.deepcopy(model.state_dict())
        best_val, best_epoch, bad = math.inf, 0, 0
        history: list[dict[str, float]] = []
        disable = None if progress is None else not progress
        bar = track(range(1, epochs + 1), f"fit {type(model).__name__}", disable=disable)
        epoch = 0
        for epoch in bar:
            cur_lr = lr * lr_factor(epoch, decay, decay_start)
            for group in opt.param_groups:
                group["lr"] = cur_lr
            model.train()
            total, n = 0.0, 0
            for x, y in splits.train.batches(batch_size, shuffle=True, generator=gen):
                x, y = x.to(device, dtype), y.to(device, dtype)  # float32 windows, the model's dtype
                opt.zero_grad(set_to_none=True)
                loss = _loss(model, x, y)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(x)
                n += len(x)
            val = evaluate(model, splits.val, eval_batch_size)["mse"]
            history.append({"epoch": epoch, "lr": cur_lr, "train_loss": total / n, "val_mse": val})
            log.info("epoch %d lr %.4g train loss %.4f val mse %.4f", epoch, cur_lr, total / n, val)
            bar.set_postfix(train=f"{total / n:.4f}", val=f"{val:.4f}", refresh=False)
            if val < best_val:
                best_val, best_epoch, bad = val, epoch, 0
                best_state = copy.deepcopy(model.state_dict())
            else:
                bad += 1
                if bad >= patience:
                    log.info("early stopping after epoch %d (best %d)", epoch, best_epoch)
                    break
        bar.close()
        _warn_if_diverged(best_val, splits, lr)
        model.load_state_dict(best_state)
        model.eval()
        test = evaluate(model, splits.test, eval_batch_size) if evaluate_test else None
        return FitResult(best_epoch, best_val, epoch, history, test, time.perf_counter() - t0)
