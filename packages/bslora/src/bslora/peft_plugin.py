"""Plug BSLoRA into HF peft's ``get_peft_model`` (optional; needs ``pip install icml25-bslora[peft]``).

    from bslora.peft_plugin import BSLoRAPeftConfig, register
    register()
    model = peft.get_peft_model(base, BSLoRAPeftConfig(r_local=2, r_intra=4, r_inter=16))

Why not ``peft.register_peft_method``: in peft 0.13–0.21 it refuses every name that is not already a member of
peft's closed ``PeftType`` enum (``ValueError: Unknown PEFT type ...``), and Python enums cannot gain members
without touching their private tables. peft's registries (``PEFT_TYPE_TO_CONFIG_MAPPING``,
``PEFT_TYPE_TO_TUNER_MAPPING``, ``PEFT_TYPE_TO_PREFIX_MAPPING``) are plain dicts keyed by ``PeftType``, a ``str``
enum, so the plain string ``"BSLORA"`` is a valid key there. :func:`register` writes those three entries, exactly
what ``register_peft_method`` would write, without altering the enum.

What works through peft: ``get_peft_model``, forward (also ``adapter_names=[...]`` mixed batches), training,
``print_trainable_parameters``, ``merge_and_unload`` and every ``BSLoRAModel`` method via
``peft_model.base_model`` (``peft_model.base_model.disable_adapter()`` included). What does not: peft's own
``PeftModel.save_pretrained`` / ``from_pretrained`` (its checkpoint code branches on ``PeftType`` members; they
raise ``NotImplementedError``), ``PeftModel.disable_adapter()`` and ``get_model_status()`` (they need peft's
``BaseTuner``). Save with
``peft_model.base_model.save_pretrained(dir)`` (shared tensors once) or export to plain LoRA with
:func:`bslora.export_to_lora`, which peft's ``LoraModel`` loads natively.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

try:
    from peft import PeftConfig
except ImportError as err:  # peft is an optional extra
    raise ImportError("bslora.peft_plugin needs peft: pip install 'icml25-bslora[peft]'") from err

from torch import nn

from bslora.config import BSLoRAConfig
from bslora.model import BSLoRAModel

__all__ = ["PEFT_TYPE", "PREFIX", "BSLoRAPeftConfig", "BSLoRAPeftTuner", "register", "is_registered"]

PEFT_TYPE = "BSLORA"
PREFIX = "bslora_"


@dataclass
class BSLoRAPeftConfig(PeftConfig, BSLoRAConfig):
    """:class:`~bslora.BSLoRAConfig` as a ``peft.PeftConfig`` (same fields, same validation, ``peft_type="BSLORA"``)."""

    task_type: str | None = "CAUSAL_LM"

    def __post_init__(self) -> None:
        BSLoRAConfig.__post_init__(self)
        self.peft_type = PEFT_TYPE

    def to_bslora_config(self) -> BSLoRAConfig:
        """The plain :class:`~bslora.BSLoRAConfig` with the same hyper-parameters."""
        return BSLoRAConfig.from_dict(BSLoRAConfig.to_dict(self))


class BSLoRAPeftTuner(BSLoRAModel):
    """The tuner peft's ``PeftModel`` builds as ``cls(model, {adapter_name: config}, adapter_name)``."""

    prefix = PREFIX

    def __init__(
        self, model: nn.Module, config: dict[str, BSLoRAConfig] | BSLoRAConfig, adapter_name: str = "default", **_: Any
    ) -> None:
        cfg = config[adapter_name] if isinstance(config, dict) else config
        super().__init__(model, cfg, adapter_name)

    @property
    def model(self) -> nn.Module:
        """The wrapped transformers model (peft's ``PeftModel.get_base_model()`` reads ``base_model.model``)."""
        return self.base_model

    @contextlib.contextmanager
    def _enable_peft_forward_hooks(self, *args: Any, adapter_names: list[str] | None = None, **kwargs: Any):
        """peft strips ``adapter_names`` from the forward kwargs and hands it to this context instead."""
        if adapter_names is None:
            yield
            return
        with self._mixed_batch(adapter_names, None):
            yield

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        # peft's PeftModelForCausalLM passes inputs_embeds=None, output_attentions=None...: drop the Nones
        return super().forward(*args, **{k: v for k, v in kwargs.items() if v is not None})

    @classmethod
    def _get_adapter_state_dict(cls, *args: Any, **kwargs: Any) -> dict:
        raise NotImplementedError(
            "peft's PeftModel.save_pretrained does not support BSLoRA (its checkpoint code branches on PeftType "
            "members); use peft_model.base_model.save_pretrained(dir) or bslora.export_to_lora"
        )

    _remap_adapter_state_dict_for_load = _get_adapter_state_dict


def _mappings() -> tuple[dict, dict, dict]:
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_PREFIX_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING

    return PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING, PEFT_TYPE_TO_PREFIX_MAPPING


def is_registered() -> bool:
    """Whether :func:`register` has run in this process."""
    return _mappings()[1].get(PEFT_TYPE) is BSLoRAPeftTuner


def register() -> None:
    """Make ``peft.get_peft_model(model, BSLoRAPeftConfig(...))`` build a BSLoRA model (idempotent)."""
    config_map, tuner_map, prefix_map = _mappings()
    if is_registered():
        return
    for name, table in (("config", config_map), ("tuner", tuner_map), ("prefix", prefix_map)):
        if PEFT_TYPE in table:
            raise KeyError(f"peft already has a {name} registered as {PEFT_TYPE!r}: {table[PEFT_TYPE]!r}")
    config_map[PEFT_TYPE] = BSLoRAPeftConfig
    tuner_map[PEFT_TYPE] = BSLoRAPeftTuner
    prefix_map[PEFT_TYPE] = PREFIX


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """Context manager: :func:`register`, then remove the entries again (for tests)."""
    was = is_registered()
    register()
    try:
        yield
    finally:
        if not was:
            for table in _mappings():
                table.pop(PEFT_TYPE, None)
