"""Model downscaling by pruning (the first step of the paper's proposed pipeline).

Unstructured (masks through ``torch.nn.utils.prune``, so they stay applied under any optimizer):

- magnitude: score |W_ij| (Han et al. 2015);
- Wanda (Sun et al. 2024, eq. 1): score S_ij = |W_ij| · ‖X_j‖₂ with X the layer's calibration inputs, compared per
  output row;
- SparseGPT (Frantar & Alistarh 2023, Alg. 1): columns are pruned left to right; the error of each pruned column
  is pushed onto the remaining ones through the inverse Hessian H = XᵀX + λI (λ = damp · mean diag), the mask of
  each block of columns chosen by w² / [H⁻¹]²_jj.

Structured (the model shrinks and gets a new config, so it saves with ``save_pretrained``): ``heads`` removes
key/value groups with their query heads (grouped-query attention stays grouped), ``channels`` MLP channels,
``layers`` whole blocks (scored by 1 − cos(h_in, h_out) on calibration data, the "block influence" of Men et al.
2024, or by the norm of the block's output matrices without it). The slicing of Linear layers goes through
``torch_pruning.prune_linear_out_channels`` / ``prune_linear_in_channels``.

Statistics are gathered in one calibration pass of the dense model (not block by block as in the Wanda and
SparseGPT papers); a documented simplification.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, cast

import torch
from torch import nn
from torch.nn.utils import prune as torch_prune

from downscaling.config import STRUCTURED, PruneConfig, Recover
from downscaling.flops import check_token_ids
from icml25_shared.validate import check_float

__all__ = [
    "PruneResult",
    "conv1d_to_linear",
    "finalize",
    "magnitude_mask",
    "prunable_linears",
    "prune",
    "sparsegpt_prune",
    "sparsity_of",
    "wanda_mask",
]


class PruneResult(NamedTuple):
    """The pruned copy and a record of what was done."""

    model: nn.Module
    record: dict[str, Any]


# --------------------------------------------------------------------------------------------------- the masks


def _n_pruned(numel: int, sparsity: float) -> int:
    return int(round(sparsity * numel))


def _lowest(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the k lowest entries of ``scores`` (exactly k; ties broken by position)."""
    mask = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    if k > 0:
        idx = torch.argsort(scores.reshape(-1), stable=True)[:k]
        mask[idx] = True
    return mask.reshape(scores.shape)


def magnitude_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Keep-mask (True = kept) removing the ``round(sparsity · numel)`` smallest |W_ij|."""
    s = check_float("sparsity", sparsity, min=0.0, max=1.0, max_open=True)
    return ~_lowest(weight.detach().abs(), _n_pruned(weight.numel(), s))


def wanda_mask(
    weight: torch.Tensor, input_norm: torch.Tensor, sparsity: float, *, per_row: bool = True
) -> torch.Tensor:
    """Wanda keep-mask (Sun et al. 2024, eq. 1): S_ij = |W_ij| · ‖X_j‖₂, the lowest ``sparsity`` removed in each
    output row (``per_row``, the paper's comparison group) or over the whole matrix."""
    s = check_float("sparsity", sparsity, min=0.0, max=1.0, max_open=True)
    if input_norm.shape != weight.shape[1:]:
        raise ValueError(f"input_norm must have shape {tuple(weight.shape[1:])}, got {tuple(input_norm.shape)}")
    score = weight.detach().abs() * input_norm.to(weight.dtype)[None, :]
    if not per_row:
        return ~_lowest(score, _n_pruned(score.numel(), s))
    k = _n_pruned(score.shape[1], s)
    idx = torch.argsort(score, dim=1, stable=True)[:, :k]
    keep = torch.ones_like(score, dtype=torch.bool)
    keep.scatter_(1, idx, False)
    return keep


@torch.no_grad()
def sparsegpt_prune(
    weight: torch.Tensor, hessian: torch.Tensor, sparsity: float, *, damp: float = 0.01, block: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    """SparseGPT (Frantar & Alistarh 2023, Alg. 1) on one ``(out, in)`` weight with H = Σ x xᵀ over calibration
    inputs: returns the updated weight (zeros where pruned) and its keep-mask. Each block of ``block`` columns
    loses exactly ``round(sparsity · out · block)`` weights, chosen by w² / [H⁻¹]²_jj (the OBS saliency); the error
    of each pruned column is compensated on the columns to its right."""
    s = check_float("sparsity", sparsity, min=0.0, max=1.0, max_open=True)
    w = weight.detach().to(torch.float64).clone()
    rows, cols = w.shape
    h = hessian.detach().to(torch.float64).clone()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += damp * torch.mean(torch.diag(h)) * torch.eye(cols, dtype=h.dtype)
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    keep = torch.ones_like(w, dtype=torch.bool)
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        w1 = w[:, i1:i2].clone()
        err1 = torch.zeros_like(w1)
        hinv1 = hinv[i1:i2, i1:i2]
        saliency = w1**2 / torch.diag(hinv1)[None, :] ** 2
        pruned1 = _lowest(saliency, _n_pruned(saliency.numel(), s))
        for i in range(i2 - i1):
            col = w1[:, i]
            q = torch.where(pruned1[:, i], torch.zeros_like(col), col)
            e = (col - q) / hinv1[i, i]
            w1[:, i:] -= e[:, None] * hinv1[i, i:][None, :]
            w1[:, i] = q
            err1[:, i] = e
        w[:, i1:i2] = w1
        w[:, i2:] -= err1 @ hinv[i1:i2, i2:]
        keep[:, i1:i2] = ~pruned1
    w[~keep] = 0.0
    return w.to(weight.dtype), keep


# ---------------------------------------------------------------------------------------------- model walking


def _is_conv1d(m: nn.Module) -> bool:
    return type(m).__name__ == "Conv1D" and hasattr(m, "nf")


def conv1d_to_linear(model: nn.Module) -> int:
    """Replace every HF GPT-2 ``Conv1D`` (y = x W + b, W of shape (in, out)) in place by the equal ``nn.Linear``
    (weight Wᵀ).

    Args:
        model: the model to convert, changed in place.

    Returns:
        How many ``Conv1D`` layers were replaced.
    """
    n = 0
    for name, module in list(model.named_modules()):
        if _is_conv1d(module):
            m: Any = module  # transformers' Conv1D: weight (in, out) and bias are tensors, not sub-modules
            lin = nn.Linear(m.weight.shape[0], m.weight.shape[1], bias=m.bias is not None)
            with torch.no_grad():
                lin.weight.copy_(m.weight.T)
                if m.bias is not None:
                    lin.bias.copy_(m.bias)
            lin.to(m.weight.device, m.weight.dtype)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, lin)
            n += 1
    return n


def _output_head(model: nn.Module) -> Any:
    hf: Any = model  # a transformers PreTrainedModel when it has get_output_embeddings
    return hf.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None


def _is_prunable(name: str, m: nn.Module, head: Any) -> bool:
    return isinstance(m, nn.Linear) and m is not head and name.rpartition(".")[2] != "lm_head"


def _no_linear_error(model: nn.Module) -> ValueError:
    found = sorted({type(m).__name__ for m in model.modules() if not list(m.children())})
    conv = " (GPT-2 Conv1D: call conv1d_to_linear(model) first)" if "Conv1D" in found else ""
    return ValueError(f"model has no nn.Linear to prune{conv}; leaf layer types found: {found}")


def prunable_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` layers pruning acts on: all of them except the output head (``get_output_embeddings()``
    or a module named ``lm_head``).

    Args:
        model: any ``torch.nn.Module``.

    Returns:
        Module name -> ``nn.Linear``.

    Raises:
        ValueError: the model has no such layer (the message names the layer types found).
    """
    head = _output_head(model)
    out = {n: m for n, m in model.named_modules() if _is_prunable(n, m, head)}
    if not out:
        raise _no_linear_error(model)
    return cast(dict[str, nn.Linear], out)


class _Scan(NamedTuple):
    """What ``prune`` reads from its copy, in one walk."""

    converted: int  # Conv1D layers replaced by nn.Linear
    linears: dict[str, nn.Linear]  # prunable_linears(model)
    n_params: int  # sum(p.numel() for p in model.parameters())
    device: torch.device  # the first parameter's (cpu without any)
    shared: set[int] | None  # ids of the parameters held by more than one module (None: not known)


def _scan(model: nn.Module) -> _Scan:
    """``conv1d_to_linear``, ``prunable_linears``, the parameter count and the device in one walk over ``model``
    (the same results, in the same order, as the four separate calls)."""
    head = _output_head(model)
    linears: dict[str, nn.Linear] = {}
    seen: set[int] = set()
    dups: set[int] = set()
    n_params, device, converted = 0, None, 0
    for name, m in model.named_modules():
        if _is_conv1d(m):
            converted += 1
            break
        if _is_prunable(name, m, head):
            linears[name] = cast(nn.Linear, m)
        for p in m._parameters.values():
            if p is None:
                continue
            if id(p) in seen:
                dups.add(id(p))
                continue
            seen.add(id(p))
            n_params += p.numel()
            if device is None:
                device = p.device
    if converted:  # rare (GPT-2): convert, then read the converted model the usual way
        converted = conv1d_to_linear(model)
        linears = prunable_linears(model)
        params = list(model.parameters())
        n_params, device = sum(p.numel() for p in params), params[0].device if params else None
    if not linears:
        raise _no_linear_error(model)
    cpu = torch.device("cpu")
    return _Scan(converted, linears, n_params, device if device is not None else cpu, None if converted else dups)


def sparsity_of(model: nn.Module) -> dict[str, float]:
    """Fraction of zero weights of every prunable Linear (after masks), plus ``"all"`` over them together.

    Args:
        model: a model with ``nn.Linear`` layers (see :func:`prunable_linears`).

    Returns:
        Layer name -> fraction of zeros, and ``"all"`` -> the fraction over all of them.
    """
    out, zeros, total = {}, 0, 0
    for n, m in prunable_linears(model).items():
        z = int((m.weight == 0).sum())
        out[n] = z / m.weight.numel()
        zeros, total = zeros + z, total + m.weight.numel()
    out["all"] = zeros / total
    return out


def finalize(model: nn.Module) -> nn.Module:
    """Make the masks of unstructured pruning permanent (``torch.nn.utils.prune.remove``), so that the model has
    plain ``weight`` parameters again. (``prune`` does this by default.)

    Args:
        model: a model pruned with ``finalize=False``, changed in place.

    Returns:
        ``model`` itself.
    """
    for m in model.modules():
        if torch_prune.is_pruned(m) and hasattr(m, "weight_mask"):
            torch_prune.remove(m, "weight")
    return model


def _fold_mask_on_save(module: nn.Module, state_dict: dict[str, Any], prefix: str, _meta: Any) -> None:
    """State-dict hook of a masked Linear: write the pruned ``weight`` (weight_orig x mask), not the pair, so that
    ``save_pretrained`` of a masked model loads into a plain one."""
    if prefix + "weight_orig" in state_dict and hasattr(module, "weight_mask"):
        state_dict.pop(prefix + "weight_orig")
        state_dict.pop(prefix + "weight_mask", None)
        state_dict[prefix + "weight"] = cast(torch.Tensor, module.weight).detach()


def _unfold_mask_on_load(module: nn.Module, state_dict: dict[str, Any], prefix: str, *_args: Any) -> None:
    """Load pre-hook of a masked Linear: a plain ``weight`` entry (what the hook above saves) becomes weight_orig,
    and the module keeps its mask."""
    if prefix + "weight" in state_dict and prefix + "weight_orig" not in state_dict and hasattr(module, "weight_mask"):
        state_dict[prefix + "weight_orig"] = state_dict.pop(prefix + "weight")
        state_dict[prefix + "weight_mask"] = module.weight_mask


def _reapply_mask_after_load(module: nn.Module, _incompatible: Any) -> None:
    """Load post-hook: recompute the masked ``weight`` now (torch recomputes it only on the next forward)."""
    if hasattr(module, "weight_orig") and hasattr(module, "weight_mask"):
        masked: Any = module  # weight_orig / weight_mask are attributes torch.nn.utils.prune added
        with torch.no_grad():
            masked.weight = masked.weight_orig * masked.weight_mask


def _calib_batches(calib: Any, device: torch.device, model: nn.Module) -> list[torch.Tensor]:
    items = [calib] if isinstance(calib, torch.Tensor) else list(calib) if isinstance(calib, Iterable) else None
    if not items:
        raise ValueError(f"calib must be a (n, T) tensor of token ids or a non-empty list of them, got {calib!r}")
    out = []
    for i, t in enumerate(items):
        if isinstance(t, (tuple, list)):
            t = t[0]
        if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype == torch.bool:
            raise ValueError(f"calib[{i}] must be an integer tensor of token ids, got {type(t).__name__}")
        t = check_token_ids(f"calib[{i}]", t if t.ndim == 2 else t.reshape(1, -1), model)
        out.append(t.long().to(device))
    return out


def _calibrate(model: nn.Module, calib: Iterable[Any], handles: list[Any]) -> None:
    """Run the calibration batches through ``model`` in eval mode (restoring its mode), then remove ``handles``."""
    was = model.training
    model.eval()
    try:
        for x in calib:
            _model_forward(model, x)
    finally:
        model.train(was)
        for h in handles:
            h.remove()


def _model_forward(model: nn.Module, x: torch.Tensor) -> Any:
    from downscaling.flops import _forward

    return _forward(model, x)


@torch.no_grad()
def _input_stats(
    model: nn.Module, modules: Mapping[str, nn.Module], calib: list[torch.Tensor], hessian: bool
) -> dict[str, torch.Tensor]:
    """Per module: Σ x_j² over calibration tokens (``hessian=False``) or Σ x xᵀ (``True``), in float64."""
    stats: dict[str, torch.Tensor] = {}
    handles = []

    def hook(name: str) -> Any:
        def fn(_m: nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0].detach().reshape(-1, args[0].shape[-1]).to(torch.float64)
            s = x.T @ x if hessian else (x * x).sum(0)
            stats[name] = stats[name] + s if name in stats else s

        return fn

    for n, m in modules.items():
        handles.append(m.register_forward_pre_hook(hook(n)))
    _calibrate(model, calib, handles)
    return stats


# ------------------------------------------------------------------------------------------------ structured


def _decoder_layers(model: nn.Module) -> list[Any]:
    """The decoder blocks of a Llama-style model, typed ``Any``: their sub-modules (``self_attn.o_proj``,
    ``mlp.down_proj``, ...) are reached through ``nn.Module.__getattr__``, which types them ``Tensor | Module``."""
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not layers:
        raise ValueError(
            f"structured pruning (heads, channels, layers) needs a Llama-style decoder (model.model.layers with "
            f"self_attn.q/k/v/o_proj and mlp.gate/up/down_proj), got {type(model).__name__}; unstructured methods "
            "(magnitude, wanda, sparsegpt) work on any model with nn.Linear layers"
        )
    return list(layers)


class _Sliced:
    """Slices Linear layers through torch_pruning and keeps account of the parameters it replaced, so that the
    parameter count after pruning needs no second walk over the model."""

    def __init__(self) -> None:
        import torch_pruning as tp

        self._out, self._in = tp.prune_linear_out_channels, tp.prune_linear_in_channels
        self.replaced: list[torch.Tensor] = []  # the parameters swapped for sliced ones
        self.removed = 0  # elements removed from them

    def __call__(self, lin: nn.Linear, remove: list[int], dim: str) -> None:
        """Remove output (``dim="out"``: weight rows and bias) or input (``"in"``: weight columns) channels
        ``remove`` (sorted) of ``lin``."""
        if not remove:
            return
        w, b = lin.weight, lin.bias if dim == "out" else None
        (self._out if dim == "out" else self._in)(lin, remove)
        self.replaced.append(w)
        self.removed += w.numel() - lin.weight.numel()
        if b is not None:
            self.replaced.append(b)
            self.removed += b.numel() - lin.bias.numel()


def _n_units(sparsity: float, n: int, unit: str) -> int:
    """Units removed per block: floor(sparsity · n), at most n − 1; a positive sparsity that removes none raises."""
    k = min(int(math.floor(sparsity * n)), n - 1)
    if sparsity > 0 and k == 0:
        least = 1.0 / n if n > 1 else None
        hint = f"use sparsity >= {least:.4g} to remove one" if least is not None else "there is only one, it stays"
        raise ValueError(
            f"sparsity={sparsity} removes floor({sparsity} x {n}) = 0 of the {n} {unit} per block, so nothing would "
            f"be pruned; {hint}"
        )
    return k


def _drop_groups(
    layers: list[Any], h: int, kv: int, hd: int, n_remove: int, stats: dict[str, torch.Tensor] | None
) -> list[list[int]]:
    """The ``n_remove`` key/value groups of each block with the least output energy, sorted: a group's score is the
    sum over its query heads' channels j of ‖W_o[:, j]‖² (times Σ x_j² with calibration data), in float64; ties go
    to the lower index. All blocks are scored at once."""
    w_o = torch.stack([blk.self_attn.o_proj.weight.detach() for blk in layers])
    if w_o.shape[2] != h * hd:
        raise ValueError(
            f"o_proj has {w_o.shape[2]} input channels but the config says {h} heads x head_dim {hd} = {h * hd}"
        )
    col_energy = w_o.double().pow_(2).sum(1)  # (blocks, h·d_h)
    if stats is not None:
        col_energy = col_energy * torch.stack([stats[str(i)] for i in range(len(layers))])
    # query head q belongs to kv group q // (h / kv); a group's channels are those of its query heads
    score = col_energy.reshape(len(layers), kv, (h // kv) * hd).sum(2)
    return [sorted(d) for d in torch.argsort(score, dim=1, stable=True)[:, :n_remove].tolist()]


def _prune_heads(
    model: nn.Module, sparsity: float, calib: list[torch.Tensor] | None, sliced: _Sliced
) -> dict[str, Any]:
    layers = _decoder_layers(model)
    cfg: Any = model.config  # a transformers PretrainedConfig (nn.Module.__getattr__ types it Tensor | Module)
    h = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or h
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // h
    group = h // kv
    n_remove = _n_units(sparsity, kv, "key/value head groups")
    stats = None
    if calib is not None and n_remove:
        stats = _input_stats(model, {str(i): blk.self_attn.o_proj for i, blk in enumerate(layers)}, calib, False)
    drops = _drop_groups(layers, h, kv, hd, n_remove, stats)
    removed: dict[int, list[int]] = {}
    for i, layer in enumerate(layers):
        drop = removed[i] = drops[i]
        att = layer.self_attn
        q_rows = [g * group * hd + r for g in drop for r in range(group * hd)]
        kv_rows = q_rows if group == 1 else [g * hd + r for g in drop for r in range(hd)]
        sliced(att.q_proj, q_rows, "out")
        sliced(att.k_proj, kv_rows, "out")
        sliced(att.v_proj, kv_rows, "out")
        sliced(att.o_proj, q_rows, "in")
    cfg.head_dim = hd
    cfg.num_key_value_heads = kv - n_remove
    cfg.num_attention_heads = (kv - n_remove) * group
    return {"removed_kv_groups": removed, "heads_before": h, "heads_after": cfg.num_attention_heads}


def _prune_channels(
    model: nn.Module, sparsity: float, calib: list[torch.Tensor] | None, sliced: _Sliced
) -> dict[str, Any]:
    cfg: Any = model.config  # a transformers PretrainedConfig
    layers = _decoder_layers(model)
    ff = cfg.intermediate_size
    n_remove = _n_units(sparsity, ff, "MLP channels")
    stats = None
    if calib is not None and n_remove:
        stats = _input_stats(model, {str(i): blk.mlp.down_proj for i, blk in enumerate(layers)}, calib, False)
    removed = {}
    for i, layer in enumerate(layers):
        mlp = layer.mlp
        score = mlp.down_proj.weight.detach().double().pow(2).sum(0)
        if stats is not None:
            score = score * stats[str(i)]
        else:
            score = score * (mlp.gate_proj.weight.double().pow(2).sum(1) + mlp.up_proj.weight.double().pow(2).sum(1))
        drop = sorted(torch.argsort(score, stable=True)[:n_remove].tolist())
        removed[i] = len(drop)
        sliced(mlp.gate_proj, drop, "out")
        sliced(mlp.up_proj, drop, "out")
        sliced(mlp.down_proj, drop, "in")
    cfg.intermediate_size = ff - n_remove
    return {"removed_channels_per_layer": n_remove, "intermediate_before": ff, "intermediate_after": ff - n_remove}


@torch.no_grad()
def _block_influence(model: nn.Module, layers: list[Any], calib: list[torch.Tensor]) -> list[float]:
    """1 − mean cos(h_in, h_out) per block over calibration tokens (Men et al. 2024, ShortGPT)."""
    sims: dict[int, list[float]] = {i: [] for i in range(len(layers))}
    handles = []

    def hook(i: int) -> Any:
        def fn(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
            h_in = args[0] if args else kwargs["hidden_states"]
            h_out = out[0] if isinstance(out, tuple) else out
            cos = nn.functional.cosine_similarity(h_in.double(), h_out.double(), dim=-1)
            sims[i].append(float(cos.mean()))

        return fn

    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_hook(hook(i), with_kwargs=True))
    _calibrate(model, calib, handles)
    return [1.0 - sum(v) / len(v) for v in sims.values()]


def _prune_layers(
    model: nn.Module, sparsity: float, calib: list[torch.Tensor] | None, _sliced: _Sliced
) -> dict[str, Any]:
    layers = _decoder_layers(model)
    n = len(layers)
    n_remove = _n_units(sparsity, n, "decoder layers")
    if calib is not None:
        score = _block_influence(model, layers, calib)
    else:
        score = [
            float(blk.self_attn.o_proj.weight.norm() ** 2 + blk.mlp.down_proj.weight.norm() ** 2) for blk in layers
        ]
    drop = sorted(sorted(range(n), key=lambda i: (score[i], i))[:n_remove])
    kept = [layers[i] for i in range(n) if i not in drop]
    base = getattr(model, "model", model)
    base.layers = nn.ModuleList(kept)
    for j, layer in enumerate(kept):
        if hasattr(layer.self_attn, "layer_idx"):
            layer.self_attn.layer_idx = j
    cfg: Any = model.config  # a transformers PretrainedConfig
    cfg.num_hidden_layers = len(kept)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = [t for i, t in enumerate(cfg.layer_types) if i not in drop]
    return {"removed_layers": drop, "block_scores": score}


# ----------------------------------------------------------------------------------------------- entry point


def prune(model: nn.Module, config: PruneConfig | None = None, **kwargs: Any) -> PruneResult:
    """Prune a copy of ``model`` as ``config`` says (or ``PruneConfig(**kwargs)``); the input is not modified.

    Unstructured methods zero weights of every prunable Linear through ``torch.nn.utils.prune`` masks, then
    (``config.finalize``, the default) bake them in, so the returned model saves and reloads
    (``save_pretrained`` / ``from_pretrained``) with its pruned weights; with ``finalize=False`` the masks stay
    and the state dict still holds the pruned weights. Structured ones slice the layers and update
    ``model.config``. A GPT-2 ``Conv1D`` is converted to ``nn.Linear`` first. ``config.recover`` trains the pruned
    copy with the masks applied, before they are baked in.

    Args:
        model: the model to prune (a Llama-style decoder for the structured methods).
        config: what to do; ``None`` builds ``PruneConfig(**kwargs)``.
        **kwargs: fields of :class:`PruneConfig`, when ``config`` is ``None``.

    Returns:
        The pruned copy and a record (method, achieved sparsity, what was removed).

    Raises:
        ValueError: both ``config`` and keyword arguments, or a model the method cannot prune.
        TypeError: ``config`` is not a :class:`PruneConfig` or ``model`` not a ``torch.nn.Module``.
    """
    if config is None:
        config = PruneConfig(**kwargs)
    elif kwargs:
        raise ValueError(f"give a PruneConfig or keyword arguments, not both (got {sorted(kwargs)})")
    if not isinstance(config, PruneConfig):
        raise TypeError(f"config must be a PruneConfig, got {type(config).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    with torch.inference_mode(False):  # masks made under inference_mode would break later training
        return _prune(model, config)


def _prune(model: nn.Module, config: PruneConfig) -> PruneResult:
    pruned = copy.deepcopy(model)
    scan = _scan(pruned)  # converts GPT-2 Conv1D layers; checks there is a Linear to prune
    linears = scan.linears
    calib = _calib_batches(config.calib, scan.device, pruned) if config.calib is not None else None
    record: dict[str, Any] = {"method": config.method, "sparsity": config.sparsity, "scope": config.scope}
    record["converted_conv1d"] = scan.converted
    s = config.sparsity
    n_after = None
    if config.method in STRUCTURED:
        if config.scope == "global":
            raise ValueError(
                f"scope='global' is not supported for structured method {config.method!r}: every block must keep "
                "the same shape to share one config; use scope='layer'"
            )
        if not hasattr(pruned, "config"):
            raise ValueError(f"structured pruning needs a transformers model with .config, got {type(model).__name__}")
        fn = {"heads": _prune_heads, "channels": _prune_channels, "layers": _prune_layers}[config.method]
        sliced = _Sliced()
        record.update(fn(pruned, s, calib, sliced))
        shared = scan.shared
        if config.method != "layers" and shared is not None and not any(id(p) in shared for p in sliced.replaced):
            n_after = scan.n_params - sliced.removed  # the sliced parameters were held by their layer only
    elif s > 0:
        masks = _unstructured_masks(pruned, linears, config, calib)
        for name, lin in linears.items():
            torch_prune.custom_from_mask(lin, "weight", masks[name])
    record["params_before"] = scan.n_params
    record["params_after"] = sum(p.numel() for p in pruned.parameters()) if n_after is None else n_after
    if config.method not in STRUCTURED:
        record["achieved_sparsity"] = sparsity_of(pruned)["all"]
    if config.recover is not None:
        if calib is None:
            raise ValueError("recover needs calib data (PruneConfig.calib) to train on, got calib=None")
        record["recover_loss"] = recover(pruned, calib, config.recover)
    if config.method not in STRUCTURED:
        if config.finalize:
            finalize(pruned)
        else:
            for lin in prunable_linears(pruned).values():
                if hasattr(lin, "weight_mask"):
                    lin.register_state_dict_post_hook(_fold_mask_on_save)
                    lin.register_load_state_dict_pre_hook(_unfold_mask_on_load)
                    lin.register_load_state_dict_post_hook(_reapply_mask_after_load)
    record["finalized"] = config.method in STRUCTURED or config.finalize
    return PruneResult(pruned, record)


def _unstructured_masks(
    model: nn.Module, linears: dict[str, nn.Linear], config: PruneConfig, calib: list[torch.Tensor] | None
) -> dict[str, torch.Tensor]:
    s, method = config.sparsity, config.method
    if method == "magnitude":
        if config.scope == "layer":
            return {n: magnitude_mask(m.weight, s) for n, m in linears.items()}
        scores = {n: m.weight.detach().abs() for n, m in linears.items()}
    else:
        assert calib is not None
        stats = _input_stats(model, linears, calib, hessian=(method == "sparsegpt"))
        if method == "sparsegpt":
            if config.scope == "global":
                raise ValueError("scope='global' is not supported for method='sparsegpt' (it prunes per layer)")
            masks = {}
            for n, m in linears.items():
                w, keep = sparsegpt_prune(
                    m.weight, stats[n], s, damp=config.sparsegpt_damp, block=config.sparsegpt_block
                )
                with torch.no_grad():
                    m.weight.copy_(w)
                masks[n] = keep
            return masks
        norms = {n: stats[n].sqrt() for n in linears}
        if config.scope == "layer":
            return {n: wanda_mask(m.weight, norms[n], s) for n, m in linears.items()}
        scores = {n: m.weight.detach().abs() * norms[n].to(m.weight.dtype)[None, :] for n, m in linears.items()}
    flat = torch.cat([v.reshape(-1).double().cpu() for v in scores.values()])
    pruned = _lowest(flat, _n_pruned(flat.numel(), s))
    out, i = {}, 0
    for n, v in scores.items():
        out[n] = ~pruned[i : i + v.numel()].reshape(v.shape).to(v.device)
        i += v.numel()
    return out


def recover(model: nn.Module, calib: list[torch.Tensor], cfg: Recover, *, seed: int = 0) -> list[float]:
    """``cfg.steps`` AdamW steps of next-token training (or distillation from ``cfg.distill_from``) on random
    calibration windows; in place; returns the losses (this rank's). Pruning masks stay applied (they multiply the
    weight on every forward), so pruned weights stay zero.

    Under an initialised ``torch.distributed`` group the model is wrapped in DDP and every rank takes rows
    ``shard_bounds(batch, rank, world)`` of the same seeded global batch; each rank's loss is weighted by its share
    of the rows, so DDP's gradient average is the gradient of the global batch's mean loss (tested: 2 gloo ranks ==
    one process)."""
    import torch.distributed as dist

    from downscaling.distill import distill_loss
    from icml25_shared.distributed import shard_bounds

    data = torch.cat(list(calib), 0)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.0)
    teacher = cfg.distill_from
    if teacher is not None:
        teacher.eval()
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    bs = min(16, data.shape[0])
    lo, hi = shard_bounds(bs, rank, world)
    share = (hi - lo) * world / bs  # DDP averages over ranks: weight each rank's mean by its rows
    train_model = nn.parallel.DistributedDataParallel(model) if distributed else model
    model.train()
    losses = []
    for _ in range(cfg.steps):
        idx = torch.randint(data.shape[0], (bs,), generator=gen)[lo:hi].to(data.device)
        x = data[idx]
        logits = _model_forward(train_model, x[:, :-1])
        if teacher is None:
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        else:
            with torch.no_grad():
                t_logits = _model_forward(teacher, x[:, :-1])
            loss = distill_loss(logits, t_logits, x[:, 1:])
        opt.zero_grad(set_to_none=True)
        (loss * share).backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses
