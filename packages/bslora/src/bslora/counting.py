"""Analytic trainable-parameter counts of BSLoRA and of the LoRA / ShareLoRA baselines (closed forms)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bslora.config import BSLoRAConfig
from bslora.model import _layer_index, _module_shape, check_kron_shapes, find_targets

__all__ = ["count_bslora_parameters", "count_lora_parameters", "count_sharelora_parameters", "target_shapes"]


def _as_model(config_or_model: Any) -> nn.Module:
    if isinstance(config_or_model, nn.Module):
        return config_or_model
    try:
        from transformers import AutoModelForCausalLM, PretrainedConfig
    except ImportError as err:  # pragma: no cover - transformers is a dependency
        raise TypeError("counting from a config needs transformers") from err
    if not isinstance(config_or_model, PretrainedConfig):
        raise TypeError(
            "config_or_model must be an nn.Module or a transformers PretrainedConfig, got "
            f"{type(config_or_model).__name__}"
        )
    with torch.device("meta"):  # shapes only: no memory, no init cost
        return AutoModelForCausalLM.from_config(config_or_model)


def target_shapes(config_or_model: Any, cfg: BSLoRAConfig) -> list[tuple[str, int, int, int | None]]:
    """``(name, in_features, out_features, layer_index)`` of every target (a meta model is built from a config)."""
    model = _as_model(config_or_model)
    return [(n, *_module_shape(m), _layer_index(n, cfg.layers_pattern)) for n, m in find_targets(model, cfg)]


def count_bslora_parameters(config_or_model: Any, cfg: BSLoRAConfig) -> dict[str, int]:
    """Trainable parameters of BSLoRA ``cfg`` on a model, in closed form.

    Equals the unique trainable ``numel`` after :func:`~bslora.get_bslora_model`.

    Args:
        config_or_model: a transformers ``PretrainedConfig`` (a meta-device model is built, no weights) or a model.
        cfg: the BSLoRA configuration.

    Returns:
        ``{"local", "intra", "inter", "samplers", "total"}`` parameter counts.

    Raises:
        ValueError: when a KE configuration's shapes are not divisible by ``kron_share_size``.
    """
    shapes = target_shapes(config_or_model, cfg)
    check_kron_shapes({n: (i, o) for n, i, o, _ in shapes}, cfg)  # the same refusal as injection
    layers = {i for *_, i in shapes if i is not None}
    local = cfg.r_local * sum(i + o for _, i, o, _ in shapes)
    mode = cfg.share_mode
    if mode == "slice":
        n_in = max(i for _, i, _, _ in shapes)
        n_out = max(o for _, _, o, _ in shapes)
    elif mode == "kron":
        n_in = n_out = cfg.kron_share_size
    else:
        n_in = n_out = cfg.gate_share_size
    intra = cfg.r_intra * (n_in + n_out) * len(layers) if cfg.r_intra else 0
    inter = cfg.r_inter * (n_in + n_out) if cfg.r_inter else 0
    n_branches = (cfg.r_intra > 0) + (cfg.r_inter > 0)
    samplers = 0
    if mode == "kron":
        S = cfg.kron_share_size
        samplers = n_branches * sum(i // S + o // S for _, i, o, _ in shapes)
    elif mode == "gate":
        G = cfg.gate_share_size
        samplers = n_branches * sum(i + o + 2 * G for _, i, o, _ in shapes)
    return {
        "local": local,
        "intra": intra,
        "inter": inter,
        "samplers": samplers,
        "total": local + intra + inter + samplers,
    }


def _lora_config(r: int, target_modules: Any) -> BSLoRAConfig:
    extra = {"target_modules": target_modules} if target_modules else {}
    return BSLoRAConfig(r_local=r, r_intra=0, r_inter=0, **extra)


def count_lora_parameters(config_or_model: Any, r: int, target_modules: Any = None) -> int:
    """Plain LoRA of rank ``r`` on the same targets: ``r · Σ (in + out)``."""
    cfg = _lora_config(r, target_modules)
    return count_bslora_parameters(config_or_model, cfg)["total"]


def count_sharelora_parameters(config_or_model: Any, r: int, target_modules: Any = None) -> int:
    """ShareLoRA (A per layer, one B per module type shared across layers): ``r Σ in · L + r Σ_types out``."""
    cfg = _lora_config(r, target_modules)
    shapes = target_shapes(config_or_model, cfg)
    types = {}
    for n, _, o, _ in shapes:
        types[n.rsplit(".", 1)[-1]] = o
    return r * sum(i for _, i, _, _ in shapes) + r * sum(types.values())
