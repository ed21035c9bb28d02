"""SWAN as a ``torch.optim.Optimizer``: stateless SWAN on hidden matrices, AdamW on everything else, in one object.

Paper Algorithm 1, per step and per matrix parameter ``W`` (conv kernels viewed as ``(out, in·kh·kw)``)::

    Gn = GradNorm(∇W)                      # functional.grad_norm
    Δ  = GradWhitening(Gn; K, β)           # functional.grad_whitening, fp32 or wider
    Δ  = Δ · sqrt(m n) / ||Δ||_F           # functional.rescale_to_unit_rms
    W  = W (1 - η λ) - η Δ

Groups with ``algorithm="adamw"`` (token embeddings, LM head, norms, biases: the GaLore-benchmark convention the
paper follows) run torch's own AdamW kernel on the same state layout as ``torch.optim.AdamW``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

from icml25_shared.training import adamw_update
from icml25_shared.validate import check_float, check_lr
from swan.config import NonfinitePolicy, SWANConfig, validate_hparams
from swan.functional import Whitening, compute_dtype, swan_directions_into

__all__ = ["SWAN", "param_groups"]

logger = logging.getLogger(__name__)


def _as_matrix(t: Tensor) -> Tensor:
    """``(out, ...)`` viewed as ``(out, prod(...))``: conv kernels become ``(out, in·kh·kw)``."""
    return t.reshape(t.shape[0], -1)


class SWAN(torch.optim.Optimizer):
    """SWAN: SGD with GradNorm and GradWhitening (Ma et al., ICML 2025), no optimizer state on matrices.

    Every parameter group has an ``algorithm``: ``"swan"`` (default; parameters with >= 2 dimensions only, like
    ``torch.optim.Muon``) or ``"adamw"`` (anything; torch's AdamW update with ``adamw_betas``/``adamw_eps``,
    ``lr`` and ``weight_decay`` of the group). :func:`param_groups` builds the paper's split for a model::

        opt = SWAN(param_groups(model, lr=3e-3), ns_steps=10, ns_beta=0.8)

    Args:
        params: parameters or parameter groups (``dict`` with ``"params"`` and any option below as an override).
        lr: learning rate; after the rescale each matrix entry moves by about ``lr``.
        ns_steps: Newton-Schulz iterations (``None``: preset of ``whitening``, 10 for the paper's iteration).
        ns_beta: Newton-Schulz scale in (0, 1] (``None``: preset, 0.8; ``0.5`` = exact polar factor).
        whitening: ``"newton_schulz"``, ``"nsds"`` (experimental) or ``"svd"`` (exact reference).
        normalize: apply GradNorm (Alg. 3); ``False`` is the paper's "GradWhitening only" ablation.
        whiten: apply GradWhitening (Alg. 2); ``False`` is the paper's "GradNorm only" ablation.
        rescale: scale the direction to ``sqrt(m n)`` Frobenius norm (an Adam-like step of about ``lr`` per entry).
        norm_dim: GradNorm axis, -1 (paper: rows across inputs) or -2.
        eps: GradNorm's epsilon (inside the square root).
        weight_decay: decoupled weight decay ``W <- W (1 - lr wd)``.
        momentum: extension (not in the paper): SGD buffer before GradNorm; ``> 0`` allocates one per matrix.
            A scheduler that cycles momentum (``OneCycleLR``/``CyclicLR`` with their default
            ``cycle_momentum=True``) writes ``momentum`` into every group: SWAN groups created with ``momentum=0``
            keep the paper's stateless update (with a one-time ``UserWarning``), groups created with
            ``momentum > 0`` follow the cycled value, and AdamW groups take it as their beta1 (as
            ``torch.optim.AdamW`` does under those schedulers).
        whiten_dtype: lowest dtype the whitening runs in (bf16 parameters are whitened in fp32).
        nonfinite: ``"raise"`` (``FloatingPointError``) or ``"skip"`` (warn, leave that matrix unchanged) for a
            NaN/Inf gradient of a SWAN matrix. AdamW groups behave like ``torch.optim.AdamW``.
        foreach: whiten same-shaped matrices (tall ones transposed) as one stacked ``bmm`` chain, in buckets whose
            transient memory stays within ``max_bucket_bytes``; ``False``: one matrix at a time. ``None`` = on.
            Either way each direction is built in one buffer in place and applied before the next bucket is
            touched, and the gradients are left unchanged.
        max_bucket_bytes: cap of one bucket's transient memory: its matrices in the compute dtype plus their
            whitening buffers (four ``min(m, n)²`` matrices each). ``None``: the largest single matrix's, so a
            step's transient is one matrix plus its whitening buffers whether or not it batches (small matrices
            are batched, large ones go one by one).
        distributed_whitening: split the whitening round-robin over ``torch.distributed`` ranks and broadcast.
        norm_center: centre in GradNorm (paper) or not (RMS-only deviation).
        adamw_lr: ``lr`` of AdamW groups that set none (``None``: ``lr``).
        adamw_betas: AdamW moments' coefficients.
        adamw_eps: AdamW's epsilon.
        adamw_weight_decay: ``weight_decay`` of AdamW groups that set none.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        ns_steps: int | None = None,
        ns_beta: float | None = None,
        whitening: Whitening = "newton_schulz",
        normalize: bool = True,
        whiten: bool = True,
        rescale: bool = True,
        norm_dim: int = -1,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        whiten_dtype: torch.dtype = torch.float32,
        nonfinite: NonfinitePolicy = "raise",
        foreach: bool | None = None,
        distributed_whitening: bool = False,
        *,
        max_bucket_bytes: int | None = None,
        norm_center: bool = True,
        adamw_lr: float | None = None,
        adamw_betas: tuple[float, float] = (0.9, 0.999),
        adamw_eps: float = 1e-8,
        adamw_weight_decay: float = 0.0,
    ) -> None:
        defaults = {
            "lr": lr,
            "algorithm": "swan",
            "ns_steps": ns_steps,
            "ns_beta": ns_beta,
            "whitening": whitening,
            "normalize": normalize,
            "whiten": whiten,
            "rescale": rescale,
            "norm_dim": norm_dim,
            "norm_center": norm_center,
            "eps": eps,
            "weight_decay": weight_decay,
            "momentum": momentum,
            "whiten_dtype": whiten_dtype,
            "nonfinite": nonfinite,
            "foreach": foreach,
            "max_bucket_bytes": max_bucket_bytes,
            "distributed_whitening": distributed_whitening,
            "adamw_lr": adamw_lr,
            "adamw_betas": tuple(adamw_betas) if isinstance(adamw_betas, (list, tuple)) else adamw_betas,
            "adamw_eps": adamw_eps,
            "adamw_weight_decay": adamw_weight_decay,
        }
        validate_hparams(defaults)
        super().__init__(params, defaults)

    @classmethod
    def from_config(cls, params: Iterable[Tensor] | Iterable[dict[str, Any]], config: SWANConfig) -> SWAN:
        """Build the optimizer from a :class:`~swan.SWANConfig`."""
        return cls(params, **config.to_dict())

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group; AdamW groups without ``lr``/``weight_decay`` take ``adamw_lr``/``adamw_weight_decay``.
        Validates the group's options and, for SWAN groups, that every parameter is a real matrix (>= 2-D)."""
        group = dict(param_group)
        unknown = sorted(set(group) - set(self.defaults) - {"params", "name"})
        if unknown:
            warnings.warn(
                f"SWAN parameter group: unknown option(s) {unknown} are ignored; known options: "
                f"{sorted(self.defaults)}",
                UserWarning,
                stacklevel=3,
            )
        if group.get("algorithm", self.defaults["algorithm"]) == "adamw":
            if "lr" not in group and self.defaults["adamw_lr"] is not None:
                group["lr"] = self.defaults["adamw_lr"]
            group.setdefault("weight_decay", self.defaults["adamw_weight_decay"])
        if "adamw_betas" in group and isinstance(group["adamw_betas"], list):
            group["adamw_betas"] = tuple(group["adamw_betas"])
        super().add_param_group(group)
        group = self.param_groups[-1]
        validate_hparams(group)
        # whether the user asked for the momentum extension: a momentum-cycling scheduler must not switch it on
        group.setdefault("momentum_requested", group["momentum"] > 0)
        for p in group["params"]:
            if group["algorithm"] != "swan":
                continue
            if torch.is_complex(p):
                raise ValueError(
                    f"SWAN supports real parameters only, got a complex parameter of shape {tuple(p.shape)} "
                    "in a 'swan' group; put it in a group with algorithm='adamw'"
                )
            if p.dim() < 2:
                raise ValueError(
                    f"SWAN only supports parameters with at least 2 dimensions in a 'swan' group, got a parameter "
                    f"of shape {tuple(p.shape)}; put it in a group with algorithm='adamw' (see swan.param_groups). "
                    "With transformers' Trainer, whose optimizer_cls_and_kwargs route passes its own decay / no-decay "
                    "groups, build the optimizer yourself: Trainer(..., optimizers=(SWAN(param_groups(model), ...), "
                    "scheduler))"
                )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One optimisation step (``closure`` re-evaluates the loss, as in every ``torch.optim`` optimizer)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        n_swan = 0  # global matrix counter: round-robin owner of each matrix under distributed_whitening
        for group in self.param_groups:
            if group["algorithm"] == "adamw":
                self._adamw_group(group)
            else:
                n_swan = self._swan_group(group, n_swan)
        return loss

    # ------------------------------------------------------------------ AdamW side
    def _adamw_group(self, group: dict[str, Any]) -> None:
        # exactly torch.optim.AdamW, with its state layout, so its state_dict is interchangeable
        betas = group["adamw_betas"]
        if "max_momentum" in group:  # OneCycleLR / CyclicLR cycle "momentum" here: AdamW's beta1, as for AdamW
            betas = (float(group["momentum"]), betas[1])
        adamw_update(
            self.state,
            group["params"],
            lr=group["lr"],
            betas=betas,
            eps=group["adamw_eps"],
            weight_decay=group["weight_decay"],
            foreach=group["foreach"],
            owner="SWAN",
        )

    # ------------------------------------------------------------------ SWAN side
    def _swan_group(self, group: dict[str, Any], counter: int) -> int:
        params: list[Tensor] = []
        raw: list[Tensor] = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"SWAN does not support sparse gradients (parameter of shape {tuple(p.shape)})")
            params.append(p)
            raw.append(p.grad)
        if not params:
            return counter
        grads = self._check_finite(group, params, raw)  # None where a non-finite gradient is skipped
        if group["momentum"] > 0 and self._momentum_on(group):
            grads = self._apply_momentum(group, params, grads)

        world, rank = 1, 0
        if group["distributed_whitening"] and torch.distributed.is_available() and torch.distributed.is_initialized():
            world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
        # matrices with a (finite) gradient and at least one entry; index i keeps its round-robin owner
        found = [(i, g) for i, g in enumerate(grads) if g is not None and params[i].numel() > 0]
        live = [i for i, _ in found]
        if world > 1:
            self._distributed_updates(group, params, grads, live, counter, world, rank)
        else:
            for chunk in self._chunks(group, [_as_matrix(g) for _, g in found]):
                self._update_chunk(group, [params[live[j]] for j in chunk], [found[j][1] for j in chunk])
        return counter + len(params)

    def _update_chunk(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor]) -> None:
        # a function of its own: the chunk's buffer is freed on return, before the next chunk is built
        for p, d in zip(params, self._directions(group, [_as_matrix(g) for g in grads]), strict=True):
            self._apply(group, p, d)

    @staticmethod
    def _apply(group: dict[str, Any], p: Tensor, d: Tensor) -> None:
        lr, wd = group["lr"], group["weight_decay"]
        if wd != 0:
            p.mul_(1.0 - lr * wd)
        p.add_(d.reshape(p.shape).to(p.dtype), alpha=-lr)

    def _chunks(self, group: dict[str, Any], mats: list[Tensor]) -> list[list[int]]:
        """Which matrices are whitened together: one at a time (``foreach=False``), or buckets of the same shape up
        to a transpose whose transient memory (copies + whitening buffers) stays within ``max_bucket_bytes`` --
        by default the largest single matrix's, so batching never raises the step's peak."""
        if group["foreach"] is False:
            return [[i] for i in range(len(mats))]

        def cost(m: Tensor) -> int:  # the matrix's copy and its four whitening buffers, in the compute dtype
            return (m.numel() + 4 * min(m.shape) ** 2) * compute_dtype(m.dtype, group["whiten_dtype"]).itemsize

        buckets: dict[tuple[Any, ...], list[int]] = {}
        for i, m in enumerate(mats):
            buckets.setdefault((tuple(sorted(m.shape)), m.dtype, m.device), []).append(i)
        cap = group["max_bucket_bytes"]
        if cap is None:
            cap = max((cost(m) for m in mats), default=0)
        chunks: list[list[int]] = []
        for idx in buckets.values():
            size = max(1, cap // max(cost(mats[idx[0]]), 1))
            chunks += [idx[k : k + size] for k in range(0, len(idx), size)]
        return chunks

    def _distributed_updates(self, group, params, grads, live, counter, world, rank) -> None:
        """``distributed_whitening``: windows of ``world`` matrices, each whitened by its round-robin owner and
        broadcast, then applied and freed; the transient is ``world`` matrices (one per rank), not the model."""
        for w0 in range(0, len(live), world):
            window = live[w0 : w0 + world]
            dirs: list[Tensor] = []
            works = []
            for i in window:
                owner = (counter + i) % world
                if owner == rank:
                    d = self._directions(group, [_as_matrix(grads[i])])[0].contiguous()  # collectives need it
                else:
                    cdtype = compute_dtype(params[i].dtype, group["whiten_dtype"])
                    d = torch.empty(_as_matrix(params[i]).shape, dtype=cdtype, device=params[i].device)
                dirs.append(d)
                works.append(torch.distributed.broadcast(d, src=owner, async_op=True))
            for work in works:
                work.wait()
            for i, d in zip(window, dirs, strict=True):
                self._apply(group, params[i], d)
            del dirs, d  # freed before the next window

    def _check_finite(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor]) -> list[Tensor | None]:
        # one host sync for the whole group, no temporaries: a non-finite entry makes its matrix's sum non-finite
        # (a finite matrix whose sum overflows takes the exact per-entry check below, as a suspect)
        sums = torch.stack([g.sum(dtype=torch.promote_types(g.dtype, torch.float32)) for g in grads])
        suspects = sums.isfinite().logical_not_()
        if not bool(suspects.any()):
            return list(grads)
        out: list[Tensor | None] = []
        for p, g, suspect in zip(params, grads, suspects.tolist(), strict=True):
            if not suspect or bool(g.isfinite().all()):
                out.append(g)
                continue
            msg = f"non-finite gradient (NaN or Inf) for a SWAN parameter of shape {tuple(p.shape)}"
            if group["nonfinite"] == "raise":
                raise FloatingPointError(f"{msg}; pass nonfinite='skip' to skip such matrices")
            warnings.warn(f"{msg}: skipping this matrix for this step", RuntimeWarning, stacklevel=4)
            out.append(None)
        return out

    def _momentum_on(self, group: dict[str, Any]) -> bool:
        """False when a momentum-cycling scheduler set ``momentum`` on a group created without it (the paper's
        update is stateless); warns once per optimizer."""
        if "max_momentum" not in group or group.get("momentum_requested", True):
            return True
        if not getattr(self, "_warned_cycled_momentum", False):
            self._warned_cycled_momentum = True
            warnings.warn(
                "a scheduler cycles momentum on SWAN (OneCycleLR/CyclicLR with cycle_momentum=True): the SWAN "
                "matrices keep the paper's stateless update and the AdamW groups cycle their beta1; build SWAN with "
                "momentum > 0 to use the cycled momentum extension, or pass cycle_momentum=False",
                UserWarning,
                stacklevel=4,
            )
        return False

    def _apply_momentum(
        self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor | None]
    ) -> list[Tensor | None]:
        out: list[Tensor | None] = []
        for p, g in zip(params, grads, strict=True):
            if g is None:
                out.append(None)
                continue
            state = self.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = g.detach().clone()
            else:
                buf.mul_(group["momentum"]).add_(g)
            out.append(buf)
        return out

    def _directions(self, group: dict[str, Any], mats: list[Tensor]) -> list[Tensor]:
        """Directions of same-shaped (up to a transpose) matrices, as views of one in-place buffer."""
        return swan_directions_into(
            mats,
            normalize=group["normalize"],
            whiten=group["whiten"],
            rescale=group["rescale"],
            ns_steps=group["ns_steps"],
            ns_beta=group["ns_beta"],
            whitening=group["whitening"],
            norm_dim=group["norm_dim"],
            norm_center=group["norm_center"],
            eps=group["eps"],
            whiten_dtype=group["whiten_dtype"],
        )


_HEAD_NAMES = ("lm_head", "output_projection", "embed_out")


def _output_heads(model: nn.Module, head: Any = "auto") -> list[tuple[str, nn.Module, str]]:
    """The model's output head(s) as (name, module, why).

    ``head="auto"``: ``get_output_embeddings()`` when the model has one (transformers), otherwise ``nn.Linear``
    modules named like a LM head, or else the model's last ``nn.Linear`` when its output size is the vocabulary of
    one of the model's ``nn.Embedding`` tables (tied or untied). ``head=None``: none. A submodule name (or several):
    those modules."""
    names = {id(m): n for n, m in model.named_modules()}
    if head is None:
        return []
    if head != "auto":
        wanted = (head,) if isinstance(head, str) else tuple(head)
        out = []
        for n in wanted:
            try:
                out.append((n, model.get_submodule(n), "given"))
            except AttributeError as e:
                raise ValueError(f"head: model has no submodule {n!r}") from e
        return out
    get_head = getattr(model, "get_output_embeddings", None)
    found = get_head() if callable(get_head) else None
    if isinstance(found, nn.Module):
        return [(names.get(id(found), "?"), found, "get_output_embeddings()")]
    vocab = {m.num_embeddings for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    heads: list[tuple[str, nn.Module, str]] = [
        (n, m, "named like an LM head") for n, m in linears if n.rsplit(".", 1)[-1] in _HEAD_NAMES
    ]
    if not heads and linears and linears[-1][1].out_features in vocab:
        n, m = linears[-1]  # the model's last Linear projects onto a vocabulary: its LM head
        heads.append((n, m, f"last Linear, {m.out_features} outputs = an embedding's vocabulary"))
    return heads


def param_groups(
    model: nn.Module,
    lr: float = 1e-3,
    adamw_lr: float | None = None,
    weight_decay: float = 0.0,
    adamw_weight_decay: float = 0.0,
    *,
    exclude: str | Iterable[str] = (),
    head: str | Iterable[str] | None = "auto",
) -> list[dict[str, Any]]:
    """The paper's split of ``model``'s trainable parameters into a SWAN group and an AdamW group.

    SWAN gets every parameter with >= 2 dimensions (attention/MLP matrices, conv kernels) except token embeddings
    (``nn.Embedding``/``nn.EmbeddingBag``), the output head (``model.get_output_embeddings()`` for transformers
    models; otherwise a ``nn.Linear`` named ``lm_head``/``output_projection``/``embed_out``, or the model's last
    ``nn.Linear`` when its output size is an embedding table's vocabulary) and names containing ``exclude`` (one
    string, or any of several). AdamW gets the rest: embeddings, head, norms, biases. Shared (tied) parameters
    appear once. Empty groups are left out.

    The head rule is a heuristic (a plain classifier's last ``nn.Linear`` stays on SWAN; a classifier whose class
    count equals an embedding's vocabulary goes to AdamW): ``head=`` overrides it with the head's submodule name(s),
    or ``None`` for no head. What was matched is stated in each group's ``"name"`` (e.g. ``"adamw: head lm_head
    (get_output_embeddings()); 2 embedding tables; 5 other tensors (norms, biases)"``) and logged at INFO.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(exclude, str):
        exclude = (exclude,)  # one name, not its characters
    exclude = tuple(exclude)
    for s in exclude:
        if not isinstance(s, str) or not s:
            raise ValueError(f"exclude must be a non-empty string or an iterable of them, got an entry {s!r}")
    check_lr("lr", lr)
    check_float("adamw_lr", adamw_lr, min=0.0, allow_none=True)
    check_float("weight_decay", weight_decay, min=0.0)
    check_float("adamw_weight_decay", adamw_weight_decay, min=0.0)
    adamw_ids: set[int] = set()
    for module in model.modules():
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
            adamw_ids.update(id(p) for p in module.parameters(recurse=False))
    n_embed = len(adamw_ids)
    heads = _output_heads(model, head)
    for _, module, _ in heads:
        adamw_ids.update(id(p) for p in module.parameters())
    swan, other = [], []
    for name, p in model.named_parameters():  # named_parameters() already yields a shared tensor once
        if not p.requires_grad:
            continue
        is_matrix = p.dim() >= 2 and not torch.is_complex(p)
        if is_matrix and id(p) not in adamw_ids and not any(s in name for s in exclude):
            swan.append(p)
        else:
            other.append(p)
    head_text = "; ".join(f"head {n} ({why})" for n, _, why in heads) or "no output head"
    n_excluded = sum(1 for p in other if p.dim() >= 2 and id(p) not in adamw_ids)
    what = f"{head_text}; {n_embed} embedding tensor(s)" + (f"; {n_excluded} excluded matrices" if n_excluded else "")
    logger.info("param_groups: %d SWAN matrices; AdamW: %s; %d tensors in all", len(swan), what, len(other))
    groups = []
    if swan:
        name = f"swan: {len(swan)} matrices"
        groups.append({"params": swan, "algorithm": "swan", "lr": lr, "weight_decay": weight_decay, "name": name})
    if other:
        groups.append(
            {
                "params": other,
                "algorithm": "adamw",
                "lr": lr if adamw_lr is None else adamw_lr,
                "weight_decay": adamw_weight_decay,
                "name": f"adamw: {what}; {len(other)} tensors in all (norms, biases, ...)",
            }
        )
    if not groups:
        raise ValueError("model has no trainable parameters")
    return groups
