"""SWAN on the tiny LLaMA: a training smoke test, exact state bytes, and the reproduce machinery (reduced)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F

from icml25_shared.training import optimizer_state_bytes
from swan import SWAN, param_groups
from swan.experiments import QUICK, expected_state_bytes, llama_memory_bytes, tiny_llama_config, tokens_to_reach
from swan.reproduce import reproduce

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_llama():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(tiny_llama_config())


def _loss(model, x, y):
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def test_tiny_llama_has_108992_parameters(tiny_llama):
    assert sum(p.numel() for p in tiny_llama.parameters()) == 108_992


def test_swan_beats_sgd_on_the_matrices_in_40_steps(tiny_llama):
    """Same lr, same AdamW on embeddings/head/norms; only the matrix update differs (SWAN vs plain SGD)."""
    import copy

    gen = torch.Generator().manual_seed(0)
    data = [torch.randint(0, 65, (8, 33), generator=gen) for _ in range(4)]  # a few fixed batches to fit
    final = {}
    for name in ("swan", "sgd"):
        model = copy.deepcopy(tiny_llama)
        groups = param_groups(model, lr=3e-3)
        if name == "swan":
            opts = [SWAN(groups)]
        else:
            opts = [torch.optim.SGD(groups[0]["params"], lr=3e-3), torch.optim.AdamW(groups[1]["params"], lr=3e-3)]
            opts[1].param_groups[0]["weight_decay"] = 0.0
        first = None
        for step in range(40):
            block = data[step % 4]
            loss = _loss(model, block[:, :-1], block[:, 1:])
            first = loss.item() if first is None else first
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()
        with torch.no_grad():
            final[name] = sum(_loss(model, b[:, :-1], b[:, 1:]).item() for b in data) / 4
    assert final["swan"] < final["sgd"] - 0.1, final
    assert final["swan"] < math.log(65) - 0.3


def test_state_bytes_match_the_closed_form(tiny_llama):
    import copy

    model = copy.deepcopy(tiny_llama)
    swan = SWAN(param_groups(model, lr=1e-3))
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 65, (2, 17))
    _loss(model, x[:, :-1], x[:, 1:]).backward()
    swan.step()
    adamw.step()
    assert optimizer_state_bytes(adamw) == expected_state_bytes(model, "adamw") == 872_020
    assert optimizer_state_bytes(swan) == expected_state_bytes(model, "swan") == 69_148
    matrices = {id(p) for p in param_groups(model)[0]["params"]}
    assert not any(id(p) in matrices for p in swan.state)


def test_llama_1b3_memory_table():
    mem = llama_memory_bytes(vocab=32000, hidden=2048, intermediate=5461, layers=24)
    assert mem["adam_bytes"] / 1e9 == pytest.approx(16.07, abs=0.01)
    assert mem["swan_bytes"] / 1e9 == pytest.approx(6.41, abs=0.01)
    assert mem["ratio"] == pytest.approx(0.399, abs=0.001)


def test_tokens_to_reach_interpolates_linearly():
    steps, losses = [0, 10, 20, 30], [4.0, 3.0, 2.0, 1.5]
    assert tokens_to_reach(steps, losses, 2.5) == pytest.approx(15.0)
    assert tokens_to_reach(steps, losses, 1.75) == pytest.approx(25.0)
    assert tokens_to_reach(steps, losses, 5.0) == 0.0
    assert tokens_to_reach(steps, losses, 1.0) == math.inf
    assert tokens_to_reach([0, 10, 20], [3.0, 2.0, 2.5], 2.0) == pytest.approx(10.0)  # first crossing


def test_reproduce_reduced_writes_claims_plot_and_json(tmp_path, tinyshakespeare_data):
    result = reproduce(False, tmp_path, setup=dataclasses.replace(QUICK, steps=6, val_batches=2))
    assert result.package == "swan" and result.mode == "quick"
    texts = [c.text for c in result.claims]
    assert any("80% of AdamW's tokens" in t for t in texts)
    state_claim = next(c for c in result.claims if "no optimizer state" in c.text)
    assert state_claim.holds is True
    assert state_claim.measured == pytest.approx(69_148 / 872_020)
    token_claim = result.claims[0]
    assert token_claim.paper == 0.5 and isinstance(token_claim.holds, bool)
    runs = result.settings["runs"]
    assert {len(r["val_loss"]) for r in runs.values()} == {7}  # step 0 and every step (6 // 10 -> 1)
    assert (tmp_path / "val_loss_vs_tokens.png").stat().st_size > 0
    saved = result.save_json(tmp_path / "result.json")
    assert json.loads(saved.read_text())["claims"][0]["verdict"] in {"holds", "does not hold"}
    assert result.settings["seed"] == 0 and token_claim.details["seeds"]["n"] == 1
    other = reproduce(False, tmp_path, seed=2, setup=dataclasses.replace(QUICK, steps=6, val_batches=2))
    assert other.settings["seed"] == 2  # the base seed reaches the initialisation and the batches
    assert other.settings["runs"] != runs


@pytest.mark.slow
def test_hf_trainer_accepts_swan_and_scheduler(tmp_path, tiny_llama):
    """``Trainer(optimizers=(opt, sched))`` drives SWAN unchanged: matrices move, and hold no state."""
    import copy

    pytest.importorskip("accelerate")
    model = copy.deepcopy(tiny_llama)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = SWAN(param_groups(model, lr=3e-3))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    gen = torch.Generator().manual_seed(0)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 65, (8, 32), generator=gen)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, optimizers=(opt, sched))
    trainer.train()
    assert getattr(trainer.optimizer, "optimizer", trainer.optimizer) is opt
    matrices = {id(p) for p in param_groups(model)[0]["params"]}
    assert not any(id(p) in matrices for p in opt.state)
    moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert "model.layers.0.self_attn.q_proj.weight" in moved and "lm_head.weight" in moved


TINY = dataclasses.replace(
    QUICK, hidden_size=16, num_hidden_layers=1, intermediate_size=32, seq_len=16, batch_size=4, steps=3, val_batches=1
)


def test_full_reproduction_resumes_from_finished_parts(tmp_path, tinyshakespeare_data):
    """--full on a tiny setup: every (run, seed) is a part; a rerun after losing two parts recomputes only those,
    reuses the rest, and judges the same figures; another setup (fingerprint) reuses nothing."""
    first = reproduce(True, tmp_path, setup=TINY)
    parts = first.settings["parts"]
    assert parts["reused"] == [] and len(parts["computed"]) == 21  # 11 sweep + 2 x 2 seeds + 2 ablations x 3 seeds
    assert first.settings["seeds"] == [0, 1, 2]
    lost = ["SWAN_lr=0.001_seed0", parts["computed"][-1]]
    for name in lost:
        (tmp_path / "parts" / f"{name}.json").unlink()
    again = reproduce(True, tmp_path, setup=TINY)
    assert sorted(again.settings["parts"]["computed"]) == sorted(lost)
    assert len(again.settings["parts"]["reused"]) == 19
    assert [c.measured for c in again.claims] == [c.measured for c in first.claims]
    curves = [{k: r["val_loss"] for k, r in res.settings["runs"].items()} for res in (first, again)]
    assert curves[0] == curves[1] and len(curves[0]) == 21  # recomputed parts reproduce their curves exactly
    ablation = next(c for c in again.claims if "ablation" in c.text)
    assert ablation.details["seeds"]["n"] == 3 and ablation.verdict in {"holds", "does not hold", "inconclusive"}
    other = reproduce(True, tmp_path, setup=dataclasses.replace(TINY, steps=2))
    assert other.settings["parts"]["reused"] == []
