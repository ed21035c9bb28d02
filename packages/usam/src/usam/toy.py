"""A promptable segmentation setting where every target of the paper is exact (CPU, offline).

No SAM weights or segmentation data sets are reachable offline, so the reproduction runs the package's targets,
entropies, heads, training and metrics on a toy stand-in for SAM:

- :func:`make_scenes` — 64×64 RGB scenes: a smooth background with texture noise and 1–3 *wholes*, each a group of
  1–3 touching *objects* of similar colour (ellipses / rectangles); objects may contain a *part* of a moderately
  different colour, so part ⊂ object ⊂ whole gives real task ambiguity (the paper's *task* uncertainty, Sec. 3.1).
  Every scene carries GT instances whose level (part / object / whole) is drawn from a *task prior*: the *source*
  domain (the stand-in for SA-1B) has clean images and a uniform prior, the *target* domain (a stand-in for COCO) adds
  noise σ ∈ [0, 0.1] and blur σ ∈ [0, 1] and a skewed prior (object 0.6, whole 0.3, part 0.1).
- :class:`ToySegmenter` — deterministic, training-free: the colour distance of every pixel to the clicked colour
  (3×3 mean), three tolerances τ_1 < τ_2 < τ_3, and for each the connected component of {d ≤ τ_k} containing the
  click → three nested masks with soft logits (τ_k − d)/s, damped outside the component. ``downsample=2`` (the
  stand-in for a Tiny model) runs the same on a blurred, 2× down-sampled image. It returns SamModel's fields
  (``pred_masks`` (B, P, 3, h, w), ``iou_scores`` (B, P, 3)) plus stand-in decoder tokens: an "IoU token" of global
  and click features and one "mask token" per hypothesis (area, boundary contrast, tolerance margin, compactness,
  soft-map entropy, overlap with the other hypotheses). Its *SamScore* is a :class:`~usam.heads.USAMHead` trained on
  the source domain, as SAM's IoU head is trained on SA-1B.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from scipy import ndimage

from icml25_shared.validate import check_choice, check_float, check_int
from usam.entropy import EPS
from usam.heads import USAMHead

__all__ = ["LEVELS", "PRIORS", "ToyOutput", "ToyScenes", "ToySegmenter", "make_scenes"]

LEVELS = ("part", "object", "whole")
PRIORS = {"source": (1 / 3, 1 / 3, 1 / 3), "target": (0.1, 0.6, 0.3)}
"""Task priors p(level) of the two domains, in the order of :data:`LEVELS`."""
TOKEN_DIM = 24


@dataclass
class ToyScenes:
    """Images (n, S, S, 3) in [0, 1]; per image the GT masks (K_i, S, S), their levels (K_i,) and the hierarchy."""

    images: np.ndarray
    gt_masks: list[np.ndarray]
    levels: list[np.ndarray]
    hierarchy: list[list[dict[str, Any]]] = field(default_factory=list)
    domain: str = "source"

    def pixel_values(self) -> torch.Tensor:
        """Images as a float32 tensor (n, 3, S, S)."""
        return torch.from_numpy(np.ascontiguousarray(self.images.transpose(0, 3, 1, 2))).float()

    def __len__(self) -> int:
        return len(self.images)

    @property
    def n_instances(self) -> int:
        """Number of GT instances (prompts) over all scenes."""
        return int(sum(len(g) for g in self.gt_masks))


def _shape_mask(size: int, cy: float, cx: float, ry: float, rx: float, kind: str) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    if kind == "ellipse":
        return ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
    return (np.abs(yy - cy) <= ry) & (np.abs(xx - cx) <= rx)


def _unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


def _far_colour(rng: np.random.Generator, avoid: list[np.ndarray], dist: float) -> np.ndarray:
    for _ in range(200):
        c = rng.uniform(0.15, 0.85, 3)
        if all(np.linalg.norm(c - a) >= dist for a in avoid):
            return c
    return c


def _scene(
    rng: np.random.Generator,
    size: int,
    radius: tuple[float, float] = (5.0, 9.0),
    wholes_max: int = 3,
    min_area: int = 25,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """One clean scene: image (S, S, 3) and its wholes [{mask, objects: [{mask, part}]}].

    1..``wholes_max`` wholes of objects with radii drawn from ``radius``; objects smaller than ``min_area`` pixels
    are dropped (and wholes smaller than 2.4 × ``min_area``). The defaults are the toy's scenes.
    """
    yy, xx = np.mgrid[:size, :size] / size
    bg = rng.uniform(0.2, 0.8, 3)
    grad = rng.normal(0, 0.06, (2, 3))
    image = bg + yy[..., None] * grad[0] + xx[..., None] * grad[1]
    occupied = np.zeros((size, size), bool)
    wholes: list[dict[str, Any]] = []
    colours = [bg]
    for _ in range(int(rng.integers(1, wholes_max + 1))):
        for _try in range(30):
            cy, cx = rng.uniform(12, size - 12, 2)
            objs = []
            centre = np.array([cy, cx])
            for j in range(int(rng.integers(1, 4))):
                ry, rx = rng.uniform(radius[0], radius[1], 2)
                kind = "ellipse" if rng.random() < 0.6 else "rect"
                if j:
                    ang = rng.uniform(0, 2 * np.pi)
                    prev = objs[-1]
                    step = 0.8 * (max(prev["r"]) + max(ry, rx))
                    centre = prev["c"] + step * np.array([np.sin(ang), np.cos(ang)])
                m = _shape_mask(size, centre[0], centre[1], ry, rx, kind)
                objs.append({"c": centre, "r": (ry, rx), "mask": m, "kind": kind})
            union = np.any([o["mask"] for o in objs], axis=0)
            if not (union & np.pad(occupied, 0)).any() and union.sum() > 2.4 * min_area:
                break
        else:
            continue
        grown = ndimage.binary_dilation(union, iterations=2)
        if (grown & occupied).any():
            continue
        occupied |= grown
        cw = _far_colour(rng, colours, 0.6)
        colours.append(cw)
        taken = np.zeros((size, size), bool)
        whole_objs = []
        for o in objs:
            mask = o["mask"] & ~taken  # later objects sit behind earlier ones
            if mask.sum() < min_area:
                continue
            taken |= mask
            col = np.clip(cw + 0.16 * _unit(rng), 0, 1)
            image[mask] = col
            part = None
            if rng.random() < 0.7:
                pr = 0.45 * np.array(o["r"]) * rng.uniform(0.8, 1.1)
                off = rng.uniform(-0.25, 0.25, 2) * np.array(o["r"])
                pm = _shape_mask(size, o["c"][0] + off[0], o["c"][1] + off[1], pr[0], pr[1], "ellipse") & mask
                if pm.sum() >= 9 and (mask & ~pm).sum() >= 16:
                    image[pm] = np.clip(col + 0.18 * _unit(rng), 0, 1)
                    part = pm
            whole_objs.append({"mask": mask, "part": part})
        if whole_objs:
            wholes.append({"mask": taken, "objects": whole_objs})
    return image, wholes


def make_scenes(
    n: int,
    size: int = 64,
    domain: str = "source",
    seed: int = 0,
    *,
    prompts_per_scene: int = 4,
) -> ToyScenes:
    """``n`` scenes with ``prompts_per_scene`` GT instances each; levels drawn from the domain's task prior.

    Every scene has at least one part, so each level of the prior can be drawn in every scene.
    """
    n = check_int("n", n, min=1)
    size = check_int("size", size, min=32)
    check_choice("domain", domain, tuple(PRIORS))
    seed = check_int("seed", seed, min=0)
    k = check_int("prompts_per_scene", prompts_per_scene, min=1)
    rng = np.random.default_rng([seed, 0 if domain == "source" else 1])
    prior = np.asarray(PRIORS[domain])
    images, gts, levels, hier = [], [], [], []
    while len(images) < n:
        image, wholes = _scene(rng, size)
        if not any(o["part"] is not None for w in wholes for o in w["objects"]):
            continue
        image = image + rng.normal(0, 0.02, image.shape)  # texture
        if domain == "target":
            image = ndimage.gaussian_filter(image, sigma=(rng.uniform(0, 1),) * 2 + (0,))
            image = image + rng.normal(0, rng.uniform(0, 0.1), image.shape)
        objects = [o for w in wholes for o in w["objects"]]
        parts = [o["part"] for o in objects if o["part"] is not None]
        lv = rng.choice(3, size=k, p=prior)
        masks = []
        for level in lv:
            pool = (parts, [o["mask"] for o in objects], [w["mask"] for w in wholes])[level]
            masks.append(pool[int(rng.integers(len(pool)))])
        images.append(np.clip(image, 0, 1).astype(np.float32))
        gts.append(np.stack(masks))
        levels.append(lv.astype(np.int64))
        hier.append(wholes)
    return ToyScenes(np.stack(images), gts, levels, hier, domain)


def _dilate(m: np.ndarray) -> np.ndarray:
    """4-neighbour dilation by one pixel (borders treated as outside)."""
    out = m.copy()
    out[1:] |= m[:-1]
    out[:-1] |= m[1:]
    out[:, 1:] |= m[:, :-1]
    out[:, :-1] |= m[:, 1:]
    return out


def _map_entropy(logits: np.ndarray) -> np.ndarray:
    """:func:`usam.entropy.mask_entropy` of sigmoid(logits) in numpy (the stand-in tokens' own feature)."""
    p = np.clip(1.0 / (1.0 + np.exp(-logits)), EPS, 1 - EPS)
    h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return (p * h).sum((-2, -1)) / p.sum((-2, -1))


@dataclass
class ToyOutput:
    """SamModel's output fields plus stand-in decoder tokens (B, P, 3, 2·24)."""

    pred_masks: torch.Tensor
    iou_scores: torch.Tensor
    tokens: torch.Tensor | None = None


class ToySegmenter:
    """Three nested colour-tolerance masks per prompt (module docstring), called like an ``UncertainSAM``.

    Args:
        tolerances: τ_1 < τ_2 < τ_3 (colour distance, RGB in [0, 1]).
        softness: s of the soft logits (τ_k − d)/s.
        downsample: 1 ("Large") or 2 ("Tiny": blurred and 2× down-sampled).
        score_head: the SamScore head on the tokens (``None``: a constant 0.5).
    """

    def __init__(
        self,
        tolerances: tuple[float, float, float] = (0.1, 0.22, 0.5),
        softness: float = 0.04,
        downsample: int = 1,
        score_head: USAMHead | None = None,
    ) -> None:
        t = [check_float(f"tolerances[{i}]", v, min=0.0, min_open=True) for i, v in enumerate(tolerances)]
        if len(t) != 3 or not t[0] < t[1] < t[2]:
            raise ValueError(f"tolerances must be three increasing floats, got {tolerances}")
        self.tolerances = tuple(t)
        self.softness = check_float("softness", softness, min=0.0, min_open=True)
        self.downsample = check_choice("downsample", downsample, (1, 2))
        self.score_head = score_head

    def _prepare(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(raw, smoothed) image at the working resolution."""
        if self.downsample == 2:
            image = ndimage.gaussian_filter(image, sigma=(1.0, 1.0, 0))[::2, ::2]
        return image, ndimage.uniform_filter(image, size=cast(Any, (3, 3, 1)), mode="nearest")  # per-axis sizes

    def _one(self, raw: np.ndarray, smooth: np.ndarray, points: np.ndarray, noise: float) -> tuple[np.ndarray, ...]:
        h, w = smooth.shape[:2]
        pts = np.clip(np.floor(points / self.downsample).astype(int), 0, [w - 1, h - 1])
        clicked = smooth[pts[:, 1], pts[:, 0]]  # (n, 3)
        d = np.min(np.linalg.norm(smooth[None] - clicked[:, None, None], axis=-1), axis=0)
        logits, comps = [], []
        for tau in self.tolerances:
            lab = cast(tuple[np.ndarray, int], ndimage.label(d <= tau))[0]
            keep = np.zeros(lab.max() + 1, bool)
            keep[lab[pts[:, 1], pts[:, 0]]] = True
            keep[0] = False
            comp = keep[lab]
            comps.append(comp)
            logits.append((tau - d) / self.softness - 8.0 * ~comp)
        logits = np.stack(logits)
        # stand-in IoU token: click and image features
        y0, x0 = pts[0, 1], pts[0, 0]
        win = raw[max(0, y0 - 1) : y0 + 2, max(0, x0 - 1) : x0 + 2].reshape(-1, 3)
        iou_tok = np.zeros(TOKEN_DIM, np.float32)
        iou_tok[:9] = [*clicked[0], win.std(0).mean() * 10, noise * 10, x0 / w, y0 / h, len(pts) / 8, 1.0]
        iou_tok[9:12] = [(d <= t).mean() for t in self.tolerances]
        # stand-in mask tokens: one per hypothesis
        mask_toks = np.zeros((3, TOKEN_DIM), np.float32)
        ent = _map_entropy(logits)
        for k, (comp, tau) in enumerate(zip(comps, self.tolerances)):
            area = comp.sum()
            grown = _dilate(comp)
            ring = grown & ~comp
            edge = comp & _dilate(~comp)
            contrast = (d[ring].mean() - tau) if ring.any() else 1.0
            margin = tau - d[comp].mean()
            compact = 4 * np.pi * area / max(edge.sum(), 1) ** 2
            ys, xs = np.nonzero(comp)
            fill = area / ((np.ptp(ys) + 1) * (np.ptp(xs) + 1))
            others = [o for j, o in enumerate(comps) if j != k]
            ov = [(comp & o).sum() / max((comp | o).sum(), 1) for o in others]
            mask_toks[k, :3] = np.eye(3)[k]
            iou_tok[12 + k] = np.log1p(area) / 8  # the IoU token attends to every mask token in SAM's decoder
            iou_tok[15 + k] = contrast * 5
            iou_tok[18 + k] = ent[k]
            mask_toks[k, 3:14] = [
                area / (h * w) * 10,
                np.log1p(area) / 8,
                contrast * 5,
                margin * 5,
                min(compact, 2.0),
                fill,
                ent[k],
                *ov,
                area / max((d <= tau).sum(), 1),
                ring.sum() / max(area, 1),
            ]
        return logits, iou_tok, mask_toks

    def __call__(
        self,
        pixel_values: torch.Tensor,
        input_points: torch.Tensor,
        input_labels: torch.Tensor | None = None,
        multimask_output: bool = True,
        return_tokens: bool = False,
    ) -> ToyOutput:
        """pixel_values (B, 3, S, S), input_points (B, P, n, 2) as (x, y) → masks (B, P, 3, S, S), scores, tokens."""
        if not multimask_output:
            raise ValueError("multimask_output: ToySegmenter always returns three masks")
        b, p = input_points.shape[:2]
        images = pixel_values.detach().float().cpu().numpy().transpose(0, 2, 3, 1)
        pts = input_points.detach().float().cpu().numpy()
        size = images.shape[1]
        masks = np.zeros((b, p, 3, size, size), np.float32)
        tokens = np.zeros((b, p, 3, 2 * TOKEN_DIM), np.float32)
        for i in range(b):
            raw, smooth = self._prepare(images[i])
            noise = float(np.median(np.abs(np.diff(raw, axis=1))))
            for j in range(p):
                logits, iou_tok, mask_toks = self._one(raw, smooth, pts[i, j], noise)
                if self.downsample == 2:
                    logits = logits.repeat(2, axis=1).repeat(2, axis=2)
                masks[i, j] = logits
                tokens[i, j, :, :TOKEN_DIM] = iou_tok
                tokens[i, j, :, TOKEN_DIM:] = mask_toks
        tok = torch.from_numpy(tokens)
        if self.score_head is not None:
            with torch.no_grad():
                scores = self.score_head(tok)
        else:
            scores = torch.full((b, p, 3), 0.5)
        return ToyOutput(torch.from_numpy(masks), scores, tok if return_tokens else None)
