"""The reproduction's experiments: data, SamScore, USAM heads, curves, tables.

The segmenter (``Setup.model``) is the shipped small ``SamModel`` (:mod:`usam.small_sam`, trained on the toy's
*source* scenes; its own IoU head is the SamScore, its decoder tokens are captured by :class:`usam.model.UncertainSAM`'s
hooks) or, as a fast fixture for tests, the training-free :class:`usam.toy.ToySegmenter` (hand-made stand-in tokens,
a SamScore head trained on source prompts). Protocol (one seed): USAM heads trained on *target* prompts (tokens of
the GT-best mask, Sec. 4.1), evaluation on held-out target prompts at the token of the SamScore-selected mask (what a
user has at inference). Importable by users::

    from usam.experiments import QUICK, run_seed
    result = run_seed(QUICK, seed=0)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from icml25_shared.device import torch_threads
from usam import mc
from usam.config import USAMConfig
from usam.heads import USAMHead
from usam.metrics import correction_curve, oracle_curve, pearson, random_curve, relative_auc, spearman
from usam.targets import decode_gap, extract_rows, iou
from usam.toy import ToyScenes, ToySegmenter, make_scenes
from usam.train import fit_head, training_data

__all__ = [
    "FULL",
    "QUICK",
    "SCORE_CONFIG",
    "TOY_CONFIG",
    "SeedResult",
    "Setup",
    "mc_entropies",
    "run_seed",
    "summarise",
]

SCORE_CONFIG = USAMConfig(
    heads=("iou",), hidden=64, optimizer="adamw", lr=3e-3, epochs=20, batch_size=128, val_fraction=0.0
)
"""Training of the toy's SamScore head (AdamW: the stand-in for SAM's well-trained IoU head)."""


@dataclass(frozen=True)
class Setup:
    """Sizes of one run; prompts are GT instances (4 per scene)."""

    source_prompts: int = 1000
    """Source prompts for the toy segmenter's SamScore head (the small SamModel has its own IoU head)."""
    train_prompts: int = 1000
    test_prompts: int = 400
    n_seeds: int = 3
    """Seeds per run: a run at base seed ``b`` uses ``icml25_shared.verdict.seed_list(b, n_seeds)``."""
    model: str = "small_sam"
    """``"small_sam"``: the shipped small SamModel (:mod:`usam.small_sam`); ``"toy"``: the ToySegmenter fixture."""
    tiny: bool = False
    """Also run the "Tiny" toy model (model selection, Δ*_Θ, H_Θ; toy only)."""
    dense_prompt: bool = False
    """Also run the 8-point prompt (prompt refinement, Δ*_XP)."""
    mc: bool = False
    """Compute the MC baselines H_XP, H_T, H_Θ, H_Y on the test prompts."""
    config: USAMConfig = field(default_factory=USAMConfig)
    """Training of the USAM heads (default: the released COCO setting)."""
    prompts_per_scene: int = 4
    difference: bool = False
    """Also train IoU heads for Δ* as differences (Δ*_A = USAM_θ − USAM_SAM, Δ*_XP = USAM_dense − USAM_θ)."""
    ablation: bool = True
    """Train the token-ablation heads (mask token only, IoU token only) of the task gap."""

    def __post_init__(self) -> None:
        if self.model not in ("small_sam", "toy"):
            raise ValueError(f"model must be 'small_sam' or 'toy', got {self.model!r}")
        if self.model == "small_sam" and (self.tiny or self.mc):
            raise ValueError(
                "tiny and mc need a second model size: only model='toy' has one (the small SamModel ships one size)"
            )


TOY_CONFIG = USAMConfig(optimizer="adamw", lr=1e-3, epochs=60, batch_size=64, val_fraction=0.0)
"""USAM head training on the toy: AdamW, 60 epochs (the released SGD setting is tuned for ~10⁵ COCO rows and
barely moves a head in 36 epochs of 1,000 rows; ``--full`` reports it too); 512 hidden units, GT-best tokens."""

QUICK = Setup(train_prompts=800, config=TOY_CONFIG, ablation=False)
"""Quick: 3 seeds × (800 train + 400 test target prompts) on the small SamModel; no token ablation (CPU budget:
≈ 16 CPU-s a seed)."""
FULL = Setup(
    train_prompts=2400,
    test_prompts=600,
    n_seeds=5,
    dense_prompt=True,
    config=replace(TOY_CONFIG, epochs=25),
)
"""--full: 5 seeds × 3,000 prompts, 8-point prompts (prompt gap), token ablation. The heads train for 25 epochs on
2,400 rows, the same number of optimiser steps (≈ 940 batches of 64) as the quick run's 60 epochs on 1,000 rows."""


@dataclass
class SeedResult:
    """Per-seed outcome: relative AUCs per task and priority, Pearson table, curves and training metrics."""

    seed: int
    rel_auc: dict[str, dict[str, float]]
    pearson: dict[str, float]
    spearman: dict[str, float]
    curves: dict[str, dict[str, list[float]]]
    ablation: dict[str, float]
    sizes: dict[str, Any]
    val: dict[str, dict[str, float]] = field(default_factory=dict)


def _scenes(n_prompts: int, domain: str, seed: int, setup: Setup) -> ToyScenes:
    n = max(1, -(-n_prompts // setup.prompts_per_scene))
    return make_scenes(n, domain=domain, seed=seed, prompts_per_scene=setup.prompts_per_scene)


def _score_head(seg: ToySegmenter, seed: int, setup: Setup) -> USAMHead:
    """SamScore: one head on every mask token → that mask's IoU, trained on source prompts."""
    src = _scenes(setup.source_prompts, "source", seed, setup)
    rows = extract_rows({"m": seg}, src.pixel_values(), src.gt_masks, dense_prompt=False, entropies=False, seed=seed)
    x = rows["tokens"].reshape(-1, rows["tokens"].shape[-1])
    return fit_head(x, rows["ious"].reshape(-1), replace(SCORE_CONFIG, seed=seed)).head


def _selected(tokens: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    return tokens.gather(1, sel[:, None, None].expand(-1, 1, tokens.shape[-1]))[:, 0]


def _predict(head: USAMHead, x: torch.Tensor, gap: bool, offset: float) -> np.ndarray:
    with torch.no_grad():
        y = head(x.float())
    return (decode_gap(y, offset) if gap else y).numpy()


def _gt_best(logits: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """Index of the GT-best of the three masks (the MC baselines peek at the GT, as in the paper's analysis)."""
    return iou(logits > 0, gt).argmax(-1)


@torch.no_grad()
def mc_entropies(
    models: dict[str, ToySegmenter], scenes: ToyScenes, rows: dict[str, torch.Tensor]
) -> dict[str, np.ndarray]:
    """H_XP, H_T, H_Θ, H_Y per test row (``rows`` from :func:`extract_rows` on ``scenes``)."""
    from usam.augment import AUGMENTATIONS

    px = scenes.pixel_values()
    large = models["large"]
    out: dict[str, list[float]] = {"h_xp": [], "h_t": [], "h_theta": [], "h_y": []}
    size = px.shape[-2:]
    for r in range(len(rows["iou"])):
        i = int(rows["image"][r])
        k = int(rows["instance"][r])
        gt = torch.as_tensor(scenes.gt_masks[i][k])
        pts = rows["points"][r]
        xp_l, xp_s = mc.prompt_maps(large, px[i : i + 1], pts)
        img = scenes.images[i]
        aug = torch.from_numpy(np.stack([f(img) for f in AUGMENTATIONS.values()]).transpose(0, 3, 1, 2)).float()
        t_l, t_s = mc.augmentation_maps(large, aug, pts[0])
        th_l, th_s = mc.model_maps(list(models.values()), px[i : i + 1], pts[0])
        out["h_xp"].append(float(mc.h_mc(xp_l, _gt_best(xp_l, gt))))
        out["h_t"].append(float(mc.h_mc(t_l, _gt_best(t_l, gt))))
        out["h_theta"].append(float(mc.h_mc(th_l, _gt_best(th_l, gt))))
        all_l = torch.cat([xp_l, t_l, th_l])
        all_s = torch.cat([xp_s, t_s, th_s])
        out["h_y"].append(float(mc.h_y(all_l, all_s)))
        assert all_l.shape[-2:] == size
    return {k: np.asarray(v) for k, v in out.items()}


def _relative_auc_or_nan(base: np.ndarray, refined: np.ndarray, priority: np.ndarray) -> float:
    """relAUC, or NaN where it is undefined (the refinement never changes the IoU, e.g. a model whose three masks
    coincide has no task gap): reported as such instead of ending the run."""
    try:
        return relative_auc(base, refined, priority)
    except ValueError as e:
        if "is undefined" not in str(e):
            raise
        return float("nan")


def run_seed(setup: Setup, seed: int) -> SeedResult:
    """One seed of the protocol (module docstring), on one torch thread."""
    with torch_threads(1):
        return _run_seed(setup, seed)


def _run_seed(setup: Setup, seed: int, models: dict[str, Any] | None = None) -> SeedResult:
    cfg = replace(setup.config, seed=seed)
    off = cfg.gap_offset
    if models is None and setup.model == "small_sam":
        from usam.small_sam import load_small_sam

        models = {"large": load_small_sam()}
    if models is None:  # the toy segmenters, with a SamScore head trained on the source domain
        models = {"large": ToySegmenter()}
        if setup.tiny:
            models["tiny"] = ToySegmenter(downsample=2)
        for m in models.values():
            m.score_head = _score_head(m, seed, setup)
    train = _scenes(setup.train_prompts, "target", seed + 1000, setup)
    test = _scenes(setup.test_prompts, "target", seed + 2000, setup)
    kw: dict[str, Any] = {"token_model": "large", "dense_prompt": setup.dense_prompt, "seed": seed}
    tr = extract_rows(models, train.pixel_values(), train.gt_masks, entropies=False, **kw)
    te = extract_rows(models, test.pixel_values(), test.gt_masks, entropies=True, **kw)

    names = ["iou", "task_gap"]
    if setup.dense_prompt:
        names += ["prompt_gap"]
    if setup.difference:  # the Δ* as differences of IoU heads (the paper's notation)
        names += ["unsupervised_iou"] + (["iou_dense_prompt"] if setup.dense_prompt else [])
    heads, val = {}, {}
    for name in names:
        fit = fit_head(*training_data(tr, name, cfg), cfg)
        heads[name], val[name] = fit.head, fit.val
    x_sel = _selected(te["tokens"], te["selected"])
    pred = {n: _predict(h, x_sel, n.endswith("gap"), off) for n, h in heads.items()}
    samscore = te["scores"].max(-1).values.numpy()
    col = {k: v.numpy() for k, v in te.items() if v.ndim == 1}

    # token ablation on the task gap (paper: both 94.82 / mask 91.96 / IoU 86.89 % relAUC)
    ablation = {}
    for tok in ("both", "mask", "iou") if setup.ablation else ():
        c = replace(cfg, token_input=tok)
        h = heads["task_gap"] if tok == "both" else fit_head(*training_data(tr, "task_gap", c), c).head
        d = x_sel.shape[-1] // 2
        xs = x_sel if tok == "both" else (x_sel[:, d:] if tok == "mask" else x_sel[:, :d])
        ablation[tok] = relative_auc(col["unsupervised_iou"], col["iou"], _predict(h, xs, True, off))

    tasks: dict[str, tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]] = {
        "task": (
            col["unsupervised_iou"],
            col["iou"],
            {
                "delta_A (USAM)": pred["task_gap"],
                **(
                    {"delta_A (difference)": pred["iou"] - pred["unsupervised_iou"]}
                    if "unsupervised_iou" in pred
                    else {}
                ),
                "-SamScore": -samscore,
                "H_Std": col["h_std"],
                "H_A": col["h_a"],
            },
        ),
        "segmentation": (
            col["unsupervised_iou"],
            np.ones_like(col["iou"]),
            {"-USAM_theta": -pred["iou"], "-SamScore": -samscore, "H_Std": col["h_std"], "H_A": col["h_a"]},
        ),
    }
    mcs = mc_entropies(models, test, te) if setup.mc else {}
    if mcs:
        for k in ("segmentation", "task"):
            tasks[k][2].update({"H_Y": mcs["h_y"], "H_T": mcs["h_t"], "H_XP": mcs["h_xp"], "H_Theta": mcs["h_theta"]})
    if setup.dense_prompt:
        tasks["prompt"] = (
            col["iou"],
            col["iou_dense_prompt"],
            {
                "delta_XP (USAM)": pred["prompt_gap"],
                **(
                    {"delta_XP (difference)": pred["iou_dense_prompt"] - pred["iou"]}
                    if "iou_dense_prompt" in pred
                    else {}
                ),
                "H_Std": col["h_std"],
                **({"H_XP": mcs["h_xp"]} if mcs else {}),
            },
        )
    if setup.tiny:
        fit = fit_head(*training_data(tr, "model_gap", cfg, model="tiny"), cfg)
        heads["model_gap"], val["model_gap"] = fit.head, fit.val
        tiny_scores = te["scores_tiny"]
        x_tiny = _selected(te["tokens_tiny"], tiny_scores.argmax(-1))
        tasks["model"] = (
            col["iou_tiny"],
            col["iou_large"],
            {
                "delta_Theta (USAM)": _predict(heads["model_gap"], x_tiny, True, off),
                "-SamScore_Tiny": -tiny_scores.max(-1).values.numpy(),
                **({"H_Theta": mcs["h_theta"]} if mcs else {}),
            },
        )

    rel, curves = {}, {}
    for task, (base, refined, prios) in tasks.items():
        rel[task] = {k: _relative_auc_or_nan(base, refined, v) for k, v in prios.items()}
        cur = {k: correction_curve(base, refined, v, 0.5)[1].tolist() for k, v in prios.items()}
        cur["oracle"] = oracle_curve(base, refined, 0.5)[1].tolist()
        cur["random"] = random_curve(base, refined, 0.5)[1].tolist()
        curves[task] = cur
    target = col["unsupervised_iou"]  # GT IoU of the mask the user gets (SamScore-selected)
    corr = {
        "SamScore": samscore,
        "USAM_theta": pred["iou"],
        "H_Std": col["h_std"],
        "H_A": col["h_a"],
        "delta_A": pred["task_gap"],
        **{k.replace("h_", "H_"): v for k, v in mcs.items()},
    }
    sizes = {
        "source_prompts": setup.source_prompts,
        "train_rows": len(tr["iou"]),
        "test_rows": len(te["iou"]),
        "test_mean_iou_selected": float(target.mean()),
        "test_mean_iou_best": float(col["iou"].mean()),
    }
    return SeedResult(
        seed,
        rel,
        {k: pearson(v, target) for k, v in corr.items()},
        {k: spearman(v, target) for k, v in corr.items()},
        curves,
        ablation,
        sizes,
        val,
    )


def summarise(results: list[SeedResult]) -> dict[str, Any]:
    """Mean and s.d. over seeds of every relative AUC, correlation and ablation entry."""

    def ms(values: list[float]) -> dict[str, float]:
        a = np.asarray(values, dtype=float)
        return {"mean": float(a.mean()), "sd": float(a.std(ddof=1)) if len(a) > 1 else 0.0}

    first = results[0]
    return {
        "rel_auc": {t: {k: ms([r.rel_auc[t][k] for r in results]) for k in first.rel_auc[t]} for t in first.rel_auc},
        "pearson": {k: ms([r.pearson[k] for r in results]) for k in first.pearson},
        "ablation": {k: ms([r.ablation[k] for r in results]) for k in first.ablation},
    }
