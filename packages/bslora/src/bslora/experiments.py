"""The reproduction's experiment: a tiny Llama, string tasks with exact answers, LoRA vs BSLoRA fine-tuning.

A tiny Llama (hidden 64, 8 layers, ASCII bytes as tokens) is pre-trained briefly on three permutation tasks in the
``task:input=answer`` format (copy, swap adjacent pairs, rotate; answer-token loss); then one adapter per task
(reverse / sort 6 distinct letters, or add two 3-digit numbers) is fine-tuned with each method under identical
steps, learning rate, seed and data order, the steps calibrated once per task on LoRA-8 (never on BSLoRA). Exact
match on 512 held-out strings is scored with one teacher-forced forward (for a causal LM, "argmax right at every
answer position" is greedy-decoding exact match)::

    from bslora.experiments import TASKS, pretrain_base, run_cell

    base, info = pretrain_base(seed=0)
    cell = run_cell(base.state_dict(), "reverse", seed=0, full=False, steps=None)
    cell["exact"]  # {"LoRA r=8": ..., "BSLoRA SS(2,4,16)": ...} (full=True adds LoRA r=4, r=2, KE, GT)

Also here: the paired confidence interval used by the claims, and the serving checks of full mode (mixed batch of
task adapters, resident bytes per extra adapter).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from bslora.config import BSLoRAConfig
from bslora.model import BSLoRAModel, get_bslora_model
from icml25_shared.device import torch_threads, worker_count
from icml25_shared.report import save_figure, subplots
from icml25_shared.seed import seed_everything
from icml25_shared.training import count_parameters, warmup_cosine

__all__ = [
    "TASKS",
    "Task",
    "PRETRAIN_TASKS",
    "base_config",
    "pretrain_base",
    "method_configs",
    "finetune",
    "run_cell",
    "run_cells",
    "score",
    "evaluate",
    "paired_interval",
    "plot_accuracy_vs_params",
    "protocol",
    "llama_shapes",
    "mixed_batch_error",
    "bytes_per_adapter",
]

LETTERS = "abcdefgh"  # lowercase letters; each string holds STR_LEN distinct ones (sort and reverse well defined)
STR_LEN = 6
# Pre-training: three permutation tasks of the same format that are neither reverse nor sort (copy, swap adjacent
# pairs, rotate left by one), loss on the answer only. They give the tiny base the positional routing that a rank-8
# adapter can then re-aim within a few dozen steps; copy alone (or full-LM loss) leaves reverse unlearnable there.
PRETRAIN_TASKS = ("cpy", "swp", "rot")
PRETRAIN_STEPS = 300
PRETRAIN_BATCH = 32
PRETRAIN_LR = 3e-3
# The step count is calibrated once per task on LoRA r=8 (seed 0), never on BSLoRA: LoRA-8 trains with a constant
# learning rate after a fixed warm-up, is scored on a validation set (disjoint from test and train) every
# CALIB_EVERY steps, and stops at the first checkpoint at or above CALIB_TARGET exact match. Because the schedule does
# not depend on the total, that run *is* the LoRA-8 run of that length; every other method then trains exactly that
# many steps.
CALIB_EVERY = 10
CALIB_TARGET = 0.4
MAX_STEPS = 100
WARMUP_STEPS = 10
FT_LR = 1e-2
FT_BATCH = 32
FT_CLIP = 1.0  # gradient-norm clipping, the same for every method (constant lr 1e-2 alone collapsed after ~70 steps)
FT_DROPOUT = 0.0  # the same for every method; the official 0.05 only slows a run of a few dozen steps
N_TEST = 512
N_VAL = 256


def protocol() -> dict[str, Any]:
    """The fine-tuning protocol's constants (recorded in the reproduction's settings)."""
    return {
        "calibration": {"every": CALIB_EVERY, "target": CALIB_TARGET, "max_steps": MAX_STEPS, "n_val": N_VAL},
        "clip": FT_CLIP,
        "lr": FT_LR,
        "batch": FT_BATCH,
        "lora_dropout": FT_DROPOUT,
        "n_test": N_TEST,
        "letters": LETTERS,
        "string_length": STR_LEN,
    }


def base_config() -> Any:
    """The reproduction's tiny Llama: vocab 128 (ASCII bytes), hidden 64, intermediate 128, 8 layers, 4 heads.

    With the targets q, k, v, up, down (768 in + out features per layer) LoRA r=8 trains 49,152 parameters and
    SS(2,4,16) 24,576, exactly half."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )


# --------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Task:
    """A string task ``name:input=answer`` with an exactly computable answer."""

    name: str

    def sample_input(self, rng: np.random.Generator) -> str:
        if self.name == "add":
            a, b = rng.integers(0, 1000, size=2)
            return f"{a:03d}+{b:03d}"
        return "".join(LETTERS[i] for i in rng.permutation(len(LETTERS))[:STR_LEN])

    def answer(self, s: str) -> str:
        if self.name == "rev":
            return s[::-1]
        if self.name == "sort":
            return "".join(sorted(s))
        if self.name == "cpy":
            return s
        if self.name == "swp":  # swap adjacent pairs: abcdef -> badcfe
            return "".join(s[i ^ 1] for i in range(len(s)))
        if self.name == "rot":  # rotate left by one: abcdef -> bcdefa
            return s[1:] + s[:1]
        a, b = s.split("+")
        return f"{int(a) + int(b):04d}"

    def line(self, s: str) -> str:
        return f"{self.name}:{s}={self.answer(s)}"

    def answer_slice(self, s: str) -> slice:
        line = self.line(s)
        start = line.index("=") + 1
        return slice(start, start + len(self.answer(s)))


TASKS = {"reverse": Task("rev"), "sort": Task("sort"), "add": Task("add")}


def _encode(lines: list[str]) -> torch.Tensor:
    return torch.tensor([[ord(c) for c in s] for s in lines], dtype=torch.long)


def _test_set(task: Task, seed: int, offset: int = 10_000, exclude: frozenset[str] = frozenset(), n: int = N_TEST):
    rng = np.random.default_rng(offset + seed)
    out: dict[str, None] = {}
    while len(out) < n:
        s = task.sample_input(rng)
        if s not in exclude:
            out[s] = None
    return list(out)


def _val_set(task: Task, test: list[str]) -> list[str]:
    """The calibration set: N_VAL strings disjoint from the test set (and excluded from training)."""
    return _test_set(task, 0, offset=20_000, exclude=frozenset(test), n=N_VAL)


def _train_batch(task: Task, rng: np.random.Generator, exclude: set[str], batch: int) -> tuple[torch.Tensor, ...]:
    inputs: list[str] = []
    while len(inputs) < batch:
        s = task.sample_input(rng)
        if s not in exclude:  # held-out strings never appear in training
            inputs.append(s)
    ids = _encode([task.line(s) for s in inputs])
    labels = torch.full_like(ids, -100)
    sl = task.answer_slice(inputs[0])  # fixed format: same positions in every row
    labels[:, sl] = ids[:, sl]
    return ids, labels


@torch.no_grad()
def score(model: torch.nn.Module, task: Task, test: list[str]) -> tuple[float, float]:
    """``(exact match, per-token accuracy)`` of the answers under teacher forcing, from one forward.

    For a causal LM, "the argmax is right at every answer position" is exactly greedy-decoding exact match.
    """
    model.eval()
    ids = _encode([task.line(s) for s in test])
    sl = task.answer_slice(test[0])
    pred = model(input_ids=ids).logits[:, sl.start - 1 : sl.stop - 1].argmax(-1)
    ok = pred == ids[:, sl]
    return float(ok.all(-1).float().mean()), float(ok.float().mean())


def evaluate(model: torch.nn.Module, task: Task, test: list[str]) -> float:
    """Exact match: the argmax at every answer position is right (one teacher-forced forward)."""
    return score(model, task, test)[0]


# --------------------------------------------------------------------------- base model
def pretrain_base(seed: int = 0, steps: int = PRETRAIN_STEPS, cache_dir: Path | None = None) -> tuple[Any, dict]:
    """The tiny Llama pre-trained ``steps`` AdamW steps on the pre-training tasks (answer-token loss, one task per
    batch, in turn); cached in ``cache_dir`` keyed by a hash of everything that determines it."""
    from transformers import LlamaForCausalLM

    cfg = base_config()
    info = {"pretrain_steps": steps, "shakespeare": False, "tasks": list(PRETRAIN_TASKS), "letters": LETTERS,
            "len": STR_LEN, "seed": seed, "lr": PRETRAIN_LR, "batch": PRETRAIN_BATCH}  # fmt: skip
    key = hashlib.sha256(json.dumps([cfg.to_dict(), info], sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = cache_dir / f"base-{key}.pt" if cache_dir is not None else None
    seed_everything(seed)
    model = LlamaForCausalLM(cfg)
    if path is not None and path.is_file():
        model.load_state_dict(torch.load(path, weights_only=True))
        info["cached"] = True
        return model.eval(), info
    rng = np.random.default_rng(seed)
    tasks = [Task(t) for t in PRETRAIN_TASKS]
    opt = torch.optim.AdamW(model.parameters(), lr=PRETRAIN_LR, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, 0.05, 0.1))
    model.train()
    for step in range(steps):
        ids, labels = _train_batch(tasks[step % len(tasks)], rng, set(), PRETRAIN_BATCH)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    info["final_loss"] = float(loss.detach())
    info["cached"] = False
    probe = _test_set(tasks[0], seed, offset=30_000, n=128)
    info["exact_match_after_pretraining"] = {t.name: score(model, t, probe)[0] for t in tasks}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
    return model.eval(), info


# --------------------------------------------------------------------------- fine-tuning
def method_configs(full: bool) -> dict[str, BSLoRAConfig | str]:
    """Methods compared; LoRA r is BSLoRA with ``r_intra = r_inter = 0`` (equal to peft LoRA, see the tests)."""
    d = FT_DROPOUT
    methods: dict[str, BSLoRAConfig | str] = {
        "LoRA r=8": BSLoRAConfig(r_local=8, r_intra=0, r_inter=0, lora_dropout=d),
        "BSLoRA SS(2,4,16)": BSLoRAConfig(2, 4, 16, "slice", lora_dropout=d),
    }
    if full:  # the quick budget holds the judged pair on one task x three seeds; the rest in full mode
        methods["LoRA r=4"] = BSLoRAConfig(r_local=4, r_intra=0, r_inter=0, lora_dropout=d)
        methods["LoRA r=2"] = BSLoRAConfig(r_local=2, r_intra=0, r_inter=0, lora_dropout=d)
        methods["BSLoRA KE(2,4,16) S=64"] = BSLoRAConfig(2, 4, 16, "kron", kron_share_size=64, lora_dropout=d)
        methods["BSLoRA GT(2,4,16) G=128"] = BSLoRAConfig(2, 4, 16, "gate", gate_share_size=128, lora_dropout=d)
        if importlib.util.find_spec("peft") is not None:
            methods["peft LoRA r=8"] = "peft"
    return methods


def finetune(
    base_state: dict[str, torch.Tensor],
    method: BSLoRAConfig | str,
    task: Task,
    test: list[str],
    seed: int,
    steps: int,
    lr: float = FT_LR,
    calibrate_on: list[str] | None = None,
) -> tuple[torch.nn.Module, tuple[float, float], int, int]:
    """Train one adapter; returns ``(model, (exact_match, token_accuracy), trainable_params, steps)``. Same data order
    for every method.

    With ``calibrate_on`` (a validation set), training stops at the first multiple of ``CALIB_EVERY`` steps whose
    validation exact match reaches ``CALIB_TARGET`` (at most ``steps``).
    """
    from transformers import LlamaForCausalLM

    base = LlamaForCausalLM(base_config())
    base.load_state_dict(base_state)
    torch.manual_seed(seed)
    if method == "peft":
        import peft

        targets = list(BSLoRAConfig().target_modules)
        lcfg = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=FT_DROPOUT, target_modules=targets)
        with warnings.catch_warnings():  # transformers 5 deprecation alias read inside peft
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            model = peft.get_peft_model(base, lcfg)
    else:
        assert isinstance(method, BSLoRAConfig), f"method must be a BSLoRAConfig or 'peft', got {method!r}"
        model = get_bslora_model(base, method)
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = count_parameters(model, trainable_only=True)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    # linear warm-up then constant: a run of N steps is a prefix of a run of M > N steps (calibration relies on it)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / WARMUP_STEPS))
    rng = np.random.default_rng(seed)  # identical batches for every method
    exclude = set(test) | set(calibrate_on or ())
    exclude |= set(_val_set(task, test))
    model.train()
    done = 0
    for step in range(1, steps + 1):
        ids, labels = _train_batch(task, rng, exclude, FT_BATCH)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if FT_CLIP:
            torch.nn.utils.clip_grad_norm_(params, FT_CLIP)
        opt.step()
        sched.step()
        done = step
        if calibrate_on is not None and step % CALIB_EVERY == 0:
            if score(model, task, calibrate_on)[0] >= CALIB_TARGET:
                break
            model.train()
    return model, score(model, task, test), n_params, done


def run_cell(
    base_state: dict[str, torch.Tensor], task_name: str, seed: int, full: bool, steps: int | None, keep: bool = False
) -> dict[str, Any]:
    """Every method on one (task, seed). With ``steps=None`` the step count is first calibrated on LoRA-8.

    Returns plain data (picklable: cells run in worker processes): exact match and token accuracy per method,
    trainable counts, the step count, and with ``keep`` the SS adapter's state dict.
    """
    task = TASKS[task_name]
    test = _test_set(task, seed)
    out: dict[str, Any] = {"task": task_name, "seed": seed, "exact": {}, "token": {}, "params": {}}
    with torch_threads(1):  # tiny matmuls: one thread is faster than two here
        for mname, mcfg in method_configs(full).items():
            if steps is None:  # calibration: LoRA-8 (first method), validation set
                assert mname == "LoRA r=8"
                model, (em, tok), p, steps = finetune(
                    base_state, mcfg, task, test, seed, MAX_STEPS, calibrate_on=_val_set(task, test)
                )
            else:
                model, (em, tok), p, _ = finetune(base_state, mcfg, task, test, seed, steps)
            out["exact"][mname], out["token"][mname], out["params"][mname] = em, tok, p
            if keep and mname == "BSLoRA SS(2,4,16)":
                sd = cast(BSLoRAModel, model).adapter_state_dict("default")
                out["ss_state"] = {k: v.clone() for k, v in sd.items()}
    out["steps"] = steps
    return out


def run_cells(jobs: list[tuple], workers: int | None = None) -> list[dict[str, Any]]:
    """:func:`run_cell` on every argument tuple of ``jobs``, in ``workers`` processes (independent trainings, one
    torch thread each; default :func:`icml25_shared.device.worker_count`, which the ``icml25`` command sets)."""
    workers = worker_count() if workers is None else workers
    if workers <= 1 or len(jobs) <= 1:
        return [run_cell(*j) for j in jobs]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # fork (Linux) skips re-importing torch and transformers in each worker; the parent runs torch on one thread, so
    # no OpenMP pool is inherited half-initialised
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() and torch.get_num_threads() == 1 else "spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as ex:
        futures = [ex.submit(run_cell, *j) for j in jobs]
        return [f.result() for f in futures]


def _t975(df: int) -> float:
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
    return table.get(df, 1.96 + 2.4 / max(df, 1))


def paired_interval(diffs: list[float]) -> tuple[float, float, float]:
    """Mean and Student-t 95 % interval of paired differences."""
    d = np.asarray(diffs, dtype=np.float64)
    mean = float(d.mean())
    if len(d) < 2:
        return mean, float("nan"), float("nan")
    half = _t975(len(d) - 1) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return mean, mean - half, mean + half


def plot_accuracy_vs_params(
    n_params: dict[str, int], mean_acc: dict[str, float], runs: str, out_dir: str | Path
) -> Path:
    """Mean exact match against trainable parameters, one point per method (``runs`` labels the y axis)."""
    fig, ax = subplots()
    for mname in mean_acc:
        ax.scatter([n_params[mname]], [mean_acc[mname]], s=60, label=mname)
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters")
    ax.set_ylabel(f"mean exact match ({runs})")
    ax.set_title("BSLoRA vs LoRA on a tiny Llama")
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir, "accuracy_vs_params")


# --------------------------------------------------------------------------- serving checks (full mode)
def llama_shapes() -> dict[str, Any]:
    """``LlamaConfig`` of the paper's LLaMA-7B, Llama-3-8B and LLaMA-13B (shapes only, for the analytic counts)."""
    from transformers import LlamaConfig

    return {
        "LLaMA-7B": LlamaConfig(hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                                num_key_value_heads=32, num_hidden_layers=32, vocab_size=32000),
        "Llama-3-8B": LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                  num_key_value_heads=8, num_hidden_layers=32, vocab_size=32000),
        "LLaMA-13B": LlamaConfig(hidden_size=5120, intermediate_size=13824, num_attention_heads=40,
                                 num_key_value_heads=40, num_hidden_layers=40, vocab_size=32000),
    }  # fmt: skip


def mixed_batch_error(
    base_state: dict[str, torch.Tensor], adapters: dict[str, dict[str, torch.Tensor]], cfg: BSLoRAConfig
) -> float:
    """Serve one adapter per task (``adapters``: task name -> adapter state dict) on one base; max |Δlogit| between
    a mixed batch (8 test strings per task, ``adapter_names`` per row) and each adapter run alone."""
    from transformers import LlamaForCausalLM

    base = LlamaForCausalLM(base_config())
    base.load_state_dict(base_state)
    task_names = list(adapters)
    server = get_bslora_model(base, cfg, task_names[0])
    for tn in task_names[1:]:
        server.add_adapter(tn, cfg)
    for tn in task_names:
        server.load_adapter_state_dict(adapters[tn], tn)
    server.eval()
    rows, lines = [], []
    for tn in task_names:
        test = _test_set(TASKS[tn], 0)[:8]
        lines += [TASKS[tn].line(s) for s in test]
        rows += [tn] * len(test)
    length = max(len(s) for s in lines)
    ids = _encode([s.ljust(length, " ") for s in lines])
    with torch.no_grad():
        mixed = server(input_ids=ids, adapter_names=rows).logits
        err = 0.0
        for tn in task_names:
            server.set_adapter(tn)
            sel = [i for i, r in enumerate(rows) if r == tn]
            alone = server(input_ids=ids[sel]).logits
            err = max(err, float((mixed[sel] - alone).abs().max()))
    return err


def _resident_bytes(model: torch.nn.Module) -> int:
    """Bytes of the unique parameter tensors of ``model`` (a shared tensor counts once)."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[p.data_ptr()] = p.numel() * p.element_size()
    return sum(seen.values())


def bytes_per_adapter(cfg: BSLoRAConfig, n_adapters: int = 4) -> int:
    """Resident bytes each extra adapter adds to a serving tiny Llama (unique tensors, each shared one once);
    checks that the growth is linear in the number of adapters."""
    from transformers import LlamaForCausalLM

    srv = get_bslora_model(LlamaForCausalLM(base_config()), cfg, "a0")
    sizes = [_resident_bytes(srv)]
    for i in range(1, n_adapters):
        srv.add_adapter(f"a{i}", cfg)
        sizes.append(_resident_bytes(srv))
    steps = np.diff(sizes)
    if len(set(steps.tolist())) != 1:
        raise RuntimeError(f"resident bytes do not grow linearly with the adapters: {sizes}")
    return int(steps[0])
