"""``UncertainSAM``: USAM heads on transformers' ``SamModel`` / ``Sam2Model`` through forward hooks (Sec. 3.2).

The heads read the mask decoder's output query tokens after the two-way transformer, the tensor the decoder feeds to
its IoU head and hypernetwork MLPs. A forward hook on ``model.mask_decoder.transformer`` captures it; nothing in
transformers is patched, and ``pred_masks`` / ``iou_scores`` are the model's own outputs, bit for bit.

Token layouts (T = output tokens then prompt tokens):

- ``SamModel``: index 0 the IoU token, 1..4 the mask tokens (1 single-mask, 2..4 the three multimask outputs);
- ``Sam2Model``: index 0 the object-score token, 1 the IoU token, 2..5 the mask tokens.

With ``multimask_output=True`` SAM returns the masks of mask tokens 1..3 (counted among the mask tokens).
``token_alignment="aligned"`` pairs returned mask k with mask token k + 1, the token that produced it (the paper);
``"official"`` pairs it with mask token k, as the released code does (an off-by-one that is consistent between its
training and its inference, so the released heads need it). With ``multimask_output=False`` the single returned
mask is paired with its own token; SAM2 may then return a multimask output instead when the single mask is unstable
(``dynamic_multimask_via_stability``): the wrapper reproduces that choice from the captured tokens and pairs the
returned mask with the token that produced it.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers.utils.generic import ModelOutput

from icml25_shared.validate import check_bool, check_finite
from usam.config import GAP_PAIRS, GAP_TARGETS, OFFICIAL_HEAD_NAMES, USAMConfig
from usam.heads import USAMHead, USAMHeads

__all__ = ["UncertainSAM", "USAMOutput", "is_sam_model", "load_official_heads", "token_layout"]

log = logging.getLogger(__name__)
CONFIG_NAME = "usam_config.json"
WEIGHTS_NAME = "usam_heads.safetensors"


def is_sam_model(model: Any) -> bool:
    """Whether ``model`` has a SAM-style mask decoder (``mask_decoder.transformer`` and ``iou_token``)."""
    dec = getattr(model, "mask_decoder", None)
    return isinstance(model, nn.Module) and hasattr(dec, "transformer") and hasattr(dec, "iou_token")


def token_layout(model: nn.Module) -> tuple[int, int]:
    """(index of the IoU token, index of mask token 0) in the decoder's output tokens."""
    if hasattr(model.mask_decoder, "obj_score_token"):  # Sam2MaskDecoder
        return 1, 2
    return 0, 1


@dataclass
class USAMOutput(ModelOutput):
    """What :meth:`UncertainSAM.forward` returns: a transformers ``ModelOutput`` (attributes, ``out["name"]``,
    ``out[0]``, ``to_tuple()``, fields that are ``None`` left out), like the SAM model's own output.

    ``pred_masks`` (B, P, K, h, w) and ``iou_scores`` (B, P, K) are the SAM model's outputs unchanged (K = 3 with
    ``multimask_output=True``, else 1); ``uncertainty[name]`` (B, P, K) is each head's score for each returned
    mask (gaps with the offset subtracted); ``tokens`` (B, P, K, 2d) = concat(IoU token, paired mask token) when
    asked for; ``sam_output`` is the model's full output object.
    """

    pred_masks: torch.Tensor | None = None
    iou_scores: torch.Tensor | None = None
    uncertainty: dict[str, torch.Tensor] | None = None
    tokens: torch.Tensor | None = None
    sam_output: Any = None


class UncertainSAM(nn.Module):
    """A ``SamModel`` / ``Sam2Model`` with USAM heads: one forward pass gives masks, SamScores and the heads' scores.

    Args:
        model: transformers' ``SamModel`` or ``Sam2Model`` (any device and dtype).
        config: :class:`~usam.config.USAMConfig` (defaults: the four heads of the paper, aligned tokens).
        heads: fused heads to use (default: freshly initialised heads, float32, on the model's device).

    Example::

        usam = UncertainSAM(SamModel(SamConfig()), USAMConfig())
        out = usam(pixel_values=x, input_points=pts)      # the SamModel arguments
        out.uncertainty["task_gap"]                       # (B, P, 3)
    """

    def __init__(self, model: nn.Module, config: USAMConfig | None = None, heads: USAMHeads | None = None) -> None:
        super().__init__()
        if not is_sam_model(model):
            raise TypeError(
                f"model must be a transformers SamModel or Sam2Model (with mask_decoder.transformer), "
                f"got {type(model).__name__}"
            )
        config = config if config is not None else USAMConfig()
        if not isinstance(config, USAMConfig):
            raise TypeError(f"config must be a USAMConfig, got {type(config).__name__}")
        self.model: Any = model  # a SamModel / Sam2Model: its sub-modules are read by name
        self.config = config
        self.iou_index, self.mask_index = token_layout(model)
        self.d = int(self.model.mask_decoder.iou_token.weight.shape[-1])
        param = next(model.parameters())
        if heads is None:
            heads = USAMHeads(config.trained_heads, self.in_features, config.hidden)
        self._check_heads(heads)
        self.heads = heads.to(device=param.device)
        self._tokens: torch.Tensor | None = None
        self._upscaled: torch.Tensor | None = None
        self._active = False
        dec = self.model.mask_decoder
        self._hooks = [
            dec.transformer.register_forward_hook(self._capture_tokens),
            dec.activation.register_forward_hook(self._capture_upscaled),
        ]

    @property
    def device(self) -> torch.device:
        """The SAM model's device (as ``PreTrainedModel.device``)."""
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The SAM model's floating dtype (as ``PreTrainedModel.dtype``)."""
        return next(p.dtype for p in self.model.parameters() if p.is_floating_point())

    @property
    def in_features(self) -> int:
        """Input width of the heads: 2d for ``token_input="both"``, else d."""
        return 2 * self.d if self.config.token_input == "both" else self.d

    def _check_heads(self, heads: USAMHeads) -> None:
        if not isinstance(heads, USAMHeads):
            raise TypeError(f"heads must be USAMHeads, got {type(heads).__name__}")
        if heads.in_features != self.in_features and heads.names:
            raise ValueError(
                f"heads: the model's decoder width d = {self.d} with token_input={self.config.token_input!r} gives "
                f"head inputs of {self.in_features} features; expected {self.in_features}, got {heads.in_features}"
            )
        if tuple(heads.names) != tuple(self.config.trained_heads):
            raise ValueError(f"heads: names {heads.names} differ from the config's {self.config.trained_heads}")

    def _capture_tokens(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._active:
            self._tokens = output[0]

    def _capture_upscaled(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._active:  # the decoder's second GELU call is the upscaled embedding
            self._upscaled = output

    def remove_hooks(self) -> None:
        """Detach the hooks from the SAM model (the wrapper no longer works afterwards)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def set_head(self, name: str, head: USAMHead) -> None:
        """Use a trained :class:`USAMHead` (e.g. from :func:`usam.train.fit_head`) for target ``name``."""
        self.heads.set_head(name, head)

    # ------------------------------------------------------------------ tokens
    def _mask_token_choice(self, q: torch.Tensor, out: Any, multimask: bool) -> torch.Tensor:
        """Index into the mask tokens (B, P, K) paired with each returned mask."""
        b, p = q.shape[:2]
        if multimask:
            first = 1 if self.config.token_alignment == "aligned" else 0
            idx = torch.arange(first, first + out.pred_masks.shape[2], device=q.device)
            return idx.expand(b, p, -1)
        dec = self.model.mask_decoder
        if getattr(dec, "dynamic_multimask_via_stability", False) and not dec.training:
            return self._sam2_dynamic_choice(q, out)[..., None]
        return torch.zeros(b, p, 1, dtype=torch.long, device=q.device)

    def _sam2_dynamic_choice(self, q: torch.Tensor, out: Any) -> torch.Tensor:
        """Which mask token SAM2 returned in single-mask mode (the stability rule of its decoder)."""
        dec = self.model.mask_decoder
        b, p = q.shape[:2]
        n_masks = dec.num_mask_tokens
        mask_tok = q[:, :, self.mask_index : self.mask_index + n_masks]
        hyper = torch.stack([dec.output_hypernetworks_mlps[i](mask_tok[:, :, i]) for i in range(n_masks)], 2)
        up = self._upscaled
        assert up is not None  # captured by the forward hook during this call
        all_masks = (hyper @ up.reshape(b, p, up.shape[1], -1)).reshape(b, p, n_masks, *up.shape[-2:])
        stability = dec._get_stability_scores(all_masks[:, :, 0])
        scores = dec.iou_prediction_head(q[:, :, self.iou_index])
        best = 1 + scores[:, :, 1:].argmax(-1)
        choice = torch.where(stability >= dec.dynamic_multimask_stability_thresh, 0, best)
        picked = all_masks.gather(2, choice[:, :, None, None, None].expand(-1, -1, 1, *all_masks.shape[-2:]))
        if not torch.allclose(picked.float(), out.pred_masks.float(), atol=1e-3, rtol=1e-3):
            warnings.warn(
                "UncertainSAM: could not reproduce SAM2's single-mask choice; pairing with mask token 0",
                RuntimeWarning,
                stacklevel=3,
            )
            return torch.zeros_like(choice)
        return choice

    def tokens_from_queries(self, q: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
        """concat(IoU token, chosen mask tokens): (B, P, T, d) queries, (B, P, K) choice → (B, P, K, 2d)."""
        iou_tok = q[:, :, self.iou_index]
        masks = q[:, :, self.mask_index : self.mask_index + self.model.mask_decoder.num_mask_tokens]
        mask_tok = masks.gather(2, choice[..., None].expand(-1, -1, -1, q.shape[-1]))
        return torch.cat([iou_tok[:, :, None].expand_as(mask_tok), mask_tok], -1)

    def head_inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        """The part of concat(IoU, mask) tokens (…, 2d) the heads read (``token_input``)."""
        if self.config.token_input == "iou":
            return tokens[..., : self.d]
        if self.config.token_input == "mask":
            return tokens[..., self.d :]
        return tokens

    def scores(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """Head outputs for tokens (…, 2d): IoU heads as they are, gaps minus the offset (or as differences)."""
        check_finite("tokens", tokens)
        x = self.head_inputs(tokens).to(self.heads.w1.dtype)
        raw = self.heads(x)
        out: dict[str, torch.Tensor] = {}
        for i, name in enumerate(self.heads.names):
            out[name] = raw[..., i] - self.config.gap_offset if name in GAP_TARGETS else raw[..., i]
        if self.config.gap_estimate == "difference":
            for gap in self.config.heads:
                if gap in GAP_PAIRS:
                    a, b = GAP_PAIRS[gap]
                    out[gap] = out[a] - out[b]
        return {name: out[name] for name in self.config.heads}

    def forward(
        self, *args: Any, return_tokens: bool = False, return_dict: bool | None = None, **sam_inputs: Any
    ) -> USAMOutput | tuple:
        """Run the SAM model on its own arguments (``SamProcessor`` / ``Sam2Processor`` outputs) and the heads.

        ``return_dict=False`` returns ``USAMOutput.to_tuple()`` (with the SAM output as the model's own tuple), as
        transformers models do; the default follows the SAM model's ``config.return_dict``.
        """
        check_bool("return_tokens", return_tokens)
        if return_dict is None:
            return_dict = getattr(self.model.config, "return_dict", True)
        check_bool("return_dict", return_dict)
        dtype = self.dtype
        for key in ("pixel_values", "image_embeddings"):
            v = sam_inputs.get(key)
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype != dtype:
                raise TypeError(f"{key} must have the model's dtype {dtype}, got {v.dtype} (cast it with .to({dtype}))")
        for key, v in sam_inputs.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                check_finite(key, v)  # a NaN input would surface later as non-finite decoder tokens
        for i, v in enumerate(args):
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                check_finite(f"positional argument {i}", v)
        multimask = sam_inputs.get("multimask_output", True)
        self._active, self._tokens, self._upscaled = True, None, None
        try:
            out = self.model(*args, return_dict=True, **sam_inputs)
            q = self._tokens
            if q is None:
                raise RuntimeError("UncertainSAM: the mask decoder's transformer hook did not run")
            choice = self._mask_token_choice(q, out, bool(multimask))
        finally:
            self._active, self._tokens, self._upscaled = False, None, None
        tokens = self.tokens_from_queries(q, choice)
        if not torch.isfinite(tokens).all():
            raise ValueError(
                f"the SAM model's decoder tokens are not finite ({int((~torch.isfinite(tokens)).sum())} entries) "
                f"although the inputs {sorted(k for k, v in sam_inputs.items() if isinstance(v, torch.Tensor))} are "
                "finite: are the model's weights finite (a failed load or an overflow in float16)?"
            )
        uncertainty = self.scores(tokens)
        result = USAMOutput(out.pred_masks, out.iou_scores, uncertainty, tokens if return_tokens else None, out)
        if not return_dict:
            result.sam_output = out.to_tuple()
            return result.to_tuple()
        return result

    # ------------------------------------------------------------------ save / load
    def save_pretrained(self, save_directory: str | Path) -> Path:
        """Write the heads (safetensors) and the config (JSON) to ``save_directory``; the SAM model is not saved."""
        from safetensors.torch import save_file

        path = Path(save_directory)
        path.mkdir(parents=True, exist_ok=True)
        cfg = self.config.to_dict()
        cfg["in_features"] = self.heads.in_features
        (path / CONFIG_NAME).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        save_file({k: v.cpu() for k, v in self.heads.state_dict_per_head().items()}, str(path / WEIGHTS_NAME))
        return path

    @classmethod
    def from_pretrained(cls, model: nn.Module, pretrained_path: str | Path) -> UncertainSAM:
        """``model`` with the heads and config saved by :meth:`save_pretrained` at ``pretrained_path``."""
        from safetensors.torch import load_file

        path = Path(pretrained_path)
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            if not (path / name).is_file():
                raise FileNotFoundError(f"pretrained_path: {path / name} does not exist")
        cfg = json.loads((path / CONFIG_NAME).read_text(encoding="utf-8"))
        in_features = cfg.pop("in_features")
        config = USAMConfig.from_dict(cfg)
        state = load_file(str(path / WEIGHTS_NAME))
        heads = {}
        for name in config.trained_heads:
            sub = {k[len(name) + 1 :]: v for k, v in state.items() if k.startswith(name + ".")}
            heads[name] = USAMHead.from_state_dict(sub, f"{path / WEIGHTS_NAME} [{name}]")
        fused = USAMHeads.from_heads(heads) if heads else USAMHeads((), in_features, config.hidden)
        return cls(model, config, fused)

    def load_official_heads(self, directory: str | Path, names: list[str] | None = None) -> UncertainSAM:
        """Replace the heads by the released ones (``<directory>/<name>/model.pth``) and set ``"official"`` tokens."""
        heads = load_official_heads(directory, names, expected_in=2 * self.d)
        ours = tuple(heads)
        hidden = next(iter(heads.values())).hidden
        self.config = USAMConfig.from_dict(
            {
                **self.config.to_dict(),
                "heads": ours,
                "hidden": hidden,
                "token_alignment": "official",
                "token_input": "both",
                "gap_estimate": "direct",
            }
        )
        dev = self.heads.w1.device
        self.heads = USAMHeads.from_heads(heads).to(dev)
        return self


def load_official_heads(
    directory: str | Path, names: list[str] | None = None, *, expected_in: int | None = None
) -> dict[str, USAMHead]:
    """Released heads from a local copy of ``models/mlps/sam2.x`` → {our target name: USAMHead}.

    Each ``<directory>/<official name>/model.pth`` is read with ``torch.load(weights_only=True)``; ``names`` are
    official folder names (default: every one of :data:`~usam.config.OFFICIAL_HEAD_NAMES` present).
    """
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"directory: {root} does not exist")
    if names is None:
        names = [n for n in OFFICIAL_HEAD_NAMES if (root / n / "model.pth").is_file()]
        if not names:
            raise FileNotFoundError(
                f"directory: no <head>/model.pth under {root} (expected {list(OFFICIAL_HEAD_NAMES)})"
            )
    out: dict[str, USAMHead] = {}
    for n in names:
        if n not in OFFICIAL_HEAD_NAMES:
            raise ValueError(f"names: unknown official head {n!r}, expected one of {list(OFFICIAL_HEAD_NAMES)}")
        file = root / n / "model.pth"
        if not file.is_file():
            raise FileNotFoundError(f"{file}: missing")
        state = torch.load(file, map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ValueError(f"{file}: expected a state dict, got {type(state).__name__}")
        head = USAMHead.from_state_dict(state, str(file))
        if expected_in is not None and head.in_features != expected_in:
            raise ValueError(
                f"{file}: head input must be 2d = {expected_in}, expected {expected_in}, got {head.in_features}"
            )
        out[OFFICIAL_HEAD_NAMES[n]] = head
    return out
