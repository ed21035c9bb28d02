"""FRUGAL as a drop-in for ``torch.optim.AdamW``: the same signature and defaults, AdamW step for step with the
projection off (weight decay, maximize, foreach), clear errors for what it does not implement; and the projectable
layers of the common transformers families (GPT-2's transposed ``Conv1D`` included), ranks larger than a matrix,
numpy hyper-parameters."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch
from torch import nn

from frugal import FRUGAL, param_groups

transformers = pytest.importorskip("transformers")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(11, 6)
        self.attn = nn.Linear(6, 9)
        self.mlp = nn.Linear(9, 6, bias=False)
        self.lm_head = nn.Linear(6, 11, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.mlp(torch.tanh(self.attn(self.embed_tokens(x)))))


def _net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def _loss(model: nn.Module, x: torch.Tensor, sign: float = 1.0) -> torch.Tensor:
    logits = model(x[:, :-1])
    return sign * nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def _batches(n: int, seed: int = 1) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 11, (4, 5), generator=gen) for _ in range(n)]


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, sign: float = 1.0) -> None:
    opt.zero_grad()
    _loss(model, x, sign).backward()
    opt.step()


def test_signature_is_adamws():
    """Same parameter names, kinds (positional / keyword-only), order and defaults as torch.optim.AdamW, then
    FRUGAL's own options by keyword."""
    ours = list(inspect.signature(FRUGAL.__init__).parameters.values())
    theirs = list(inspect.signature(torch.optim.AdamW.__init__).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours[: len(theirs)]] == [(p.name, p.kind, p.default) for p in theirs]
    assert all(p.kind is p.KEYWORD_ONLY for p in ours[len(theirs) :])
    # AdamW's exact keyword set at its defaults constructs, and the positional form too
    kwargs = {p.name: p.default for p in theirs[2:]}
    opt = FRUGAL(_net().parameters(), **kwargs)
    adamw = torch.optim.AdamW(_net().parameters())
    assert opt.param_groups[0]["weight_decay"] == 0.01 == adamw.defaults["weight_decay"]
    FRUGAL(_net().parameters(), 1e-3, (0.9, 0.99), 1e-6, 0.1, False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"amsgrad": True}, r"amsgrad=True.*pass amsgrad=False"),
        ({"fused": True}, r"fused=True.*pass fused=None or False"),
        ({"capturable": True}, r"capturable=True"),
        ({"differentiable": True}, r"differentiable=True"),
    ],
)
def test_unsupported_adamw_options_raise_not_implemented(kwargs, match):
    with pytest.raises(NotImplementedError, match=match):
        FRUGAL(_net().parameters(), **kwargs)
    with pytest.raises(NotImplementedError, match=match):  # as a per-group option too
        FRUGAL([{"params": list(_net().parameters()), **kwargs}])
    with pytest.raises(ValueError, match="maximize"):
        FRUGAL(_net().parameters(), maximize="yes")


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("weight_decay", [None, 0.1])
def test_projection_off_is_adamw_step_for_step(weight_decay, maximize, foreach):
    """No projectable group: bitwise torch.optim.AdamW after every step, default decay (0.01) included."""
    a, b = _net(), _net()
    kw = {"lr": 3e-2, "betas": (0.8, 0.95), "eps": 1e-6, "maximize": maximize, "foreach": foreach}
    if weight_decay is not None:
        kw["weight_decay"] = weight_decay
    ref, opt = torch.optim.AdamW(a.parameters(), **kw), FRUGAL(b.parameters(), **kw)
    for x in _batches(5):
        _step(a, ref, x)
        _step(b, opt, x)
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.equal(p, q)
    assert all(p.grad is not None for p in b.parameters())


@pytest.mark.parametrize("selector", ["block", "columns"])
def test_density_one_with_decay_and_maximize_is_adamw(selector):
    """The projectable path at ρ = 1 (every coordinate state-full, no refresh) with decay and maximize: AdamW."""
    a, b = _net(), _net()
    kw = {"lr": 3e-2, "weight_decay": 0.1, "maximize": True}
    ref = torch.optim.AdamW(a.parameters(), foreach=False, **kw)
    opt = FRUGAL(param_groups(b), density=1.0, update_gap=100, selector=selector, **kw)
    for x in _batches(5):
        _step(a, ref, x)
        _step(b, opt, x)
    for (n, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=0, msg=n)


@pytest.mark.parametrize("selector", ["svd", "randk"])
def test_maximize_equals_minimising_the_negated_loss(selector):
    """Maximize reaches every part of the update (state-full, state-free, AdamW groups): FRUGAL(maximize=True) on
    L is bitwise FRUGAL on -L, and the gradients the user sees are left as computed."""
    a, b = _net(), _net()
    kw = {"lr": 1e-2, "density": 0.5, "update_gap": 2, "selector": selector}
    up, down = FRUGAL(param_groups(a), maximize=True, **kw), FRUGAL(param_groups(b), **kw)
    for x in _batches(5):
        up.zero_grad()
        _loss(a, x).backward()
        grads = [p.grad.clone() for p in a.parameters()]
        up.step()
        assert all(torch.equal(p.grad, g) for p, g in zip(a.parameters(), grads, strict=True))
        _step(b, down, x, sign=-1.0)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def _tiny(family: str) -> nn.Module:
    torch.manual_seed(0)
    small = {"vocab_size": 50}
    if family == "llama":
        cfg = transformers.LlamaConfig(
            **small, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2
        )
        return transformers.LlamaForCausalLM(cfg)
    if family == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(**small, n_embd=16, n_layer=2, n_head=2))
    if family == "bert":
        cfg = transformers.BertConfig(
            **small, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24
        )
        return transformers.BertForMaskedLM(cfg)
    if family == "opt":
        cfg = transformers.OPTConfig(
            **small, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, ffn_dim=24, word_embed_proj_dim=16
        )
        return transformers.OPTForCausalLM(cfg)
    if family == "gpt_neox":
        cfg = transformers.GPTNeoXConfig(
            **small, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24
        )
        return transformers.GPTNeoXForCausalLM(cfg)
    cfg = transformers.T5Config(**small, d_model=16, d_kv=8, d_ff=24, num_layers=1, num_decoder_layers=1, num_heads=2)
    return transformers.T5ForConditionalGeneration(cfg)


# per family: (projectable matrices, of which transposed Conv1D): every attention and MLP projection of every block
FAMILIES = {
    "llama": (2 * 7, 0),
    "gpt2": (2 * 4, 2 * 4),
    "bert": (2 * 6, 0),
    "opt": (2 * 6, 0),
    "gpt_neox": (2 * 4, 0),
    "t5": (4 + 2 + 4 + 4 + 2, 0),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_param_groups_find_the_projections_of_common_families(family):
    model = _tiny(family)
    groups = param_groups(model)
    proj = [p for g in groups if g["projectable"] for p in g["params"]]
    transposed = [p for g in groups if g.get("transposed") for p in g["params"]]
    assert (len(proj), len(transposed)) == FAMILIES[family]
    assert all(p.dim() == 2 for p in proj)
    head = model.get_output_embeddings().weight
    assert all(p is not head and p is not model.get_input_embeddings().weight for p in proj)


def test_gpt2_trains_with_projected_conv1d_weights():
    """GPT-2's Conv1D weights (in, out) are optimised as (out, in) matrices: projectors of the transposed shape,
    state memory equal to the closed form, and the loss goes down."""
    model = _tiny("gpt2")
    opt = FRUGAL(param_groups(model), lr=1e-2, density=0.25, update_gap=3, selector="svd")
    ids = torch.randint(0, 50, (4, 12), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    c_fc = model.transformer.h[0].mlp.c_fc.weight  # (16, 64): the (64, 16) matrix, tall: right side, r = 4
    assert tuple(c_fc.shape) == (16, 64) and tuple(opt.state[c_fc]["right"].shape) == (4, 16)
    report = opt.memory_report()
    assert report["state_bytes"] == report["expected_state_bytes"] < report["adamw_state_bytes"]
    assert losses[-1] < losses[0]


class _Conv1DNet(nn.Module):
    def __init__(self, linear: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        ref = transformers.pytorch_utils.Conv1D(9, 6)  # in 6, out 9; weight (6, 9)
        self.mlp = nn.Linear(6, 9, bias=True) if linear else ref
        if linear:
            with torch.no_grad():
                self.mlp.weight.copy_(ref.weight.t())
                self.mlp.bias.copy_(ref.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mlp(x))


@pytest.mark.parametrize(
    ("selector", "side"), [("svd", "right"), ("svd", "left"), ("columns", "std"), ("random", "std")]
)
def test_conv1d_is_optimised_as_the_linear_layer_it_is(selector, side):
    """A Conv1D and the nn.Linear holding its transpose follow the same trajectory: sides, columns and projectors
    refer to the (out, in) matrix."""
    conv, lin = _Conv1DNet(linear=False), _Conv1DNet(linear=True)
    kw = {"lr": 1e-2, "density": 0.5, "update_gap": 2, "selector": selector, "proj_side": side, "seed": 3}
    oc, ol = FRUGAL(param_groups(conv), **kw), FRUGAL(param_groups(lin), **kw)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        x, y = torch.randn(8, 6, generator=gen), torch.randn(8, 9, generator=gen)
        for model, opt in ((conv, oc), (lin, ol)):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
    torch.testing.assert_close(conv.mlp.weight.t(), lin.mlp.weight, atol=1e-6, rtol=0)
    torch.testing.assert_close(conv.mlp.bias, lin.mlp.bias, atol=1e-6, rtol=0)


def test_rank_larger_than_the_matrix_warns_with_the_clamp():
    model = _net()  # attn (9, 6): the std side projects the 6 columns
    with pytest.warns(UserWarning, match=r"rank=20 exceeds the dimension \(6\).*shape \(9, 6\).*clamped to 6"):
        FRUGAL([{"params": [model.attn.weight], "rank": 20, "update_proj_gap": 5}])
    with pytest.warns(UserWarning, match=r"rank=7 exceeds the dimension \(6\)"):
        FRUGAL(param_groups(model, selector="columns", rank=7))


def test_numpy_hyperparameters_become_python_numbers():
    groups = param_groups(_net(), density=np.float32(0.25), update_gap=np.int64(4), weight_decay=np.float64(0.1))
    assert type(groups[1]["density"]) is float and groups[1]["density"] == 0.25
    assert type(groups[1]["update_gap"]) is int and type(groups[1]["weight_decay"]) is float
    opt = FRUGAL(param_groups(_net()), lr=np.float32(1e-3), density=np.float64(0.5), betas=(np.float32(0.9), 0.99))
    group = opt.param_groups[1]
    assert type(group["density"]) is float and type(group["lr"]) is float and type(group["betas"][0]) is float
    ok = copy.deepcopy(opt.state_dict())
    assert type(ok["param_groups"][1]["density"]) is float
