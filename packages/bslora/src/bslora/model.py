"""Inject BSLoRA into a transformers (or any torch) model; adapters, merge, save/load, mixed batches, as peft does."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from bslora.config import BSLoRAConfig
from bslora.layer import BASE_ADAPTER, BSLoRALinear, InterShare, IntraShare, MixedBatch, SharedPair
from icml25_shared.validate import ArgumentTypeError, check_bool, check_choice

__all__ = [
    "BSLoRAModel",
    "get_bslora_model",
    "find_targets",
    "check_kron_shapes",
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "STATE_CONFIG_PREFIX",
    "TRAINER_WEIGHTS_NAME",
]

logger = logging.getLogger(__name__)

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
TRAINER_WEIGHTS_NAME = "model.safetensors"  # what transformers.Trainer writes for a model that is not a PreTrainedModel
STATE_CONFIG_PREFIX = "bslora_config."  # state_dict() entry holding an adapter's config (JSON bytes, uint8)
_ADAPTER_STORES = ("lora_A", "lora_B", "intra_adapt", "inter_adapt")


def _config_tensor(config: BSLoRAConfig) -> torch.Tensor:
    return torch.tensor(list(json.dumps(config.to_dict(), sort_keys=True).encode("utf-8")), dtype=torch.uint8)


def _config_from_tensor(t: torch.Tensor) -> BSLoRAConfig:
    return BSLoRAConfig.from_dict(json.loads(bytes(t.to(torch.uint8).tolist()).decode("utf-8")))


def _conv1d_type() -> type | None:
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # transformers is a dependency, but keep the math usable without it
        return None
    return Conv1D


def _is_supported(module: nn.Module) -> bool:
    conv1d = _conv1d_type()
    return isinstance(module, nn.Linear) or (conv1d is not None and isinstance(module, conv1d))


def _matches(name: str, target_modules: tuple[str, ...] | list[str] | str) -> bool:
    if isinstance(target_modules, str):
        return re.fullmatch(target_modules, name) is not None
    return any(name == t or name.endswith("." + t) for t in target_modules)


def _layer_index(name: str, pattern: str) -> int | None:
    m = re.search(pattern, "." + name + ".")
    return int(m.group(1)) if m else None


def find_targets(model: nn.Module, cfg: BSLoRAConfig) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every target of ``cfg`` in ``model`` (already wrapped :class:`BSLoRALinear` included).

    Raises ``TypeError`` when a matched module is neither ``nn.Linear`` nor ``Conv1D`` and ``ValueError`` when nothing
    matches (the message lists the linear layers that exist).
    """
    found: list[tuple[str, nn.Module]] = []
    skip: list[str] = []
    linear_names: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(p + ".") for p in skip):
            continue
        if isinstance(module, BSLoRALinear):
            skip.append(name)
            linear_names.append(name)
            if _matches(name, cfg.target_modules):
                found.append((name, module))
            continue
        if _is_supported(module):
            linear_names.append(name)
        if not name or not _matches(name, cfg.target_modules):
            continue
        if not _is_supported(module):
            raise TypeError(
                f"target module {name!r} is a {type(module).__module__}.{type(module).__qualname__}; BSLoRA "
                "supports nn.Linear and transformers Conv1D only"
            )
        found.append((name, module))
    if not found:
        shown = sorted({n.rsplit(".", 1)[-1] for n in linear_names})
        raise ValueError(
            f"target_modules={cfg.target_modules!r} matched no module; the model's linear layers are named {shown}"
        )
    return found


def _module_shape(module: nn.Module) -> tuple[int, int]:
    if isinstance(module, BSLoRALinear):
        return module.in_features, module.out_features
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    w = cast(torch.Tensor, module.weight)  # Conv1D: (in, out)
    return int(w.shape[0]), int(w.shape[1])


def check_kron_shapes(shapes: dict[str, tuple[int, int]], config: BSLoRAConfig) -> None:
    """KE (Sec. 3.2) needs every target's in and out features divisible by ``kron_share_size``: ``ValueError``
    naming the first module that is not (used by injection and by the analytic counts alike)."""
    if config.share_mode != "kron" or not (config.r_intra or config.r_inter):
        return
    S = config.kron_share_size
    for name, (fin, fout) in shapes.items():
        if fin % S or fout % S:
            raise ValueError(
                f"share_mode='kron' needs in and out features divisible by kron_share_size={S}; module "
                f"{name!r} has shape (out={fout}, in={fin})"
            )


def _set_submodule(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


class BSLoRAModel(nn.Module):
    """A base model with one or more BSLoRA adapters (peft's ``LoraModel`` idiom).

    ``base_model`` is the wrapped model (its targets replaced by :class:`BSLoRALinear`); ``bslora_shared`` holds each
    adapter's shared pairs exactly once: ``bslora_shared[adapter]["intra"][str(layer)]`` and ``["inter"]``. Unknown
    attributes fall through to ``base_model`` (``config``, ``generate``...).
    """

    def __init__(
        self,
        model: nn.Module,
        config: BSLoRAConfig,
        adapter_name: str = "default",
        *,
        autocast_adapter_dtype: bool = True,
    ) -> None:
        super().__init__()
        self.base_model = model
        self.bslora_shared = nn.ModuleDict()
        self.peft_config: dict[str, BSLoRAConfig] = {}
        self.active_adapter: str = adapter_name
        self._layer_list: list[BSLoRALinear] | None = None  # the wrapped modules, found once (see _layers)
        self._load_prefix = ""
        self.register_load_state_dict_pre_hook(BSLoRAModel._load_pre_hook)
        self.register_load_state_dict_post_hook(BSLoRAModel._load_post_hook)
        for p in model.parameters():
            p.requires_grad_(False)
        self.add_adapter(adapter_name, config, autocast_adapter_dtype=autocast_adapter_dtype)
        self.set_adapter(adapter_name)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("base_model", "bslora_shared"):
                raise
            return getattr(self.base_model, name)

    # ------------------------------------------------------------------ adapters
    def bslora_layers(self) -> Iterator[tuple[str, BSLoRALinear]]:
        """``(name, layer)`` for every wrapped target, names relative to ``base_model``."""
        for name, module in self.base_model.named_modules():
            if isinstance(module, BSLoRALinear):
                yield name, module

    def _layers(self) -> list[BSLoRALinear]:
        """The wrapped modules (kept between forwards; rebuilt after add_adapter / delete_adapter / unload)."""
        if self._layer_list is None:
            self._layer_list = [layer for _, layer in self.bslora_layers()]
        return self._layer_list

    def add_adapter(self, adapter_name: str, config: BSLoRAConfig, *, autocast_adapter_dtype: bool = True) -> None:
        """Inject a new adapter ``adapter_name`` (not activated; see :meth:`set_adapter`).

        ``autocast_adapter_dtype`` (peft's default): on a float16 / bfloat16 base the adapter's tensors are kept in
        float32 (inputs are cast to it, outputs back to the base dtype); ``False`` keeps the base dtype."""
        if not isinstance(config, BSLoRAConfig):
            raise TypeError(f"config must be a BSLoRAConfig, got {type(config).__name__}")
        if not isinstance(adapter_name, str) or not adapter_name or adapter_name == BASE_ADAPTER or "." in adapter_name:
            raise ValueError(
                f"adapter_name must be a non-empty str without '.' other than {BASE_ADAPTER!r}, got {adapter_name!r}"
            )
        if adapter_name in self.peft_config:
            raise ValueError(f"adapter {adapter_name!r} already exists; loaded adapters: {list(self.peft_config)}")
        targets = find_targets(self.base_model, config)
        shapes = {name: _module_shape(m) for name, m in targets}
        layer_of = {name: _layer_index(name, config.layers_pattern) for name, _ in targets}
        if config.r_intra > 0:
            missing = [n for n, i in layer_of.items() if i is None]
            if missing:
                raise ValueError(
                    f"r_intra={config.r_intra} needs a layer index, but {missing[:3]} do not match "
                    f"layers_pattern={config.layers_pattern!r}"
                )
        mode = config.share_mode
        check_kron_shapes(shapes, config)
        if mode == "kron":
            n_in = n_out = config.kron_share_size
        elif mode == "gate":
            n_in = n_out = config.gate_share_size
        else:
            n_in = max(s[0] for s in shapes.values())
            n_out = max(s[1] for s in shapes.values())
        ref = cast(torch.Tensor, targets[0][1].weight)
        dtype = ref.dtype if ref.dtype.is_floating_point else torch.float32
        if check_bool("autocast_adapter_dtype", autocast_adapter_dtype) and dtype in (torch.float16, torch.bfloat16):
            dtype = torch.float32
        kw = {"device": ref.device, "dtype": dtype}
        store = nn.ModuleDict()
        intra_pairs: dict[int, SharedPair] = {}
        if config.r_intra > 0:
            intra = nn.ModuleDict()
            for idx in sorted({i for i in layer_of.values() if i is not None}):
                pair = IntraShare(config.r_intra, n_in, n_out, **kw)
                pair.reset_parameters(config)  # initialised once, however many modules share it
                intra[str(idx)] = pair
                intra_pairs[idx] = pair
            store["intra"] = intra
        inter_pair: SharedPair | None = None
        if config.r_inter > 0:
            inter_pair = InterShare(config.r_inter, n_in, n_out, **kw)
            inter_pair.reset_parameters(config)
            store["inter"] = inter_pair
        self.bslora_shared[adapter_name] = store
        linear = [n for n, m in targets if isinstance(m.base_layer if isinstance(m, BSLoRALinear) else m, nn.Linear)]
        if config.fan_in_fan_out and linear:
            warnings.warn(
                f"fan_in_fan_out=True but {linear[:3]} ({len(linear)} targets) are nn.Linear (weights stored "
                "out x in); treating them as fan_in_fan_out=False, as peft does",
                UserWarning,
                stacklevel=2,
            )
        for name, module in targets:
            if not isinstance(module, BSLoRALinear):
                if not isinstance(module, nn.Linear) and not config.fan_in_fan_out:
                    logger.warning("%s is a Conv1D; treating it as fan_in_fan_out=True", name)
                wrapped = BSLoRALinear(module, name=name, layer_idx=layer_of[name])
                _set_submodule(self.base_model, name, wrapped)
                module = wrapped
            idx = layer_of[name]
            intra_pair = intra_pairs.get(idx) if idx is not None else None
            module.update_layer(adapter_name, config, intra_pair, inter_pair, dtype=dtype)
        self.peft_config[adapter_name] = config
        self._layer_list = None
        self._mark_trainable()

    def set_adapter(self, adapter_name: str) -> None:
        """Make ``adapter_name`` the active (and only trainable) adapter.

        As in peft, a merged model is unmerged first (with a warning): the new adapter is then served unmerged."""
        self._check_names([adapter_name])
        self._unmerge_with_warning("Adapter cannot be set when the model is merged. Unmerging the model first.")
        self.active_adapter = adapter_name
        for _, layer in self.bslora_layers():
            layer.active_adapter = adapter_name if adapter_name in layer.configs else None
        self._mark_trainable()

    def delete_adapter(self, adapter_name: str) -> None:
        """Remove ``adapter_name`` everywhere; a merged adapter is refused (``ValueError``), as in peft."""
        self._check_names([adapter_name])
        if any(adapter_name in layer.merged_adapters for _, layer in self.bslora_layers()):
            raise ValueError(
                f"Cannot delete adapter(s) {[adapter_name]} while they are merged. Please unmerge them first."
            )
        for _, layer in self.bslora_layers():
            layer.delete_adapter(adapter_name)
        del self.bslora_shared[adapter_name]
        del self.peft_config[adapter_name]
        self._layer_list = None
        if self.active_adapter == adapter_name:
            remaining = list(self.peft_config)
            if remaining:
                self.set_adapter(remaining[0])

    def _mark_trainable(self) -> None:
        active = self.active_adapter
        for _, layer in self.bslora_layers():
            for store in (layer.lora_A, layer.lora_B, layer.intra_adapt, layer.inter_adapt):
                for name, mod in store.items():
                    mod.requires_grad_(name == active)
        for name, store in self.bslora_shared.items():
            store.requires_grad_(name == active)

    def _check_names(self, names: list[str]) -> None:
        unknown = sorted({n for n in names if n not in self.peft_config and n != BASE_ADAPTER})
        if unknown:
            raise ValueError(f"unknown adapter name(s) {unknown}; loaded adapters: {list(self.peft_config)}")

    @property
    def active_adapters(self) -> list[str]:
        return [self.active_adapter]

    @property
    def merged_adapters(self) -> list[str]:
        """Adapters merged into at least one layer's weights, in merge order."""
        return list(dict.fromkeys(n for _, layer in self.bslora_layers() for n in layer.merged_adapters))

    def _unmerge_with_warning(self, message: str) -> None:
        if self.merged_adapters:
            warnings.warn(message, UserWarning, stacklevel=3)
            self.unmerge_adapter()

    @contextlib.contextmanager
    def disable_adapter(self) -> Iterator[None]:
        """Context manager: run the base model alone (adapters skipped, not removed).

        A merged model is unmerged first, with a warning (peft unmerges too); it stays unmerged afterwards, so the
        active adapter is then served unmerged (same outputs as merged, to rounding)."""
        self._unmerge_with_warning(
            "disable_adapter() on a merged model: unmerging the merged adapter(s) first (they stay unmerged)"
        )
        layers = [layer for _, layer in self.bslora_layers()]
        old = [layer.disable_adapters for layer in layers]
        try:
            for layer in layers:
                layer.disable_adapters = True
            yield
        finally:
            for layer, o in zip(layers, old):
                layer.disable_adapters = o

    # ------------------------------------------------------------------ merge
    def merge_adapter(self, adapter_names: list[str] | None = None) -> None:
        """Fold the adapter(s) (default: the active one) into the base weights."""
        names = adapter_names or [self.active_adapter]
        self._check_names(names)
        for _, layer in self.bslora_layers():
            for n in names:
                if n in layer.configs:
                    layer.merge(n)

    def unmerge_adapter(self) -> None:
        """Subtract every merged update, restoring ``W0``."""
        for _, layer in self.bslora_layers():
            layer.unmerge()

    def merge_and_unload(self, adapter_names: list[str] | None = None) -> nn.Module:
        """Merge, then replace every :class:`BSLoRALinear` by its base layer; returns the plain base model."""
        self.merge_adapter(adapter_names)
        return self.unload()

    def unload(self) -> nn.Module:
        """Replace every :class:`BSLoRALinear` by its base layer (merged weights stay) and return the base model."""
        for name, layer in list(self.bslora_layers()):
            _set_submodule(self.base_model, name, layer.base_layer)
        self._layer_list = None
        return self.base_model

    # ------------------------------------------------------------------ counts
    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        """``(trainable, total)`` parameter counts, each shared tensor counted once."""
        seen: set[int] = set()
        trainable = total = 0
        for p in self.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            total += p.numel()
            if p.requires_grad:
                trainable += p.numel()
        return trainable, total

    def print_trainable_parameters(self) -> None:
        """Print ``trainable params: ... || all params: ... || trainable%: ...`` (peft's format)."""
        t, a = self.get_nb_trainable_parameters()
        print(f"trainable params: {t:,d} || all params: {a:,d} || trainable%: {100 * t / a:.4f}")

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: Any = None,
        *args: Any,
        attention_mask: Any = None,
        labels: Any = None,
        adapter_names: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The base model's forward. ``adapter_names`` (one per batch row, ``"__base__"`` = no adapter) runs a
        mixed batch: every row with its own adapter in one pass.

        ``input_ids``, ``attention_mask`` and ``labels`` are named so that ``transformers.Trainer`` keeps those
        dataset columns; they are passed on only when given (a non-LM base gets its first positional argument).
        """
        if input_ids is not None:
            args = (input_ids, *args)
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if labels is not None:
            kwargs["labels"] = labels
        if adapter_names is None:
            try:
                return self.base_model(*args, **kwargs)
            finally:
                self.clear_caches()
        with self._mixed_batch(adapter_names, self._batch_size(args, kwargs)):
            return self.base_model(*args, **kwargs)

    @contextlib.contextmanager
    def _mixed_batch(self, adapter_names: Any, batch: int | None) -> Iterator[None]:
        """Serve one forward with one adapter per row: checks the names as peft does (a list of str, one per row,
        inference mode, nothing merged), then hands every wrapped module the same :class:`MixedBatch`."""
        if isinstance(adapter_names, str) or not isinstance(adapter_names, (list, tuple)):
            raise ArgumentTypeError(
                f"adapter_names must be a list of adapter names (one per batch row), got {adapter_names!r}"
            )
        rows = list(adapter_names)
        if not all(isinstance(r, str) for r in rows):
            raise ArgumentTypeError(f"adapter_names must hold str names, got {rows!r}")
        self._check_names(rows)
        if batch is not None and batch != len(rows):
            raise ValueError(f"adapter_names has {len(rows)} entries, expected the batch size {batch}")
        if self.training:
            raise ValueError("Cannot pass `adapter_names` when the model is in training mode; call .eval() first")
        layers = self._layers()
        if any(layer.merged for layer in layers):
            raise ValueError("forward with adapter_names is not possible while an adapter is merged; unmerge first")
        mixed = MixedBatch(rows)
        for layer in layers:
            layer._mixed = mixed
        try:
            yield
        finally:
            for layer in layers:
                layer._mixed = None
            self.clear_caches()

    def set_kernel_impl(self, impl: str) -> None:
        """How mixed-adapter batches (``forward(adapter_names=...)``) compute the per-row adapter terms.

        ``"auto"`` (default): CUDA tensors go to the shared Triton segmented matmul
        (``icml25_shared.kernels.grouped_lora``: tokens grouped by adapter, one shrink and one expand pass), CPU
        tensors to a gathered ``bmm`` pair over the stacked exact factors; ``"torch"`` runs ``grouped_lora``'s
        pure-torch reference (one matmul pair per adapter); ``"triton"`` forces the kernel (CUDA, or CPU under
        ``TRITON_INTERPRET=1``). All give the same result to rounding.
        """
        from icml25_shared.kernels import IMPLS

        impl = check_choice("impl", impl, IMPLS)
        for _, layer in self.bslora_layers():
            layer.kernel_impl = impl

    @staticmethod
    def _batch_size(args: tuple, kwargs: dict) -> int | None:
        for key in ("input_ids", "inputs_embeds"):
            if isinstance(kwargs.get(key), torch.Tensor):
                return int(kwargs[key].shape[0])
        for a in args:
            if isinstance(a, torch.Tensor):
                return int(a.shape[0])
        return None

    def clear_caches(self) -> None:
        """Drop the kept shared projections (done after every forward)."""
        for layer in self._layers():
            for pairs in layer._shared.values():
                for p in pairs:
                    if p is not None and p._cache is not None:
                        p.clear_cache()

    def memory_report(self) -> dict[str, Any]:
        """Bytes held by the adapters, counted from the live tensors (each shared tensor once).

        ``{"adapters": {name: bytes}, "adapters_total", "base", "caches"}``; ``caches`` counts every tensor a wrapped
        module or shared pair keeps between forwards (0 after a forward: the shared projections and the mixed-batch
        stacks live for one forward only)."""

        def nbytes(ts: Any) -> int:
            seen: dict[int, int] = {}
            for t in ts:
                seen[t.data_ptr()] = t.numel() * t.element_size()
            return sum(seen.values())

        per: dict[str, int] = {}
        for name in self.peft_config:
            ts = list(self.bslora_shared[name].parameters())
            for _, layer in self.bslora_layers():
                for store in (layer.lora_A, layer.lora_B, layer.intra_adapt, layer.inter_adapt):
                    if name in store:
                        ts += list(store[name].parameters())
            per[name] = nbytes(ts)
        adapter_ptrs = {p.data_ptr() for p in self.bslora_shared.parameters()}
        for _, layer in self.bslora_layers():
            for store in (layer.lora_A, layer.lora_B, layer.intra_adapt, layer.inter_adapt):
                adapter_ptrs |= {p.data_ptr() for p in store.parameters()}
        base = nbytes(t for t in [*self.base_model.parameters(), *self.base_model.buffers()]
                      if t.data_ptr() not in adapter_ptrs)  # fmt: skip
        kept = [m._cache[2] for m in self.bslora_shared.modules() if isinstance(m, SharedPair) and m._cache]
        for _, layer in self.bslora_layers():
            if layer._mixed is not None:
                kept += [v[2] for v in layer._mixed._kept.values()]
        return {"adapters": per, "adapters_total": sum(per.values()), "base": base, "caches": nbytes(kept)}

    def generate(self, *args: Any, adapter_names: list[str] | None = None, **kwargs: Any) -> Any:
        """``base_model.generate`` with the active adapter, or with ``adapter_names`` (one per prompt row,
        ``"__base__"`` = no adapter): every row decodes with its own adapter in one batched generation, as peft's
        ``generate(adapter_names=...)`` does. With ``num_beams > 1`` (or ``num_return_sequences > 1`` when
        sampling) each row's name is repeated for its beams / sequences, as transformers expands the prompts."""
        if adapter_names is None:
            try:
                return cast(Any, self.base_model).generate(*args, **kwargs)
            finally:
                self.clear_caches()
        if isinstance(adapter_names, str) or not isinstance(adapter_names, (list, tuple)):
            raise ArgumentTypeError(
                f"adapter_names must be a list of adapter names (one per prompt row), got {adapter_names!r}"
            )
        batch = self._batch_size(args, kwargs)
        if batch is not None and batch != len(adapter_names):
            raise ValueError(f"adapter_names has {len(adapter_names)} entries, expected the batch size {batch}")
        beams = int(kwargs.get("num_beams") or getattr(getattr(self.base_model, "generation_config", None),
                                                        "num_beams", 1) or 1)  # fmt: skip
        seqs = int(kwargs.get("num_return_sequences") or 1)
        repeat = beams if beams > 1 else seqs
        rows = [n for n in adapter_names for _ in range(repeat)]
        with self._mixed_batch(rows, None):
            return cast(Any, self.base_model).generate(*args, **kwargs)

    # ------------------------------------------------------------------ save / load
    def _adapter_keys(self) -> set[str]:
        """``state_dict`` keys (relative to this module) of every adapter's tensors."""
        keys = {f"bslora_shared.{k}" for k in self.bslora_shared.state_dict()}
        for mod_name, layer in self.bslora_layers():
            for store in _ADAPTER_STORES:
                keys |= {f"base_model.{mod_name}.{store}.{k}" for k in getattr(layer, store).state_dict()}
        return keys

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        """The adapters only, as a peft checkpoint holds them: every adapter's tensors under their module keys
        (``base_model.<module>.lora_A.<adapter>.weight``, ``bslora_shared.<adapter>.inter.A``...) plus one
        ``bslora_config.<adapter>`` entry per adapter (its config as JSON bytes), and none of the frozen base
        model's tensors (they come from the base model; ``base_model.state_dict()`` has everything).

        This is what ``transformers.Trainer`` saves into ``checkpoint-N/model.safetensors`` and loads back on
        ``resume_from_checkpoint``, and :meth:`from_pretrained` reads such a checkpoint. A tied-embedding base no
        longer reaches safetensors' shared-memory check, and a checkpoint is the size of the adapters.
        :meth:`load_state_dict` accepts this dict (missing base keys are expected) as well as a full one."""
        out = super().state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)
        keep = {prefix + k for k in self._adapter_keys()}
        for k in [k for k in out if k.startswith(prefix) and k not in keep]:
            del out[k]
        for name, cfg in self.peft_config.items():
            out[f"{prefix}{STATE_CONFIG_PREFIX}{name}"] = _config_tensor(cfg)
        return out

    @staticmethod
    def _load_pre_hook(module: BSLoRAModel, state_dict: dict, prefix: str, *args: Any) -> None:
        """Consume the ``bslora_config.<adapter>`` entries: each must name a loaded adapter with the same config."""
        error_msgs = args[-1]
        module._load_prefix = prefix
        for key in [k for k in state_dict if k.startswith(prefix + STATE_CONFIG_PREFIX)]:
            name = key[len(prefix + STATE_CONFIG_PREFIX) :]
            cfg = _config_from_tensor(state_dict.pop(key))
            if name not in module.peft_config:
                error_msgs.append(
                    f"state dict holds BSLoRA adapter {name!r}, which this model does not have (loaded adapters: "
                    f"{list(module.peft_config)}); add it first, or use BSLoRAModel.from_pretrained on the checkpoint"
                )
            elif cfg.to_dict() != module.peft_config[name].to_dict():
                error_msgs.append(
                    f"adapter {name!r}: the state dict's config {cfg.to_dict()} differs from the model's "
                    f"{module.peft_config[name].to_dict()}"
                )

    @staticmethod
    def _load_post_hook(module: BSLoRAModel, incompatible: Any) -> None:
        """Base-model keys absent from the dict are expected (:meth:`state_dict` holds the adapters only)."""
        adapter = {module._load_prefix + k for k in module._adapter_keys()}
        prefix = module._load_prefix
        missing = incompatible.missing_keys
        missing[:] = [k for k in missing if not k.startswith(prefix) or k in adapter]

    def adapter_state_dict(self, adapter_name: str | None = None) -> dict[str, torch.Tensor]:
        """Every tensor of one adapter, each shared tensor once. Keys: ``<module>.lora_A.weight``,
        ``<module>.lora_B.weight``, ``<module>.{intra,inter}.<a|b|u_in|...>``, ``bslora_shared.intra.<l>.<A|B>``,
        ``bslora_shared.inter.<A|B>``."""
        name = adapter_name or self.active_adapter
        self._check_names([name])
        sd: dict[str, torch.Tensor] = {}
        for mod_name, layer in self.bslora_layers():
            if name not in layer.configs:
                continue
            if name in layer.lora_A:
                sd[f"{mod_name}.lora_A.weight"] = cast(nn.Linear, layer.lora_A[name]).weight
                sd[f"{mod_name}.lora_B.weight"] = cast(nn.Linear, layer.lora_B[name]).weight
            for kind, store in (("intra", layer.intra_adapt), ("inter", layer.inter_adapt)):
                if name in store:
                    for pn, p in store[name].named_parameters():
                        sd[f"{mod_name}.{kind}.{pn}"] = p
        for key, p in self.bslora_shared[name].named_parameters():
            sd[f"bslora_shared.{key}"] = p
        return {k: v.detach() for k, v in sd.items()}

    def load_adapter_state_dict(self, state_dict: dict[str, torch.Tensor], adapter_name: str | None = None) -> None:
        """Copy ``state_dict`` (as from :meth:`adapter_state_dict`) into the adapter; strict on keys and shapes."""
        name = adapter_name or self.active_adapter
        own = self.adapter_state_dict(name)
        missing = sorted(set(own) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(own))
        if missing or unexpected:
            raise ValueError(
                f"adapter {name!r}: state dict has missing keys {missing[:5]} ({len(missing)} in all) and unexpected "
                f"keys {unexpected[:5]} ({len(unexpected)} in all)"
            )
        for k, dst in own.items():
            src = state_dict[k]
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"tensor {k!r}: checkpoint shape {tuple(src.shape)} != model shape {tuple(dst.shape)}")
        with torch.no_grad():
            for k, dst in own.items():
                dst.copy_(state_dict[k].to(dst.dtype))

    def save_pretrained(self, save_directory: str | Path, adapter_name: str | None = None) -> Path:
        """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (each shared tensor stored once)."""
        from safetensors.torch import save_file

        name = adapter_name or self.active_adapter
        d = Path(save_directory)
        d.mkdir(parents=True, exist_ok=True)
        sd = {k: v.contiguous().cpu() for k, v in self.adapter_state_dict(name).items()}
        save_file(sd, str(d / WEIGHTS_NAME), metadata={"format": "pt", "adapter_name": name})
        (d / CONFIG_NAME).write_text(json.dumps(self.peft_config[name].to_dict(), indent=2) + "\n", encoding="utf-8")
        return d

    def load_adapter(
        self, save_directory: str | Path, adapter_name: str = "default", *, is_trainable: bool = False
    ) -> None:
        """Add the adapter saved in ``save_directory`` as ``adapter_name`` (frozen unless ``is_trainable``)."""
        from safetensors.torch import load_file

        d = Path(save_directory)
        for f in (CONFIG_NAME, WEIGHTS_NAME):
            if not (d / f).is_file():
                raise FileNotFoundError(f"{d / f} does not exist; expected a folder written by save_pretrained")
        cfg = BSLoRAConfig.from_dict(json.loads((d / CONFIG_NAME).read_text(encoding="utf-8")))
        self.add_adapter(adapter_name, cfg)
        try:
            self.load_adapter_state_dict(load_file(str(d / WEIGHTS_NAME)), adapter_name)
        except ValueError:
            self.delete_adapter(adapter_name)
            raise
        self._mark_trainable()
        if not is_trainable:
            self._freeze(adapter_name)

    def _freeze(self, adapter_name: str) -> None:
        for _, layer in self.bslora_layers():
            for store in (layer.lora_A, layer.lora_B, layer.intra_adapt, layer.inter_adapt):
                if adapter_name in store:
                    store[adapter_name].requires_grad_(False)
        self.bslora_shared[adapter_name].requires_grad_(False)

    @classmethod
    def from_pretrained(
        cls, model: nn.Module, save_directory: str | Path, adapter_name: str = "default", *, is_trainable: bool = False
    ) -> BSLoRAModel:
        """Wrap ``model`` with the adapter saved in ``save_directory``: a folder written by :meth:`save_pretrained`
        (``adapter_config.json`` + ``adapter_model.safetensors``) or a ``transformers.Trainer`` checkpoint
        (``checkpoint-N/model.safetensors``, written from :meth:`state_dict`: every adapter it holds is restored
        under its saved name and ``adapter_name`` is made active; with a single adapter that adapter is active)."""
        from safetensors.torch import load_file

        d = Path(save_directory)
        if not (d / CONFIG_NAME).is_file():
            if (d / TRAINER_WEIGHTS_NAME).is_file():
                return cls._from_trainer_checkpoint(model, d, adapter_name, is_trainable)
            raise FileNotFoundError(
                f"{d / CONFIG_NAME} does not exist; expected a folder written by save_pretrained or a "
                f"transformers.Trainer checkpoint holding {TRAINER_WEIGHTS_NAME}"
            )
        cfg = BSLoRAConfig.from_dict(json.loads((d / CONFIG_NAME).read_text(encoding="utf-8")))
        out = cls(model, cfg, adapter_name)
        out.load_adapter_state_dict(load_file(str(d / WEIGHTS_NAME)), adapter_name)
        if not is_trainable:
            out._freeze(adapter_name)
        return out

    @classmethod
    def _from_trainer_checkpoint(cls, model: nn.Module, d: Path, adapter_name: str, is_trainable: bool) -> BSLoRAModel:
        from safetensors.torch import load_file

        sd = load_file(str(d / TRAINER_WEIGHTS_NAME))
        configs = {k[len(STATE_CONFIG_PREFIX) :]: _config_from_tensor(v) for k, v in sd.items()
                   if k.startswith(STATE_CONFIG_PREFIX)}  # fmt: skip
        if not configs:
            raise ValueError(
                f"{d / TRAINER_WEIGHTS_NAME} holds no BSLoRA adapter (no {STATE_CONFIG_PREFIX}<name> entry); "
                "expected a checkpoint that transformers.Trainer wrote for a BSLoRAModel"
            )
        names = list(configs)
        active = adapter_name if adapter_name in configs else names[0] if len(names) == 1 else None
        if active is None:
            raise ValueError(f"adapter_name={adapter_name!r} is not in the checkpoint, which holds {names}")
        out = cls(model, configs[active], active)
        for name in names:
            if name != active:
                out.add_adapter(name, configs[name])
        out.set_adapter(active)
        result = out.load_state_dict(sd, strict=False)
        if result.missing_keys or result.unexpected_keys:
            raise ValueError(
                f"{d / TRAINER_WEIGHTS_NAME}: missing keys {result.missing_keys[:5]}, unexpected keys "
                f"{result.unexpected_keys[:5]}"
            )
        for name in names:
            if not is_trainable or name != active:
                out._freeze(name)
        return out


def get_bslora_model(
    model: nn.Module, config: BSLoRAConfig, adapter_name: str = "default", *, autocast_adapter_dtype: bool = True
) -> BSLoRAModel:
    """Wrap ``model`` with a BSLoRA adapter (peft's ``get_peft_model`` idiom).

    Args:
        model: the base model (a transformers model or any module with ``nn.Linear`` / ``Conv1D`` targets); its
            weights are frozen and its target modules wrapped in place.
        config: the adapter's configuration.
        adapter_name: the adapter's name.
        autocast_adapter_dtype: on a float16 / bfloat16 base keep the adapter in float32 (peft's default).

    Returns:
        The wrapped model, with ``adapter_name`` active and trainable.

    Raises:
        ValueError: when ``target_modules`` matches no module, or KE shapes are not divisible by
            ``kron_share_size``.
        TypeError: when a matched module is neither ``nn.Linear`` nor transformers ``Conv1D``.
    """
    return BSLoRAModel(model, config, adapter_name, autocast_adapter_dtype=autocast_adapter_dtype)
