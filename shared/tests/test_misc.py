import math
import random

import numpy as np
import pytest
import torch

from icml25_shared import device, seed, training
from icml25_shared.text import CharCorpus


def test_seed_everything_repeats():
    g1 = seed.seed_everything(7)
    a = (random.random(), np.random.rand(), torch.rand(3), torch.rand(2, generator=g1))
    g2 = seed.seed_everything(7)
    b = (random.random(), np.random.rand(), torch.rand(3), torch.rand(2, generator=g2))
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2]) and torch.equal(a[3], b[3])
    with pytest.raises(ValueError, match="seed"):
        seed.seed_everything(-1)


def test_device_override(monkeypatch):
    monkeypatch.setenv("ICML25_DEVICE", "cpu")
    assert device.get_device().type == "cpu"
    monkeypatch.delenv("ICML25_DEVICE")
    expected = "cuda" if torch.cuda.is_available() else device.get_device().type
    assert device.get_device().type == expected
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            device.get_device("cuda")
    assert device.resolve_dtype("bf16") is torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        device.resolve_dtype("int3")


@device.torch_threads(2)  # a known starting count other than 1, so that restoring is observable
def test_torch_threads_sets_and_restores():
    before = torch.get_num_threads()
    assert before == 2
    with device.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), device.torch_threads(1):
        raise RuntimeError("restored on error too")
    assert torch.get_num_threads() == before

    @device.torch_threads(1)
    def inner() -> int:
        return torch.get_num_threads()

    assert inner() == 1 and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n must be a positive int"), device.torch_threads(0):
        pass
    with pytest.raises(TypeError, match="n must be a positive int"), device.torch_threads(True):
        pass
    with device.torch_threads(np.int64(1)):  # a validated hyper-parameter may be a numpy integer
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with device.torch_threads(None):  # None leaves torch's setting alone (an estimator's n_threads=None)
        assert torch.get_num_threads() == before
        torch.set_num_threads(1)  # and does not restore a change made inside: it never touched the setting
    assert torch.get_num_threads() == 1
    torch.set_num_threads(before)


def test_warmup_cosine_shape():
    f = training.warmup_cosine(100, warmup=0.1, final=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(100) == pytest.approx(0.1)
    mid = 10 + 45
    assert f(mid) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert all(f(i) >= f(i + 1) for i in range(10, 100))


def test_optimizer_state_bytes_matches_adam_formula():
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 2, bias=False))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 5)).sum().backward()
    opt.step()
    n_params = training.count_parameters(model)
    assert n_params == 5 * 3 + 3 + 3 * 2
    n_tensors = 3
    step_bytes = sum(s["step"].numel() * s["step"].element_size() for s in opt.state.values())
    assert training.optimizer_state_bytes(opt) == 2 * n_params * 4 + step_bytes
    assert training.optimizer_state_bytes(opt, min_dim=1) == 2 * n_params * 4
    assert step_bytes == n_tensors * 4


def test_count_parameters_dedupes_tied():
    lin = torch.nn.Linear(4, 4, bias=False)
    model = torch.nn.Sequential(lin, lin)
    assert training.count_parameters(model) == 16
    lin.weight.requires_grad_(False)
    assert training.count_parameters(model, trainable_only=True) == 0


def test_char_corpus_batches():
    corpus = CharCorpus.from_text("hello world, " * 50)
    assert corpus.vocab_size == len(set("hello world, "))
    assert corpus.decode(corpus.encode("hello")) == "hello"
    g = torch.Generator().manual_seed(0)
    x, y = corpus.get_batch("train", 4, 8, generator=g)
    assert x.shape == y.shape == (4, 8) and torch.equal(x[:, 1:], y[:, :-1])
    g2 = torch.Generator().manual_seed(0)
    x2, _ = corpus.get_batch("train", 4, 8, generator=g2)
    assert torch.equal(x, x2)
    vb = corpus.fixed_batches("val", 2, 3, 5)
    assert len(vb) == 2 and vb[0][0].shape == (3, 5)
    assert len(corpus.train) == int(0.9 * len(corpus.text))
    with pytest.raises(ValueError, match="not in the corpus vocabulary"):
        corpus.encode("Z")


def test_tinyshakespeare_when_available():
    from icml25_shared.data import DataNotFoundError

    try:
        c = CharCorpus.tinyshakespeare()
    except DataNotFoundError:
        pytest.skip("Tiny Shakespeare not installed (icml25-datasets) and ICML25_DATA not set")
    c = CharCorpus.tinyshakespeare()
    assert c.vocab_size == 65 and len(c.text) == 1_115_394


def test_adamw_update_is_torch_adamw_and_shares_its_state_layout():
    from collections import defaultdict

    from icml25_shared.training import adamw_update

    g = torch.Generator().manual_seed(0)
    a = [torch.randn(3, 4, generator=g, requires_grad=True), torch.randn(5, generator=g, requires_grad=True)]
    b = [p.detach().clone().requires_grad_(True) for p in a]
    ref = torch.optim.AdamW(b, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    state = defaultdict(dict)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=g) for p in a]
        for p, q, gr in zip(a, b, grads):
            p.grad, q.grad = gr.clone(), gr.clone()
        adamw_update(state, a, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
        ref.step()
    for p, q in zip(a, b):
        assert torch.equal(p, q)
        assert set(state[p]) == set(ref.state[q]) and torch.equal(state[p]["exp_avg_sq"], ref.state[q]["exp_avg_sq"])
    a[0].grad = torch.eye(3, 4).to_sparse()
    with pytest.raises(RuntimeError, match="MyOpt does not support sparse gradients"):
        adamw_update(state, a, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, owner="MyOpt")


def test_check_lr_takes_a_one_element_tensor():
    from icml25_shared.validate import check_lr

    assert check_lr("lr", torch.tensor([0.5])) == 0.5 and check_lr("lr", np.float32(0.25)) == 0.25
    with pytest.raises(ValueError, match="lr as a tensor must have 1 element, got shape"):
        check_lr("lr", torch.tensor([0.1, 0.2]))
    with pytest.raises(ValueError, match="lr must be a float >= 0.0, got -1.0"):
        check_lr("lr", -1.0)


def test_track_works_without_tqdm(monkeypatch):
    """A method installed without the report extra still runs its loops: track() falls back to a silent iterator."""
    import builtins

    from icml25_shared import progress

    real_import = builtins.__import__

    def no_tqdm(name, *args, **kw):
        if name.startswith("tqdm"):
            raise ImportError("No module named 'tqdm'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    bar = progress.track(range(4), "x", disable=False)
    assert isinstance(bar, progress.Silent) and len(bar) == 4
    seen = []
    for i in bar:
        seen.append(i)
        bar.set_postfix(loss=0.1)
    bar.update(2)
    assert seen == [0, 1, 2, 3] and bar.n == 6
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert not isinstance(progress.track(range(2), disable=True), progress.Silent)  # tqdm present: a real bar


def test_kept_buffers_puts_batch_norm_statistics_back():
    bn = torch.nn.BatchNorm1d(3)
    shared = torch.nn.Sequential(bn, torch.nn.Linear(3, 3))
    before = [b.clone() for b in bn.buffers()]
    with training.kept_buffers(shared, bn):  # the same buffers through two modules: saved once
        bn.train()
        bn(torch.randn(8, 3) + 5.0)
        assert not torch.equal(bn.running_mean, before[0])  # the forward did move them
    assert all(torch.equal(b, o) for b, o in zip(bn.buffers(), before))
    with pytest.raises(RuntimeError), training.kept_buffers(bn):
        bn(torch.randn(8, 3) - 5.0)
        raise RuntimeError("restored on error too")
    assert all(torch.equal(b, o) for b, o in zip(bn.buffers(), before))
