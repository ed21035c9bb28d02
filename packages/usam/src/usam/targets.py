"""Regression targets of the USAM heads (Sec. 3.2) and the prompt protocol of the paper's evaluation (Sec. 4.1).

- :func:`iou`, :func:`best_of` — IoU of predicted masks with the ground truth, best-of-3 (the GT-best mask);
- :func:`encode_gap` / :func:`decode_gap` — gaps stored as clip(0.5 + Δ, 0, 1), 0.5 subtracted at inference;
- :func:`sample_prompts` — the centre point of the eroded GT mask plus 7 random foreground points;
- :func:`extract_rows` — batch inference over images × GT instances: tokens, SamScores, IoUs and every target of
  the paper (``iou``, ``iou_<model>``, ``unsupervised_iou``, ``iou_dense_prompt``, the three gaps) as a table
  saved with :func:`save_rows` (safetensors); the images can be split over processes (accelerate's
  ``PartialState.split_between_processes``, or plain ``torch.distributed``) and the rows gathered on every rank.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as tF

from icml25_shared.validate import check_array, check_bool, check_choice, check_float, check_int
from usam.config import GAP_PAIRS
from usam.entropy import mask_entropy, mixture_entropy

__all__ = [
    "best_of",
    "check_gt_mask",
    "decode_gap",
    "encode_gap",
    "extract_rows",
    "iou",
    "load_rows",
    "sample_prompts",
    "save_rows",
]

log = logging.getLogger(__name__)


def iou(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """IoU of binary masks over the last two axes (broadcast); empty ∪ empty counts as identical (IoU 1).

    Masks are boolean or integer 0/1 tensors; probabilities and logits are refused rather than counted as
    foreground wherever non-zero: threshold them first (``logits > 0``, ``probs > 0.5``).
    """
    if not isinstance(pred, torch.Tensor) or not isinstance(gt, torch.Tensor):
        raise TypeError(f"pred and gt must be torch.Tensor, got {type(pred).__name__} and {type(gt).__name__}")
    for name, m in (("pred", pred), ("gt", gt)):
        if m.is_floating_point() or m.is_complex():
            raise TypeError(
                f"{name} must be a binary mask (bool or integer 0/1), got dtype {m.dtype}; threshold probabilities "
                "or logits first (probs > 0.5, logits > 0)"
            )
        if m.dtype != torch.bool and m.numel() and (m.min() < 0 or m.max() > 1):
            raise ValueError(
                f"{name} must be a binary mask with values 0 and 1, got values in [{int(m.min())}, {int(m.max())}]"
            )
    try:
        torch.broadcast_shapes(pred.shape, gt.shape)
    except RuntimeError as e:
        raise ValueError(
            f"pred and gt must broadcast (masks of the same H × W), got shapes {tuple(pred.shape)} and "
            f"{tuple(gt.shape)}"
        ) from e
    pred, gt = pred.bool(), gt.bool()
    inter = (pred & gt).sum((-2, -1)).float()
    union = (pred | gt).sum((-2, -1)).float()
    return torch.where(union > 0, inter / union.clamp_min(1.0), torch.ones_like(union))


def best_of(ious: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(max, argmax) over the last axis: the IoU and index of the GT-best of SAM's three masks."""
    values, index = ious.max(-1)
    return values, index


def encode_gap(delta: torch.Tensor | np.ndarray | float, offset: float = 0.5) -> Any:
    """clip(offset + Δ, 0, 1): a gap in [−1, 1] as a sigmoid head's target (Sec. 3.2)."""
    offset = check_float("offset", offset, min=0.0, max=1.0)
    if isinstance(delta, torch.Tensor):
        return (delta + offset).clamp(0.0, 1.0)
    return np.clip(np.asarray(delta, dtype=float) + offset, 0.0, 1.0)


def decode_gap(y: torch.Tensor | np.ndarray | float, offset: float = 0.5) -> Any:
    """y − offset: the gap predicted by a head trained on :func:`encode_gap` targets."""
    offset = check_float("offset", offset, min=0.0, max=1.0)
    if isinstance(y, torch.Tensor):
        return y - offset
    return np.asarray(y, dtype=float) - offset


def check_gt_mask(name: str, mask: Any, shape: tuple[int, int] | None = None) -> np.ndarray:
    """A GT mask as a bool array: 2-D, values in {0, 1}, shape ``shape`` when given."""
    if isinstance(mask, torch.Tensor):
        mask = mask.detach().cpu().numpy()
    arr = check_array(name, mask, ndim=2, dtype="numeric")
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name} must have the image's shape {tuple(shape)}, got {tuple(arr.shape)}")
    if arr.dtype != bool and not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{name} must be binary (values 0/1 or bool), got values {np.unique(arr)[:5].tolist()}…")
    return arr.astype(bool)


def sample_prompts(
    gt_mask: Any, n_points: int = 8, *, rng: np.random.Generator | int | None = 0, erode: int = 5
) -> np.ndarray:
    """Point prompts for a GT mask, (n_points, 2) float (x, y) in pixels (Sec. 4.1).

    The mask is eroded with an ``erode × erode`` square (kept un-eroded when erosion empties it); point 0 is the
    foreground pixel closest to the foreground centroid, the others are drawn uniformly from the foreground
    (without replacement, or with replacement when there are fewer pixels than points).
    """
    from scipy.ndimage import binary_erosion

    mask = check_gt_mask("gt_mask", gt_mask)
    n_points = check_int("n_points", n_points, min=1)
    erode = check_int("erode", erode, min=1)
    if not mask.any():
        raise ValueError("gt_mask must contain at least one foreground pixel")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    eroded = binary_erosion(mask, np.ones((erode, erode), dtype=bool), border_value=0)
    fg = eroded if eroded.any() else mask
    ys, xs = np.nonzero(fg)
    cy, cx = ys.mean(), xs.mean()
    c = int(np.argmin((ys - cy) ** 2 + (xs - cx) ** 2))
    pts = [(xs[c], ys[c])]
    if n_points > 1:
        k = n_points - 1
        idx = rng.choice(len(xs), size=k, replace=len(xs) < k)
        pts += [(xs[i], ys[i]) for i in idx]
    return np.asarray(pts, dtype=np.float32)


def _check_points(points: np.ndarray, height: int, width: int) -> None:
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points must have shape (n, 2) as (x, y), got {points.shape}")
    bad = (points[:, 0] < 0) | (points[:, 0] >= width) | (points[:, 1] < 0) | (points[:, 1] >= height)
    if bad.any():
        raise ValueError(f"points must lie inside the {height}x{width} image, got {points[bad][:3].tolist()}")


def _as_wrapped(model: Any) -> Any:
    """A raw ``SamModel``/``Sam2Model`` becomes an :class:`~usam.model.UncertainSAM` without heads (tokens only)."""
    from usam.model import UncertainSAM, is_sam_model

    if is_sam_model(model):
        from usam.config import USAMConfig

        return UncertainSAM(model, USAMConfig(heads=()))
    return model


def _masks_at(logits: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Mask logits (…, h, w) resized to the image size (bilinear, as SAM's post-processing), float32."""
    lead = logits.shape[:-2]
    x = logits.float().reshape(-1, 1, *logits.shape[-2:])
    if tuple(x.shape[-2:]) != tuple(size):
        x = tF.interpolate(x, size=size, mode="bilinear", align_corners=False)
    return x.reshape(*lead, *size)


@torch.no_grad()
def _run(model: Any, image: torch.Tensor, points: np.ndarray) -> Any:
    """One image, P prompts of n points each: points (P, n, 2) → the wrapper's output (B = 1)."""
    dev = image.device
    pts = torch.as_tensor(points, dtype=torch.float32, device=dev)[None]
    labels = torch.ones(pts.shape[:-1], dtype=torch.long, device=dev)
    return model(
        pixel_values=image[None], input_points=pts, input_labels=labels, multimask_output=True, return_tokens=True
    )


def extract_rows(
    models: Mapping[str, Any],
    images: torch.Tensor,
    gt_masks: Sequence[Any],
    *,
    token_model: str | None = None,
    dense_prompt: bool = True,
    n_points: int = 8,
    seed: int = 0,
    entropies: bool = True,
    distributed: bool | None = None,
    split: Literal["auto", "accelerate", "torch"] = "auto",
) -> dict[str, torch.Tensor]:
    """Tokens and every target of Sec. 3.2 for each GT instance, one centre-point prompt each (batch inference).

    Args:
        models: name → a ``SamModel``/``Sam2Model``, an :class:`~usam.model.UncertainSAM`, or any callable with the
            wrapper's signature (``usam.toy.ToySegmenter``). Names such as ``"tiny"``/``"large"`` give the columns
            ``iou_tiny``/``iou_large`` and, when both exist, ``model_gap``.
        images: (N, 3, S, S) pixel values in the models' input frame (``SamProcessor(...).pixel_values``).
        gt_masks: N arrays (K_i, S, S) of binary GT masks in the same frame.
        token_model: whose tokens, SamScores and IoUs fill ``tokens``/``iou``/… (default: the first model).
        dense_prompt: also run the 8-point prompt of the token model (``iou_dense_prompt``, ``prompt_gap``).
        entropies: add ``h_std`` (entropy of the SamScore-selected map) and ``h_a`` (Sec. 3.1).
        distributed: split the images over the processes and gather the rows on every rank (default: when a
            ``torch.distributed`` group is initialised, e.g. under ``accelerate launch`` or ``torchrun``).
        split: how the images are split: ``"accelerate"`` (``PartialState().split_between_processes``, the
            ``distributed`` extra), ``"torch"`` (contiguous shards by ``torch.distributed`` rank), ``"auto"``
            (accelerate when installed). Both give contiguous shards in rank order, so the rows equal one process's.

    Returns:
        Columns of R rows: ``image``, ``instance``, ``points`` (R, n_points, 2), ``tokens`` (R, 3, 2d), ``scores``
        (R, 3), ``ious`` (R, 3), ``best`` (R,), ``selected`` (R,), ``iou``, ``unsupervised_iou``, ``iou_<name>``,
        and ``iou_dense_prompt`` / ``model_gap`` / ``prompt_gap`` / ``task_gap`` (raw gaps, not offset), ``h_std``,
        ``h_a``. Instances with an empty GT mask are skipped (logged); all empty raises.
    """
    if not isinstance(models, Mapping) or not models:
        raise ValueError("models must be a non-empty mapping name → model")
    if not isinstance(images, torch.Tensor) or images.ndim != 4:
        raise ValueError(f"images must be a tensor (N, 3, S, S), got {getattr(images, 'shape', type(images))}")
    if len(gt_masks) != images.shape[0]:
        raise ValueError(f"gt_masks must have one entry per image ({images.shape[0]}), got {len(gt_masks)}")
    check_bool("dense_prompt", dense_prompt)
    check_bool("entropies", entropies)
    n_points = check_int("n_points", n_points, min=1)
    seed = check_int("seed", seed, min=0)
    split = check_choice("split", split, ("auto", "accelerate", "torch"))
    token_model = token_model or next(iter(models))
    if token_model not in models:
        raise ValueError(f"token_model must be one of {list(models)}, got {token_model!r}")
    wrapped = {k: _as_wrapped(m) for k, m in models.items()}
    n_img = images.shape[0]
    indices: Sequence[int] = range(n_img)
    if distributed is None:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    check_bool("distributed", distributed)
    state = None
    if distributed:
        if split == "accelerate" or (split == "auto" and _has_accelerate()):
            state = _accelerate_state()
            with state.split_between_processes(list(range(n_img))) as mine:
                indices = mine
        else:
            from icml25_shared.distributed import shard_bounds

            if not torch.distributed.is_initialized():
                raise ValueError("distributed=True with split='torch' needs an initialised torch.distributed group")
            indices = range(*shard_bounds(n_img, torch.distributed.get_rank(), torch.distributed.get_world_size()))

    cols: dict[str, list[torch.Tensor]] = {}

    def add(name: str, value: torch.Tensor) -> None:
        cols.setdefault(name, []).append(value.detach().float().cpu() if value.is_floating_point() else value.cpu())

    try:
        skipped = _extract(
            wrapped, images, gt_masks, indices, token_model, dense_prompt, n_points, seed, entropies, add
        )
    finally:  # the hooks of wrappers made here for raw SAM models
        for k, m in wrapped.items():
            if m is not models[k]:
                m.remove_hooks()
    if skipped:
        log.warning("extract_rows: skipped %d GT instances with an empty mask", skipped)
    rows = {k: torch.cat(v) for k, v in cols.items()}
    if distributed:
        rows = _gather_rows(rows, state)
    if not rows or rows["iou"].numel() == 0:
        raise ValueError("gt_masks: every GT mask is empty, no rows to extract")
    _add_gaps(rows)
    return rows


def _extract(
    wrapped: Mapping[str, Any],
    images: torch.Tensor,
    gt_masks: Sequence[Any],
    indices: Sequence[int],
    token_model: str,
    dense_prompt: bool,
    n_points: int,
    seed: int,
    entropies: bool,
    add: Any,
) -> int:
    """The loop of :func:`extract_rows` over images ``indices``; returns the number of skipped empty GT masks."""
    size = (int(images.shape[-2]), int(images.shape[-1]))
    skipped = 0
    for i in indices:
        masks_i = [check_gt_mask(f"gt_masks[{i}][{k}]", m, size) for k, m in enumerate(gt_masks[i])]
        keep = [k for k, m in enumerate(masks_i) if m.any()]
        skipped += len(masks_i) - len(keep)
        if not keep:
            continue
        rng = np.random.default_rng([seed, i])
        pts = np.stack([sample_prompts(masks_i[k], n_points, rng=rng) for k in keep])  # (P, n, 2)
        _check_points(pts.reshape(-1, 2), *size)
        gt = torch.as_tensor(np.stack([masks_i[k] for k in keep]))  # (P, S, S)
        image = images[i]
        per_model: dict[str, torch.Tensor] = {}
        for name, model in wrapped.items():
            out = _run(model, image, pts[:, :1])
            logits = _masks_at(out.pred_masks[0], size)  # (P, 3, S, S)
            ious = iou(logits.cpu() > 0, gt[:, None])
            per_model[name] = best_of(ious)[0]
            if name != token_model:  # the other models' tokens and scores (e.g. Δ*_Θ reads the Tiny model's)
                add(f"tokens_{name}", out.tokens[0])
                add(f"scores_{name}", out.iou_scores[0].float())
                add(f"best_{name}", best_of(ious)[1])
            else:
                scores = out.iou_scores[0].float().cpu()
                sel = scores.argmax(-1)
                best = best_of(ious)[1]
                add("tokens", out.tokens[0])
                add("scores", scores)
                add("ious", ious)
                add("best", best)
                add("selected", sel)
                add("iou", best_of(ious)[0])
                add("unsupervised_iou", ious.gather(-1, sel[:, None])[:, 0])
                if entropies:
                    p = torch.sigmoid(out.pred_masks[0].float()).cpu()  # low-res maps, as the released code
                    add("h_std", mask_entropy(p.gather(1, sel[:, None, None, None].expand(-1, 1, *p.shape[-2:]))[:, 0]))
                    add("h_a", mixture_entropy(p, scores.clamp_min(1e-6), dim=1))
                if dense_prompt:
                    dense = _run(model, image, pts)
                    d_ious = iou(_masks_at(dense.pred_masks[0], size).cpu() > 0, gt[:, None])
                    add("iou_dense_prompt", best_of(d_ious)[0])
        for name, v in per_model.items():
            add(f"iou_{name}", v)
        add("image", torch.full((len(keep),), i, dtype=torch.long))
        add("instance", torch.as_tensor(keep, dtype=torch.long))
        add("points", torch.as_tensor(pts))
    return skipped


def _add_gaps(rows: dict[str, torch.Tensor]) -> None:
    """Raw gaps Δ (not offset) wherever both IoU columns exist."""
    for gap, (a, b) in GAP_PAIRS.items():
        if a in rows and b in rows:
            rows[gap] = rows[a] - rows[b]


def _has_accelerate() -> bool:
    import importlib.util

    return importlib.util.find_spec("accelerate") is not None


def _accelerate_state() -> Any:
    """accelerate's ``PartialState`` for the running group (a gloo group is accelerate's CPU mode).

    ``PartialState`` sets torch's thread count on CPU when ``OMP_NUM_THREADS`` is unset; the caller's is restored.
    """
    import warnings

    try:
        from accelerate import PartialState
    except ImportError as e:
        raise ImportError("split='accelerate' needs accelerate: pip install 'icml25-usam[distributed]'") from e
    dist = torch.distributed
    cpu = dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo"
    threads = torch.get_num_threads()

    def build() -> Any:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="OMP_NUM_THREADS/MKL_NUM_THREADS unset")
                return PartialState(cpu=cpu)
        finally:
            torch.set_num_threads(threads)

    def stale(state: Any) -> bool:
        return state.num_processes == 1 and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1

    state = build()
    if stale(state):
        # a state built before this group existed, e.g. inherited by a forked worker from a parent that had used
        # accelerate (the state is a process-wide singleton): it describes a one-process world, so build it afresh
        log.info(
            "accelerate's state predates this torch.distributed group (one process vs %d); rebuilding it",
            dist.get_world_size(),
        )
        PartialState._shared_state.clear()
        state = build()
    if stale(state):
        raise RuntimeError(
            f"accelerate sees one process but torch.distributed has {dist.get_world_size()}: launch with "
            "`accelerate launch` or pass split='torch'"
        )
    return state


def _gather_rows(rows: dict[str, torch.Tensor], state: Any = None) -> dict[str, torch.Tensor]:
    """Concatenate every rank's rows in rank order (ranks hold contiguous image shards)."""
    if state is not None and state.num_processes > 1:
        from accelerate.utils import gather_object

        parts: list[Any] = gather_object([rows])
    elif state is not None or not torch.distributed.is_initialized():
        parts = [rows]
    else:
        parts = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(parts, rows)
    parts = [p for p in parts if p]  # a rank without images contributes nothing
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if parts else {}


def save_rows(rows: Mapping[str, torch.Tensor], path: str | Path) -> Path:
    """Write a row table (:func:`extract_rows`) as safetensors."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in rows.items()}, str(path))
    return path


def load_rows(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a row table written by :func:`save_rows`."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no row table at {path}")
    return load_file(str(path))
