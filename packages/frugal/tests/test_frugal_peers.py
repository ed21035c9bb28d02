"""FRUGAL against its peers on the same input: galore-torch's GaLoreAdamW (the preset must reproduce it), and a
training smoke test on the tiny LLaMA; plus the reproduction machinery on a reduced setup."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F

from frugal import FRUGAL, param_groups
from frugal.experiments import QUICK, expected_bytes, galore_groups, llama_memory_table, state_bytes, tiny_llama_config
from frugal.reproduce import reproduce
from icml25_shared.data import DataNotFoundError

transformers = pytest.importorskip("transformers")
galore_torch = pytest.importorskip("galore_torch")


@pytest.fixture(scope="module")
def tiny_llama():
    torch.manual_seed(0)
    cfg = tiny_llama_config(hidden_size=32, num_hidden_layers=1, intermediate_size=88, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(cfg)


def _loss(model, block):
    logits = model(input_ids=block[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), block[:, 1:].reshape(-1))


def _batches(n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 65, (4, 17), generator=gen) for _ in range(n)]


def _train(model, opt, batches):
    losses = []
    for b in batches:
        opt.zero_grad()
        loss = _loss(model, b)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_galore_preset_reproduces_galore_torch(tiny_llama):
    """``svd`` selector, no state-free update, moments kept across refreshes, s_p = α: GaLore itself, over 2·T
    steps (two refreshes). eps 1e-12 because galore-torch adds ε to √v before the bias correction, torch after."""
    gap, density, scale = 3, 0.25, 0.25
    a, b = copy.deepcopy(tiny_llama), copy.deepcopy(tiny_llama)
    ref = galore_torch.GaLoreAdamW(
        galore_groups(a, density, gap, scale), lr=1e-2, eps=1e-12, weight_decay=0.0, no_deprecation_warning=True
    )
    opt = FRUGAL.galore_preset(param_groups(b), rank_fraction=density, lr=1e-2, update_gap=gap, scale=scale, eps=1e-12)
    batches = _batches(2 * gap + 1)
    _train(a, ref, batches)
    _train(b, opt, batches)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(q, p, atol=1e-5, rtol=0, msg=n)
    # same state tensors (moments of the projected gradients and projectors): equal bytes
    assert state_bytes(ref, min_dim=1) == state_bytes(opt, min_dim=1)


@pytest.mark.parametrize("proj_type", ["reverse_std", "left", "right"])
def test_galore_style_groups_switch_by_class_name(tiny_llama, proj_type):
    """A galore-torch user changes only the class name: the groups keep their rank, gap, scale and side.
    (``"full"`` is left out: ``Aᵀ G Bᵀ`` with GaLore's own singular vectors is diagonal up to round-off, and Adam's
    first step turns that round-off into ±lr, so two correct implementations differ at 1e-3.)"""
    a, b = copy.deepcopy(tiny_llama), copy.deepcopy(tiny_llama)
    groups_a, groups_b = galore_groups(a, 0.25, 2), galore_groups(b, 0.25, 2)
    for g in groups_a[1:] + groups_b[1:]:
        g["proj_type"] = proj_type
    ref = galore_torch.GaLoreAdamW(groups_a, lr=1e-2, eps=1e-12, no_deprecation_warning=True)
    opt = FRUGAL(groups_b, lr=1e-2, eps=1e-12, state_free="none", reset_statistics=False)
    batches = _batches(5)
    _train(a, ref, batches)
    _train(b, opt, batches)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(q, p, atol=1e-5, rtol=0, msg=n)


def test_frugal_trains_at_least_as_well_as_galore_at_same_density(tiny_llama):
    """Smoke: 60 steps on 4 fixed batches; FRUGAL (AdamW's lr) memorises them as GaLore does.

    Both end near the memorisation floor (≈ 0.1 nats from 4.18), where which one is lower is floating-point noise: the
    same run on 1 vs 2 torch threads, or on another CPU, moves FRUGAL's loss by ≈ 0.06 nats (and flipped the order
    that an earlier version of this test asserted). So: both fall below a tenth of the start, and FRUGAL ends within
    0.1 nats of GaLore. The paper's comparison itself is the reproduction's claim, not this smoke test."""
    data = _batches(4, seed=1)
    batches = [data[i % 4] for i in range(60)]
    a, b = copy.deepcopy(tiny_llama), copy.deepcopy(tiny_llama)
    galore = galore_torch.GaLoreAdamW(
        galore_groups(a, 0.25, 20), lr=3e-2, weight_decay=0.0, no_deprecation_warning=True
    )
    frugal = FRUGAL(param_groups(b), lr=1e-2, density=0.25, update_gap=20, selector="svd")
    lg = _train(a, galore, batches)
    lf = _train(b, frugal, batches)
    with torch.no_grad():
        final_g = sum(_loss(a, d).item() for d in data) / 4
        final_f = sum(_loss(b, d).item() for d in data) / 4
    assert lf[0] == pytest.approx(lg[0])  # same start
    assert final_g < 0.1 * lg[0] and final_f < 0.1 * lf[0], (final_f, final_g)
    assert final_f <= final_g + 0.1, (final_f, final_g)


def test_expected_bytes_of_the_quick_setup():
    """The reproduction's closed forms for the quick model (108,992 parameters, 14 projectable matrices)."""
    assert expected_bytes(QUICK, "adamw") == 872_020
    assert expected_bytes(QUICK, "galore") == 327_168
    assert expected_bytes(QUICK, "frugal") == 327_168 + 21 * 4  # fp32 step counters, as torch.optim.AdamW
    table = llama_memory_table()
    assert table["LLaMA-1B"]["GaLore"] == table["LLaMA-1B"]["FRUGAL-SVD"] < table["LLaMA-1B"]["AdamW"]


def test_reproduce_reduced_writes_claims_plot_and_json(tmp_path):
    small = dataclasses.replace(
        QUICK, hidden_size=32, num_hidden_layers=1, intermediate_size=88, seq_len=16, batch_size=4, steps=6,
        update_gap=3, val_batches=2,
    )  # fmt: skip
    try:
        result = reproduce(False, tmp_path, setup=small)
    except DataNotFoundError as err:
        pytest.skip(f"Tiny Shakespeare is not installed (the [data] extra) and we are offline: {err}")
    assert result.package == "frugal"
    first, memory, table = result.claims[:3]
    assert isinstance(first.holds, bool) and "margin" in first.measured
    assert first.details["state_bytes_frugal_nd"] == first.details["state_bytes_galore_nd"]
    assert memory.holds is True and memory.details["measured"] == memory.details["expected"]
    assert table.holds is None
    assert all(len(c.label) <= 32 for c in result.claims)
    assert (tmp_path / "val_loss_vs_tokens.png").stat().st_size > 0
    saved = result.save_json(tmp_path / "result.json")
    assert json.loads(saved.read_text())["claims"][0]["verdict"] in {"holds", "does not hold"}


def test_runs_fanned_out_to_processes_equal_sequential_runs():
    from frugal.experiments import RunSpec, Task, run_many

    small = dataclasses.replace(
        QUICK, hidden_size=32, num_hidden_layers=1, intermediate_size=88, seq_len=16, batch_size=4, steps=4,
        update_gap=2, val_batches=1,
    )  # fmt: skip
    try:
        task = Task.build(small)
    except DataNotFoundError as err:
        pytest.skip(f"Tiny Shakespeare is not installed (the [data] extra) and we are offline: {err}")
    specs = [RunSpec("g", "galore", 3e-2), RunSpec("f", "frugal", 1e-2, {"selector": "svd"})]
    parallel, sequential = run_many(specs, task, workers=2), run_many(specs, task, workers=1)
    assert [r.val_loss for r in parallel] == [r.val_loss for r in sequential]
    assert [r.state_bytes for r in parallel] == [r.state_bytes for r in sequential]


@pytest.mark.slow
def test_hf_trainer_drives_frugal_with_a_scheduler(tmp_path, tiny_llama):
    pytest.importorskip("accelerate")
    model = copy.deepcopy(tiny_llama)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = FRUGAL(param_groups(model), lr=1e-2, selector="svd", update_gap=2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    gen = torch.Generator().manual_seed(0)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 65, (8, 16), generator=gen)]
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
    moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert "model.layers.0.self_attn.q_proj.weight" in moved and "lm_head.weight" in moved
    assert "right" in opt.state[model.model.layers[0].mlp.gate_proj.weight]
