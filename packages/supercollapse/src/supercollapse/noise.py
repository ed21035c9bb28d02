"""The SGD-noise model of learning-rate schedules (paper Sec. 4) and the gradient-noise tracker.

The model predicts the loss curve of a schedule s from the constant-LR curve of the same size and peak LR::

    L_s(t) ≈ L_const(τ_s(t)) + α · (s(t) − 1) · Tr Cov(u_batch)(t),        τ_s(t) = Σ_{k<t} η_peak s(k)

where ``u = P^−½ g`` is the preconditioned minibatch gradient: ``P^−1 = diag(η_peak / (√v̂ + ε))`` for Adam
(bias-corrected second moment v̂, per-tensor peak LR) and ``P^−1 = η_peak·I`` for SGD. Deterministic progress
depends only on τ; the excess loss from SGD noise is proportional to the instantaneous LR times the noise scale.
α is one scalar per task, shared by every schedule, size and horizon; it is fitted in closed form by least squares
of ``L_s − L_const(τ_s)`` on ``(s − 1)·Tr Cov`` over the points after the decay starts (s < 1).

:class:`GradNoiseTracker` measures ``Tr Cov(u_batch)`` at batch size B:

- ``estimator="batches"`` (the official code's estimator): the gradient of each of N evaluation batches, then the
  trace of their sample covariance (Welford's running mean and sum of squares, ddof = 1).
- ``estimator="per_example"``: one backward over all N·B examples; per-example squared preconditioned norms come
  from a GEMM of squared activations and squared output gradients for ``nn.Linear`` layers (no per-example
  gradient is materialised), ``Tr Cov_example = (Σ_i ‖D^½ g_i‖² − n‖D^½ ḡ‖²)/(n − 1)`` and
  ``Tr Cov_batch = Tr Cov_example / B``. Models with parameters outside ``nn.Linear`` layers, or whose layers see
  other than one input row per example or run more than once per forward (tied weights), use
  ``torch.func.vmap(grad)`` instead.

The loss may be mean- or sum-reduced over the batch: ``reduction="auto"`` reads a torch loss's ``.reduction``
(also through ``functools.partial(..., reduction=...)``) and, for any other callable, compares the loss of the first
evaluation batch with the losses of its two halves (the mean loss is the size-weighted mean of the halves', the sum
loss their sum), in eval mode without gradients. A sum-reduced loss is divided by the batch size, so the trace is
the same as with the mean loss; ``reduction="none"`` and a callable that matches neither raise.

For a ``DistributedDataParallel`` model (or ``distributed=True``) each rank passes its share of every evaluation
batch; the sums and mean gradients are all-reduced, so the result equals the single-process trace on the
concatenated batches. Otherwise nothing is all-reduced (a sweep trains different runs on different ranks).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Literal

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from icml25_shared.training import kept_buffers
from icml25_shared.validate import check_bool, check_choice, check_float, check_tensor
from supercollapse.runs import Runs

__all__ = ["GradNoiseTracker", "NoiseModel", "preconditioner"]

Batch = tuple[torch.Tensor, torch.Tensor]


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _group_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@torch.no_grad()
def preconditioner(optimizer: torch.optim.Optimizer | None, params: list[nn.Parameter]) -> list[torch.Tensor]:
    """``D = P^−1`` per parameter (Sec. 4): ``η_peak / (√v̂ + ε)`` for Adam/AdamW (v̂ the bias-corrected second
    moment, or its running maximum with ``amsgrad=True``), ``η_peak`` for SGD, 1 when ``optimizer`` is None.
    ``η_peak`` is the group's ``initial_lr`` (set by LR schedulers) or else its ``lr``."""
    if optimizer is None:
        return [torch.ones_like(p) for p in params]
    where = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            where[id(p)] = group
    out = []
    for p in params:
        if id(p) not in where:
            raise ValueError(f"a parameter of shape {tuple(p.shape)} is not in the optimizer")
        group = where[id(p)]
        lr = float(group.get("initial_lr", group["lr"]))
        if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
            state = optimizer.state.get(p, {})
            if "exp_avg_sq" not in state:
                raise ValueError("the Adam preconditioner needs the second moment: take >= 1 optimizer step first")
            step = float(state["step"])
            # amsgrad divides by the running maximum of the second moment, not the moment itself
            v = state["max_exp_avg_sq"] if group.get("amsgrad", False) else state["exp_avg_sq"]
            v_hat = v / (1.0 - group["betas"][1] ** step)
            out.append(lr / (v_hat.sqrt() + group["eps"]))
        elif isinstance(optimizer, torch.optim.SGD):
            out.append(torch.full_like(p, lr))
        else:
            raise ValueError(
                f"preconditioned=True supports Adam, AdamW and SGD, got {type(optimizer).__name__}; "
                "pass preconditioned=False for the raw gradient trace"
            )
    return out


class GradNoiseTracker:
    """Trace of the covariance of the preconditioned minibatch gradient, ``Tr Cov(u_batch)`` (paper Sec. 4).

    Args:
        model: the model (a ``DistributedDataParallel`` wrapper is unwrapped).
        optimizer: its optimizer (Adam/AdamW/SGD) for the preconditioner; ignored when ``preconditioned=False``.
        loss_fn: ``loss_fn(model(inputs), targets)`` → scalar, the mean or the sum over the batch's examples (the
            first dimension).
        preconditioned: measure ``u = P^−½ g`` (True) or the raw gradient ``g``.
        estimator: ``"batches"`` (Welford over evaluation batches, as the official code) or ``"per_example"``.
        distributed: all-reduce over the default process group (each rank holds a share of every batch). ``None``:
            when ``model`` is a ``DistributedDataParallel`` (a sweep training separate runs per rank must not
            all-reduce).
        reduction: how ``loss_fn`` reduces over the batch: ``"mean"``, ``"sum"`` (divided by the batch size here, so
            the trace equals the mean loss's), or ``"auto"`` (see the module docstring; the detected value is kept in
            :attr:`reduction`).

    Both estimators measure the same quantity: they agree in expectation, and within 5 % with 400 evaluation
    batches of 8 in the tests (the ``batches`` estimator's sample covariance has N − 1 degrees of freedom, so its
    relative error shrinks as ~√(2/(N − 1)) at worst).

    :meth:`trace` leaves the model's ``.grad``, buffers (e.g. batch-norm running statistics) and train/eval mode as
    it found them. ``"per_example"`` refuses a batch-norm layer in training mode (its batch statistics couple the
    examples): call ``model.eval()`` first or use ``"batches"``.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        preconditioned: bool = True,
        estimator: Literal["batches", "per_example"] = "batches",
        distributed: bool | None = None,
        reduction: Literal["auto", "mean", "sum"] = "auto",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(loss_fn):
            raise TypeError("loss_fn must be callable")
        if distributed is None:
            distributed = isinstance(model, nn.parallel.DistributedDataParallel)
        self.distributed = check_bool("distributed", distributed)
        self.model = _unwrap(model)
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.reduction: str | None = _declared_reduction(loss_fn, reduction)
        self.preconditioned = check_bool("preconditioned", preconditioned)
        self.estimator = check_choice("estimator", estimator, ("batches", "per_example"))
        if self.preconditioned and optimizer is None:
            raise ValueError("preconditioned=True needs the optimizer")
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        linear_ids = {id(m.weight) for m in self.model.modules() if isinstance(m, nn.Linear)}
        linear_ids |= {id(m.bias) for m in self.model.modules() if isinstance(m, nn.Linear) and m.bias is not None}
        self._linear_only = all(id(p) in linear_ids for p in self.params)

    def trace(self, eval_batches: Iterable[Batch]) -> float:
        """``Tr Cov(u_batch)`` at the batch size of ``eval_batches`` (all batches of one size B; under DDP B is the
        global size, the sum over ranks)."""
        with torch.inference_mode(False), torch.enable_grad():
            # inputs made under inference_mode are cloned into normal tensors that autograd may save
            batches = [(x.clone(), y.clone()) for x, y in eval_batches]
            return self._trace(batches)

    def _trace(self, batches: list[Batch]) -> float:
        if not batches:
            raise ValueError("eval_batches must hold at least one (inputs, targets) batch")
        for k, (x, y) in enumerate(batches):
            check_tensor(f"eval_batches[{k}] inputs", x, nonempty=True, finite=x.is_floating_point())
            check_tensor(f"eval_batches[{k}] targets", y, finite=y.is_floating_point())
            if x.ndim == 0 or y.ndim == 0 or x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"eval_batches[{k}] must pair inputs and targets with one row per example (the first dimension), "
                    f"got inputs of shape {tuple(x.shape)} and targets of shape {tuple(y.shape)}"
                )
        sizes = {int(x.shape[0]) for x, _ in batches}
        if len(sizes) != 1:
            raise ValueError(f"every evaluation batch must have the same size, got sizes {sorted(sizes)}")
        if self.estimator == "batches" and len(batches) < 2:
            raise ValueError("estimator='batches' needs >= 2 evaluation batches (a sample covariance)")
        if self.estimator == "per_example" and not self.distributed and sum(int(x.shape[0]) for x, _ in batches) < 2:
            raise ValueError(
                "estimator='per_example' needs >= 2 examples in eval_batches in all (a sample covariance), got 1"
            )
        dtypes = {p.dtype for p in self.params}
        for x, _ in batches:
            if x.is_floating_point() and x.dtype not in dtypes:
                raise TypeError(
                    f"eval_batches inputs are {x.dtype} but the model's parameters are "
                    f"{', '.join(sorted(map(str, dtypes)))}; cast the batches (e.g. x.to(model_dtype)) or the model"
                )
        if self.estimator == "per_example":
            coupled = [type(m).__name__ for m in self.model.modules() if isinstance(m, _BatchNorm) and m.training]
            if coupled:
                raise ValueError(
                    f"estimator='per_example' needs each example's gradient on its own, but the model has "
                    f"{coupled[0]} in training mode (batch statistics couple the examples); call model.eval() "
                    "before trace() or use estimator='batches'"
                )
        saved = [None if p.grad is None else p.grad.clone() for p in self.params]
        was_training = self.model.training
        D = preconditioner(self.optimizer if self.preconditioned else None, self.params)
        if self.reduction is None:
            self.reduction = self._detect_reduction(*batches[0])
        try:
            with kept_buffers(self.model):  # running statistics a train-mode forward updates
                if self.estimator == "batches":
                    return self._trace_batches(batches, D)
                return self._trace_per_example(batches, D)
        finally:
            self.model.train(was_training)
            for p, g in zip(self.params, saved):
                p.grad = g

    def _detect_reduction(self, x: torch.Tensor, y: torch.Tensor) -> str:
        """ "mean" or "sum" from the loss of batch (x, y) and of its two halves (eval mode, no gradients)."""
        n = x.shape[0]
        if n < 2:
            raise ValueError(
                f"reduction='auto' compares a batch's loss with its halves' and needs batches of >= 2 examples, got "
                f"{n}; pass reduction='mean' or 'sum'"
            )
        h = n // 2
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                parts = ((x, y), (x[:h], y[:h]), (x[h:], y[h:]))
                whole, a, b = (float(self.loss_fn(self.model(xx), yy)) for xx, yy in parts)
        finally:
            self.model.train(was_training)
        scale = max(abs(whole), abs(a) + abs(b))
        tol = 1e-4 * scale + 1e-30
        is_mean = abs(whole - (h * a + (n - h) * b) / n) <= tol
        is_sum = abs(whole - (a + b)) <= tol
        if is_mean != is_sum:
            return "mean" if is_mean else "sum"
        what = "both" if is_mean else "neither"
        raise ValueError(
            f"cannot tell whether loss_fn reduces by mean or by sum: its loss on a batch of {n} ({whole:.6g}) matches "
            f"{what} of the mean ({(h * a + (n - h) * b) / n:.6g}) and the sum ({a + b:.6g}) of its halves' losses; "
            "pass reduction='mean' or reduction='sum'"
        )

    def _loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The mean loss over the batch (a sum-reduced loss divided by the number of examples)."""
        loss = self.loss_fn(out, y)
        return loss / out.shape[0] if self.reduction == "sum" else loss

    # -- estimators -------------------------------------------------------------------------------------------------
    def _batch_grad(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        grads = torch.autograd.grad(self._loss(self.model(x), y), self.params, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(self.params, grads)]

    def _trace_batches(self, batches: list[Batch], D: list[torch.Tensor]) -> float:
        world = _group_size() if self.distributed else 1
        on = world > 1
        mean = [torch.zeros_like(p, dtype=torch.float64) for p in self.params]
        m2 = torch.zeros((), dtype=torch.float64)
        for k, (x, y) in enumerate(batches, start=1):
            grads = self._batch_grad(x, y)
            if on:
                import torch.distributed as dist

                flat = torch.cat([g.reshape(-1) for g in grads])
                dist.all_reduce(flat)
                flat /= world
                grads = list(torch.split(flat, [g.numel() for g in grads]))
            for i, (g, d, p) in enumerate(zip(grads, D, self.params)):
                u = (d.sqrt() * g.reshape(p.shape)).to(torch.float64)
                diff = u - mean[i]
                mean[i] += diff / k
                m2 += (diff * (u - mean[i])).sum()  # Welford: Σ (u − mean_old)(u − mean_new)
        return float(m2 / (len(batches) - 1))

    def _trace_per_example(self, batches: list[Batch], D: list[torch.Tensor]) -> float:
        on = self.distributed and _group_size() > 1
        B_local = batches[0][0].shape[0]
        x = torch.cat([b[0] for b in batches])
        y = torch.cat([b[1] for b in batches])
        found = self._sq_norms_linear(x, y, D) if self._linear_only and x.ndim == 2 else None
        sq, gsum = found if found is not None else self._sq_norms_vmap(x, y, D)
        n = torch.tensor(float(x.shape[0]), dtype=torch.float64)
        B = torch.tensor(float(B_local), dtype=torch.float64)
        flat = torch.cat([g.reshape(-1) for g in gsum])
        if on:
            import torch.distributed as dist

            packed = torch.cat([sq.reshape(1), n.reshape(1), B.reshape(1), flat])
            dist.all_reduce(packed)
            sq, n, B, flat = packed[0], packed[1], packed[2], packed[3:]
        dsq = torch.cat([d.reshape(-1).to(torch.float64) for d in D])
        mean = flat / n
        # Σ_i ||D^½ g_i||² − n ||D^½ ḡ||², ddof = 1
        tr_example = (sq - n * (dsq * mean**2).sum()) / (n - 1)
        return float(tr_example / B)

    def _sq_norms_linear(self, x: torch.Tensor, y: torch.Tensor, D: list[torch.Tensor]):
        """Σ_i ||D^½ ⊙ g_i||² and Σ_i g_i for nn.Linear-only models: one GEMM of squared activations and squared
        output gradients per layer. None when a layer's per-example gradient is not one outer product δ_i a_iᵀ (a
        layer called more than once, e.g. tied or reused, or fed other than one row per example): the caller then
        uses the vmap path."""
        n = x.shape[0]
        acts: dict[nn.Module, torch.Tensor] = {}
        outs: dict[nn.Module, torch.Tensor] = {}
        calls: dict[nn.Module, int] = {}
        rows_ok = [True]

        def save(mod: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            calls[mod] = calls.get(mod, 0) + 1
            a = inp[0]
            if a.ndim != 2 or a.shape[0] != n:
                rows_ok[0] = False
                return
            acts[mod] = a.detach()
            if out.requires_grad:  # else the layer is frozen and its input needs no gradient: nothing to count
                out.register_hook(lambda g: outs.__setitem__(mod, g.detach()))

        handles = [m.register_forward_hook(save) for m in self.model.modules() if isinstance(m, nn.Linear)]
        try:
            self.model.zero_grad(set_to_none=True)
            # the mean loss times n is the sum of per-example losses, so grad_output rows are the δ_i
            (self._loss(self.model(x), y) * x.shape[0]).backward()
        finally:
            for h in handles:
                h.remove()
        if not rows_ok[0] or any(c != 1 for c in calls.values()):
            return None
        index = {id(p): i for i, p in enumerate(self.params)}
        total = torch.zeros((), dtype=torch.float64)
        for m, a in acts.items():
            if m not in outs:  # the layer's output does not reach the loss: zero gradient
                continue
            delta = outs[m].to(torch.float64)
            a64 = a.to(torch.float64)
            if m.weight.requires_grad:
                d = D[index[id(m.weight)]].to(torch.float64)
                total += (d * ((delta * delta).T @ (a64 * a64))).sum()
            if m.bias is not None and m.bias.requires_grad:
                d = D[index[id(m.bias)]].to(torch.float64)
                total += (d * (delta * delta).sum(0)).sum()
        gsum = [p.grad.to(torch.float64).clone() if p.grad is not None else torch.zeros_like(p, dtype=torch.float64)
                for p in self.params]  # fmt: skip
        return total, gsum

    def _sq_norms_vmap(self, x: torch.Tensor, y: torch.Tensor, D: list[torch.Tensor]):
        """The same with explicit per-example gradients (``torch.func.vmap(grad)``), for any model."""
        from torch.func import functional_call, grad, vmap

        names = [n for n, p in self.model.named_parameters() if p.requires_grad]
        params = {n: p.detach() for n, p in zip(names, self.params)}
        buffers = {n: b.detach() for n, b in self.model.named_buffers()}

        def one(ps, xi, yi):
            out = functional_call(self.model, (ps, buffers), (xi.unsqueeze(0),))
            return self._loss(out, yi.unsqueeze(0))

        # randomness="different": train-mode dropout draws its own mask per example, as in a batched forward
        g = vmap(grad(one), in_dims=(None, 0, 0), randomness="different")(params, x, y)
        total = torch.zeros((), dtype=torch.float64)
        gsum = []
        for n, d in zip(names, D):
            gi = g[n].to(torch.float64)
            total += (d.to(torch.float64) * gi * gi).sum()
            gsum.append(gi.sum(0))
        return total, gsum


def _declared_reduction(loss_fn: Callable, reduction: str) -> str | None:
    """The reduction given by ``reduction`` or declared by the loss (a torch loss's ``.reduction``, a partial's
    ``reduction=`` keyword); None when it must be detected from data."""
    reduction = check_choice("reduction", reduction, ("auto", "mean", "sum"))
    declared = getattr(loss_fn, "reduction", None)
    if declared is None and isinstance(loss_fn, functools.partial):
        declared = loss_fn.keywords.get("reduction")
    if declared is not None:
        if declared not in ("mean", "sum"):
            raise ValueError(
                f"loss_fn.reduction must be 'mean' or 'sum' (a scalar loss over the batch), got {declared!r}"
            )
        if reduction != "auto" and reduction != declared:
            raise ValueError(f"reduction={reduction!r} contradicts loss_fn.reduction={declared!r}")
        return declared
    return None if reduction == "auto" else reduction


# -- the noise model ---------------------------------------------------------------------------------------------
def _single_run(run: Runs | pd.DataFrame, name: str) -> pd.DataFrame:
    f = run.frame if isinstance(run, Runs) else Runs.from_frame(run).frame
    if f["run_id"].nunique() != 1:
        raise ValueError(f"{name} must hold exactly one run, got {f['run_id'].nunique()}")
    return f


def _tau_and_s(f: pd.DataFrame, eta_peak: float) -> tuple[np.ndarray, np.ndarray]:
    """(τ, s) at the logged steps: the ``tau`` column if present, else the trapezoid integral of ``lr`` over
    steps (an approximation when evaluations are sparse)."""
    if "lr" not in f.columns or bool(f["lr"].isna().any()):
        raise ValueError("the noise model needs the 'lr' column (the applied LR at every logged step)")
    lr = f["lr"].to_numpy(dtype=np.float64)
    steps = f["step"].to_numpy(dtype=np.float64)
    if "tau" in f.columns and not bool(f["tau"].isna().any()):
        tau = f["tau"].to_numpy(dtype=np.float64)
    else:
        tau = np.concatenate([[0.0], np.cumsum(0.5 * (lr[1:] + lr[:-1]) * np.diff(steps))]) + lr[0] * steps[0]
    return tau, lr / eta_peak


class NoiseModel:
    """``L_s(t) ≈ L_const(τ_s(t)) + α (s(t) − 1) Tr Cov(u_batch)(t)`` (paper Sec. 4).

    Runs need the columns ``lr`` (applied LR), ``noise_trace`` (Tr Cov(u_batch) at the peak LR's preconditioner,
    from :class:`GradNoiseTracker`) and preferably ``tau``. ``trace_from="run"`` uses the trace measured on the run
    being predicted (the paper); ``"const"`` uses the constant run's trace at the same τ (a prediction that needs
    nothing from the new run but its schedule).
    """

    def __init__(self, alpha: float | None = None, trace_from: Literal["run", "const"] = "run") -> None:
        self.alpha = None if alpha is None else check_float("alpha", alpha)
        self.trace_from = check_choice("trace_from", trace_from, ("run", "const"))
        self._const: pd.DataFrame | None = None

    def _set_const(self, const_run: Runs | pd.DataFrame) -> None:
        f = _single_run(const_run, "const_run")
        if "lr" not in f.columns or bool(f["lr"].isna().any()):
            raise ValueError("const_run needs the 'lr' column")
        lr = f["lr"].to_numpy(dtype=np.float64)
        if not np.allclose(lr, lr[0], rtol=1e-9, atol=0):
            raise ValueError(
                f"const_run must be a constant-LR run; its lr varies from {lr.min():.4g} to {lr.max():.4g} "
                f"(schedule {f['schedule'].iloc[0]!r})"
            )
        if self.trace_from == "const" and ("noise_trace" not in f.columns or bool(f["noise_trace"].isna().all())):
            raise ValueError("trace_from='const' needs the 'noise_trace' column in const_run")
        if not lr[0] > 0:
            raise ValueError(f"const_run's lr must be > 0 (its peak LR sets s = lr / peak), got {lr[0]:.4g}")
        self.eta_peak = float(lr[0])
        tau, _ = _tau_and_s(f, self.eta_peak)
        self._const = f.assign(_tau=tau)

    def _parts(self, run: Runs | pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(L_s, L_const(τ_s), (s − 1)·TrCov, s) at the run's logged steps (NaN where τ_s leaves the const run)."""
        if self._const is None:
            raise ValueError("call fit(const_run, runs) first")
        f = _single_run(run, "run")
        tau, s = _tau_and_s(f, self.eta_peak)
        c = self._const
        ct = c["_tau"].to_numpy()
        base = np.interp(tau, ct, c["loss"].to_numpy())
        base[(tau < ct[0]) | (tau > ct[-1])] = np.nan
        if self.trace_from == "const":
            tr = np.interp(tau, ct, c["noise_trace"].to_numpy(dtype=np.float64))
        else:
            if "noise_trace" not in f.columns or bool(f["noise_trace"].isna().all()):
                raise ValueError(f"run {f['run_id'].iloc[0]!r} has no 'noise_trace' column")
            tr = f["noise_trace"].to_numpy(dtype=np.float64)
        return f["loss"].to_numpy(dtype=np.float64), base, (s - 1.0) * tr, s

    def fit(self, const_run: Runs | pd.DataFrame, runs: Runs | pd.DataFrame | list) -> NoiseModel:
        """Fit α by least squares over the points with s < 1 of ``runs`` (one run, a Runs of several, or a list)."""
        self._set_const(const_run)
        parts = _split(runs)
        if not parts:
            raise ValueError("runs must hold at least one schedule run to fit alpha on")
        ys, zs = [], []
        for r in parts:
            L, base, z, s = self._parts(r)
            ok = (s < 1.0 - 1e-12) & np.isfinite(base) & np.isfinite(z)
            ys.append(L[ok] - base[ok])
            zs.append(z[ok])
        y, z = np.concatenate(ys), np.concatenate(zs)
        if len(z) == 0 or not np.any(z != 0):
            raise ValueError("no point of the fitting runs has s < 1 and a non-zero noise trace: cannot fit alpha")
        self.alpha = float(np.dot(y, z) / np.dot(z, z))
        return self

    def predict(self, run: Runs | pd.DataFrame, alpha: float | None = None) -> np.ndarray:
        """Predicted loss at the run's logged steps (NaN where τ_s lies outside the constant run)."""
        a = self.alpha if alpha is None else check_float("alpha", alpha)
        if a is None:
            raise ValueError("alpha is not set: fit the model or pass alpha")
        _, base, z, _ = self._parts(run)
        return base + a * z

    def rmse(self, run: Runs | pd.DataFrame, alpha: float | None = None) -> float:
        """Root-mean-square error of :meth:`predict` over the run's points where it is defined; ``alpha=0`` gives
        the τ-matched constant-LR baseline."""
        L, *_ = self._parts(run)
        pred = self.predict(run, alpha)
        ok = np.isfinite(pred)
        return float(np.sqrt(np.mean((pred[ok] - L[ok]) ** 2)))


def _split(runs: Runs | pd.DataFrame | list) -> list[pd.DataFrame]:
    if isinstance(runs, list):
        return [_single_run(r, "runs item") for r in runs]
    f = runs.frame if isinstance(runs, Runs) else Runs.from_frame(runs).frame
    return [g for _, g in f.groupby("run_id", sort=True)]
