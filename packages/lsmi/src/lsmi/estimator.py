"""LSMIEstimator: three classifiers give the pointwise MIs, two KNIFEs the surprisals; one aligned scoring pass
gives r, u1, u2, s for every sample (the paper's estimation procedure; the official code's defects fixed, see the
README's "Choices").

Distributed: when ``torch.distributed`` is initialised, ``fit`` wraps the models in DDP and every rank takes an
equal-as-possible shard of each global batch (losses are weighted so that the averaged gradient is exactly the
single-process gradient of that global batch); ``transform`` scores a contiguous shard per rank and gathers.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from icml25_shared.device import get_device, torch_threads
from icml25_shared.progress import track
from icml25_shared.validate import ArgumentTypeError, check_array, check_bool, check_choice, check_int
from lsmi.config import LSMIConfig
from lsmi.functional import lsmi_from_terms, mean_shift, pmi
from lsmi.knife import KNIFE, GaussianMixtureDensity, StackedKNIFE

__all__ = ["LSMIEstimator", "Interactions", "StackedMLP", "mlp_classifier"]

_F32_MAX = float(torch.finfo(torch.float32).max)


def mlp_classifier(in_dim: int, n_classes: int, hidden: int = 64) -> nn.Sequential:
    """The official classifier head: Linear(d, h) - ReLU - Linear(h, h) - ReLU - Linear(h, C)."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes)
    )


class StackedMLP(nn.Module):
    """The three classifier heads f1(x1), f2(x2), f12([x1, x2]) as one batched MLP (one ``bmm`` per layer).

    Inputs are zero-padded to the widest head; the padded weight columns start at zero and, seeing zero inputs,
    get zero gradients, so each head is exactly ``mlp_classifier(d_i, C, hidden)`` (same init distribution:
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with each head's true fan_in).
    """

    def __init__(self, d1: int, d2: int, n_classes: int, hidden: int = 64) -> None:
        super().__init__()
        self.d1, self.d2, self.dmax = d1, d2, d1 + d2
        fans = (d1, d2, d1 + d2)

        def init(shape_in: int, shape_out: int, fan: tuple[int, ...] | int, mask_rows: bool = False):
            w = torch.zeros(3, shape_in, shape_out)
            b = torch.zeros(3, 1, shape_out)
            for i in range(3):
                f = fan[i] if isinstance(fan, tuple) else fan
                bound = 1.0 / math.sqrt(f)
                rows = f if mask_rows else shape_in
                w[i, :rows].uniform_(-bound, bound)
                b[i].uniform_(-bound, bound)
            return nn.Parameter(w), nn.Parameter(b)

        self.w1, self.b1 = init(self.dmax, hidden, fans, mask_rows=True)
        self.w2, self.b2 = init(hidden, hidden, hidden)
        self.w3, self.b3 = init(hidden, n_classes, hidden)

    def stack_inputs(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        n = len(x1)
        pad1 = torch.zeros(n, self.dmax - self.d1, dtype=x1.dtype, device=x1.device)
        pad2 = torch.zeros(n, self.dmax - self.d2, dtype=x2.dtype, device=x2.device)
        return torch.stack([torch.cat([x1, pad1], 1), torch.cat([x2, pad2], 1), torch.cat([x1, x2], 1)])

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """Logits of the three heads, shape (3, N, C)."""
        h = torch.relu(torch.baddbmm(self.b1, self.stack_inputs(x1, x2), self.w1))
        h = torch.relu(torch.baddbmm(self.b2, h, self.w2))
        return torch.baddbmm(self.b3, h, self.w3)


class _Heads(nn.Module):
    """User-supplied heads (f1, f2, f12) behind the StackedMLP interface."""

    def __init__(self, f1: nn.Module, f2: nn.Module, f12: nn.Module) -> None:
        super().__init__()
        self.f1, self.f2, self.f12 = f1, f2, f12
        self.raw_input = False  # True: fed the raw features they were trained on (fit's classifier_input="raw")

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.f1(x1), self.f2(x2), self.f12(torch.cat([x1, x2], 1))])


@dataclass
class Interactions:
    """Per-sample redundancy ``r``, uniquenesses ``u1``, ``u2`` and synergy ``s`` (1-D tensors), plus the shift
    ``delta`` applied (0 when ``adjust=None``) and the ``units``."""

    r: torch.Tensor
    u1: torch.Tensor
    u2: torch.Tensor
    s: torch.Tensor
    delta: float = 0.0
    units: str = "nats"

    def mean(self) -> tuple[float, float, float, float]:
        """Dataset-level (R, U1, U2, S)."""
        return tuple(float(v.mean()) for v in (self.r, self.u1, self.u2, self.s))  # type: ignore[return-value]

    def to_dict(self) -> dict[str, Any]:
        return {
            "r": self.r.cpu().numpy(),
            "u1": self.u1.cpu().numpy(),
            "u2": self.u2.cpu().numpy(),
            "s": self.s.cpu().numpy(),
            "delta": self.delta,
            "units": self.units,
        }


def _dist() -> tuple[bool, int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return True, torch.distributed.get_rank(), torch.distributed.get_world_size()
    return False, 0, 1


class LSMIEstimator:
    """Sample-wise multimodal interaction estimator (sklearn-style ``fit`` / ``transform`` / ``score``)."""

    def __init__(self, config: LSMIConfig | None = None, **kwargs: Any) -> None:
        if config is None and kwargs:
            config = LSMIConfig(**kwargs)
        elif kwargs:
            raise ValueError("pass either a config or keyword arguments, not both")
        if config is not None and not isinstance(config, LSMIConfig):
            raise ArgumentTypeError(
                f"config must be an LSMIConfig (or pass its fields as keywords), got {type(config).__name__}"
            )
        # LSMIEstimator() without a config is an empty shell for load_state_dict (fit asks for n_classes)
        self.config = config
        self.device = get_device(config.device if config is not None else None)
        self.fitted = False
        self.fit_delta_: float | None = None

    @property
    def _cfg(self) -> LSMIConfig:
        """The config; an estimator built without one has none until ``load_state_dict``."""
        if self.config is None:
            raise ValueError("this LSMIEstimator has no config: pass n_classes (or an LSMIConfig), or load_state_dict")
        return self.config

    @classmethod
    def from_state_dict(cls, sd: dict[str, Any]) -> LSMIEstimator:
        """A fitted estimator rebuilt from :meth:`state_dict` (its config included)."""
        return cls().load_state_dict(sd)

    # -- input checks ----------------------------------------------------------------------------------------
    def _prepare(self, x1: Any, x2: Any, y: Any, fitting: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Features as float64 (2-D, finite, inside the float32 range: the models run in float32) and labels."""

        def feat(x: Any, name: str) -> torch.Tensor:
            if isinstance(x, torch.Tensor):
                t = x.detach().cpu()
                if t.is_complex():  # .double() would drop the imaginary part without a word
                    raise ArgumentTypeError(
                        f"{name} must have a real numeric dtype, got a tensor of shape {tuple(t.shape)} and dtype"
                        f" {t.dtype}"
                    )
            else:
                t = torch.as_tensor(check_array(name, x, dtype="numeric"))
            if t.ndim == 1:
                t = t[:, None]
            if t.ndim != 2:
                raise ValueError(f"{name} must be 2-D (n_samples, n_features), got shape {tuple(t.shape)}")
            t = t.double()
            if not torch.isfinite(t).all():
                nan, inf = int(t.isnan().sum()), int(t.isinf().sum())
                raise ValueError(f"{name} contains NaN or inf ({nan} NaN and {inf} infinite entries)")
            big = float(t.abs().max()) if t.numel() else 0.0
            if big > _F32_MAX:
                raise ValueError(
                    f"{name} holds values beyond the float32 range (max |x| = {big:.3g} > {_F32_MAX:.3g}); the models"
                    " run in float32: rescale the features"
                )
            return t

        t1, t2 = feat(x1, "x1"), feat(x2, "x2")
        if not isinstance(y, torch.Tensor):
            ya = np.asarray(y)
            if ya.dtype.kind not in "biuf":
                first = ya.reshape(-1)[:3].tolist()
                raise ValueError(
                    f"y must hold integer class labels in [0, n_classes), got dtype {ya.dtype} (first values {first});"
                    " encode them first, e.g. with sklearn.preprocessing.LabelEncoder"
                )
            y = ya
        ty = torch.as_tensor(y).detach().reshape(-1)
        if ty.is_complex():
            raise ArgumentTypeError(f"y must hold integer class labels in [0, n_classes), got dtype {ty.dtype}")
        if not (len(t1) == len(t2) == len(ty)):
            raise ValueError(f"x1, x2 and y must have the same length, got {len(t1)}, {len(t2)} and {len(ty)}")
        if len(ty) == 0:
            raise ValueError("x1, x2 and y are empty")
        if ty.is_floating_point() and not torch.all(torch.isfinite(ty) & (ty == ty.round())):
            bad = ty[~torch.isfinite(ty) | (ty != ty.round())][0].item()
            raise ValueError(f"y must hold integer labels, got {bad!r}")
        ty = ty.long()
        if ty.dtype == torch.bool:
            ty = ty.long()
        c = self._cfg.n_classes
        if ty.min() < 0 or ty.max() >= c:
            bad = ty[(ty < 0) | (ty >= c)][0].item()
            raise ValueError(f"labels must lie in [0, n_classes={c}), got {bad}")
        if not fitting:
            for name, t, d in (("x1", t1, self.d1), ("x2", t2, self.d2)):
                if t.shape[1] != d:
                    raise ValueError(f"{name} has {t.shape[1]} features at transform, but {d} at fit")
        return t1, t2, ty

    def _standardize(self, t1: torch.Tensor, t2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z-scores in float64, cast to float32; a value that leaves the float32 range is refused, not turned
        into inf."""
        out = []
        for name, t, mean, std in (("x1", t1, self.mean1, self.std1), ("x2", t2, self.mean2, self.std2)):
            z = (t.double() - mean.double()) / std.double()
            big = float(z.abs().max()) if z.numel() else 0.0
            if big > _F32_MAX:
                raise ValueError(
                    f"{name} standardised with the fit statistics reaches |z| = {big:.3g}, beyond the float32 range"
                )
            out.append(z.float())
        return out[0], out[1]

    @staticmethod
    def _scale(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and standard deviation per feature (float64); a constant feature gets scale 1, as scikit-learn's
        ``StandardScaler`` does, instead of a division by ~0."""
        mean, std = t.mean(0), t.std(0) if len(t) > 1 else torch.zeros(t.shape[1], dtype=t.dtype)
        constant = (std == 0) | (std <= 10 * torch.finfo(torch.float64).eps * mean.abs())  # relative rounding
        return mean, torch.where(constant, torch.ones_like(std), std)

    # -- fit -------------------------------------------------------------------------------------------------
    def fit(
        self,
        x1: Any,
        x2: Any,
        y: Any,
        classifiers: tuple[nn.Module, nn.Module, nn.Module] | None = None,
        verbose: bool | None = None,
        classifier_input: str = "raw",
    ) -> LSMIEstimator:
        """Train the classifiers (unless ``classifiers=(f1, f2, f12)`` are given, f12 taking [x1, x2]) and the
        two KNIFEs on (x1, x2, y), on ``config.n_threads`` torch threads (the caller's setting is restored).

        ``classifier_input`` says what user ``classifiers`` were trained on, and so what they are fed: ``"raw"``
        (default: the features as passed, cast to float32) or ``"standardized"`` (z-scored with this fit's
        statistics, as the built-in heads are). The KNIFEs always see the standardised features."""
        if self.config is None:
            raise ValueError("this LSMIEstimator has no config: pass n_classes (or an LSMIConfig), or load_state_dict")
        classifier_input = check_choice("classifier_input", classifier_input, ("raw", "standardized"))
        if verbose is not None:  # "no" used to count as True and show the progress bar
            verbose = check_bool("verbose", verbose)
        with self._threads():
            return self._fit(x1, x2, y, classifiers, verbose, classifier_input)

    def _threads(self) -> contextlib.AbstractContextManager:
        return torch_threads(self._cfg.n_threads)

    def _fit(self, x1, x2, y, classifiers, verbose, classifier_input) -> LSMIEstimator:
        cfg = self._cfg
        t1, t2, ty = self._prepare(x1, x2, y, fitting=True)
        self.d1, self.d2 = t1.shape[1], t2.shape[1]
        if cfg.standardize:
            (self.mean1, self.std1), (self.mean2, self.std2) = self._scale(t1), self._scale(t2)
        else:
            self.mean1, self.std1 = torch.zeros(self.d1, dtype=torch.float64), torch.ones(self.d1, dtype=torch.float64)
            self.mean2, self.std2 = torch.zeros(self.d2, dtype=torch.float64), torch.ones(self.d2, dtype=torch.float64)
        z1, z2 = self._standardize(t1, t2)
        counts = torch.bincount(ty, minlength=cfg.n_classes).double()
        if cfg.prior == "empirical":
            if (counts == 0).any():
                missing = torch.nonzero(counts == 0)[0].item()
                raise ValueError(f"class {missing} never occurs in y; the empirical prior needs every class")
            self.log_prior = torch.log(counts / counts.sum()).float()
        else:
            self.log_prior = torch.full((cfg.n_classes,), -math.log(cfg.n_classes))
        torch.manual_seed(cfg.seed)
        gen = torch.Generator().manual_seed(cfg.seed)
        if classifiers is not None:
            if len(classifiers) != 3:
                raise ValueError(f"classifiers must be (f1, f2, f12), got {len(classifiers)} modules")
            self.heads: nn.Module = _Heads(*classifiers).to(self.device).eval()
            self.heads.raw_input = classifier_input == "raw"
            self._check_heads(*self._head_inputs(t1[:2], t2[:2], z1[:2], z2[:2]))
        gmm = cfg.density == "gmm"
        if cfg.validation_fraction > 0:
            if classifiers is None:
                self.heads = StackedMLP(self.d1, self.d2, cfg.n_classes, cfg.hidden)
            if not gmm:
                self.knife1, self.knife2 = KNIFE(self.d1, cfg.n_kernels), KNIFE(self.d2, cfg.n_kernels)
            self._train_early_stopping(z1, z2, ty, gen, classifiers is None, not gmm, verbose)
        else:  # the paper's recipe: fixed epochs, classifiers first, then the KNIFEs
            self.history_ = {}
            if classifiers is None:
                self.heads = StackedMLP(self.d1, self.d2, cfg.n_classes, cfg.hidden)
                self._train_classifiers(z1, z2, ty, gen, verbose)
            if not gmm:
                self.knife1, self.knife2 = KNIFE(self.d1, cfg.n_kernels), KNIFE(self.d2, cfg.n_kernels)
                self._train_knifes(z1, z2, gen, verbose)
        if gmm:  # EM on all fit samples (no held-out split needed: EM has no step size or epoch count to choose)
            self.knife1, self.knife2 = (
                GaussianMixtureDensity.fit(z, cfg.n_kernels, cfg.gmm_covariance, cfg.gmm_max_iter, cfg.seed)
                .to(self.device)
                .eval()
                for z in (z1, z2)
            )
            self.history_["gmm_converged"] = [self.knife1.converged_, self.knife2.converged_]
        self.fitted = True
        self.fit_delta_ = None
        if cfg.adjust == "fit_mean_shift":  # the reference shift: from the fit samples, fixed from now on
            t = self._score_terms(t1, t2, ty, 4096)
            self.fit_delta_ = float(mean_shift(*lsmi_from_terms(t["i1"], t["i2"], t["i12"], t["h1"], t["h2"]))[4])
        return self

    def _head_inputs(
        self, t1: torch.Tensor, t2: torch.Tensor, z1: torch.Tensor, z2: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What the heads are fed: the raw features (float32) for user heads trained on them, else z-scores."""
        if getattr(self.heads, "raw_input", False):
            return t1.float(), t2.float()
        return z1, z2

    def _train_early_stopping(
        self, z1, z2, ty, gen, train_heads: bool, train_knifes: bool, verbose: bool | None
    ) -> None:
        """All five models in one loop with one fused Adam step per batch, stopped on held-out loss.

        The two KNIFEs train as one :class:`StackedKNIFE` (as the three heads are one :class:`StackedMLP`).
        With ``train_knifes=False`` (``density="gmm"``) only the heads train here.

        A random ``validation_fraction`` of the fit samples is held out. After every epoch the held-out mean
        cross-entropy of each head and mean NLL of each KNIFE is measured; each of the five keeps its best state
        (the heads are slices of one stacked model, snapshotted slice by slice), and training stops once none of
        them has improved for ``patience`` epochs (or after ``max(epochs_clf, epochs_entropy)`` epochs; a model
        past its own epoch budget stops improving by definition). The best states are restored at the end.
        """
        cfg = self._cfg
        distributed, rank, world = _dist()
        n = len(ty)
        perm = torch.randperm(n, generator=gen)
        if n < 2:
            raise ValueError(
                f"validation_fraction={cfg.validation_fraction} holds samples out for early stopping, which needs"
                f" at least 2 fit samples, got {n}; pass more samples or validation_fraction=0"
            )
        n_val = min(n - 1, max(1, round(cfg.validation_fraction * n)))
        val, train = perm[:n_val], perm[n_val:]
        v1, v2, vy = (t[val].to(self.device) for t in (z1, z2, ty))
        a1, a2, ay = z1[train], z2[train], ty[train]
        stacked = StackedKNIFE(cast(KNIFE, self.knife1), cast(KNIFE, self.knife2)) if train_knifes else None
        modules: list[nn.Module] = ([self.heads] if train_heads else []) + ([stacked] if stacked is not None else [])
        if not modules:
            self.history_ = {"epochs": 0, "held_out_loss": [math.inf] * 5, "n_validation": n_val}
            return
        for m in modules:
            m.to(self.device).train()
        wrapped = [nn.parallel.DistributedDataParallel(m) for m in modules] if distributed else modules
        groups, budgets = [], []
        if train_heads:
            groups.append({"params": list(self.heads.parameters())})
            budgets.append((cfg.epochs_clf, cfg.clf_lr_step))
        if stacked is not None:
            groups.append({"params": list(stacked.parameters())})
            budgets.append((cfg.epochs_entropy, cfg.entropy_lr_step))
        opt = torch.optim.Adam(groups, lr=cfg.lr, fused=self.device.type in ("cpu", "cuda") or None)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, [lambda e, s=s: 0.1 ** (e // s) if s else 1.0 for _, s in budgets]
        )
        ce = nn.functional.cross_entropy
        best = torch.full((5,), math.inf)  # f1, f2, f12, knife1, knife2
        stale = torch.zeros(5, dtype=torch.long)
        if not train_heads:
            stale[:3] = cfg.patience
        if not train_knifes:
            stale[3:] = cfg.patience
        snap = {id(m): {k: v.detach().clone() for k, v in m.state_dict().items()} for m in modules}
        limits = torch.tensor(
            [cfg.epochs_clf if train_heads else 0] * 3 + [cfg.epochs_entropy if train_knifes else 0] * 2
        )
        disable = (None if verbose is None else not verbose) or rank != 0
        epochs = 0
        for epoch in track(range(int(limits.max())), "LSMI fit", disable=disable):
            active = epoch < limits
            for idx in torch.randperm(len(ay), generator=gen).split(cfg.batch_size):
                local = idx[rank::world]  # this rank's shard of the global batch
                b1, b2, by = a1[local].to(self.device), a2[local].to(self.device), ay[local].to(self.device)
                # sums over the shard, scaled by world / |global batch|: DDP's average over ranks is then exactly
                # the gradient of the global-batch mean (empty shards included)
                loss = torch.zeros(())
                if train_knifes and active[3]:  # past its epoch budget a model is not run (nor synchronised)
                    loss = loss + wrapped[-1](b1, b2).sum()  # both KNIFEs in one batched pass
                if train_heads and active[:3].any():
                    logits = wrapped[0](b1, b2)  # (3, B, C)
                    per_head = ce(logits.reshape(-1, logits.shape[-1]), by.repeat(3), reduction="none")
                    loss = loss + (per_head.view(3, -1).sum(1) * active[:3]).sum()
                if not loss.requires_grad:
                    continue
                opt.zero_grad(set_to_none=True)
                (loss * (world / len(idx))).backward()
                opt.step()
            sched.step()
            epochs += 1
            held_out = self._held_out_losses(v1, v2, vy, train_heads, stacked)
            improved = (held_out < best - cfg.tol) & active
            best = torch.where(improved, held_out, best)
            stale = torch.where(improved, torch.zeros_like(stale), stale + 1)
            if train_heads and improved[:3].any():
                head_state = self.heads.state_dict()
                for i in torch.nonzero(improved[:3]).flatten().tolist():
                    for k, v in head_state.items():  # every StackedMLP tensor has the head on dim 0
                        snap[id(self.heads)][k][i] = v[i]
            if stacked is not None and improved[3:].any():
                knife_state = stacked.state_dict()
                for i in torch.nonzero(improved[3:]).flatten().tolist():
                    for k, v in knife_state.items():  # parameters have the KNIFE on dim 0; buffers are fixed
                        snap[id(stacked)][k][i] = v[i]
            if bool(((stale >= cfg.patience) | ~(epoch + 1 < limits)).all()):
                break
        for m in modules:
            m.load_state_dict(snap[id(m)])
            m.eval()
        if stacked is not None:
            for g, k in enumerate((self.knife1, self.knife2)):
                k.load_state_dict(stacked.knife_state(g))
                k.to(self.device).eval()
        self.history_ = {"epochs": epochs, "held_out_loss": best.tolist(), "n_validation": n_val}

    @torch.no_grad()
    def _held_out_losses(self, v1, v2, vy, heads: bool, stacked: StackedKNIFE | None) -> torch.Tensor:
        """Held-out mean cross-entropy of the three heads and mean NLL of the two KNIFEs, shape (5,)."""
        out = torch.full((5,), math.inf)
        if heads:
            self.heads.eval()
            logits = self.heads(v1, v2)
            out[:3] = torch.stack([nn.functional.cross_entropy(logits[i], vy) for i in range(3)]).cpu()
            self.heads.train()
        if stacked is not None:
            out[3:] = stacked(v1, v2).mean(1).cpu()
        return out

    @torch.no_grad()
    def _check_heads(self, z1: torch.Tensor, z2: torch.Tensor) -> None:
        """User heads must map n samples to (n, n_classes) logits: a wider head would silently be read as a
        posterior over classes that do not exist."""
        c = self._cfg.n_classes
        heads = cast(_Heads, self.heads)  # called on user heads only
        for name, f, x in (("f1", heads.f1, z1), ("f2", heads.f2, z2), ("f12", heads.f12, torch.cat([z1, z2], 1))):
            if not callable(f):
                raise ArgumentTypeError(f"classifier {name} must be a torch module (callable), got {type(f).__name__}")
            try:
                out = f(x.to(self.device))
            except Exception as e:
                raise ValueError(
                    f"classifier {name} failed on a float32 input of shape {tuple(x.shape)} (n_samples, features):"
                    f" {type(e).__name__}: {e}"
                ) from e
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(x), c):
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise ValueError(
                    f"classifier {name} must return logits of shape (n_samples, n_classes={c}), got {got} for"
                    f" {len(x)} samples"
                )

    def _batches(self, n: int, gen: torch.Generator) -> list[torch.Tensor]:
        perm = torch.randperm(n, generator=gen)
        return list(perm.split(self._cfg.batch_size))

    def _loop(
        self,
        modules: list[nn.Module],
        loss_fn,
        tensors,
        epochs: int,
        step: int | None,
        gen,
        zero_grad: bool,
        desc: str,
        verbose: bool | None,
    ) -> None:
        distributed, rank, world = _dist()
        for m in modules:
            m.to(self.device).train()
        wrapped = modules
        if distributed:
            wrapped = [nn.parallel.DistributedDataParallel(m) for m in modules]
        params = [p for m in modules for p in m.parameters()]
        # fused Adam: one kernel per step instead of ~10 per parameter (about 25% of fit time on CPU); same update
        opt = torch.optim.Adam(params, lr=self._cfg.lr, fused=self.device.type in ("cpu", "cuda") or None)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=step or epochs + 1, gamma=0.1)
        n = len(tensors[0])
        disable = None if verbose is None else not verbose
        for _ in track(range(epochs), desc, disable=disable or rank != 0):
            for idx in self._batches(n, gen):
                local = idx[rank::world]  # this rank's shard of the global batch
                batch = [t[local].to(self.device) for t in tensors]
                # loss_fn returns a sum over the shard; DDP averages over ranks, so scaling by world / |global
                # batch| makes the gradient exactly that of the global-batch mean (empty shards included)
                loss = loss_fn(wrapped, batch) * (world / len(idx))
                if zero_grad:
                    opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            sched.step()
        for m in modules:
            m.eval()

    def _train_classifiers(self, z1, z2, ty, gen, verbose) -> None:
        ce = nn.functional.cross_entropy

        def loss_fn(mods, b):
            x1, x2, y = b
            logits = mods[0](x1, x2)  # (3, B, C): the sum of the three heads' cross-entropies
            return ce(logits.reshape(-1, logits.shape[-1]), y.repeat(3), reduction="sum")

        cfg = self._cfg
        self._loop(
            [self.heads], loss_fn, (z1, z2, ty), cfg.epochs_clf, cfg.clf_lr_step, gen, True, "LSMI classifiers", verbose
        )

    def _train_knifes(self, z1, z2, gen, verbose) -> None:
        def loss_fn(mods, b):
            return mods[0](b[0], b[1]).sum()  # both KNIFEs in one batched pass

        cfg = self._cfg
        stacked = StackedKNIFE(cast(KNIFE, self.knife1), cast(KNIFE, self.knife2))
        self._loop(
            [stacked],
            loss_fn,
            (z1, z2),
            cfg.epochs_entropy,
            cfg.entropy_lr_step,
            gen,
            not cfg.legacy_grad_accumulation,
            "LSMI entropies",
            verbose,
        )
        for g, k in enumerate((self.knife1, self.knife2)):
            k.load_state_dict(stacked.knife_state(g))
            k.to(self.device).eval()

    # -- scoring ---------------------------------------------------------------------------------------------
    def terms(self, x1: Any, x2: Any, y: Any, batch_size: int = 4096) -> dict[str, torch.Tensor]:
        """The five per-sample terms i1, i2, i12, h1, h2 (nats) in one aligned pass over the samples (on
        ``config.n_threads`` torch threads)."""
        self._check_fitted()
        batch_size = check_int("batch_size", batch_size, min=1)
        with self._threads():
            return self._terms(x1, x2, y, batch_size)

    @torch.no_grad()
    def _terms(self, x1: Any, x2: Any, y: Any, batch_size: int) -> dict[str, torch.Tensor]:
        t1, t2, ty = self._prepare(x1, x2, y, fitting=False)
        return self._score_terms(t1, t2, ty, batch_size)

    @torch.no_grad()
    def _score_terms(self, t1: torch.Tensor, t2: torch.Tensor, ty: torch.Tensor, batch_size: int):
        z1, z2 = self._standardize(t1, t2)
        h1, h2 = self._head_inputs(t1, t2, z1, z2)
        distributed, rank, world = _dist()
        n = len(ty)
        lo, hi = (n * rank) // world, (n * (rank + 1)) // world
        out: dict[str, list[torch.Tensor]] = {k: [] for k in ("i1", "i2", "i12", "h1", "h2")}
        lp = self.log_prior.to(self.device)
        for s in range(lo, hi, batch_size):
            e = min(hi, s + batch_size)
            a, b, c = z1[s:e].to(self.device), z2[s:e].to(self.device), ty[s:e].to(self.device)
            logp = torch.log_softmax(self.heads(h1[s:e].to(self.device), h2[s:e].to(self.device)), -1)
            for j, name in enumerate(("i1", "i2", "i12")):
                out[name].append(pmi(logp[j], c, lp))
            out["h1"].append(self.knife1(a))
            out["h2"].append(self.knife2(b))
        res = {k: torch.cat(v).cpu() if v else torch.zeros(0) for k, v in out.items()}
        if distributed:
            gathered: list[dict[str, torch.Tensor]] = [None] * world  # type: ignore[list-item]
            torch.distributed.all_gather_object(gathered, res)
            res = {k: torch.cat([g[k] for g in gathered]) for k in res}
        return res

    def log_posteriors(self, x1: Any, x2: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Standardised features z1, z2 and the three heads' log p(y | x1), log p(y | x2), log p(y | x1, x2),
        shape (3, N, C) (no gradient; user heads fed what ``fit``'s ``classifier_input`` says)."""
        self._check_fitted()
        with self._threads(), torch.no_grad():
            n = len(x1)
            t1, t2, _ = self._prepare(x1, x2, np.zeros(n, dtype=np.int64), fitting=False)
            z1, z2 = self._standardize(t1, t2)
            h1, h2 = self._head_inputs(t1, t2, z1, z2)
            logp = torch.cat(
                [torch.log_softmax(self.heads(h1[s : s + 4096], h2[s : s + 4096]), -1) for s in range(0, n, 4096)], 1
            )
            return z1, z2, logp

    def transform(self, x1: Any, x2: Any, y: Any) -> Interactions:
        """Per-sample (r, u1, u2, s); with ``adjust="mean_shift"`` shifted by the dataset-level delta of these
        samples (a sample's values then depend on the samples scored with it), with ``adjust="fit_mean_shift"``
        by the delta of the fit samples, fixed at ``fit`` (a sample's values depend on it alone)."""
        t = self.terms(x1, x2, y)
        r, u1, u2, s = lsmi_from_terms(t["i1"], t["i2"], t["i12"], t["h1"], t["h2"])
        cfg = self._cfg
        delta = 0.0
        if cfg.adjust == "mean_shift":
            r, u1, u2, s, delta = mean_shift(r, u1, u2, s)
        elif cfg.adjust == "fit_mean_shift":
            assert self.fit_delta_ is not None  # set by fit (and kept by state_dict) under this adjust
            delta = float(self.fit_delta_)
            r, u1, u2, s = r + delta, u1 - delta, u2 - delta, s + delta
        if cfg.units == "bits":
            nat = math.log(2)
            r, u1, u2, s, delta = r / nat, u1 / nat, u2 / nat, s / nat, delta / nat
        return Interactions(r, u1, u2, s, float(delta), cfg.units)

    def score(self, x1: Any, x2: Any, y: Any) -> tuple[float, float, float, float]:
        """Dataset-level (R, U1, U2, S): the means of :meth:`transform`."""
        return self.transform(x1, x2, y).mean()

    # -- persistence -----------------------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError("this LSMIEstimator is not fitted yet; call fit(x1, x2, y) first")

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the fitted estimator (tensors and plain values only)."""
        self._check_fitted()
        sd: dict[str, Any] = {
            "config": self._cfg.to_dict(),
            "d1": self.d1,
            "d2": self.d2,
            "log_prior": self.log_prior.clone(),
            "fit_delta": self.fit_delta_,
        }
        for k in ("mean1", "std1", "mean2", "std2"):
            sd[k] = getattr(self, k).clone()
        if not isinstance(self.heads, StackedMLP):
            raise ValueError("state_dict() stores the built-in heads; save user-supplied classifiers yourself")
        for k in ("heads", "knife1", "knife2"):
            sd[k] = {n: v.detach().cpu().clone() for n, v in getattr(self, k).state_dict().items()}
        return sd

    def load_state_dict(self, sd: dict[str, Any]) -> LSMIEstimator:
        """Restore a state from :meth:`state_dict` (classifiers must be the default MLP heads)."""
        self.config = LSMIConfig(**sd["config"])
        self.device = get_device(self._cfg.device)
        cfg = self._cfg
        self.d1, self.d2 = sd["d1"], sd["d2"]
        self.log_prior = sd["log_prior"]
        self.fit_delta_ = sd.get("fit_delta")
        for k in ("mean1", "std1", "mean2", "std2"):
            setattr(self, k, sd[k])
        self.heads = StackedMLP(self.d1, self.d2, cfg.n_classes, cfg.hidden)
        density = GaussianMixtureDensity if cfg.density == "gmm" else KNIFE
        self.knife1, self.knife2 = density(self.d1, cfg.n_kernels), density(self.d2, cfg.n_kernels)
        for k in ("heads", "knife1", "knife2"):
            m = getattr(self, k)
            m.load_state_dict(sd[k])
            m.to(self.device).eval()
        self.fitted = True
        return self
