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


def _subspace(p: torch.Tensor) -> torch.Tensor:
    """The orthogonal projector onto the span of a projector's basis (the same for any sign of each vector)."""
    return p.mT @ p if p.shape[0] < p.shape[1] else p @ p.mT


def test_galore_preset_equals_galore_torch_up_to_the_first_refresh(tiny_llama):
    """``svd`` selector, no state-free update, moments kept across refreshes, s_p = α: GaLore itself, step for step
    until the projector is re-chosen (steps 0..T-1 share the projector of step 0). At the refresh (step T) an SVD
    vector may come out with the opposite sign in one of the two, so we compare what does not depend on it: the
    projected subspace and Adam's second moments. eps 1e-12 because galore-torch adds ε to √v before the bias
    correction, torch after."""
    gap, density, scale = 3, 0.25, 0.25
    a, b = copy.deepcopy(tiny_llama), copy.deepcopy(tiny_llama)
    ref = galore_torch.GaLoreAdamW(
        galore_groups(a, density, gap, scale), lr=1e-2, eps=1e-12, weight_decay=0.0, no_deprecation_warning=True
    )
    opt = FRUGAL.galore_preset(param_groups(b), rank_fraction=density, lr=1e-2, update_gap=gap, scale=scale, eps=1e-12)
    assert opt.param_groups[1]["weight_decay"] == 0.0  # GaLoreAdamW's default, not AdamW's 0.01
    batches = _batches(gap + 1)
    for x in batches[:gap]:
        _train(a, ref, [x])
        _train(b, opt, [x])
        for (n, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
            torch.testing.assert_close(q, p, atol=1e-5, rtol=0, msg=n)
    _train(a, ref, batches[gap:])  # step T: both re-choose their projectors from their (equal) gradients
    _train(b, opt, batches[gap:])
    projected = [(n, p, q) for (n, p), q in zip(a.named_parameters(), b.parameters()) if "projector" in ref.state[p]]
    assert len(projected) == 7
    for n, p, q in projected:
        ours, theirs = opt.state[q].get("right", opt.state[q].get("left")), ref.state[p]["projector"].ortho_matrix
        torch.testing.assert_close(_subspace(ours), _subspace(theirs), atol=1e-5, rtol=0, msg=n)
        torch.testing.assert_close(opt.state[q]["exp_avg_sq"], ref.state[p]["exp_avg_sq"], atol=1e-12, rtol=1e-4, msg=n)
    # same state tensors (moments of the projected gradients and projectors): equal bytes
    assert state_bytes(ref, min_dim=1) == state_bytes(opt, min_dim=1)


@pytest.mark.parametrize("proj_type", ["reverse_std", "left", "right"])
def test_galore_style_groups_switch_by_class_name(tiny_llama, proj_type):
    """A galore-torch user changes the class name (and states GaLoreAdamW's weight_decay=0, since FRUGAL takes
    torch.optim.AdamW's 0.01): the groups keep their rank, gap, scale and side.
    (``"full"`` is left out: ``Aᵀ G Bᵀ`` with GaLore's own singular vectors is diagonal up to round-off, and Adam's
    first step turns that round-off into ±lr, so two correct implementations differ at 1e-3.)"""
    a, b = copy.deepcopy(tiny_llama), copy.deepcopy(tiny_llama)
    groups_a, groups_b = galore_groups(a, 0.25, 2), galore_groups(b, 0.25, 2)
    for g in groups_a[1:] + groups_b[1:]:
        g["proj_type"] = proj_type
    ref = galore_torch.GaLoreAdamW(groups_a, lr=1e-2, eps=1e-12, no_deprecation_warning=True)
    # GaLoreAdamW defaults weight_decay to 0, torch.optim.AdamW (and FRUGAL) to 0.01: state it
    opt = FRUGAL(groups_b, lr=1e-2, eps=1e-12, weight_decay=0.0, state_free="none", reset_statistics=False)
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
    assert first.verdict in {"holds", "does not hold", "inconclusive"} and "margin" in first.measured
    assert "3 seeds" in first.measured and result.settings["seeds"] == [0, 1, 2]
    assert first.details["state_bytes_frugal_nd"] == first.details["state_bytes_galore_nd"]
    assert memory.holds is True and memory.details["measured"] == memory.details["expected"]
    assert table.holds is None
    assert all(len(c.label) <= 32 for c in result.claims)
    assert (tmp_path / "val_loss_vs_tokens.png").stat().st_size > 0
    saved = result.save_json(tmp_path / "result.json")
    assert json.loads(saved.read_text())["claims"][0]["verdict"] == first.verdict


def _fake_runs(finals):
    """``_seed_runs`` stand-ins: final validation losses per seed for AdamW, GaLore, FRUGAL; equal state bytes."""
    from frugal.experiments import RunResult, RunSpec

    it = iter(finals)

    def run(task, full):
        names = ("AdamW", "GaLore", "FRUGAL")
        out = {
            k: RunResult(RunSpec(k, "adamw", 1e-2), [0, 1], [9.0, v], [], 1, 1, 0.0) for k, v in zip(names, next(it))
        }
        return out, {}, list(out.values())

    return run


@pytest.mark.parametrize(
    ("finals", "verdict"),
    [
        ([(2.10, 2.20, 2.05), (2.11, 2.21, 2.06), (2.12, 2.22, 2.07)], "holds"),
        ([(2.10, 2.20, 2.05), (2.11, 2.06, 2.07), (2.12, 2.22, 2.07)], "inconclusive"),  # one seed: GaLore ahead
        ([(2.10, 2.00, 2.05), (2.11, 2.01, 2.06), (2.12, 2.02, 2.07)], "does not hold"),
    ],
)
def test_headline_verdict_is_judged_on_the_interval_over_seeds(finals, verdict, tmp_path, monkeypatch):
    """The margin L(GaLore) - L(FRUGAL) over the 3 seeds decides through its t-interval: every seed ahead holds, a
    seed behind makes it inconclusive (the old every-seed rule would call it 'does not hold'), all behind fail."""
    import frugal.reproduce as rep

    monkeypatch.setattr(rep, "_seed_runs", _fake_runs(finals))
    monkeypatch.setattr(rep, "plot_val_loss", lambda *a, **k: tmp_path / "p.png")
    fake_task = classmethod(lambda cls, setup, download=False: type("T", (), {"setup": setup})())
    monkeypatch.setattr(rep.Task, "build", fake_task)
    monkeypatch.setattr(rep, "expected_bytes", lambda st, k: 1)
    result = rep.reproduce(False, tmp_path, seed=1)
    first = result.claims[0]
    assert first.verdict == verdict and result.settings["seeds"] == [3, 4, 5]
    assert first.details["seeds"]["margin_vs_galore"]["n"] == 3


def test_runs_fanned_out_to_processes_equal_sequential_runs(tmp_path):
    from frugal.experiments import RunSpec, Task, run_many
    from icml25_shared.parts import Parts

    small = dataclasses.replace(
        QUICK, hidden_size=32, num_hidden_layers=1, intermediate_size=88, seq_len=16, batch_size=4, steps=4,
        update_gap=2, val_batches=1,
    )  # fmt: skip
    try:
        task = Task.build(small)
    except DataNotFoundError as err:
        pytest.skip(f"Tiny Shakespeare is not installed (the [data] extra) and we are offline: {err}")
    specs = [RunSpec("g", "galore", 3e-2), RunSpec("f", "frugal", 1e-2, {"selector": "svd"})]
    parts = Parts(tmp_path, fingerprint={"steps": 4})
    parallel = run_many(specs, task, workers=2, parts=parts, prefix="s0_")
    sequential = run_many(specs, task, workers=1)
    assert [r.val_loss for r in parallel] == [r.val_loss for r in sequential]
    assert [r.state_bytes for r in parallel] == [r.state_bytes for r in sequential]
    assert parts.computed == ["s0_g", "s0_f"] and parts.reused == []  # each stored as it arrived, in order
    again = run_many(specs, task, workers=2, parts=parts, prefix="s0_")
    assert parts.reused == ["s0_g", "s0_f"] and [r.val_loss for r in again] == [r.val_loss for r in sequential]


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
