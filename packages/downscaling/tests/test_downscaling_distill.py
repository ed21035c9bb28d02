"""Distillation loss: zero for identical models, KL >= 0, tau^2 scaling (closed form + gradcheck), frozen teacher;
the training loop and the Trainer subclass."""

from __future__ import annotations

import pytest
import torch
from ds_testing import tiny_llama, tokens

from downscaling.config import DistillConfig
from downscaling.distill import distill, distill_loss, kd_kl


def _logits(seed, shape=(3, 5, 7)):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_identical_models_zero_loss_at_alpha_one():
    z = _logits(0)
    assert distill_loss(z, z.clone(), None, temperature=3.0, alpha=1.0).item() == 0.0
    assert kd_kl(z, z, kl="reverse").item() == 0.0


@pytest.mark.parametrize("kl", ["forward", "reverse"])
def test_kl_nonnegative(kl):
    for s in range(5):
        assert kd_kl(_logits(s), _logits(s + 10), temperature=0.5 + s, kl=kl).item() > 0


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0, 4.0])
def test_tau_squared_scaling_closed_form_gradient(tau):
    s = _logits(1).requires_grad_()
    t = _logits(2)
    (g,) = torch.autograd.grad(kd_kl(s, t, tau), s)
    n = s.numel() // s.shape[-1]
    want = tau * (torch.softmax(s / tau, -1) - torch.softmax(t / tau, -1)) / n  # tau^2 * (1/tau) * (p_S - p_T) / n
    torch.testing.assert_close(g, want, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a: kd_kl(a, t, tau), (s,))
    assert torch.autograd.gradcheck(lambda a: kd_kl(a, t, tau, kl="reverse"), (s,))


def test_loss_mixes_ce_and_kl():
    s, t = _logits(3), _logits(4)
    y = torch.randint(0, 7, (3, 5), generator=torch.Generator().manual_seed(0))
    ce = torch.nn.functional.cross_entropy(s.reshape(-1, 7), y.reshape(-1))
    got = distill_loss(s, t, y, temperature=2.0, alpha=0.3)
    assert got.item() == pytest.approx(0.7 * ce.item() + 0.3 * kd_kl(s, t, 2.0).item(), rel=1e-12)
    assert distill_loss(s, t, y.int(), alpha=0.0).item() == pytest.approx(ce.item(), rel=1e-12)


def test_distill_trains_student_teacher_frozen():
    teacher = tiny_llama(layers=2, hidden=32, seed=0)
    student = tiny_llama(layers=1, hidden=16, mlp=32, seed=1)
    t_before = {k: v.clone() for k, v in teacher.state_dict().items()}
    data = tokens(1, 400, seed=2).reshape(-1)
    r = distill(teacher, student, data, DistillConfig(steps=12, lr=1e-2, batch_size=4, seq_len=16, alpha=1.0))
    assert r.losses[-1] < r.losses[0]
    assert all(p.grad is None for p in teacher.parameters())
    assert all(torch.equal(t_before[k], v) for k, v in teacher.state_dict().items())
    assert any(not torch.equal(a, b) for a, b in zip(student.parameters(), r.model.parameters()))
    assert all(p.requires_grad for p in teacher.parameters())  # the caller's flags are left alone


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"kl": "js"}, "kl"),
        ({"steps": 0}, "steps"),
    ],
)
def test_distill_config_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        DistillConfig(**kw)


def test_distill_bad_data_and_labels():
    m = tiny_llama()
    with pytest.raises(ValueError, match="data"):
        distill(m, m, torch.rand(100), steps=1)
    with pytest.raises(ValueError, match="seq_len"):
        distill(m, m, torch.arange(10) % 65, steps=1, seq_len=16)
    with pytest.raises(ValueError, match="labels"):
        distill_loss(_logits(0), _logits(1), None, alpha=0.5)
    with pytest.raises(ValueError, match="same shape"):
        distill_loss(_logits(0), _logits(1, (3, 5, 8)), None, alpha=1.0)


@pytest.mark.slow  # imports transformers.Trainer (accelerate): ~10 s on 2 busy cores
def test_distill_trainer_loss_equals_functional(tmp_path):
    from transformers import TrainingArguments

    from downscaling import DistillTrainer

    teacher = tiny_llama(seed=0)
    student = tiny_llama(layers=1, seed=1).train()
    x = tokens(8, 17, seed=4)
    rows = [{"input_ids": r[:-1], "labels": r[1:]} for r in x]
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, learning_rate=1e-3,
        report_to=[], save_strategy="no", use_cpu=True, logging_strategy="no",
    )  # fmt: skip
    tr = DistillTrainer(
        student, args, train_dataset=rows, teacher_model=teacher, distill_config=DistillConfig(alpha=0.7)
    )
    batch = {"input_ids": x[:4, :-1], "labels": x[:4, 1:]}
    with torch.no_grad():
        want = distill_loss(student(input_ids=batch["input_ids"]).logits, teacher(input_ids=batch["input_ids"]).logits,
                            batch["labels"], 2.0, 0.7)  # fmt: skip
        got = tr.compute_loss(student, batch)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    tr.train()
    assert all(p.grad is None for p in teacher.parameters())
