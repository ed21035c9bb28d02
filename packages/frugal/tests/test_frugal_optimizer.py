"""FRUGAL as a torch.optim optimizer: its limits against torch's AdamW/SGD, resets, memory, reproducibility,
state_dict round-trips and bad input."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from frugal import FRUGAL, FRUGALConfig, param_groups
from icml25_shared.training import optimizer_state_bytes

SELECTORS = ["block", "svd", "random", "randperm", "columns", "rows", "randk"]


class Net(nn.Module):
    """Names follow the authors' module rule: ``attn``/``mlp`` linears are projectable, ``embed_tokens`` and
    ``lm_head`` are not."""

    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(11, 6)
        self.attn = nn.Linear(6, 9)
        self.mlp = nn.Linear(9, 6, bias=False)
        self.norm = nn.LayerNorm(6)
        self.lm_head = nn.Linear(6, 11, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(x)
        h = self.mlp(torch.tanh(self.attn(h)))
        return self.lm_head(self.norm(h))


def _net(seed: int = 0, dtype: torch.dtype = torch.float32) -> Net:
    torch.manual_seed(seed)
    return Net().to(dtype)


def _batches(n: int, seed: int = 1) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 11, (4, 5), generator=gen) for _ in range(n)]


def _loss(model: Net, x: torch.Tensor) -> torch.Tensor:
    logits = model(x[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, 11), x[:, 1:].reshape(-1))


def _train(model: Net, opt: torch.optim.Optimizer, batches: list[torch.Tensor]) -> list[torch.Tensor]:
    grads = []
    for x in batches:
        opt.zero_grad()
        _loss(model, x).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
    return grads


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_param_groups_follow_the_module_name_rule():
    model = _net()
    groups = param_groups(model)
    proj = {id(p) for p in groups[1]["params"]}
    assert groups[1]["projectable"] and not groups[0]["projectable"]
    assert proj == {id(model.attn.weight), id(model.mlp.weight)}  # weights only; bias, embeddings, head, norm: AdamW
    ablation = param_groups(model, state_full_modules=("embed_tokens", "norm"))  # lm_head made state-free
    assert id(model.lm_head.weight) in {id(p) for p in ablation[1]["params"]}
    assert param_groups(model, target_modules=("mlp",))[1]["params"] == [model.mlp.weight]


@pytest.mark.parametrize("selector", ["block", "columns", "rows", "randk", "randperm"])
def test_density_one_without_refresh_is_torch_adamw(selector):
    """ρ = 1 and T beyond the run: every coordinate is state-full, so FRUGAL is AdamW (betas, eps, decay)."""
    kw = {"lr": 3e-2, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1}
    a, b = _net(), _net()
    ref = torch.optim.AdamW(a.parameters(), foreach=False, **kw)
    opt = FRUGAL(param_groups(b), density=1.0, update_gap=100, selector=selector, **kw)
    batches = _batches(8)
    _train(a, ref, batches)
    _train(b, opt, batches)
    for n, p in _params(a).items():
        torch.testing.assert_close(_params(b)[n], p, atol=1e-6, rtol=0, msg=n)


def test_density_one_svd_is_adamw_in_the_rotated_basis():
    """``svd`` at ρ = 1 keeps Adam's state for ``G Bᵀ`` (B from the first gradient's SVD): Adam is not rotation
    invariant, so this is not AdamW; the reference below runs Adam on the rotated gradient by hand."""
    model = _net(dtype=torch.float64)
    ref = copy.deepcopy(model)
    opt = FRUGAL(param_groups(model), lr=1e-2, density=1.0, update_gap=100, selector="svd", weight_decay=0.0)
    batches = _batches(6)
    grads = _train(model, opt, batches)
    w = ref.attn.weight.detach().clone()  # (9, 6), tall: right projection, r = 6
    basis = torch.linalg.svd(grads[0]["attn.weight"].float(), full_matrices=False)[2].double()
    m = torch.zeros(9, 6, dtype=torch.float64)
    v = torch.zeros_like(m)
    for t, g in enumerate(grads, start=1):
        low = g["attn.weight"] @ basis.T
        m = 0.9 * m + 0.1 * low
        v = 0.999 * v + 0.001 * low**2
        step = (m / (1 - 0.9**t)) / ((v / (1 - 0.999**t)).sqrt() + 1e-8)
        w = w - 1e-2 * step @ basis
    torch.testing.assert_close(model.attn.weight.detach(), w, atol=1e-9, rtol=0)
    plain = _net(dtype=torch.float64)
    _train(plain, torch.optim.AdamW(plain.parameters(), lr=1e-2, weight_decay=0.0), batches)
    assert not torch.allclose(plain.attn.weight, model.attn.weight, atol=1e-4)  # not AdamW


@pytest.mark.parametrize("selector", SELECTORS)
def test_density_zero_is_signsgd_on_projectable_and_adamw_elsewhere(selector):
    lr, s_p, s_f = 1e-2, 0.5, 0.3
    a, b = _net(), _net()
    opt = FRUGAL(
        param_groups(b), lr=lr, density=0.0, update_gap=3, selector=selector, state_full_lr_scale=s_p,
        state_free_lr_scale=s_f, weight_decay=0.0,
    )  # fmt: skip
    ref = torch.optim.AdamW([p for n, p in a.named_parameters() if n not in ("attn.weight", "mlp.weight")], lr=lr)
    ref.param_groups[0]["weight_decay"] = 0.0
    batches = _batches(5)
    grads = _train(b, opt, batches)
    w = {n: getattr(a, n.split(".")[0]).weight.detach().clone() for n in ("attn.weight", "mlp.weight")}
    for x, g in zip(batches, grads):
        ref.zero_grad()
        _loss(a, x).backward()
        ref.step()
        with torch.no_grad():
            for n in w:
                w[n] = w[n] - lr * s_p * s_f * torch.sign(g[n])
                getattr(a, n.split(".")[0]).weight.copy_(w[n])
    for n, p in _params(a).items():
        torch.testing.assert_close(_params(b)[n], p, atol=1e-6, rtol=0, msg=n)


@pytest.mark.parametrize("selector", ["columns", "block"])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_rule_none_leaves_inactive_coordinates_untouched_apart_from_decay(selector, wd):
    model = _net()
    w0 = model.attn.weight.detach().clone()
    opt = FRUGAL(param_groups(model), lr=1e-2, density=0.5, update_gap=100, selector=selector, state_free="none")
    opt.param_groups[1]["weight_decay"] = wd
    _train(model, opt, _batches(4))
    state = opt.state[model.attn.weight]
    if selector == "columns":
        inactive = torch.ones(6, dtype=torch.bool)
        inactive[state["cols"]] = False
        got, want = model.attn.weight.detach()[:, inactive], w0[:, inactive]
    else:  # two tensors, one active: descending order activates the last one (mlp); attn is frozen
        assert opt.param_groups[1]["active_blocks"] == [1]
        got, want = model.attn.weight.detach(), w0
    for _ in range(4):
        want = want * (1 - 1e-2 * wd)
    assert torch.equal(got, want) if wd == 0 else torch.allclose(got, want, atol=1e-7, rtol=0)
    assert not torch.equal(model.mlp.weight.detach(), _net().mlp.weight.detach())  # the active part moved


def test_block_density_one_sgdm_is_torch_sgd_with_momentum():
    a, b = _net(), _net()
    proj = [a.attn.weight, a.mlp.weight]
    rest = [p for p in a.parameters() if all(p is not q for q in proj)]
    sgd = torch.optim.SGD(proj, lr=5e-2, momentum=0.9)
    adamw = torch.optim.AdamW(rest, lr=5e-2, weight_decay=0.0)
    opt = FRUGAL(
        param_groups(b), lr=5e-2, density=1.0, update_gap=100, state_full="sgdm", betas=(0.9, 0.999), weight_decay=0.0
    )
    for x in _batches(6):
        for o in (sgd, adamw):
            o.zero_grad()
        _loss(a, x).backward()
        sgd.step()
        adamw.step()
        opt.zero_grad()
        _loss(b, x).backward()
        opt.step()
    for n, p in _params(a).items():
        torch.testing.assert_close(_params(b)[n], p, atol=1e-6, rtol=0, msg=n)


def test_legacy_block_momentum_init_starts_from_the_parameter():
    a, b = _net(), _net()
    w0 = a.mlp.weight.detach().clone()
    groups = lambda m: param_groups(m, target_modules=("mlp",))  # noqa: E731
    kw = {"lr": 0.1, "density": 1.0, "state_full": "sgdm", "betas": (0.5, 0.9), "weight_decay": 0.0}
    new = FRUGAL(groups(a), **kw)
    old = FRUGAL(groups(b), **kw, legacy_block_momentum_init=True)
    g = _train(a, new, _batches(1))[0]["mlp.weight"]
    _train(b, old, _batches(1))
    torch.testing.assert_close(a.mlp.weight.detach(), w0 - 0.1 * g)
    torch.testing.assert_close(b.mlp.weight.detach(), w0 - 0.1 * (0.5 * w0 + g))


def test_lion_state_full_runs_and_moves_by_lr():
    model = _net()
    w0 = model.mlp.weight.detach().clone()
    opt = FRUGAL(
        param_groups(model), lr=1e-2, density=1.0, state_full="lion", betas=(0.9, 0.99), update_gap=100,
        weight_decay=0.0,
    )  # fmt: skip
    _train(model, opt, _batches(1))
    step = (model.mlp.weight.detach() - w0).abs()
    assert torch.allclose(step[step > 0], torch.full_like(step[step > 0], 1e-2))  # sign update: ±lr


def test_block_switch_clears_moments_and_descending_walks_back():
    model = _net()
    opt = FRUGAL(param_groups(model), lr=1e-2, density=0.5, update_gap=2, selector="block")
    w = model.attn.weight
    seen = []
    for i, x in enumerate(_batches(6)):
        opt.zero_grad()
        _loss(model, x).backward()
        opt.step()
        seen.append(tuple(opt.param_groups[1]["active_blocks"]))
        active = model.mlp.weight if seen[-1] == (1,) else w
        inactive = w if active is model.mlp.weight else model.mlp.weight
        assert float(opt.state[active]["step"]) == i % 2 + 1  # fresh moments after each switch
        assert inactive not in opt.state  # no state while state-free
    assert seen == [(1,), (1,), (0,), (0,), (1,), (1,)]


@pytest.mark.parametrize("reset", [True, False])
def test_reset_statistics_restarts_adam_bias_correction(reset):
    model = _net()
    opt = FRUGAL(
        param_groups(model), lr=1e-2, density=0.5, update_gap=3, selector="columns", state_free="none",
        reset_statistics=reset, weight_decay=0.0,
    )  # fmt: skip
    batches = _batches(4)
    _train(model, opt, batches[:3])
    before = model.attn.weight.detach().clone()
    _train(model, opt, batches[3:])  # step 3 = a refresh
    state = opt.state[model.attn.weight]
    delta = (model.attn.weight.detach() - before)[:, state["cols"]]
    if reset:  # first Adam step: m̂/√v̂ = sign(g), so each active entry moves by lr (up to ε)
        assert float(state["step"]) == 1
        torch.testing.assert_close(delta.abs(), torch.full_like(delta, 1e-2), atol=1e-6, rtol=1e-4)
    else:  # moments persist (same shape): bias correction continues from step 3
        assert float(state["step"]) == 4
        assert not torch.allclose(delta.abs(), torch.full_like(delta, 1e-2), atol=1e-4)


@pytest.mark.parametrize("state_full", ["adamw", "sgdm", "lion"])
@pytest.mark.parametrize("selector", SELECTORS)
def test_memory_report_equals_closed_form(selector, state_full):
    model = _net()
    opt = FRUGAL(
        param_groups(model, state_full_modules=("embed_tokens", "norm")), density=0.4, selector=selector,
        state_full=state_full, update_gap=2, proj_side="std",
    )  # fmt: skip
    for x in _batches(3):
        opt.zero_grad()
        _loss(model, x).backward()
        opt.step()
        report = opt.memory_report()
        assert report["state_bytes"] == report["expected_state_bytes"] > 0
    params = list(model.parameters())
    assert report["adamw_state_bytes"] == sum(8 * p.numel() + 4 for p in params)
    assert report["ratio"] < 1.0


def test_svd_memory_equals_galore_formula_by_hand():
    model = _net()  # attn (9, 6): right, r = round(0.5*6) = 3; mlp (6, 9): left, r = 3
    opt = FRUGAL(param_groups(model), density=0.5, selector="svd")
    _train(model, opt, _batches(1))
    moments = 2 * (9 * 3 + 3 * 9) * 4
    projectors = (3 * 6 + 6 * 3) * 4
    assert optimizer_state_bytes(opt, min_dim=1) == moments + projectors + 8 * (66 + 9 + 6 + 6 + 66)


@pytest.mark.parametrize("selector", ["random", "columns", "randk", "randperm", "block"])
def test_same_seed_same_selections_other_seed_differs(selector):
    def selections(seed):
        model = _net()
        opt = FRUGAL(param_groups(model), density=0.5, selector=selector, seed=seed, update_gap=1, block_order="random")
        out = []
        for x in _batches(3):
            opt.zero_grad()
            _loss(model, x).backward()
            opt.step()
            st = opt.state[model.attn.weight]
            out.append([t.clone() for k, t in st.items() if k in ("right", "left", "cols", "rows", "flat")])
            out[-1].append(torch.tensor(opt.param_groups[1]["active_blocks"]))
        return out

    a, b = selections(3), selections(3)
    assert all(torch.equal(x, y) for sa, sb in zip(a, b) for x, y in zip(sa, sb))
    if selector != "block":  # 2 tensors, 1 active: a different seed may well pick the same
        c = selections(4)
        assert not all(torch.equal(x, y) for sa, sc in zip(a, c) for x, y in zip(sa, sc))


@pytest.mark.parametrize("selector", SELECTORS)
@pytest.mark.parametrize("stop", [2, 3])  # between refreshes, and right before one (T = 3)
def test_state_dict_round_trip_resumes_bit_identically(selector, stop):
    batches = _batches(8)
    kw = {"lr": 1e-2, "density": 0.5, "update_gap": 3, "selector": selector, "block_order": "random", "seed": 7}
    model = _net()
    opt = FRUGAL(param_groups(model), **kw)
    _train(model, opt, batches[:stop])
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    _train(model, opt, batches[stop:])
    buf.seek(0)
    saved = torch.load(buf, weights_only=False)
    fresh = _net(seed=99)
    fresh.load_state_dict(saved["model"])
    opt2 = FRUGAL(param_groups(fresh), **{**kw, "seed": 0})  # the generator state comes from the checkpoint
    opt2.load_state_dict(saved["opt"])
    for st in opt2.state.values():
        for key in ("cols", "rows", "flat"):
            if key in st:
                assert st[key].dtype == torch.long
    _train(fresh, opt2, batches[stop:])
    for n, p in _params(model).items():
        assert torch.equal(_params(fresh)[n], p), n


def test_galore_style_groups_are_translated():
    model = _net()
    groups = param_groups(model)
    proj = groups[1]["params"]
    opt = FRUGAL(
        [groups[0], {"params": proj, "rank": 2, "update_proj_gap": 5, "scale": 0.25, "proj_type": "left"}], lr=1e-2
    )
    g = opt.param_groups[1]
    assert g["projectable"] and g["selector"] == "svd" and g["rank"] == 2
    assert (g["update_gap"], g["state_full_lr_scale"], g["proj_side"]) == (5, 0.25, "left")
    _train(model, opt, _batches(1))
    assert opt.state[model.attn.weight]["left"].shape == (9, 2)


def test_closure_and_lr_scheduler():
    model = _net()
    opt = FRUGAL(param_groups(model), lr=1e-2, selector="svd")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5**s)
    x = _batches(1)[0]

    def closure():
        opt.zero_grad()
        loss = _loss(model, x)
        loss.backward()
        return loss

    l0 = float(opt.step(closure).detach())
    sched.step()
    assert opt.param_groups[1]["lr"] == pytest.approx(5e-3)
    for _ in range(5):
        opt.step(closure)
    assert float(closure().detach()) < l0


def test_config_builds_the_same_optimizer():
    cfg = FRUGALConfig(density=0.5, selector="columns", seed=3)
    opt = FRUGAL.from_config(param_groups(_net()), cfg)
    assert opt.param_groups[1]["selector"] == "columns" and opt.seed == 3
    assert FRUGAL.galore_preset(param_groups(_net())).param_groups[1]["state_free"] == "none"
    badam = FRUGAL.badam_preset(param_groups(_net()), density=0.5)
    assert (badam.param_groups[1]["selector"], badam.param_groups[1]["state_free"]) == ("block", "none")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"density": 1.5}, "density must be .*1.5"),
        ({"density": -0.1}, "density"),
        ({"update_gap": 0}, "update_gap .*0"),
        ({"lr": -1.0}, "lr .*-1"),
        ({"state_full_lr_scale": -1.0}, "state_full_lr_scale"),
        ({"state_free_lr_scale": -0.5}, "state_free_lr_scale"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"betas": (0.9,)}, "betas"),
        ({"eps": -1e-8}, "eps"),
        ({"selector": "topk"}, "selector.*'svd'"),
        ({"state_full": "adam"}, "state_full.*'sgdm'"),
        ({"state_free": "sign"}, "state_free.*'signsgd'"),
        ({"proj_side": "up"}, "proj_side.*'reverse_std'"),
        ({"block_order": "forward"}, "block_order.*'mirror'"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_hyperparameters_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FRUGAL(param_groups(_net()), **kwargs)
    if "seed" not in kwargs:
        with pytest.raises(ValueError, match=match):
            FRUGALConfig(**kwargs)


def test_numpy_scalars_are_accepted():
    import numpy as np

    model = _net()
    opt = FRUGAL(param_groups(model), lr=np.float32(1e-3), density=np.float64(0.5), update_gap=np.int64(4))
    assert opt.param_groups[1]["update_gap"] == 4
    _train(model, opt, _batches(2))
    assert opt.memory_report()["state_bytes"] == opt.memory_report()["expected_state_bytes"]


@pytest.mark.parametrize("selector", ["svd", "columns", "block"])
def test_bfloat16_parameters_keep_their_dtype(selector):
    """bf16 weights: the SVD runs in fp32 and the projector is stored in bf16 (galore-torch's convention)."""
    model = _net(dtype=torch.bfloat16)
    opt = FRUGAL(param_groups(model), lr=1e-2, density=0.5, selector=selector)
    w0 = model.attn.weight.detach().clone()
    _train(model, opt, _batches(2))
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert not torch.equal(model.attn.weight.detach(), w0)
    assert opt.memory_report()["state_bytes"] == opt.memory_report()["expected_state_bytes"]


def test_non_matrix_in_projectable_group_is_rejected_with_its_shape():
    model = _net()
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        FRUGAL([{"params": [model.norm.weight], "projectable": True}], selector="svd")
    FRUGAL([{"params": [model.norm.weight], "projectable": True}], selector="block", density=1.0)  # any shape


def test_mirror_with_odd_active_blocks_is_rejected():
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(6)])
    with pytest.raises(ValueError, match="even number of active blocks"):
        FRUGAL([{"params": list(model.parameters()), "projectable": True}], density=0.25, block_order="mirror")


def test_sparse_gradient_raises_runtime_error():
    emb = nn.Embedding(5, 3, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        FRUGAL([emb.weight]).step()
    with pytest.raises(RuntimeError, match="sparse"):
        FRUGAL([{"params": [emb.weight], "projectable": True}], selector="columns").step()


def test_nonfinite_gradient_raises_or_skips():
    model = _net()
    opt = FRUGAL(param_groups(model), selector="svd")
    _loss(model, _batches(1)[0]).backward()
    model.attn.weight.grad[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match=r"shape \(9, 6\)"):
        opt.step()
    opt = FRUGAL(param_groups(model), selector="svd", nonfinite="skip")
    w0 = model.attn.weight.detach().clone()
    m0 = model.mlp.weight.detach().clone()
    with pytest.warns(RuntimeWarning, match="skipping"):
        opt.step()
    assert torch.equal(model.attn.weight.detach(), w0) and not torch.equal(model.mlp.weight.detach(), m0)
