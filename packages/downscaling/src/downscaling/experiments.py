"""Experiments of ``icml25 reproduce downscaling``: tiny Llama models trained from scratch on character-level Tiny
Shakespeare (65 symbols, first 90% train, last 10% validation), quality in bits per character (bpc).

Importable by users::

    from downscaling.experiments import QUICK, build_task, equal_compute
    task = build_task(QUICK)
    res = equal_compute(task)          # large vs small model at equal training FLOPs
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import nn

from downscaling.flops import analytic_llama, count_flops, count_train_flops
from downscaling.profiling import linear_weight_bytes
from icml25_shared.seed import seed_everything
from icml25_shared.text import CharCorpus
from icml25_shared.training import warmup_cosine

__all__ = [
    "FULL",
    "QUICK",
    "ModelSize",
    "Setup",
    "Task",
    "TrainedLM",
    "bpc",
    "build_task",
    "equal_compute",
    "llama_config",
    "prune_compare",
    "quant_check",
    "train_lm",
]

LN2 = math.log(2.0)


@dataclass(frozen=True)
class ModelSize:
    """A Llama shape (4 heads, tied embeddings, 65 characters)."""

    layers: int
    hidden: int
    mlp: int
    heads: int = 4


@dataclass(frozen=True)
class Setup:
    """Sizes of one reproduction run."""

    large: ModelSize = ModelSize(4, 64, 192)
    """The scaled-up model of claim 1 (0.22 M parameters; the issue's 4 x 128 shrunk to fit 60 CPU-s)."""
    small: ModelSize = ModelSize(2, 32, 96)
    """The downscaled model of claim 1 (0.03 M parameters; 7.4x fewer, forward FLOPs/token 6.8x fewer)."""
    seq_len: int = 64
    """Context (characters)."""
    large_steps: int = 150
    """AdamW steps of the large model; the small one gets as many steps as the same training FLOPs buy."""
    large_batch: int = 16
    small_batch: int = 64
    lr: float = 1e-2
    val_batches: int = 8
    val_batch_size: int = 16
    calib_windows: int = 32
    """Calibration windows (training split) for Wanda."""
    seed: int = 0
    full_sizes: tuple[ModelSize, ...] = (ModelSize(2, 32, 96), ModelSize(3, 48, 144), ModelSize(4, 64, 192))
    """--full: the three sizes of the compute sweep."""
    full_budgets: tuple[float, ...] = (1.5e11, 4.5e11, 1.35e12)
    """--full: training FLOPs budgets of the sweep (FlopCounterMode's count)."""
    sweep_batch: int = 16
    """--full: windows per step in the sweep."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


QUICK = Setup()
FULL = replace(QUICK, large_steps=400, val_batches=16)


def llama_config(size: ModelSize, seq_len: int, vocab: int = 65) -> Any:
    """``LlamaConfig`` of ``size``: tied embeddings, multi-head attention."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=size.hidden,
        intermediate_size=size.mlp,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        max_position_embeddings=seq_len,
        tie_word_embeddings=True,
    )


def new_model(size: ModelSize, seq_len: int, seed: int, vocab: int = 65) -> nn.Module:
    from transformers import LlamaForCausalLM

    seed_everything(seed)
    return LlamaForCausalLM(llama_config(size, seq_len, vocab))


@dataclass
class Task:
    setup: Setup
    corpus: CharCorpus
    val: list[tuple[torch.Tensor, torch.Tensor]]
    calib: torch.Tensor


def build_task(setup: Setup = QUICK, *, download: bool = False, corpus: CharCorpus | None = None) -> Task:
    """Tiny Shakespeare (sha256-checked by the data registry), fixed validation windows, calibration windows."""
    corpus = corpus or CharCorpus.tinyshakespeare(download=download)
    val = corpus.fixed_batches("val", setup.val_batches, setup.val_batch_size, setup.seq_len)
    gen = torch.Generator().manual_seed(setup.seed + 1)
    x, y = corpus.get_batch("train", setup.calib_windows, setup.seq_len, gen)
    return Task(setup, corpus, val, x)


@torch.no_grad()
def bpc(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Bits per character: mean next-character cross-entropy over ``batches`` / ln 2 (eval mode, restored)."""
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    for x, y in batches:
        logits = model(input_ids=x).logits
        tot += float(
            nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="sum")
        )
        n += y.numel()
    model.train(was)
    return tot / n / LN2


@dataclass
class TrainedLM:
    model: nn.Module
    steps: int
    batch: int
    tokens: int
    train_flops: float
    """FlopCounterMode's forward + backward count of one step x steps."""
    train_flops_6nd: float
    """6 N D with N the non-embedding parameters (Kaplan et al. 2020)."""
    fwd_flops_per_token: float
    val_bpc: float
    losses: list[float]


def train_lm(
    model: nn.Module,
    corpus: CharCorpus,
    steps: int,
    batch: int,
    seq_len: int,
    lr: float,
    seed: int,
    val: list[tuple[torch.Tensor, torch.Tensor]],
    *,
    split_tokens: Any = None,
) -> TrainedLM:
    """AdamW (weight decay 0.1, warm-up 10 % then cosine to 10 %) on random windows; returns the trained model with
    its measured training FLOPs. ``split_tokens`` (a 1-D id tensor) replaces the training split."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, warmup=0.1, final=0.1))
    probe = torch.zeros(batch, seq_len, dtype=torch.long)
    step_flops = count_train_flops(model, probe)
    fwd = count_flops(model, probe) / probe.numel()
    nonembed = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n)
    model.train()
    losses = []
    for _ in range(steps):
        if split_tokens is None:
            x, y = corpus.get_batch("train", batch, seq_len, gen)
        else:
            s = torch.randint(len(split_tokens) - seq_len - 1, (batch,), generator=gen)
            w = torch.stack([split_tokens[i : i + seq_len + 1] for i in s.tolist()])
            x, y = w[:, :-1], w[:, 1:]
        logits = model(input_ids=x).logits
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    tokens = steps * batch * seq_len
    return TrainedLM(
        model, steps, batch, tokens, steps * step_flops, 6.0 * nonembed * tokens, fwd, bpc(model, val), losses
    )


def equal_compute(task: Task) -> dict[str, Any]:
    """Claim 1: the large and the small model trained with the same training FLOPs (FlopCounterMode per step x
    steps; the small one takes as many steps as the large one's budget buys)."""
    st = task.setup
    large = new_model(st.large, st.seq_len, st.seed)
    small = new_model(st.small, st.seq_len, st.seed)
    per_step_l = count_train_flops(large, torch.zeros(st.large_batch, st.seq_len, dtype=torch.long))
    per_step_s = count_train_flops(small, torch.zeros(st.small_batch, st.seq_len, dtype=torch.long))
    budget = st.large_steps * per_step_l
    small_steps = max(1, round(budget / per_step_s))
    rl = train_lm(large, task.corpus, st.large_steps, st.large_batch, st.seq_len, st.lr, st.seed, task.val)
    rs = train_lm(small, task.corpus, small_steps, st.small_batch, st.seq_len, st.lr, st.seed, task.val)
    an_l = analytic_llama(large.config, st.seq_len).per_token_forward
    an_s = analytic_llama(small.config, st.seq_len).per_token_forward
    return {
        "large": rl,
        "small": rs,
        "budget_flops": budget,
        "fwd_ratio": rl.fwd_flops_per_token / rs.fwd_flops_per_token,
        "analytic_fwd_ratio": an_l / an_s,
        "flops_match_analytic": rl.fwd_flops_per_token == an_l and rs.fwd_flops_per_token == an_s,
    }


def quant_check(model: nn.Module, task: Task) -> dict[str, Any]:
    """Claim 2: torch.ao int8 dynamic quantization of every Linear (the LM head included)."""
    from downscaling.quantize import quantize

    q = quantize(model, "int8_dynamic", "torch.ao")
    x = torch.cat([b[0] for b in task.val[:2]])
    with torch.no_grad():
        a = model.eval()(input_ids=x).logits.reshape(-1)
        b = q.model(input_ids=x).logits.reshape(-1)
    cos = float(nn.functional.cosine_similarity(a, b, dim=0))
    bpc_fp, bpc_q = bpc(model, task.val), bpc(q.model, task.val)
    return {
        "cosine": cos,
        "bytes_fp32": linear_weight_bytes(model),
        "bytes_int8": linear_weight_bytes(q.model),
        "size_ratio": q.record["size_ratio"],
        "bpc_fp32": bpc_fp,
        "bpc_int8": bpc_q,
        "rel_delta_bpc": (bpc_q - bpc_fp) / bpc_fp,
    }


def prune_compare(
    model: nn.Module, task: Task, sparsity: float = 0.5, methods: tuple[str, ...] = ("magnitude", "wanda")
) -> dict[str, Any]:
    """Claim 3: unstructured pruning without recovery, bpc per method (Wanda calibrated on training windows)."""
    from downscaling.config import PruneConfig
    from downscaling.prune import prune

    out: dict[str, Any] = {"dense": bpc(model, task.val)}
    for m in methods:
        r = prune(model, PruneConfig(method=m, sparsity=sparsity, calib=task.calib))
        out[m] = bpc(r.model, task.val)
        out[f"{m}_sparsity"] = r.record["achieved_sparsity"]
    return out


def pareto_plot(points: list[tuple[str, float, float]], out_dir: Any, name: str = "pareto") -> Any:
    """bpc against forward FLOPs per token, one labelled point per model."""
    from icml25_shared.report import save_figure, subplots

    fig, ax = subplots()
    for label, flops, b in points:
        ax.scatter([flops], [b])
        ax.annotate(label, (flops, b), fontsize=8, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("forward FLOPs per token")
    ax.set_ylabel("validation bits per character")
    ax.set_title("Tiny Shakespeare: quality vs inference cost")
    return save_figure(fig, out_dir, name)


def copy_model(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model)


def compute_sweep(task: Task) -> dict[str, Any]:
    """--full: every size of ``setup.full_sizes`` trained at every budget of ``setup.full_budgets`` (steps = budget /
    FlopCounterMode's training FLOPs per step); a Chinchilla law fitted to the runs (loss in nats/char, N the
    non-embedding parameters, D the training tokens); N*(C) per budget and the best size measured per budget."""
    from downscaling.laws import fit

    st = task.setup
    runs = []
    for c in st.full_budgets:
        for size in st.full_sizes:
            m = new_model(size, st.seq_len, st.seed)
            per_step = count_train_flops(m, torch.zeros(st.sweep_batch, st.seq_len, dtype=torch.long))
            steps = max(1, round(c / per_step))
            r = train_lm(m, task.corpus, steps, st.sweep_batch, st.seq_len, st.lr, st.seed, task.val)
            n = sum(p.numel() for name, p in m.named_parameters() if "embed" not in name)
            runs.append({"C": c, "size": f"{size.layers}x{size.hidden}", "N": n, "D": r.tokens, "steps": steps,
                         "bpc": r.val_bpc, "loss": r.val_bpc * LN2})  # fmt: skip
    law = fit(runs, "chinchilla")
    best = {}
    for c in st.full_budgets:
        rows = [r for r in runs if r["C"] == c]
        best[c] = min(rows, key=lambda r: r["bpc"])["size"]
    return {"runs": runs, "law": law.params, "n_star": {c: law.compute_optimal(c)["N"] for c in st.full_budgets},
            "best_size": best}  # fmt: skip


def kd_vs_scratch(task: Task, teacher: nn.Module) -> dict[str, Any]:
    """--full: the small model distilled from ``teacher`` vs trained from scratch, at equal student steps and at
    equal total FLOPs (the teacher's forwards counted: KD costs 2 N_T + 6 N_S per token, so it gets fewer steps)."""
    from downscaling.config import DistillConfig
    from downscaling.distill import distill

    st = task.setup
    steps = st.large_steps * 2
    probe = torch.zeros(st.large_batch, st.seq_len, dtype=torch.long)
    student = new_model(st.small, st.seq_len, st.seed + 7)
    f_s, f_t = count_train_flops(student, probe), count_flops(teacher, probe)
    stream = torch.from_numpy(task.corpus.train)

    def kd_cfg(n: int) -> DistillConfig:
        return DistillConfig(steps=n, lr=st.lr, batch_size=st.large_batch, seq_len=st.seq_len, seed=st.seed)

    kd = distill(teacher, student, stream, kd_cfg(steps))
    kd_steps_eq_flops = max(1, round(steps * f_s / (f_s + f_t)))
    kd_eq = distill(teacher, student, stream, kd_cfg(kd_steps_eq_flops))
    scratch = train_lm(copy.deepcopy(student), task.corpus, steps, st.large_batch, st.seq_len, st.lr, st.seed, task.val)
    return {"steps": steps, "kd_steps_equal_flops": kd_steps_eq_flops, "bpc_kd_equal_steps": bpc(kd.model, task.val),
            "bpc_kd_equal_flops": bpc(kd_eq.model, task.val), "bpc_scratch": scratch.val_bpc,
            "teacher_bpc": bpc(teacher, task.val)}  # fmt: skip
