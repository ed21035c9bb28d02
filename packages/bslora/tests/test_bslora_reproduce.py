"""The reproduction's machinery in reduced form: tasks, exact-match scoring, identical data order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bslora import BSLoRAConfig
from bslora import experiments as R


def test_tasks_and_answers():
    assert R.TASKS["reverse"].line("abcdef") == "rev:abcdef=fedcba"
    assert R.TASKS["sort"].line("fbdaec") == "sort:fbdaec=abcdef"
    assert R.TASKS["add"].line("999+001") == "add:999+001=1000"
    assert R.Task("swp").answer("abcdef") == "badcfe" and R.Task("rot").answer("abcdef") == "bcdefa"
    # the pre-training tasks are neither of the fine-tuning tasks
    s = "gcahfb"
    pre = {R.Task(t).answer(s) for t in R.PRETRAIN_TASKS}
    assert R.TASKS["reverse"].answer(s) not in pre and R.TASKS["sort"].answer(s) not in pre
    test = R._test_set(R.TASKS["sort"], 0)
    val = R._val_set(R.TASKS["sort"], test)
    assert len(test) == len(set(test)) == R.N_TEST and len(val) == R.N_VAL and not set(test) & set(val)
    assert all(len(set(t)) == R.STR_LEN and set(t) <= set(R.LETTERS) for t in test)


def test_teacher_forced_score_equals_greedy_decoding():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    cfg = R.base_config()
    cfg.num_hidden_layers = 2
    model = LlamaForCausalLM(cfg).eval()
    task = R.TASKS["reverse"]
    test = R._test_set(task, 0)[:16]
    # make some rows right: train-free trick, force the answer by scoring the model against its own greedy output
    with torch.no_grad():
        prompts = R._encode([f"{task.name}:{s}=" for s in test])
        greedy = model.generate(prompts, max_new_tokens=6, do_sample=False, pad_token_id=0)[:, prompts.shape[1] :]
    outs = ["".join(chr(int(c)) for c in row) for row in greedy]
    forced = R.Task("rev")
    # a task whose "answer" is the model's own greedy output scores 1.0 under teacher forcing, the real one
    # scores exactly the greedy exact-match rate
    real = np.mean([o == task.answer(s) for o, s in zip(outs, test)])
    assert R.evaluate(model, task, test) == real
    lines = R._encode([f"rev:{s}={o}\n" for s, o in zip(test, outs)])
    with torch.no_grad():
        logits = model(input_ids=lines).logits
    sl = forced.answer_slice(test[0])
    assert bool((logits[:, sl.start - 1 : sl.stop - 1].argmax(-1) == lines[:, sl]).all())


@pytest.mark.slow  # the package's slowest default test (27 s at load 7): keeps the default suite near 60 s idle
def test_finetune_runs_and_calibration_stops_early():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    state = LlamaForCausalLM(R.base_config()).state_dict()
    task = R.TASKS["reverse"]
    test = R._test_set(task, 0)[:32]
    m, (em, tok), p, done = R.finetune(state, BSLoRAConfig(2, 4, 16), task, test, 0, steps=2)
    assert p == 24_576 and done == 2 and 0.0 <= em <= tok <= 1.0
    # target 0.0 is reached at the first checkpoint
    old = R.CALIB_TARGET, R.CALIB_EVERY
    R.CALIB_TARGET, R.CALIB_EVERY = 0.0, 1
    try:
        *_, done = R.finetune(state, BSLoRAConfig(8, 0, 0), task, test, 0, steps=5, calibrate_on=test)
    finally:
        R.CALIB_TARGET, R.CALIB_EVERY = old
    assert done == 1


def test_paired_interval():
    mean, lo, hi = R.paired_interval([0.0, 0.02, -0.01])
    assert lo < mean < hi and abs(mean - 1 / 300) < 1e-12


def _fake_cells(gaps: dict[int, float]):
    """run_cells stand-in: per seed, SS - LoRA-8 exact match = gaps[seed] on both tasks (LoRA-8 at 0.6)."""
    calls = []

    def run_cells(jobs, workers=None):
        out = []
        for _state, task, seed, _full, steps, _keep in jobs:
            calls.append((task, seed, steps))
            l8 = 0.6
            exact = {"LoRA r=8": l8, "LoRA r=4": 0.3, "BSLoRA SS(2,4,16)": l8 + gaps[seed]}
            params = {"LoRA r=8": 49_152, "LoRA r=4": 24_576, "BSLoRA SS(2,4,16)": 24_576}
            out.append({"task": task, "seed": seed, "exact": exact, "token": exact, "params": params,
                        "steps": steps or 50})  # fmt: skip
        return out

    return run_cells, calls


@pytest.mark.parametrize(
    ("gaps", "verdict"),
    [({3: 0.02, 4: 0.01, 5: 0.03}, "holds"), ({3: 0.05, 4: -0.09, 5: 0.01}, "inconclusive"),
     ({3: -0.20, 4: -0.21, 5: -0.19}, "does not hold")],
)  # fmt: skip
def test_parity_claim_is_judged_on_the_interval_over_seeds(monkeypatch, tmp_path, gaps, verdict):
    """The accuracy claim's verdict comes from the t-interval of the per-seed gap, and the seeds derive from
    ``seed`` (base seed 1: fine-tuning seeds 3, 4, 5, each calibrating its own step count on LoRA-8, so the
    interval carries the calibration's variance; the pre-trained base is the fixed fixture of pre-training seed 0)."""
    import bslora.reproduce as rep

    run_cells, calls = _fake_cells(gaps)
    based = []
    monkeypatch.setattr(rep, "run_cells", run_cells)
    monkeypatch.setattr(rep, "pretrain_base", lambda s, cache_dir=None: (based.append(s) or torch.nn.Linear(1, 1), {}))
    monkeypatch.setattr(rep, "seed_list", lambda s, n: [3 * s, 3 * s + 1, 3 * s + 2])
    res = rep.reproduce(False, tmp_path, seed=1)
    assert based == [0]
    assert [c for c in calls if c[2] is None] == [("sort", 3, None), ("sort", 4, None), ("sort", 5, None)]
    assert sorted({c[1] for c in calls}) == [3, 4, 5]
    claim = next(c for c in res.claims if c.short == "exact match SS - LoRA-8")
    assert claim.verdict == verdict
    assert claim.details["seeds"]["per_seed"] == pytest.approx({str(s): gaps[s] for s in (3, 4, 5)})
