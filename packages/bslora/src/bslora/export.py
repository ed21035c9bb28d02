"""Exact export of a BSLoRA adapter to a plain LoRA (peft layout) for vLLM / S-LoRA / peft ``LoraModel``."""

from __future__ import annotations

from typing import Any

import torch

from bslora.model import BSLoRAModel

__all__ = ["export_to_lora"]


@torch.no_grad()
def export_to_lora(
    model: BSLoRAModel, adapter_name: str | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A plain LoRA whose update equals the BSLoRA update of every module.

    The rank is ``r_local + r_intra + r_inter`` (slice, kron) or ``r_local + #shared branches`` (gate: each gate term
    has rank 1). The scale is folded into ``lora_B`` and ``lora_alpha = r`` (peft scaling 1). Keys follow peft's
    saved layout ``base_model.model.<module>.lora_A.weight``; load with ``peft.LoraConfig(**cfg)`` and
    ``peft.set_peft_model_state_dict``. The sharing is lost: the export is as large as a LoRA of that rank.

    Args:
        model: the BSLoRA model.
        adapter_name: the adapter to export (default: the active one).

    Returns:
        ``(lora_config_dict, state_dict)``.
    """
    name = adapter_name or model.active_adapter
    model._check_names([name])
    cfg = model.peft_config[name]
    sd: dict[str, torch.Tensor] = {}
    ranks: set[int] = set()
    targets: list[str] = []
    for mod_name, layer in model.bslora_layers():
        if name not in layer.configs:
            continue
        A, B = layer.effective_factors(name)
        ranks.add(A.shape[0])
        targets.append(mod_name)
        sd[f"base_model.model.{mod_name}.lora_A.weight"] = A.detach().clone().contiguous()
        sd[f"base_model.model.{mod_name}.lora_B.weight"] = B.detach().clone().contiguous()
    (r,) = ranks  # every module of one adapter has the same rank
    lora_cfg = {
        "peft_type": "LORA",
        "r": r,
        "lora_alpha": r,
        "lora_dropout": 0.0,
        "target_modules": targets,
        "fan_in_fan_out": cfg.fan_in_fan_out,
        "bias": "none",
        "task_type": cfg.task_type,
    }
    return lora_cfg, sd
