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

What works through peft: ``get_peft_model``, forward (also ``adapter_names=[...]`` mixed batches, and
``generate(adapter_names=...)``), training, ``print_trainable_parameters``, ``merge_and_unload``,
``PeftModel.save_pretrained`` / ``PeftModel.from_pretrained`` / ``load_adapter`` (peft's layout: the adapter's
tensors, each shared tensor once, the adapter name dropped from the keys), ``add_adapter`` and ``set_adapter``
(``inference_mode=True`` freezes), ``transformers.Trainer`` checkpoints and ``resume_from_checkpoint`` (through
those), and every ``BSLoRAModel`` method via ``peft_model.base_model`` (``peft_model.base_model.disable_adapter()``
included). What does not: ``PeftModel.disable_adapter()`` and ``get_model_status()`` (they need peft's
``BaseTuner``). :func:`bslora.export_to_lora` gives a plain LoRA that peft's ``LoraModel`` loads natively.
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

    # ------------------------------------------------------------------ peft's adapter management
    def set_adapter(self, adapter_name: str, inference_mode: bool = False) -> None:
        """``PeftModel.set_adapter(name, inference_mode=...)`` lands here: activate ``adapter_name`` (frozen when
        ``inference_mode``)."""
        super().set_adapter(adapter_name)
        if inference_mode:
            self._freeze(adapter_name)

    def inject_adapter(self, model: nn.Module, adapter_name: str, **_: Any) -> None:
        """``PeftModel.add_adapter`` / ``load_adapter`` land here, with the config already stored under
        ``adapter_name``: inject it (not activated), as :meth:`BSLoRAModel.add_adapter` does."""
        if model is not self.base_model:
            raise ValueError("BSLoRAPeftTuner.inject_adapter injects into its own base model only")
        cfg = self.peft_config.pop(adapter_name)
        if not isinstance(cfg, BSLoRAConfig):
            raise TypeError(f"adapter {adapter_name!r}: BSLoRA cannot mix with {type(cfg).__name__} adapters")
        active = self.active_adapter
        try:
            self.add_adapter(adapter_name, cfg)
        except Exception:
            self.peft_config[adapter_name] = cfg  # peft removes it again on failure
            raise
        self.set_adapter(active)

    def set_requires_grad(self, adapter_names: str | list[str], requires_grad: bool = True) -> None:
        """``PeftModel.set_requires_grad`` (used by ``load_adapter(is_trainable=True)``)."""
        names = [adapter_names] if isinstance(adapter_names, str) else list(adapter_names)
        self._check_names(names)
        for name in names:
            for _, layer in self.bslora_layers():
                for store in (layer.lora_A, layer.lora_B, layer.intra_adapt, layer.inter_adapt):
                    if name in store:
                        store[name].requires_grad_(requires_grad)
            self.bslora_shared[name].requires_grad_(requires_grad)

    # ------------------------------------------------------------------ peft's checkpoint hooks
    @classmethod
    def _remove_adapter_name_from_key(cls, key: str, adapter_name: str) -> str:
        """``...q_proj.lora_A.default.weight`` -> ``...q_proj.lora_A.weight``, ``bslora_shared.default.inter.A`` ->
        ``bslora_shared.inter.A`` (the name follows an adapter store, not only at peft's usual places)."""
        parts = key.split(".")
        for i in range(1, len(parts)):
            if parts[i] == adapter_name and parts[i - 1] in _STORES:
                return ".".join(parts[:i] + parts[i + 1 :])
        return key

    @classmethod
    def _adapter_keys_of(cls, keys: Any, adapter_name: str) -> list[str]:
        return [k for k in keys if cls._remove_adapter_name_from_key(k, adapter_name) != k]

    @classmethod
    def _get_adapter_state_dict(
        cls, model: nn.Module, config: Any, adapter_name: str, state_dict: dict, unwanted_adapter_names: Any
    ) -> dict:
        """peft's ``get_peft_model_state_dict`` (``PeftModel.save_pretrained``, ``Trainer`` checkpoints): the
        adapter's tensors, each shared tensor once; peft then drops the adapter name from the keys."""
        return {k: state_dict[k] for k in cls._adapter_keys_of(state_dict, adapter_name)}

    @classmethod
    def _remap_adapter_state_dict_for_load(cls, model: nn.Module, config: Any, adapter_name: str, state_dict: dict):
        """peft's ``set_peft_model_state_dict`` (``PeftModel.from_pretrained`` / ``load_adapter``): checkpoint keys
        back to the model's keys for ``adapter_name``."""
        to_model = {cls._remove_adapter_name_from_key(k, adapter_name): k
                    for k in cls._adapter_keys_of(model.state_dict(), adapter_name)}  # fmt: skip
        return {to_model.get(k, k): v for k, v in state_dict.items()}


_STORES = ("bslora_shared", "lora_A", "lora_B", "intra_adapt", "inter_adapt")


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
