"""The SWAN optimizer: the step rule, statelessness, the AdamW side, groups, dtypes and bad input (paper Alg. 1)."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch import nn

from swan import SWAN, SWANConfig, grad_norm, grad_whitening, param_groups, swan_direction


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _param(*shape: int, seed: int = 0, dtype=torch.float32) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, generator=_gen(seed), dtype=dtype))


def _set_grad(p: torch.Tensor, seed: int) -> None:
    p.grad = torch.randn(p.shape, generator=_gen(seed), dtype=p.dtype)


class _Net(nn.Module):
    """Embedding -> conv -> linear stack -> norm -> head: one of each kind of parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.conv = nn.Conv1d(8, 6, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 8, bias=False)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 11)

    def get_output_embeddings(self) -> nn.Module:
        return self.head

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.conv(self.embed(idx).transpose(1, 2)).transpose(1, 2)
        return self.head(self.norm(self.fc2(torch.relu(self.fc1(h)))))


# ---------------------------------------------------------------- the step rule (Algorithm 1)
def test_step_is_the_rescaled_whitened_normalised_gradient():
    W = _param(12, 30, dtype=torch.float64)
    W0 = W.detach().clone()
    _set_grad(W, 1)
    SWAN([W], lr=0.01).step()
    delta = (W0 - W.detach()) / 0.01
    expected = grad_whitening(grad_norm(W.grad), 10, 0.8)
    expected = expected * math.sqrt(12 * 30) / expected.norm()
    torch.testing.assert_close(delta, expected, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(delta.norm(), torch.tensor(math.sqrt(12 * 30), dtype=torch.float64), rtol=1e-5, atol=0)


def test_zero_lr_leaves_weights_bit_identical():
    W = _param(10, 20)
    W0 = W.detach().clone()
    _set_grad(W, 2)
    SWAN([W], lr=0.0, weight_decay=0.1).step()
    assert torch.equal(W.detach(), W0)


def test_weight_decay_alone_is_exact():
    W = _param(10, 20)
    W0 = W.detach().clone()
    W.grad = torch.zeros_like(W)
    SWAN([W], lr=0.05, weight_decay=0.2).step()
    assert torch.equal(W.detach(), W0 * (1 - 0.05 * 0.2))


def test_unnormalised_svd_unscaled_step_is_w_minus_lr_polar():
    W = _param(9, 25)
    _set_grad(W, 3)
    U, _, Vh = torch.linalg.svd(W.grad, full_matrices=False)
    expected = W.detach().add(U @ Vh, alpha=-0.1)  # W - η·UVᵀ, one rounding, as torch's add_(alpha=)
    SWAN([W], lr=0.1, normalize=False, whitening="svd", rescale=False).step()
    assert torch.equal(W.detach(), expected)


def test_conv_kernel_is_flattened_to_out_by_in_times_k():
    conv = _param(6, 4, 3, 3)
    _set_grad(conv, 4)
    flat = conv.grad.reshape(6, 36)
    expected = conv.detach().add(swan_direction(flat).reshape(6, 4, 3, 3), alpha=-0.1)
    SWAN([conv], lr=0.1).step()
    torch.testing.assert_close(conv.detach(), expected, rtol=0, atol=0)


def test_ablation_switches_compose():
    W = _param(8, 16, dtype=torch.float64)
    _set_grad(W, 5)
    g = W.grad.clone()
    cases = {
        (True, False): grad_norm(g) * math.sqrt(128) / grad_norm(g).norm(),
        (False, True): grad_whitening(g) * math.sqrt(128) / grad_whitening(g).norm(),
        (False, False): g * math.sqrt(128) / g.norm(),
    }
    for (normalize, whiten), direction in cases.items():
        P = nn.Parameter(W.detach().clone())
        P.grad = g.clone()
        SWAN([P], lr=1.0, normalize=normalize, whiten=whiten).step()
        torch.testing.assert_close(W.detach() - P.detach(), direction)


def test_foreach_path_equals_loop():
    shapes = [(16, 32), (16, 32), (32, 16), (8, 8), (16, 32)]
    a = [_param(*s, seed=i) for i, s in enumerate(shapes)]
    b = [nn.Parameter(p.detach().clone()) for p in a]
    for i, (p, q) in enumerate(zip(a, b)):
        _set_grad(p, 100 + i)
        q.grad = p.grad.clone()
    SWAN(a, lr=0.01, foreach=False).step()
    SWAN(b, lr=0.01, foreach=True, max_bucket_bytes=1 << 30).step()
    for p, q in zip(a, b):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_default_buckets_batch_small_matrices_within_the_largest_ones_memory():
    """``max_bucket_bytes=None``: a bucket may cost what the largest matrix alone costs (its copy + four whitening
    buffers): the three 16×16 matrices share one stack, the 64×256 one goes alone; a smaller explicit cap splits."""
    mats = [torch.zeros(64, 256), torch.zeros(16, 16), torch.zeros(16, 16), torch.zeros(16, 16)]
    opt = SWAN([nn.Parameter(m.clone()) for m in mats])
    assert opt._chunks(opt.param_groups[0], mats) == [[0], [1, 2, 3]]
    capped = SWAN([nn.Parameter(m.clone()) for m in mats], max_bucket_bytes=2 * (256 + 4 * 256) * 4)
    assert capped._chunks(capped.param_groups[0], mats) == [[0], [1, 2], [3]]
    assert SWAN([nn.Parameter(mats[0])], foreach=False)._chunks(opt.param_groups[0] | {"foreach": False}, mats) == [
        [0],
        [1],
        [2],
        [3],
    ]


def test_per_group_overrides():
    p, q = _param(8, 12, seed=1), _param(8, 12, seed=2)
    p0, q0 = p.detach().clone(), q.detach().clone()
    _set_grad(p, 7)
    q.grad = p.grad.clone()
    SWAN([{"params": [p]}, {"params": [q], "lr": 0.02, "whitening": "svd", "normalize": False}], lr=0.01).step()
    torch.testing.assert_close(p0 - p.detach(), 0.01 * swan_direction(p.grad))
    expected = 0.02 * swan_direction(q.grad, whitening="svd", normalize=False)
    torch.testing.assert_close(q0 - q.detach(), expected)


# ---------------------------------------------------------------- statelessness
def test_no_state_for_swan_matrices_and_history_does_not_matter():
    torch.manual_seed(0)
    a, b = _param(10, 24, seed=3), None
    b = nn.Parameter(a.detach().clone())
    opt_a, opt_b = SWAN([a], lr=0.01), SWAN([b], lr=0.01)
    for s in range(5):  # a sees five different gradients, b none
        _set_grad(a, 10 + s)
        opt_a.step()
    assert len(opt_a.state) == 0 and opt_a.state_dict()["state"] == {}
    b.data.copy_(a.detach())
    _set_grad(a, 99)
    b.grad = a.grad.clone()
    opt_a.step()
    opt_b.step()
    assert torch.equal(a.detach(), b.detach())


def test_momentum_extension_is_stateful_and_matches_sgd_buffer():
    W = _param(6, 10, dtype=torch.float64)
    ref = W.detach().clone()
    buf = None
    opt = SWAN([W], lr=0.01, momentum=0.9)
    for s in range(3):
        _set_grad(W, 20 + s)
        buf = W.grad.clone() if buf is None else 0.9 * buf + W.grad
        ref = ref - 0.01 * swan_direction(buf)
        opt.step()
    torch.testing.assert_close(W.detach(), ref)
    assert set(opt.state[W]) == {"momentum_buffer"}


def test_hybrid_state_dict_round_trip_resumes_bit_identically():
    torch.manual_seed(1)
    model = _Net()
    idx = torch.randint(0, 11, (4, 7), generator=_gen(30))

    def train(m: nn.Module, opt: torch.optim.Optimizer, n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            m(idx).logsumexp(-1).mean().backward()
            opt.step()

    opt = SWAN(param_groups(model, lr=1e-2, adamw_lr=3e-3))
    train(model, opt, 3)
    twin = copy.deepcopy(model)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    opt_twin = SWAN(param_groups(twin, lr=1e-2, adamw_lr=3e-3))
    opt_twin.load_state_dict(torch.load(buffer, weights_only=True))
    train(model, opt, 3)
    train(twin, opt_twin, 3)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p, q)


# ---------------------------------------------------------------- the AdamW side
@pytest.mark.parametrize("foreach", [False, True])
def test_adamw_group_equals_torch_adamw_bit_for_bit(foreach):
    torch.manual_seed(2)
    a = [_param(7, seed=1), _param(5, 3, seed=2)]
    b = [nn.Parameter(p.detach().clone()) for p in a]
    ours = SWAN(
        [{"params": a, "algorithm": "adamw"}],
        lr=1.0,  # the SWAN lr: AdamW groups take adamw_lr and adamw_weight_decay
        adamw_lr=3e-3,
        adamw_weight_decay=0.05,
        adamw_betas=(0.8, 0.95),
        adamw_eps=1e-7,
        foreach=foreach,
    )
    ref = torch.optim.AdamW(b, lr=3e-3, weight_decay=0.05, betas=(0.8, 0.95), eps=1e-7, foreach=foreach)
    for s in range(6):
        for i, (p, q) in enumerate(zip(a, b)):
            _set_grad(p, 40 + 7 * s + i)
            q.grad = p.grad.clone()
        ours.step()
        ref.step()
        for p, q in zip(a, b):
            assert torch.equal(p, q)
    # and the state layout is AdamW's: the state loads into torch.optim.AdamW unchanged
    assert ours.state_dict()["state"].keys() == ref.state_dict()["state"].keys()
    for k, v in ours.state_dict()["state"].items():
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(v[name], ref.state_dict()["state"][k][name])


def test_adamw_group_defaults_come_from_adamw_options():
    p, q = _param(4), _param(4, 4)
    opt = SWAN([{"params": [q]}, {"params": [p], "algorithm": "adamw"}], lr=0.1, adamw_lr=0.01, adamw_weight_decay=0.3)
    swan_group, adamw_group = opt.param_groups
    assert (swan_group["lr"], swan_group["weight_decay"]) == (0.1, 0.0)
    assert (adamw_group["lr"], adamw_group["weight_decay"]) == (0.01, 0.3)


def test_lr_scheduler_scales_both_algorithms():
    p, q = _param(4), _param(4, 4)
    opt = SWAN([{"params": [q]}, {"params": [p], "algorithm": "adamw", "lr": 0.01}], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** (step + 1))
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.05, 0.005])
    for t in (p, q):
        t.grad = torch.ones_like(t)
    opt.step()
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.025, 0.0025])


# ---------------------------------------------------------------- param_groups
def test_param_groups_routes_hidden_matrices_to_swan():
    model = _Net()
    groups = param_groups(model, lr=1e-3, adamw_lr=5e-4, weight_decay=0.1)
    swan_ids = {id(p) for p in groups[0]["params"]}
    assert groups[0]["algorithm"] == "swan" and groups[1]["algorithm"] == "adamw"
    assert swan_ids == {id(model.conv.weight), id(model.fc1.weight), id(model.fc2.weight)}
    adamw_ids = {id(p) for p in groups[1]["params"]}
    assert adamw_ids == {id(p) for p in model.parameters()} - swan_ids
    assert (groups[0]["lr"], groups[1]["lr"], groups[0]["weight_decay"], groups[1]["weight_decay"]) == (
        1e-3,
        5e-4,
        0.1,
        0.0,
    )
    excluded = param_groups(model, exclude=("fc2",))
    assert id(model.fc2.weight) in {id(p) for p in excluded[1]["params"]}


class _NoHeadAccessor(nn.Module):
    """A LM without ``get_output_embeddings``: embedding -> block -> untied vocabulary projection."""

    def __init__(self, head_name: str = "proj") -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.block = nn.Linear(8, 8)
        self.add_module(head_name, nn.Linear(8, 50, bias=False))


@pytest.mark.parametrize("head_name", ["proj", "lm_head"])
def test_param_groups_finds_the_head_without_get_output_embeddings(head_name):
    model = _NoHeadAccessor(head_name)
    head = getattr(model, head_name)
    groups = param_groups(model)
    assert [id(p) for p in groups[0]["params"]] == [id(model.block.weight)]
    assert id(head.weight) in {id(p) for p in groups[1]["params"]}


def test_param_groups_tied_head_appears_once_in_adamw():
    model = _NoHeadAccessor("lm_head")
    model.lm_head.weight = model.embed.weight  # tied
    groups = param_groups(model)
    adamw = [id(p) for p in groups[1]["params"]]
    assert adamw.count(id(model.embed.weight)) == 1 and [id(p) for p in groups[0]["params"]] == [id(model.block.weight)]


def test_param_groups_exclude_string_is_one_name_not_characters():
    model = _Net()
    by_string = param_groups(model, exclude="fc2")
    assert {id(p) for p in by_string[0]["params"]} == {id(model.conv.weight), id(model.fc1.weight)}
    with pytest.raises(ValueError, match="exclude"):
        param_groups(model, exclude=["fc2", ""])
    with pytest.raises(ValueError, match="lr"):
        param_groups(model, lr=-1.0)


def test_unknown_group_option_warns_and_known_ones_do_not():
    W = _param(4, 6)
    with pytest.warns(UserWarning, match="betas"):
        SWAN([{"params": [W], "betas": (0.9, 0.99)}])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SWAN([{"params": [W], "lr": 0.1, "ns_steps": 3, "name": "hidden"}])


def test_zero_size_and_single_row_matrices():
    """An empty matrix is left alone (no crash in reshape); a 1×n matrix's direction is its standardised row
    (whitening a single row only rescales it), so the step moves it by ``lr`` times that row."""
    E = nn.Parameter(torch.zeros(0, 5))
    E.grad = torch.zeros(0, 5)
    R = _param(1, 40)
    _set_grad(R, 9)
    R0 = R.detach().clone()
    SWAN([E, R], lr=0.1).step()
    assert E.shape == (0, 5)
    torch.testing.assert_close(R0 - R.detach(), 0.1 * grad_norm(R.grad), rtol=1e-4, atol=1e-5)


def test_param_groups_on_tiny_llama():
    transformers = pytest.importorskip("transformers")
    from swan.experiments import tiny_llama_config

    model = transformers.LlamaForCausalLM(tiny_llama_config())
    groups = param_groups(model)
    names = {id(p): n for n, p in model.named_parameters()}
    swan_names = sorted(names[id(p)] for p in groups[0]["params"])
    assert len(swan_names) == 14 and sum(p.numel() for p in groups[0]["params"]) == 100_352
    assert all(
        n.rsplit(".", 2)[-2] in {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
        for n in swan_names
    )
    other = sorted(names[id(p)] for p in groups[1]["params"])
    assert "lm_head.weight" in other and "model.embed_tokens.weight" in other


# ---------------------------------------------------------------- dtypes
def test_bf16_parameters_are_whitened_in_float32():
    W = _param(16, 40, dtype=torch.bfloat16)
    W0 = W.detach().clone()
    _set_grad(W, 6)
    SWAN([W], lr=0.01).step()
    assert W.dtype == torch.bfloat16
    direction = swan_direction(W.grad.float())
    assert direction.dtype == torch.float32
    torch.testing.assert_close(W.detach(), W0.add(direction.bfloat16(), alpha=-0.01), rtol=0, atol=0)


def test_float64_parameters_stay_float64_inside():
    W = _param(6, 9, dtype=torch.float64)
    _set_grad(W, 7)
    assert swan_direction(W.grad).dtype == torch.float64


# ---------------------------------------------------------------- bad input
def test_one_dimensional_parameter_in_swan_group_is_rejected():
    with pytest.raises(ValueError, match=r"at least 2 dimensions.*\(5,\).*algorithm='adamw'"):
        SWAN([_param(5)])
    with pytest.raises(ValueError, match=r"\(\)"):
        SWAN([nn.Parameter(torch.tensor(1.0))])


def test_complex_parameter_in_swan_group_is_rejected():
    with pytest.raises(ValueError, match="complex"):
        SWAN([nn.Parameter(torch.randn(3, 3, dtype=torch.complex64))])


def test_sparse_gradient_raises_runtime_error():
    W = _param(4, 4)
    W.grad = torch.eye(4).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        SWAN([W]).step()


def test_nonfinite_gradient_raises_or_skips():
    W, V = _param(4, 6, seed=1), _param(4, 6, seed=2)
    for t in (W, V):
        _set_grad(t, 8)
    W.grad[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="non-finite"):
        SWAN([W, V]).step()
    W0, V0 = W.detach().clone(), V.detach().clone()
    with pytest.warns(RuntimeWarning, match="skipping"):
        SWAN([W, V], nonfinite="skip", lr=0.1).step()
    assert torch.equal(W.detach(), W0) and not torch.equal(V.detach(), V0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": -1.0}, "lr"),
        ({"ns_steps": 0}, "ns_steps"),
        ({"ns_beta": 0.0}, "ns_beta"),
        ({"ns_beta": 1.2}, "ns_beta"),
        ({"eps": 0.0}, "eps"),
        ({"momentum": 1.0}, "momentum"),
        ({"momentum": -0.1}, "momentum"),
        ({"whitening": "polar"}, "whitening"),
        ({"norm_dim": 0}, "norm_dim"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"nonfinite": "ignore"}, "nonfinite"),
        ({"adamw_betas": (0.9, 1.0)}, "adamw_betas"),
    ],
)
def test_invalid_hyperparameters_name_the_value(kwargs, match):
    value = repr(next(iter(kwargs.values())))
    with pytest.raises(ValueError, match=match) as err:
        SWAN([_param(3, 3)], **kwargs)
    assert value in str(err.value)
    with pytest.raises(ValueError, match=match):
        SWANConfig(**kwargs)


def test_invalid_group_options_are_rejected():
    with pytest.raises(ValueError, match="algorithm"):
        SWAN([{"params": [_param(3, 3)], "algorithm": "sgd"}])
    with pytest.raises(ValueError, match="ns_beta"):
        SWAN([{"params": [_param(3, 3)], "ns_beta": 2.0}])


def test_empty_parameter_list_raises_torch_error():
    with pytest.raises(ValueError, match="empty parameter list"):
        SWAN([])


def test_config_round_trip():
    cfg = SWANConfig(lr=3e-3, ns_beta=0.5, weight_decay=0.01)
    opt = SWAN.from_config([_param(4, 4)], cfg)
    for key, value in cfg.to_dict().items():
        assert opt.defaults[key] == value


def test_closure_is_evaluated_with_grad_enabled():
    W = _param(4, 8)
    opt = SWAN([W], lr=0.01)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = W.square().sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() > 0 and W.grad is not None


class _MLP(nn.Module):
    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _train(opt, sched, model, steps=6):
    g = _gen(3)
    for _ in range(steps):
        x = torch.randn(16, 6, generator=g)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        sched.step()


def test_one_cycle_lr_keeps_swan_stateless_and_cycles_adamw_beta1():
    """OneCycleLR's default cycle_momentum writes 0.85-0.95 into every group's "momentum": it used to switch the
    momentum extension on for every SWAN matrix (a stateful optimizer) and leave AdamW's beta1 alone."""
    torch.manual_seed(0)
    model = _MLP()
    ref_model = copy.deepcopy(model)
    groups = param_groups(model, lr=1e-2, head="fc2")  # fc2 (the head) on AdamW
    opt = SWAN(groups)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=6)
    with pytest.warns(UserWarning, match="keep the paper's stateless update"):
        _train(opt, sched, model)
    swan_ids = {id(p) for p in opt.param_groups[0]["params"]}
    assert not any(id(p) in swan_ids for p in opt.state)  # no momentum buffers: the paper's stateless SWAN
    # reference: SWAN matrices without momentum (cycle off), the head by torch.optim.AdamW under the same schedule
    ref_groups = param_groups(ref_model, lr=1e-2, head="fc2")
    swan_ref = SWAN(ref_groups[:1])
    adamw_ref = torch.optim.AdamW(ref_groups[1]["params"], lr=1e-2, weight_decay=0.0)
    s1 = torch.optim.lr_scheduler.OneCycleLR(swan_ref, max_lr=1e-2, total_steps=6, cycle_momentum=False)
    s2 = torch.optim.lr_scheduler.OneCycleLR(adamw_ref, max_lr=1e-2, total_steps=6)  # cycles AdamW's beta1

    class _Both:
        def zero_grad(self):
            swan_ref.zero_grad(), adamw_ref.zero_grad()

        def step(self):
            swan_ref.step(), adamw_ref.step()

    class _Sched:
        def step(self):
            s1.step(), s2.step()

    _train(_Both(), _Sched(), ref_model)
    for (n, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=n)


def test_cycled_momentum_is_used_when_momentum_was_asked_for():
    model = _MLP()
    opt = SWAN(param_groups(model, lr=1e-2), momentum=0.5)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=4)
    _train(opt, sched, model, steps=2)
    assert any("momentum_buffer" in opt.state[p] for p in opt.param_groups[0]["params"])


def test_param_groups_head_is_explicit_and_named():
    mlp = _MLP(classes=5)
    auto = param_groups(mlp)  # no embedding, no LM-head name: the last Linear stays on SWAN, and says so
    assert len(auto[0]["params"]) == 2 and "no output head" in auto[1]["name"]
    named = param_groups(mlp, head="fc2")
    assert [p.shape for p in named[0]["params"]] == [torch.Size([8, 6])]
    assert "head fc2 (given)" in named[1]["name"]
    # a 10-class classifier over a 10-token vocabulary: the heuristic takes its last Linear for an LM head
    net = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 8), nn.Linear(8, 10))
    assert "head 2 (last Linear, 10 outputs = an embedding's vocabulary)" in param_groups(net)[-1]["name"]
    kept = param_groups(net, head=None)
    assert len(kept[0]["params"]) == len(param_groups(net)[0]["params"]) + 1 == 2
    with pytest.raises(ValueError, match="head: model has no submodule 'nope'"):
        param_groups(mlp, head="nope")


def test_nonfinite_skip_reports_once(caplog):
    W, V = _param(4, 6, seed=1), _param(4, 6, seed=2)
    for t in (W, V):
        _set_grad(t, 8)
    W.grad[0, 0] = float("nan")
    with caplog.at_level("WARNING", logger="swan"), pytest.warns(RuntimeWarning, match="skipping") as rec:
        SWAN([W, V], nonfinite="skip", lr=0.1).step()
    assert len([w for w in rec if "skipping" in str(w.message)]) == 1
    assert not [r for r in caplog.records if "skip" in r.getMessage()]  # not a second time through logging


@pytest.mark.slow  # builds a transformers Trainer
def test_hf_trainer_optimizer_cls_route_names_the_working_route(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

    class _Wrapped(transformers.PreTrainedModel):
        config_class = transformers.PretrainedConfig

        def __init__(self):
            super().__init__(transformers.PretrainedConfig())
            self.net = _MLP()

    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = transformers.Trainer(model=_Wrapped(), args=args, optimizer_cls_and_kwargs=(SWAN, {"lr": 1e-3}))
    with pytest.raises(ValueError, match=r"Trainer\(\.\.\., optimizers=\(SWAN\(param_groups\(model\)"):
        trainer.create_optimizer()
