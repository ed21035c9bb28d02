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
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import nn

from downscaling.flops import analytic_llama, count_flops, count_train_flops
from downscaling.profiling import linear_weight_bytes
from icml25_shared.seed import seed_everything
from icml25_shared.text import CharCorpus
from icml25_shared.training import warmup_cosine

if TYPE_CHECKING:
    from downscaling.config import PruneMethod

__all__ = [
    "FULL",
    "QUICK",
    "ModelSize",
    "Setup",
    "Task",
    "TrainedLM",
    "Domains",
    "bpc",
    "build_domains",
    "build_task",
    "compute_sweep",
    "domain_texts",
    "kd_vs_scratch",
    "new_model",
    "pareto_plot",
    "perceptron_crossover",
    "pipeline",
    "seed_runs",
    "selection_lm",
    "sweep_claims",
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
    """The scaled-up model of claim 1 (0.21 M parameters; a 4 x 128 would not train past the unigram level in 60
    CPU-s, so both sizes were shrunk keeping their ratio)."""
    small: ModelSize = ModelSize(2, 32, 96)
    """The downscaled model of claim 1 (0.03 M parameters; 7.4x fewer, forward FLOPs/token 6.8x fewer)."""
    seq_len: int = 64
    """Context (characters)."""
    large_steps: int = 100
    """AdamW steps of the large model; the small one gets as many steps as the same training FLOPs buy (100 in quick:
    three seeds of the pair fit in 60 CPU-s; the sweep of ``--full`` covers larger budgets)."""
    large_batch: int = 16
    small_batch: int = 64
    lr: float = 1e-2
    val_batches: int = 8
    val_batch_size: int = 16
    calib_windows: int = 32
    """Calibration windows (training split) for Wanda."""
    seed: int = 0
    """Seed of the first replicate: model initialisation, batch order and calibration windows derive from it."""
    n_seeds: int = 3
    """Replicates of the noisy claims (C1-C3 and the sweep): seeds ``seed + s`` for s in ``seed_list(base, n)``."""
    full_sizes: tuple[ModelSize, ...] = (ModelSize(2, 32, 96), ModelSize(3, 48, 144), ModelSize(4, 64, 192))
    """--full: the three sizes of the compute sweep."""
    full_budgets: tuple[float, ...] = (5e10, 1.5e11, 4.5e11)
    """--full: training FLOPs budgets of the sweep (FlopCounterMode's count)."""
    sweep_batch: int = 16
    """--full: windows per step in the sweep."""
    pipeline_steps: int = 240
    """--full: monolith steps of the pipeline (the specialists get the same FLOPs in total)."""
    selection_steps: int = 150
    """--full: steps of each small model trained on a selected half of the window pool."""
    perceptron_seeds: int = 3
    """--full: seeds of the teacher-student perceptron check."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


QUICK = Setup()
FULL = replace(QUICK, large_steps=200, val_batches=16)
"""--full, sized to run in about five CPU-minutes on one torch thread (the sweep dominates: its nine runs cost
3 x the sum of the budgets)."""


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
    model: nn.Module, task: Task, sparsity: float = 0.5, methods: tuple[PruneMethod, ...] = ("magnitude", "wanda")
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


def seed_runs(setup: Setup, seeds: list[int], corpus: CharCorpus) -> list[dict[str, Any]]:
    """Claims 1-3 at each package seed of ``seeds`` (``setup.seed`` replaced): the equal-compute pair, int8 of the
    large model, and 50 % magnitude vs Wanda on both sizes (the trend with size). Models are dropped after use
    except the first replicate's (for the plot and ``--full``)."""
    out = []
    for i, s in enumerate(seeds):
        task = build_task(replace(setup, seed=s), corpus=corpus)
        ec = equal_compute(task)
        large, small = ec["large"], ec["small"]
        row = {
            "seed": s,
            "task": task,
            "ec": ec,
            "quant": quant_check(large.model, task),
            "prune_large": prune_compare(large.model, task),
            "prune_small": prune_compare(small.model, task),
        }
        if i:
            large.model = small.model = None  # type: ignore[assignment]
        out.append(row)
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


def compute_sweep(task: Task, seeds: list[int] | None = None) -> dict[str, Any]:
    """--full: every size of ``setup.full_sizes`` trained at every budget of ``setup.full_budgets`` (steps = budget /
    FlopCounterMode's training FLOPs per step) at every package seed of ``seeds`` (default: ``setup.seed``); a
    Chinchilla law fitted to the runs (loss in nats/char, N the non-embedding parameters, D the training tokens);
    N*(C) per budget and the best size per budget by mean bpc; at the largest budget, 50 % magnitude vs Wanda on
    every size (``wanda_minus_magnitude[size]``: one margin per seed)."""
    from downscaling.laws import fit

    st = task.setup
    seeds = list(seeds) if seeds is not None else [st.seed]
    runs, gaps = [], {f"{s.layers}x{s.hidden}": [] for s in st.full_sizes}
    for seed in seeds:
        t = build_task(replace(st, seed=seed), corpus=task.corpus)
        for c in st.full_budgets:
            for size in st.full_sizes:
                m = new_model(size, st.seq_len, seed)
                per_step = count_train_flops(m, torch.zeros(st.sweep_batch, st.seq_len, dtype=torch.long))
                steps = max(1, round(c / per_step))
                r = train_lm(m, t.corpus, steps, st.sweep_batch, st.seq_len, st.lr, seed, t.val)
                n = sum(p.numel() for name, p in m.named_parameters() if "embed" not in name)
                name = f"{size.layers}x{size.hidden}"
                runs.append({"seed": seed, "C": c, "size": name, "N": n, "D": r.tokens, "steps": steps,
                             "bpc": r.val_bpc, "loss": r.val_bpc * LN2})  # fmt: skip
                if c == st.full_budgets[-1]:
                    pc = prune_compare(m, t)
                    gaps[name].append(pc["wanda"] - pc["magnitude"])
    law = fit(runs, "chinchilla")
    mean_bpc: dict[float, dict[str, float]] = {c: {} for c in st.full_budgets}
    for c in st.full_budgets:
        for size in {r["size"] for r in runs}:
            v = [r["bpc"] for r in runs if r["C"] == c and r["size"] == size]
            mean_bpc[c][size] = sum(v) / len(v)
    best = {c: min(mean_bpc[c], key=mean_bpc[c].__getitem__) for c in st.full_budgets}
    return {"seeds": seeds, "runs": runs, "law": law.params, "mean_bpc": mean_bpc, "best_size": best,
            "n_star": {c: law.compute_optimal(c)["N"] for c in st.full_budgets},
            "wanda_minus_magnitude": gaps}  # fmt: skip


def sweep_claims(sw: dict[str, Any], st: Setup) -> list[Any]:
    """Claims of :func:`compute_sweep`: claim 1 at every budget (smallest vs largest size, judged per budget on the
    seeds' interval; the claim holds only if it holds at every budget, and the budgets where it does are stated),
    the sweep itself (shown) and Wanda - magnitude per size (shown)."""
    from icml25_shared.report import Claim
    from icml25_shared.verdict import HOLDS, combine, judge, spread

    seeds = sw["seeds"]
    lo, hi = (f"{z.layers}x{z.hidden}" for z in (st.full_sizes[0], st.full_sizes[-1]))
    per, verdicts, texts = {}, [], []
    for c in st.full_budgets:
        bpc = {sz: [r["bpc"] for r in sw["runs"] if r["C"] == c and r["size"] == sz] for sz in (lo, hi)}
        v, sp = judge([a - b for a, b in zip(bpc[lo], bpc[hi])], "<=", 0.02, seeds=seeds)
        per[f"{c:.3g}"] = {"verdict": v, **sp.to_dict()}
        verdicts.append(v)
        texts.append(f"{c:.2g}: {sp.text(3)} ({v})")
    held = [c for c, v in zip(st.full_budgets, verdicts) if v == HOLDS]
    where = f"holds at {held[0]:.2g}-{held[-1]:.2g} FLOPs" if held else "holds at none of the budgets"
    gaps = {k: spread(v, seeds) for k, v in sw["wanda_minus_magnitude"].items()}
    law = sw["law"]
    return [
        Claim(
            f"claim 1 across budgets: at equal training compute the {lo} matches the {hi} at every budget of the sweep",
            "Chinchilla: the compute-optimal N*(C) grows with C, so the advantage must shrink as the budget grows",
            "bpc small - large per budget: " + "; ".join(texts) + f"; {where}",
            None,
            rule="bpc(smallest) - bpc(largest) <= 0.02 judged per budget on the 95% t-interval over seeds; holds "
            "only if it holds at every budget",
            unit="bits/char",
            short="small = large across budgets",
            details={"per_budget": per, "budgets_where_it_holds": held},
            verdict=combine(*verdicts),
        ),
        Claim(
            "the compute-optimal size grows with the budget; below some budget the largest model does not win",
            "N* ~ C^0.5 (Chinchilla, a = b = 0.5 approx.)",
            "best mean bpc per budget: "
            + ", ".join(f"{c:.2g}: {b} ({sw['mean_bpc'][c][b]:.3f})" for c, b in sw["best_size"].items())
            + f"; fitted alpha {law['alpha']:.2f}, beta {law['beta']:.2f}",
            None,
            rule="shown: best size per budget (mean over seeds) and the law fitted to all runs",
            short="compute sweep + fitted law",
            details={k: v for k, v in sw.items() if k != "wanda_minus_magnitude"},
        ),
        Claim(
            "Wanda - magnitude at 50% across model sizes (each trained at the largest budget)",
            "Wanda's gain grows with the outlier activation features of large LLMs (Sun et al. 2024)",
            "; ".join(f"{k}: {sp.text(3)}" for k, sp in gaps.items()),
            None,
            rule="shown: the trend with size; no outlier features at these sizes",
            unit="bits/char",
            short="Wanda - magnitude vs size",
            details={k: sp.to_dict() for k, sp in gaps.items()},
        ),
    ]


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


# ------------------------------------------------------------------------------------------ --full: more claims

STDLIB_MODULES = (
    "collections", "functools", "itertools", "json", "re", "string", "textwrap", "pathlib", "argparse", "logging",
    "typing", "dataclasses", "statistics", "fractions", "decimal", "heapq", "bisect", "csv", "datetime", "calendar",
    "shutil", "tempfile", "glob", "fnmatch", "random", "operator", "copy", "pprint", "enum", "contextlib", "io",
    "subprocess", "threading", "queue", "html", "zipfile", "tarfile", "gzip", "hashlib", "uuid", "base64", "struct",
    "difflib", "unittest",
)  # fmt: skip


def stdlib_docstrings() -> str:
    """``inspect.getdoc`` of the public functions and classes of :data:`STDLIB_MODULES` (offline, licence-free)."""
    import importlib
    import inspect

    parts = []
    for name in STDLIB_MODULES:
        mod = importlib.import_module(name)
        for attr, obj in sorted(vars(mod).items()):
            if attr.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", "") == mod.__name__ and (doc := inspect.getdoc(obj)):
                parts.append(doc)
    return "\n\n".join(parts)


def domain_texts(shakespeare: str) -> dict[str, str]:
    """The pipeline's three domains: drama (Tiny Shakespeare), stdlib docstrings, the language reference
    (``pydoc_data.topics``); characters outside printable ASCII and newline become ``?``."""
    import string
    from pydoc_data.topics import topics

    ok = set(string.printable) - set("\t\r\x0b\x0c")

    def clean(s: str) -> str:
        return "".join(c if c in ok else "?" for c in s)

    return {
        "drama": clean(shakespeare),
        "docstrings": clean(stdlib_docstrings()),
        "reference": clean("\n\n".join(topics[k] for k in sorted(topics))),
    }


@dataclass
class Domains:
    """Token streams of each domain on one joint character vocabulary (90/10 split each)."""

    chars: list[str]
    train: dict[str, torch.Tensor]
    val: dict[str, list[tuple[torch.Tensor, torch.Tensor]]]


def build_domains(task: Task, val_batches: int = 4) -> Domains:
    texts = domain_texts(task.corpus.text)
    chars = sorted(set("".join(texts.values())))
    stoi = {c: i for i, c in enumerate(chars)}
    train, val = {}, {}
    for name, t in texts.items():
        ids = torch.tensor([stoi[c] for c in t], dtype=torch.long)
        n = int(0.9 * len(ids))
        train[name] = ids[:n]
        v = ids[n:]
        starts = np.linspace(0, len(v) - task.setup.seq_len - 2, val_batches * 16).astype(np.int64)
        w = torch.stack([v[s : s + task.setup.seq_len + 1] for s in starts.tolist()])
        val[name] = [(w[i * 16 : (i + 1) * 16, :-1], w[i * 16 : (i + 1) * 16, 1:]) for i in range(val_batches)]
    return Domains(chars, train, val)


def _train_on(model: nn.Module, streams: list[torch.Tensor], steps: int, st: Setup, seed: int) -> nn.Module:
    """AdamW on windows drawn evenly from ``streams`` (a mix when several)."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=st.lr, weight_decay=0.1, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(max(1, steps), warmup=0.1, final=0.1))
    model.train()
    for _ in range(steps):
        which = torch.randint(len(streams), (st.large_batch,), generator=gen).tolist()
        rows = []
        for k in which:
            s = streams[k]
            i = int(torch.randint(len(s) - st.seq_len - 1, (1,), generator=gen))
            rows.append(s[i : i + st.seq_len + 1])
        w = torch.stack(rows)
        logits = model(input_ids=w[:, :-1]).logits
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return model.eval()


def pipeline(task: Task, dom: Domains, steps: int) -> dict[str, Any]:
    """The paper's pipeline at equal total training FLOPs C: a monolith trained on the mix for C vs three specialists,
    each pruned 50 % (MLP channels) from a monolith checkpoint trained for C/2, then continued on its own domain
    for C/6, routed by label. Per-domain bpc and forward FLOPs/token; 50 % Wanda on the monolith gives the per-domain
    degradation (uneven degradation: worst / mean increase)."""
    from downscaling.config import EnsembleConfig, PruneConfig
    from downscaling.ensemble import specialize_and_ensemble
    from downscaling.prune import prune

    st = task.setup
    streams = list(dom.train.values())
    base = new_model(st.large, st.seq_len, st.seed, vocab=len(dom.chars))
    probe = torch.zeros(st.large_batch, st.seq_len, dtype=torch.long)
    per_step = count_train_flops(base, probe)
    mono = _train_on(copy.deepcopy(base), streams, steps, st, st.seed)
    half = _train_on(copy.deepcopy(base), streams, steps // 2, st, st.seed)
    pruned_probe = prune(half, PruneConfig("channels", 0.5)).model
    spec_steps = max(1, round(per_step * steps / 6 / count_train_flops(pruned_probe, probe)))
    cfg = EnsembleConfig(PruneConfig("channels", 0.5), spec_steps, "label", st.lr, st.large_batch, st.seq_len, st.seed)
    ens = specialize_and_ensemble(half, dom.train, cfg)
    x = dom.val["drama"][0][0]
    spec_flops = count_train_flops(pruned_probe, probe)
    out: dict[str, Any] = {"monolith_steps": steps, "specialist_steps": spec_steps,
                           "train_flops_monolith": per_step * steps,
                           "train_flops_ensemble": per_step * (steps // 2) + 3 * spec_steps * spec_flops,
                           "fwd_flops_monolith": count_flops(mono, x) / x.numel(),
                           "fwd_flops_ensemble": ens.forward_flops(x, "drama") / x.numel()}  # fmt: skip
    gen = torch.Generator().manual_seed(st.seed + 3)
    starts = [(s, torch.randint(len(s) - st.seq_len, (8,), generator=gen).tolist()) for s in streams]
    calib = torch.stack([s[i : i + st.seq_len] for s, idx in starts for i in idx])
    wanda = prune(mono, PruneConfig("wanda", 0.5, calib=calib)).model
    for d, batches in dom.val.items():
        out[f"bpc_monolith[{d}]"] = bpc(mono, batches)
        out[f"bpc_ensemble[{d}]"] = _ens_bpc(ens, d, batches)
        out[f"bpc_monolith_wanda50[{d}]"] = bpc(wanda, batches)
    doms = list(dom.val)
    out["bpc_monolith_mean"] = sum(out[f"bpc_monolith[{d}]"] for d in doms) / 3
    out["bpc_ensemble_mean"] = sum(out[f"bpc_ensemble[{d}]"] for d in doms) / 3
    deltas = [out[f"bpc_monolith_wanda50[{d}]"] - out[f"bpc_monolith[{d}]"] for d in doms]
    out["wanda_delta"] = dict(zip(doms, deltas))
    out["uneven_worst_over_mean"] = max(deltas) / (sum(deltas) / 3) if sum(deltas) > 0 else math.nan
    return out


@torch.no_grad()
def _ens_bpc(ens: Any, domain: str, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    tot, n = 0.0, 0
    for x, y in batches:
        logits = ens(x, domain)
        tot += float(nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
        n += y.numel()
    return tot / n / LN2


def selection_lm(task: Task, proxy: nn.Module, steps: int, pool: int = 1024) -> dict[str, float]:
    """Keep 50 % of a pool of training windows by the proxy's loss (hard / easy) or at random and train the small
    model on each subset for the same steps (Sorscher et al. 2022 at character level)."""
    from downscaling.selection import ProxyLoss, Random, select_data

    st = task.setup
    gen = torch.Generator().manual_seed(st.seed + 11)
    x, y = task.corpus.get_batch("train", pool, st.seq_len, gen)
    windows = torch.cat([x, y[:, -1:]], 1)
    out = {}
    arms: list[tuple[str, Any, Literal["hard", "easy"]]] = [
        ("hard", ProxyLoss(proxy), "hard"), ("easy", ProxyLoss(proxy), "easy"), ("random", Random(), "hard")
    ]  # fmt: skip
    for name, scorer, mode in arms:
        kept = select_data(windows, scorer, 0.5, mode, st.seed).data
        m = new_model(st.small, st.seq_len, st.seed)
        m = _train_on(m, [kept.reshape(-1)], steps, replace(st, large_batch=st.large_batch), st.seed)
        out[name] = bpc(m, task.val)
    return out


def perceptron_crossover(n_dim: int = 200, alphas: tuple[float, ...] = (2.0, 20.0), keep: float = 0.5,
                         probe_cos: float = 0.95, seeds: int = 5) -> dict[str, dict[str, float]]:  # fmt: skip
    """Sorscher et al. (2022, Sec. 2): teacher w*, x ~ N(0, I_N), y = sign(w*·x), P = α N examples; a probe at
    cosine ``probe_cos`` to w* scores each example by its margin |w_probe·x| (small = hard); a near max-margin
    student (logistic regression, tiny L2, BFGS) is trained on the kept fraction; test error = angle(w, w*) / π.
    Expected: keeping easy examples wins at small α, keeping hard ones at large α."""
    from scipy.optimize import minimize

    res: dict[str, dict[str, float]] = {}
    for alpha in alphas:
        errs: dict[str, list[float]] = {"hard": [], "easy": [], "random": []}
        for s in range(seeds):
            rng = np.random.default_rng(s)
            w_star = rng.standard_normal(n_dim)
            w_star /= np.linalg.norm(w_star)
            noise = rng.standard_normal(n_dim)
            noise -= noise @ w_star * w_star
            noise /= np.linalg.norm(noise)
            probe = probe_cos * w_star + math.sqrt(1 - probe_cos**2) * noise
            p = int(alpha * n_dim)
            x = rng.standard_normal((p, n_dim))
            y = np.sign(x @ w_star)
            margin = np.abs(x @ probe)
            order = np.argsort(margin, kind="stable")
            k = int(round(keep * p))
            picks = {"hard": order[:k], "easy": order[p - k :], "random": rng.permutation(p)[:k]}
            for name, idx in picks.items():
                xs, ys = x[idx], y[idx]

                def f(w: np.ndarray, xs: np.ndarray = xs, ys: np.ndarray = ys) -> tuple[float, np.ndarray]:
                    z = ys * (xs @ w)
                    loss = np.logaddexp(0, -z).sum() + 1e-4 * w @ w
                    g = -(xs * (ys / (1 + np.exp(z)))[:, None]).sum(0) + 2e-4 * w
                    return float(loss), g

                w = minimize(f, np.zeros(n_dim), jac=True, method="BFGS", options={"maxiter": 500}).x
                cos = w @ w_star / (np.linalg.norm(w) + 1e-300)
                errs[name].append(float(np.arccos(np.clip(cos, -1, 1)) / math.pi))
        res[f"alpha={alpha:g}"] = {k: float(np.mean(v)) for k, v in errs.items()}
    return res


def full_extras(task: Task, proxy: nn.Module) -> dict[str, Any]:
    """--full: the pipeline (with uneven degradation), data selection with ``proxy``, the perceptron crossover."""
    st = task.setup
    dom = build_domains(task)
    return {
        "pipeline": pipeline(task, dom, st.pipeline_steps),
        "selection": selection_lm(task, proxy, st.selection_steps),
        "perceptron": perceptron_crossover(seeds=st.perceptron_seeds),
    }


def extra_claims(ex: dict[str, Any]) -> list[Any]:
    """Claims of :func:`full_extras` (kept here so that reproduce.py stays short)."""
    from icml25_shared.report import Claim

    p, s, c = ex["pipeline"], ex["selection"], ex["perceptron"]
    doms = ("drama", "docstrings", "reference")
    per = ", ".join(f"{d} {p[f'bpc_ensemble[{d}]']:.3f}/{p[f'bpc_monolith[{d}]']:.3f}" for d in doms)
    lo, hi = c["alpha=2"], c["alpha=20"]
    return [
        Claim(
            "pipeline: 3 pruned specialists (continued per domain, routed by label) match the monolith at equal "
            "training FLOPs with fewer FLOPs per token",
            "ensemble matches or beats the original at comparable compute (qualitative)",
            f"mean bpc ensemble {p['bpc_ensemble_mean']:.3f} vs monolith {p['bpc_monolith_mean']:.3f}; "
            f"per domain (ens/mono) {per}; FLOPs/token {p['fwd_flops_ensemble']:.0f} vs {p['fwd_flops_monolith']:.0f}",
            p["bpc_ensemble_mean"] <= p["bpc_monolith_mean"] + 0.02
            and p["fwd_flops_ensemble"] < p["fwd_flops_monolith"],
            rule="mean bpc(ensemble) <= mean bpc(monolith) + 0.02 and FLOPs/token lower; training FLOPs within 5%; "
            "on the first seed only",
            unit="bits/char",
            short="specialist ensemble vs monolith",
            details=p,
        ),
        Claim(
            "uneven degradation: 50% Wanda on the monolith costs some domains more than others",
            "some abilities degrade far more than others (qualitative)",
            "delta bpc "
            + ", ".join(f"{d} {p['wanda_delta'][d]:+.3f}" for d in doms)
            + f"; worst/mean {p['uneven_worst_over_mean']:.2f}",
            None,
            rule="shown (worst/mean >= 1 by construction)",
            short="uneven degradation",
        ),
        Claim(
            "data selection at character level: train the small model on half of a window pool",
            "keep hard with abundant data, easy with scarce (Sorscher et al. 2022)",
            f"bpc hard {s['hard']:.3f}, easy {s['easy']:.3f}, random {s['random']:.3f}",
            None,
            rule="shown",
            unit="bits/char",
            short="hard/easy/random selection",
            details=s,
        ),
        Claim(
            "teacher-student perceptron: keeping easy examples wins at small alpha, hard ones at large alpha",
            "crossover (Sorscher et al. 2022, Fig. 1)",
            f"test error alpha=2: easy {lo['easy']:.3f} hard {lo['hard']:.3f}; alpha=20: easy {hi['easy']:.3f} "
            f"hard {hi['hard']:.3f}",
            lo["easy"] < lo["hard"] and hi["hard"] < hi["easy"],
            rule="err_easy < err_hard at alpha = 2 and err_hard < err_easy at alpha = 20 (keep 50%)",
            short="perceptron crossover",
            details=c,
        ),
    ]
