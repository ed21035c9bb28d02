"""FRUGAL as a ``torch.optim.Optimizer``: a state-full optimizer on a subspace, a state-free rule on the rest.

Paper Algorithm 1 (FRUGAL), per step ``k`` and projectable matrix ``W`` with gradient ``G``::

    if k mod T == 0:  choose the state-full subspace (selectors.py); optionally reset its statistics
    g_low = down(G)                                       # r-dimensional, the optimizer state lives here
    u     = up(StateFull(g_low; η·s_p))                   # AdamW by default (functional.py)
    u    += StateFree(G - up(g_low); η·s_p·s_f)           # signSGD by default: full-rank update
    W     = W (1 - η λ) + u

Groups with ``projectable=False`` (embeddings, norms, LM head: see :func:`param_groups`) run torch's own AdamW
kernel on ``torch.optim.AdamW``'s state layout. Selections (projectors, index tensors, active blocks) and the
optimizer's random generator are kept as tensors/group entries, so ``state_dict()`` round-trips exactly.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import torch
from torch import Tensor, nn

from frugal.config import FRUGALConfig, normalise_hparams, validate_hparams
from frugal.functional import adamw_update, lion_update, sgdm_update, state_free_update
from frugal.memory import adamw_bytes, matrix_state_bytes
from frugal.selectors import (
    block_schedule,
    coordinate_selection,
    gather,
    project_down,
    projection_rank,
    random_projection,
    resolve_side,
    scatter,
    svd_projection,
)
from icml25_shared.training import adamw_update as torch_adamw_step
from icml25_shared.training import optimizer_state_bytes
from icml25_shared.validate import check_int

__all__ = ["FRUGAL", "param_groups", "DEFAULT_TARGET_MODULES"]

logger = logging.getLogger(__name__)

#: torch's multi-tensor kernels (``torch._foreach_*``, what ``torch.optim``'s ``foreach`` paths run): real, stable
#: functions that torch's type stubs do not re-export, so they are reached through an untyped alias
_mt: Any = torch

try:  # the dtype torch.optim.AdamW uses for its ``step`` counters
    from torch.optim.optimizer import _get_scalar_dtype
except ImportError:  # pragma: no cover - older/newer torch

    def _get_scalar_dtype() -> torch.dtype:
        return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


#: module-name fragments whose ``nn.Linear`` (or transformers ``Conv1D``) weights are projectable: the authors'
#: rule (LLaMA / BERT / RoBERTa names) plus the attention and MLP names of GPT-2 (``attn.c_attn``, ``mlp.c_fc``),
#: GPT-NeoX / Falcon (``attention.query_key_value``, ``attention.dense``), OPT (``fc1``, ``fc2``) and T5
DEFAULT_TARGET_MODULES = (
    "attn",
    "mlp",
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "up_proj",
    "down_proj",
    "gate_proj",
    "query",
    "key",
    "value",
    "intermediate.dense",
    "output.dense",
    "attention",
    "fc1",
    "fc2",
    "SelfAttention",
    "EncDecAttention",
    "DenseReluDense",
)
_PROJECTIONS = ("svd", "random")
_MATRIX_ONLY = ("svd", "random", "randperm", "columns", "rows")
_INDEX_KEYS = ("rows", "cols", "flat")
_SELECTION_KEYS = frozenset(("left", "right", *_INDEX_KEYS))
_MOMENT_KEYS = ("exp_avg", "exp_avg_sq", "momentum_buffer", "step")
_GALORE_KEYS = {"update_proj_gap": "update_gap", "scale": "state_full_lr_scale", "proj_type": "proj_side"}


class FRUGAL(torch.optim.Optimizer):
    """FRUGAL (Zmushko et al., ICML 2025): full-rank updates with optimizer state on a subspace only.

    Parameter groups with ``projectable=True`` get the gradient split; the others run AdamW (same ``lr``,
    ``betas``, ``eps``, ``weight_decay``). :func:`param_groups` builds the paper's split for a transformers model::

        opt = FRUGAL(param_groups(model), lr=1e-3, density=0.25, update_gap=200)

    galore-torch style groups (``{"params": ..., "rank": r, "update_proj_gap": T, "scale": α, "proj_type": ...}``)
    are accepted and become projectable ``svd`` groups with a fixed rank.

    The positional arguments and defaults are ``torch.optim.AdamW``'s (``params, lr, betas, eps, weight_decay,
    amsgrad``; then ``maximize``, ``foreach``, ``capturable``, ``differentiable``, ``fused`` by keyword), so
    ``torch.optim.AdamW(...)`` becomes ``FRUGAL(...)`` with the same call; with no projectable group (plain
    parameters) FRUGAL *is* AdamW, step for step. ``amsgrad``, ``capturable``, ``differentiable`` and ``fused``
    are accepted at their defaults only (``NotImplementedError`` naming the argument otherwise).

    Args:
        params: parameters or parameter groups; any option below can be overridden per group.
        lr: learning rate η.
        betas: AdamW's moment coefficients.
        eps: AdamW's ε.
        weight_decay: decoupled decay λ with the unscaled η, on every parameter (default 0.01 as
            ``torch.optim.AdamW``).
        maximize: ascend the objective (the gradient is negated for every part of the update, as AdamW does).
        foreach: torch's multi-tensor kernels.
        density: ρ ∈ [0, 1].
        update_gap: T ≥ 1 (steps between refreshes).
        selector: ``"block"``, ``"svd"``, ``"random"``, ``"randperm"``, ``"columns"``, ``"rows"``, ``"randk"``.
        state_full: ``"adamw"``, ``"sgdm"`` or ``"lion"``.
        state_free: ``"signsgd"``, ``"sgd"`` or ``"none"``.
        state_full_lr_scale: s_p (state-full lr η·s_p).
        state_free_lr_scale: s_f (state-free lr η·s_p·s_f).
        reset_statistics: zero the state-full moments at every refresh.
        proj_side: side of ``svd``/``random``/``randperm``.
        block_order: order of the block selector.
        seed: seed of the optimizer's generator. Further options: see :class:`frugal.FRUGALConfig`.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float | Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        density: float = 0.25,
        update_gap: int = 200,
        selector: str = "block",
        state_full: str = "adamw",
        state_free: str = "signsgd",
        state_full_lr_scale: float = 1.0,
        state_free_lr_scale: float = 1.0,
        reset_statistics: bool = True,
        proj_side: str = "std",
        block_order: str = "descending",
        seed: int = 0,
        rank: int | None = None,
        legacy_block_momentum_init: bool = False,
        nonfinite: str = "raise",
        sync_selectors: bool = True,
    ) -> None:
        defaults = {
            "lr": lr,
            "betas": tuple(betas) if isinstance(betas, (list, tuple)) else betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
            "foreach": foreach,
            "capturable": capturable,
            "differentiable": differentiable,
            "fused": fused,
            "density": density,
            "update_gap": update_gap,
            "selector": selector,
            "state_full": state_full,
            "state_free": state_free,
            "state_full_lr_scale": state_full_lr_scale,
            "state_free_lr_scale": state_free_lr_scale,
            "reset_statistics": reset_statistics,
            "proj_side": proj_side,
            "block_order": block_order,
            "rank": rank,
            "legacy_block_momentum_init": legacy_block_momentum_init,
            "nonfinite": nonfinite,
            "sync_selectors": sync_selectors,
            "projectable": False,
            "transposed": False,
        }
        validate_hparams(defaults)
        normalise_hparams(defaults)
        check_int("seed", seed, min=0)
        self.seed = int(seed)
        self._generator = torch.Generator().manual_seed(self.seed)
        self._buffers: dict[tuple[torch.dtype, torch.device], Tensor] = {}
        self._views: dict[tuple[torch.dtype, torch.device, tuple[int, ...]], Tensor] = {}
        super().__init__(params, defaults)
        if not any(g["projectable"] for g in self.param_groups):
            logger.warning("FRUGAL: no group has projectable=True, every parameter runs AdamW (see param_groups)")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, params: Iterable[Tensor] | Iterable[dict[str, Any]], config: FRUGALConfig) -> FRUGAL:
        """Build the optimizer from a :class:`~frugal.FRUGALConfig`."""
        return cls(params, **config.to_dict())

    @classmethod
    def galore_preset(
        cls,
        params: Iterable[dict[str, Any]],
        rank_fraction: float = 0.25,
        lr: float = 1e-2,
        update_gap: int = 200,
        scale: float = 0.25,
        proj_side: str = "std",
        **kwargs: Any,
    ) -> FRUGAL:
        """GaLore (Zhao et al., 2024) as the authors re-ran it: ``svd`` projection, no state-free update, moments
        kept across refreshes, state-full lr scaled by ``scale`` (GaLore's α); ``weight_decay`` defaults to 0 as
        ``galore_torch.GaLoreAdamW``'s.

        Equal to ``GaLoreAdamW`` step for step up to the first projector refresh after the initial one; from then on
        the two can part: an SVD singular vector is defined up to its sign, round-off can flip it in one of the two,
        and the moments carried across the refresh then meet the new gradients with the opposite sign. The
        projected subspace and the second moments stay equal at that refresh (tested). Measured on the tests' tiny
        LLaMA at T = 20: without a flip the two agree to 6e-7 (relative to the distance travelled) after 45 steps;
        flipping the first basis vector of every projector after the refresh at step 20 puts them 0.057 apart by
        step 45."""
        kwargs.setdefault("weight_decay", 0.0)
        return cls(
            params,
            lr=lr,
            density=rank_fraction,
            update_gap=update_gap,
            selector="svd",
            state_free="none",
            reset_statistics=False,
            state_full_lr_scale=scale,
            proj_side=proj_side,
            **kwargs,
        )

    @classmethod
    def badam_preset(
        cls,
        params: Iterable[dict[str, Any]],
        density: float = 0.25,
        lr: float = 1e-3,
        update_gap: int = 200,
        block_order: str = "descending",
        **kwargs: Any,
    ) -> FRUGAL:
        """BAdam (Luo et al., 2024): Adam on the active blocks only, the other blocks frozen until their turn."""
        return cls(
            params,
            lr=lr,
            density=density,
            update_gap=update_gap,
            selector="block",
            state_free="none",
            block_order=block_order,
            **kwargs,
        )

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (galore-torch keys translated), validate it and the shapes of its projectable tensors."""
        group = dict(param_group)
        if "rank" in group:  # a galore-torch group: projectable, SVD unless told otherwise
            group.setdefault("projectable", True)
            group.setdefault("selector", "svd")
        for old, new in _GALORE_KEYS.items():
            if old in group:
                group.setdefault(new, group.pop(old))
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
        validate_hparams(group)
        normalise_hparams(group)
        super().add_param_group(group)
        group = self.param_groups[-1]
        validate_hparams(group)
        group.setdefault("frugal_step", 0)
        group.setdefault("active_blocks", [])
        group.setdefault("next_block", None)
        if not group["projectable"]:
            return
        clamped: set[tuple[int, ...]] = set()
        for p in group["params"]:
            if group["transposed"] and p.dim() != 2:
                raise ValueError(f"transposed=True needs 2-D tensors, got a parameter of shape {tuple(p.shape)}")
            if group["rank"] is not None and group["selector"] in _MATRIX_ONLY and p.dim() == 2:
                shape = _matrix_shape(p, group)
                dim = _rank_dim(group["selector"], group["proj_side"], shape)
                if group["rank"] > dim and shape not in clamped:
                    clamped.add(shape)
                    warnings.warn(
                        f"rank={group['rank']} exceeds the dimension ({dim}) that selector={group['selector']!r} "
                        f"projects for a parameter of shape {shape}: it is clamped to {dim} (full rank on that side, "
                        "no state-free part)",
                        UserWarning,
                        stacklevel=3,
                    )
            if group["selector"] in _MATRIX_ONLY and p.dim() != 2:
                raise ValueError(
                    f"selector={group['selector']!r} needs 2-D tensors, got a parameter of shape {tuple(p.shape)} "
                    "in a projectable group; use selector='block' or 'randk', or put it in a non-projectable group"
                )
            if torch.is_complex(p):
                raise ValueError(f"FRUGAL supports real parameters only, got a complex one of shape {tuple(p.shape)}")
        if group["selector"] == "block":
            self._n_active(group)

    @staticmethod
    def _n_active(group: dict[str, Any]) -> int:
        n_active = int(round(len(group["params"]) * group["density"]))
        if group["block_order"] == "mirror" and n_active % 2:
            raise ValueError(
                f"block_order='mirror' needs an even number of active blocks, got round({len(group['params'])} x "
                f"{group['density']}) = {n_active}"
            )
        return n_active

    # ------------------------------------------------------------------ state_dict
    def state_dict(self) -> dict[str, Any]:
        """torch's state dict plus the optimizer's generator state (``"frugal_generator"``)."""
        sd = super().state_dict()
        sd["frugal_generator"] = self._generator.get_state()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loading, except that index tensors keep their integer dtype and the generator is restored."""
        sd = dict(state_dict)
        gen = sd.pop("frugal_generator", None)
        indices = {pid: {k: v for k, v in st.items() if k in _INDEX_KEYS} for pid, st in sd.get("state", {}).items()}
        super().load_state_dict(sd)
        saved_ids = chain.from_iterable(g["params"] for g in sd["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        by_id = dict(zip(saved_ids, params, strict=True))
        for pid, idx in indices.items():
            p = by_id[pid]
            for k, v in idx.items():
                self.state[p][k] = v.to(device=p.device, dtype=torch.long, copy=True)
        if gen is not None:
            self._generator.set_state(gen)

    # ------------------------------------------------------------------ memory
    def expected_state_bytes(self) -> int:
        """Closed form (memory.py) of the state this optimizer holds once every parameter has had a gradient."""
        total = 0
        for group in self.param_groups:
            active = set(group["active_blocks"])
            for i, p in enumerate(group["params"]):
                if not group["projectable"]:
                    total += adamw_bytes(p.numel(), p.element_size())
                    continue
                total += matrix_state_bytes(
                    _matrix_shape(p, group),
                    selector=group["selector"],
                    density=group["density"],
                    proj_side=group["proj_side"],
                    state_full=group["state_full"],
                    rank=group["rank"],
                    active=i in active,
                    element_size=p.element_size(),
                )
        return total

    def memory_report(self) -> dict[str, float]:
        """Bytes of every tensor in ``self.state`` (each storage once), the closed form, AdamW's bytes for the same
        parameters (two moments and a step each), and the ratio state/AdamW."""
        params = list(chain.from_iterable(g["params"] for g in self.param_groups))
        adamw = sum(adamw_bytes(p.numel(), p.element_size()) for p in params)
        measured = optimizer_state_bytes(self)
        return {
            "state_bytes": measured,
            "expected_state_bytes": self.expected_state_bytes(),
            "adamw_state_bytes": adamw,
            "ratio": measured / adamw if adamw else 0.0,
        }

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One optimisation step (``closure`` re-evaluates the loss, as in every ``torch.optim`` optimizer)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            # maximize: the whole update (AdamW, state-full and state-free parts) on -G, as torch.optim.AdamW does;
            # negation is exact, so the gradients are restored bit for bit
            grads = [g for g in (p.grad for p in group["params"]) if g is not None and not g.is_sparse]
            flipped = grads if group["maximize"] else []
            if flipped:
                _mt._foreach_neg_(flipped)
            try:
                if group["projectable"]:
                    self._projectable_group(group)
                else:
                    self._adamw_group(group)
            finally:
                if flipped:
                    _mt._foreach_neg_(flipped)
        return loss

    def _adamw_group(self, group: dict[str, Any], params: list[Tensor] | None = None, lr: float | None = None) -> None:
        """torch's AdamW on ``params`` (default: the group's), with ``torch.optim.AdamW``'s state layout."""
        torch_adamw_step(
            self.state,
            group["params"] if params is None else params,
            lr=group["lr"] if lr is None else lr,
            betas=group["betas"],
            eps=group["eps"],
            weight_decay=group["weight_decay"] if lr is None else 0.0,  # projectable: decay applied beforehand
            foreach=group["foreach"],
            owner="FRUGAL",
        )

    def _checked(self, group: dict[str, Any]) -> list[tuple[int, Tensor]]:
        """(index in group, parameter) of the tensors to update: a gradient, sparse refused, non-finite raised or
        skipped (the exact per-tensor search only runs when a sum is not finite: an overflowing sum of finite
        entries costs a search and nothing else)."""
        out = []
        for i, p in enumerate(group["params"]):
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"FRUGAL does not support sparse gradients (parameter of shape {tuple(p.shape)})")
            out.append((i, p))
        # a sum is non-finite whenever an entry is (NaN and ±Inf propagate): one pass per tensor, one host sync
        if not out or bool(torch.stack([p.grad.sum() for _, p in out]).isfinite().all()):
            return out
        kept = []
        for i, p in out:
            if bool(p.grad.isfinite().all()):
                kept.append((i, p))
                continue
            msg = f"non-finite gradient (NaN or Inf) for a projectable parameter of shape {tuple(p.shape)}"
            if group["nonfinite"] == "raise":
                raise FloatingPointError(f"{msg}; pass nonfinite='skip' to skip such tensors")
            warnings.warn(f"{msg}: skipping it for this step", RuntimeWarning, stacklevel=4)
        return kept

    def _projectable_group(self, group: dict[str, Any]) -> None:
        items = self._checked(group)
        k = group["frugal_step"]
        refresh = k % group["update_gap"] == 0
        group["frugal_step"] = k + 1
        lr, wd = group["lr"], group["weight_decay"]
        lr_p = lr * group["state_full_lr_scale"]
        lr_f = lr_p * group["state_free_lr_scale"]
        if group["selector"] == "block":
            self._block_group(group, items, refresh, lr_p, lr_f)
            return
        refreshed = []
        # a transposed group (transformers Conv1D, weight stored (in, out)) is optimised as the (out, in) matrix
        t = group["transposed"]
        states = [self.state[p] for _, p in items]
        for (_, p), state in zip(items, states, strict=True):
            if refresh or not _SELECTION_KEYS.intersection(state):
                self._choose_subspace(p, _grad(p).mT if t else _grad(p), state, group)
                refreshed.append(p)
        if refreshed and group["selector"] == "svd" and group["sync_selectors"]:
            self._broadcast_projectors(refreshed)
        if group["selector"] in _PROJECTIONS:
            self._projection_group(group, [p for _, p in items], states, lr_p, lr_f)
            return
        for (_, param), state in zip(items, states, strict=True):
            p, g = (param.mT, _grad(param).mT) if t else (param, _grad(param))
            if wd != 0:
                p.mul_(1 - lr * wd)
            sel = {key: state[key] for key in _INDEX_KEYS if key in state}
            update_low = self._state_full_step(gather(g, sel), state, group, lr_p)
            # at selected entries the residual is exactly 0, so its state-free update is 0 there too
            u = state_free_update(g, group["state_free"], lr_f)
            if u is None:
                u = torch.zeros(p.shape, dtype=p.dtype, device=p.device)
            p.add_(scatter(update_low, sel, u.contiguous()))

    def _projection_group(
        self, group: dict[str, Any], params: list[Tensor], states: list[dict[str, Any]], lr_p: float, lr_f: float
    ) -> None:
        """``svd`` / ``random``: per matrix ``W ← W(1 − ηλ) − η_f·sign(G − up(down(G))) + up(StateFull(down(G)))``.

        The work is three m×n×r products (down, the residual, up), the state-full rule on r dimensions and one
        m×n pass for the state-free rule; GaLore does the first and the last product. The residual is written into
        one scratch buffer reused by every matrix (no m×n allocation per step), its sign is added to ``W`` with
        ``alpha = −η_f`` and the up-projection is accumulated into ``W`` by ``addmm_``; the state-full AdamW runs
        on every matrix of the group at once (``torch._foreach_*``, the same arithmetic as
        :func:`frugal.functional.adamw_update`)."""
        t, lr, wd = group["transposed"], group["lr"], group["weight_decay"]
        mats = [(q.mT, _grad(q).mT) if t else (q, _grad(q)) for q in params]
        lows = [project_down(g, st.get("left"), st.get("right")) for st, (_, g) in zip(states, mats, strict=True)]
        updates = self._state_full_steps(lows, states, group, lr_p)
        for state, (p, g), low, update_low in zip(states, mats, lows, updates, strict=True):
            left, right = state.get("left"), state.get("right")
            if wd != 0:
                p.mul_(1 - lr * wd)
            # a full-rank projection leaves a residual of pure round-off: its sign would be noise
            full_rank = (left is None or left.shape[1] == left.shape[0]) and (
                right is None or right.shape[0] == right.shape[1]
            )
            if group["state_free"] != "none" and not full_rank:
                r = self._scratch(g)
                if right is not None:  # G - up(down(G)), one fused addmm into the scratch buffer
                    torch.addmm(g, low if left is None else left @ low, right, alpha=-1, out=r)
                else:
                    assert left is not None  # a projection has at least one side
                    torch.addmm(g, left, low, alpha=-1, out=r)
                if group["state_free"] == "signsgd":
                    r.sign_()
                p.add_(r, alpha=-lr_f)  # -η_f·sign(R) is exact, so adding with alpha is the product's sum
            if left is not None and right is not None:
                p.addmm_(left @ update_low, right)
            elif right is not None:
                p.addmm_(update_low, right)
            else:
                assert left is not None
                p.addmm_(left, update_low)

    def _scratch(self, like: Tensor) -> Tensor:
        """A reusable buffer shaped as ``like`` (one flat buffer per dtype and device, grown to the largest matrix,
        and a cached view per shape; scratch space, not optimizer state: it is not in ``state_dict`` and holds
        nothing between steps)."""
        key = (like.dtype, like.device, tuple(like.shape))
        view = self._views.get(key)
        if view is None:
            flat_key = (like.dtype, like.device)
            buf = self._buffers.get(flat_key)
            if buf is None or buf.numel() < like.numel():
                buf = self._buffers[flat_key] = torch.empty(like.numel(), dtype=like.dtype, device=like.device)
                self._views = {k: v for k, v in self._views.items() if k[:2] != flat_key}  # views of the old one
            view = self._views[key] = buf[: like.numel()].view(like.shape)
        return view

    def _choose_subspace(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """New selection for ``p`` from its gradient ``grad`` (as a matrix, transposed for a transposed group;
        Alg. 1, every T steps); moments reset if asked or if their shape changes."""
        selector, shape = group["selector"], tuple(grad.shape)
        for key in ("left", "right", *_INDEX_KEYS):
            state.pop(key, None)
        if selector in _PROJECTIONS:
            side = resolve_side(group["proj_side"], shape)
            r = projection_rank(shape, group["density"], side, group["rank"])
            if selector == "svd" and r > 0:
                left, right = svd_projection(grad, r, side)
            else:
                left, right = random_projection(shape, r, side, self._generator, p.dtype, p.device)
            if left is not None:
                state["left"] = left
            if right is not None:
                state["right"] = right
        else:
            sel = coordinate_selection(
                selector,
                shape,
                group["density"],
                self._generator,
                p.device,
                proj_side=group["proj_side"],
                rank=group["rank"],
            )
            state.update(sel)
        if group["reset_statistics"]:
            for key in _MOMENT_KEYS:
                state.pop(key, None)

    def _broadcast_projectors(self, params: list[Tensor]) -> None:
        """Rank 0's SVD projectors to every rank (the SVD of a replicated gradient may differ by round-off and
        in the signs of singular vectors)."""
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return
        works = [
            dist.broadcast(self.state[p][key], src=0, async_op=True)
            for p in params
            for key in ("left", "right")
            if key in self.state[p]
        ]
        for w in works:
            if w is not None:  # async_op=True returns a work handle
                w.wait()

    def _state_full_step(self, g: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float) -> Tensor:
        """The state-full optimizer on ``g`` (moments created, or re-created when ``g``'s shape changed)."""
        rule = group["state_full"]
        key = "momentum_buffer" if rule == "sgdm" else "exp_avg"
        if key not in state or state[key].shape != g.shape:
            for k in _MOMENT_KEYS:
                state.pop(k, None)
            state[key] = torch.zeros_like(g, memory_format=torch.preserve_format)
            if rule == "adamw":
                state["exp_avg_sq"] = torch.zeros_like(g, memory_format=torch.preserve_format)
                state["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype())
        beta1, beta2 = group["betas"]
        if rule == "adamw":
            state["step"] += 1
            step = int(state["step"].item())
            return adamw_update(g, state["exp_avg"], state["exp_avg_sq"], step, lr, beta1, beta2, group["eps"])
        if rule == "sgdm":
            return sgdm_update(g, state["momentum_buffer"], lr, beta1)
        return lion_update(g, state["exp_avg"], lr, beta1, beta2)

    def _state_full_steps(
        self, grads: list[Tensor], states: list[dict[str, Any]], group: dict[str, Any], lr: float
    ) -> list[Tensor]:
        """:meth:`_state_full_step` for several tensors; AdamW runs as one ``torch._foreach_*`` sequence over all of
        them (each op the same per-tensor arithmetic as :func:`frugal.functional.adamw_update`)."""
        if group["state_full"] != "adamw" or len(grads) < 2:
            return [self._state_full_step(g, st, group, lr) for g, st in zip(grads, states, strict=True)]
        for g, st in zip(grads, states, strict=True):
            if "exp_avg" not in st or st["exp_avg"].shape != g.shape:
                for k in _MOMENT_KEYS:
                    st.pop(k, None)
                st["exp_avg"] = torch.zeros_like(g, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(g, memory_format=torch.preserve_format)
                st["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype())
        beta1, beta2 = group["betas"]
        exp_avgs = [st["exp_avg"] for st in states]
        exp_avg_sqs = [st["exp_avg_sq"] for st in states]
        steps = [st["step"] for st in states]
        _mt._foreach_add_(steps, 1)
        counts = [int(s.item()) for s in steps]
        _mt._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        _mt._foreach_mul_(exp_avg_sqs, beta2)
        _mt._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        denom = _mt._foreach_sqrt(exp_avg_sqs)
        _mt._foreach_div_(denom, [math.sqrt(1 - beta2**k) for k in counts])
        _mt._foreach_add_(denom, group["eps"])
        updates = _mt._foreach_div(exp_avgs, denom)
        _mt._foreach_mul_(updates, [-lr / (1 - beta1**k) for k in counts])
        return list(updates)

    def _block_group(
        self, group: dict[str, Any], items: list[tuple[int, Tensor]], refresh: bool, lr_p: float, lr_f: float
    ) -> None:
        """Block selector: whole tensors active (state-full) or not (state-free); every switch clears all
        moments, as in the authors' code (``reset_statistics`` is not consulted)."""
        if refresh:
            active, group["next_block"] = block_schedule(
                group["block_order"], len(group["params"]), self._n_active(group), group["next_block"], self._generator
            )
            group["active_blocks"] = active
            for p in group["params"]:
                self.state.pop(p, None)
        active = set(group["active_blocks"])
        lr, wd = group["lr"], group["weight_decay"]
        if wd != 0 and items:
            _mt._foreach_mul_([p for _, p in items], 1 - lr * wd)
        on = [p for i, p in items if i in active]
        if group["state_full"] == "adamw":
            self._adamw_group(group, on, lr=lr_p)
        else:
            for p in on:
                state = self.state[p]
                if not state and group["state_full"] == "sgdm" and group["legacy_block_momentum_init"]:
                    state["momentum_buffer"] = p.detach().clone()  # the authors' code: a copy of the parameter
                p.add_(self._state_full_step(_grad(p), state, group, lr_p))
        off = [p for i, p in items if i not in active]
        if not off or group["state_free"] == "none":
            return
        # -lr_f·sign(G) is exact, so adding it with alpha is bit-identical to adding the product
        grads = [_grad(p) for p in off]
        direction = _mt._foreach_sign(grads) if group["state_free"] == "signsgd" else grads
        _mt._foreach_add_(off, direction, alpha=-lr_f)


def _grad(p: Tensor) -> Tensor:
    """``p.grad`` of a tensor that :meth:`FRUGAL._checked` kept (so it has one)."""
    g = p.grad
    assert g is not None
    return g


def _matrix_shape(p: Tensor, group: dict[str, Any]) -> tuple[int, ...]:
    """The shape FRUGAL optimises ``p`` as: ``(out, in)``, i.e. transposed for a transposed (``Conv1D``) group."""
    return tuple(p.shape[::-1]) if group.get("transposed") else tuple(p.shape)


def _rank_dim(selector: str, proj_side: str, shape: tuple[int, ...]) -> int:
    """The dimension a fixed ``rank`` is capped at for ``selector`` on a matrix of ``shape``."""
    if selector == "columns":
        return shape[1]
    if selector == "rows":
        return shape[0]
    side = resolve_side(proj_side, shape)
    return {"right": shape[1], "left": shape[0], "full": min(shape)}[side]


def _is_conv1d(module: nn.Module) -> bool:
    """transformers' ``Conv1D`` (GPT-2 and relatives): a linear layer whose weight is stored as (in, out)."""
    return type(module).__name__ == "Conv1D" and type(module).__module__.startswith("transformers")


def param_groups(
    model: nn.Module,
    target_modules: Iterable[str] | None = None,
    state_full_modules: Iterable[str] = ("lm_head", "embed_tokens", "norm"),
    **overrides: Any,
) -> list[dict[str, Any]]:
    """The authors' split of ``model``'s trainable parameters into a non-projectable and a projectable group.

    Projectable: the weight of every ``nn.Linear`` or transformers ``Conv1D`` whose module name contains one of
    ``target_modules`` (:data:`DEFAULT_TARGET_MODULES`: attention and MLP projections of LLaMA, BERT/RoBERTa, GPT-2,
    GPT-NeoX, Falcon, OPT, T5 and their relatives), minus names containing
    a string of ``state_full_modules``; plus, for each of ``"lm_head"``, ``"embed_tokens"``, ``"norm"`` left out
    of ``state_full_modules``, every parameter whose name contains it (the code's ``proj_logits``/``proj_embeds``/
    ``proj_norms``; norms are 1-D, so only the ``block`` and ``randk`` selectors accept them). The rest (biases,
    embeddings, norms, the LM head) run AdamW. ``overrides`` go into the projectable group(s).

    ``Conv1D`` weights (GPT-2's ``c_attn``, ``c_proj``, ``c_fc``) are stored as (in, out), the transpose of
    ``nn.Linear``'s: they get their own projectable group with ``transposed=True``, optimised as the (out, in)
    matrix, so that sides, ranks and the SVD mean what they mean for a Linear layer.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    targets = tuple(DEFAULT_TARGET_MODULES if target_modules is None else target_modules)
    keep = tuple(state_full_modules)
    extra = tuple(s for s in ("lm_head", "embed_tokens", "norm") if s not in keep)
    for key, value in overrides.items():
        validate_hparams({key: value})
    normalise_hparams(overrides)
    proj_ids: list[int] = []
    transposed: set[int] = set()
    for name, module in model.named_modules():
        conv1d = _is_conv1d(module)
        if not (isinstance(module, nn.Linear) or conv1d) or not module.weight.requires_grad:
            continue
        if any(t in name for t in targets) and not any(s in name for s in keep):
            proj_ids.append(id(module.weight))
            if conv1d:
                transposed.add(id(module.weight))
    for name, p in model.named_parameters():
        if p.requires_grad and any(s in name for s in extra) and id(p) not in proj_ids:
            proj_ids.append(id(p))
    chosen = set(proj_ids)
    regular, proj, proj_t = [], [], []
    for p in model.parameters():  # parameters() yields a shared tensor once, in registration order
        if not p.requires_grad:
            continue
        (proj_t if id(p) in transposed else proj if id(p) in chosen else regular).append(p)
    groups: list[dict[str, Any]] = []
    if regular:
        groups.append({"params": regular, "projectable": False})
    if proj:
        groups.append({"params": proj, "projectable": True, **overrides})
    if proj_t:
        groups.append({"params": proj_t, "projectable": True, "transposed": True, **overrides})
    if not groups:
        raise ValueError("model has no trainable parameters")
    return groups
