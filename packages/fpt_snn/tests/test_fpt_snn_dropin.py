"""FPTLIFNode as a spikingjelly user meets it: validate-then-train, every surrogate, the LIFNode signature, exact
round trips, store_v_seq, ParametricLIFNode, one default output across the APIs."""

from __future__ import annotations

import inspect

import pytest
import torch

sj = pytest.importorskip("spikingjelly.activation_based")
from spikingjelly.activation_based import functional, layer, neuron, surrogate  # noqa: E402

from fpt_snn import FPTConfig, FPTLIFNode, cache_info, clear_cache, convert_lif_to_fpt  # noqa: E402
from fpt_snn.functional import fpt_lif  # noqa: E402


def _x(T: int, N: int = 64, seed: int = 0, dtype: torch.dtype = torch.float64, shift: float = 0.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, N, 3, generator=g, dtype=dtype) + shift


# ----- validate, then train ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["dense", "chunked"])
def test_inference_mode_forward_then_training_step(path):
    """A validation pass under torch.inference_mode() must not leave inference tensors in the Λ cache that the next
    training step would save for backward (Lightning's validate-then-train loop)."""
    clear_cache()
    T = 24
    x = _x(T, dtype=torch.float32)
    with torch.inference_mode():
        fpt_lif(x, K=3, path=path, chunk_size=8)
    xg = x.clone().requires_grad_(True)
    fpt_lif(xg, K=3, path=path, chunk_size=8).sum().backward()
    assert xg.grad is not None and torch.isfinite(xg.grad).all()

    torch.manual_seed(0)
    net = torch.nn.Sequential(layer.Linear(3, 8, step_mode="m"), FPTLIFNode(path=path, chunk_size=8))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net.eval()
    with torch.inference_mode():
        net(x)
    net.train()
    for _ in range(2):
        loss = net(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert net[0].weight.grad is not None and net[0].weight.grad.abs().sum() > 0


def test_clear_cache_and_bound():
    clear_cache()
    assert cache_info() == {"entries": 0, "bytes": 0}
    fpt_lif(_x(12), K=2, path="dense")
    assert cache_info()["entries"] == 2  # Λ and A = Λ - I
    assert cache_info()["bytes"] == 2 * 12 * 12 * 8
    for T in range(2, 60):
        fpt_lif(_x(T, N=2), K=1, path="dense")
    assert cache_info()["entries"] <= 32
    clear_cache()
    assert cache_info() == {"entries": 0, "bytes": 0}


# ----- every spikingjelly surrogate ----------------------------------------------------------------------------
def _surrogates() -> list[tuple[str, object]]:
    """Every surrogate module in spikingjelly.activation_based.surrogate, built with its defaults (the one that needs
    an argument with max_spike_count=2). PoissonPass is left out: its forward samples Bernoulli(x) and needs x in
    [0, 1], so LIFNode itself cannot run it on a membrane potential."""
    out = []
    for name, cls in inspect.getmembers(surrogate, inspect.isclass):
        if not issubclass(cls, surrogate.SurrogateFunctionBase) or cls is surrogate.SurrogateFunctionBase:
            continue
        if name == "PoissonPass":
            continue
        out.append((name, cls(max_spike_count=2) if name == "MultiLevelSpikeCount" else cls()))
    assert len(out) >= 18
    return out


SURROGATES = _surrogates()


@pytest.mark.parametrize("name, sg", SURROGATES, ids=[n for n, _ in SURROGATES])
def test_every_surrogate_K_equals_T_matches_lifnode(name, sg):
    T = 12
    for decay_input in (True, False):
        x = _x(T, seed=1) * (2.0 if decay_input else 1.0)
        lif = neuron.LIFNode(
            tau=2.0, decay_input=decay_input, v_reset=None, surrogate_function=sg, step_mode="m", store_v_seq=True
        )
        ref = lif(x)
        assert ref.sum() > 0
        for path in ("dense", "scan"):
            node = FPTLIFNode(
                tau=2.0, decay_input=decay_input, surrogate_function=sg, K=T, mode="hard", path=path, store_v_seq=True
            )
            assert torch.equal(node(x), ref), (name, path)
            assert (node.v_seq - lif.v_seq).abs().max() <= 1e-12


def _hand_gradient(x: torch.Tensor, w: torch.Tensor, sg, lam: float, theta: float, scale: float) -> torch.Tensor:
    """dL/dx of L = Σ w·S³ for the three hard sweeps on T = 3, written out step by step: the forward recurrences of
    each sweep, then the chain rule backwards, with the surrogate's derivative taken from the surrogate alone."""

    def d(z: torch.Tensor) -> torch.Tensor:  # the surrogate's gradient at z, elementwise
        zz = z.detach().clone().requires_grad_(True)
        sg(zz).sum().backward()
        return zz.grad

    c0 = scale * x[0]
    c1 = lam * c0 + scale * x[1]
    c2 = lam * c1 + scale * x[2]
    c = [c0, c1, c2]

    def sweep(s_prev):  # z_t = c_t - θ - θ Σ_{j<t} λ^(t-j) s_j
        if s_prev is None:
            return [c[t] - theta for t in range(3)]
        return [
            c[0] - theta,
            c[1] - theta - theta * lam * s_prev[0],
            c[2] - theta - theta * (lam * s_prev[1] + lam * lam * s_prev[0]),
        ]

    z1 = sweep(None)
    s1 = [sg(z).detach() for z in z1]
    z2 = sweep(s1)
    s2 = [sg(z).detach() for z in z2]
    z3 = sweep(s2)

    def back_reset(g):  # -θ Aᵀ g for A[1,0] = λ, A[2,0] = λ², A[2,1] = λ
        return [-theta * (lam * g[1] + lam * lam * g[2]), -theta * lam * g[2], torch.zeros_like(g[2])]

    g3 = [w[t] * d(z3[t]) for t in range(3)]
    gs2 = back_reset(g3)
    g2 = [gs2[t] * d(z2[t]) for t in range(3)]
    gs1 = back_reset(g2)
    g1 = [gs1[t] * d(z1[t]) for t in range(3)]
    gc = [g1[t] + g2[t] + g3[t] for t in range(3)]
    return torch.stack(
        [
            scale * (gc[0] + lam * gc[1] + lam * lam * gc[2]),
            scale * (gc[1] + lam * gc[2]),
            scale * gc[2],
        ]
    )


@pytest.mark.parametrize("name, sg", SURROGATES, ids=[n for n, _ in SURROGATES])
def test_every_surrogate_gradient_is_the_hand_derived_K_step_chain(name, sg):
    tau, theta = 2.5, 0.8
    lam = 1.0 - 1.0 / tau
    x = _x(3, N=40, seed=2, shift=0.6).reshape(3, -1) * 1.5
    w = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for decay_input in (False, True):
        expected = _hand_gradient(x, w, sg, lam, theta, 1.0 / tau if decay_input else 1.0)
        assert expected.abs().sum() > 0
        for path in ("dense", "scan"):
            node = FPTLIFNode(
                tau=tau, decay_input=decay_input, v_threshold=theta, surrogate_function=sg, K=3, mode="hard", path=path
            )
            xg = x.clone().requires_grad_(True)
            (node(xg) * w).sum().backward()
            err = (xg.grad - expected).abs() - 1e-10 * expected.abs().clamp(min=1.0)
            assert err.max() <= 0, (name, path, decay_input, (xg.grad - expected).abs().max().item())


def test_surrogate_changes_the_gradient_not_the_spikes():
    x = _x(10, seed=4).requires_grad_(True)
    grads, spikes = [], []
    for sg in (surrogate.Sigmoid(), surrogate.ATan(alpha=3.0)):
        x.grad = None
        s = FPTLIFNode(surrogate_function=sg, K=3, mode="hard")(x)
        s.sum().backward()
        spikes.append(s.detach())
        grads.append(x.grad.clone())
    assert torch.equal(spikes[0], spikes[1])
    assert not torch.allclose(grads[0], grads[1])


def test_default_soft_output_gradient_is_the_official_flat_surrogate():
    """Default FPTLIFNode (soft sweeps, Heaviside output through Sigmoid(alpha=4)) has the gradient the official
    rule gives the last sweep: the flat sigmoid of slope max(1, 12/3) = 4 (fpt_lif without a surrogate)."""
    x = _x(16, seed=5).requires_grad_(True)
    s_node = FPTLIFNode()(x)
    s_node.sum().backward()
    g_node = x.grad.clone()
    x.grad = None
    s_fn = fpt_lif(x, decay_input=True)
    s_fn.sum().backward()
    assert torch.equal(s_node, s_fn)
    assert (g_node - x.grad).abs().max() <= 1e-12


# ----- signature and defaults ----------------------------------------------------------------------------------
def test_signature_starts_with_lifnode_arguments():
    lif = list(inspect.signature(neuron.LIFNode).parameters.values())
    fpt = inspect.signature(FPTLIFNode).parameters
    names = list(fpt)
    # the host's positional arguments, in its order (a "backend" between step_mode and store_v_seq, absent from
    # spikingjelly 2's LIFNode, made a positional store_v_seq land on it)
    assert names[: len(lif)] == [p.name for p in lif]
    assert names[:8] == ["tau", "decay_input", "v_threshold", "v_reset", "surrogate_function", "detach_reset",
                         "step_mode", "store_v_seq"]  # fmt: skip
    positional = (2.0, True, 1.0, None, surrogate.ATan(), False, "m", True)
    assert FPTLIFNode(*positional).store_v_seq is neuron.LIFNode(*positional).store_v_seq is True
    for p in lif:
        if p.name in ("v_reset", "step_mode", "surrogate_function"):
            continue  # soft reset and multi-step only; the surrogate default is compared below
        assert fpt[p.name].default == p.default, p.name
    node = FPTLIFNode()
    assert type(node.surrogate_function) is surrogate.Sigmoid and node.surrogate_function.alpha == 4.0
    assert fpt["v_reset"].default is None and fpt["step_mode"].default == "m"
    with pytest.raises(ValueError, match="T=..."):
        FPTLIFNode(8)  # the old positional T is not silently a tau
    with pytest.raises(ValueError, match="v_reset"):
        FPTLIFNode(v_reset=0.0)
    with pytest.raises(ValueError, match="backend"):
        FPTLIFNode(backend="cupy")


def test_output_defaults_agree_across_apis():
    fn_default = inspect.signature(fpt_lif).parameters["output"].default
    node_default = inspect.signature(FPTLIFNode).parameters["output"].default
    assert fn_default == node_default == FPTConfig().output == "heaviside"
    x = _x(12, seed=6)
    node = FPTLIFNode(decay_input=False)
    assert node.training
    assert torch.equal(node(x), fpt_lif(x))  # deterministic in training by default, both ways


def test_store_v_seq_and_reset():
    x = _x(20, seed=7)
    lif = neuron.LIFNode(tau=2.0, v_reset=None, step_mode="m", store_v_seq=True)
    node = FPTLIFNode(tau=2.0, K="auto", mode="hard", store_v_seq=True)
    assert torch.equal(node(x), lif(x))
    assert node.v_seq.shape == x.shape and (node.v_seq - lif.v_seq).abs().max() <= 1e-12
    assert (node.v - lif.v).abs().max() <= 1e-12
    functional.reset_net(node)
    assert node.v_seq is None and node.v is None
    quiet = FPTLIFNode()
    quiet(x)
    assert quiet.v_seq is None


# ----- conversion round trips ----------------------------------------------------------------------------------
def test_convert_then_to_lif_round_trip_is_exact():
    lif = neuron.LIFNode(
        tau=3.0,
        decay_input=False,
        v_threshold=0.7,
        v_reset=None,
        surrogate_function=surrogate.ATan(alpha=3.0),
        detach_reset=True,
        step_mode="m",
        store_v_seq=True,
    )
    net = torch.nn.Sequential(layer.Linear(3, 3, step_mode="m"), lif)
    convert_lif_to_fpt(net, K=3)
    fpt = net[1]
    assert isinstance(fpt, FPTLIFNode) and type(fpt.surrogate_function) is surrogate.ATan
    assert fpt.surrogate_function.alpha == 3.0
    back = fpt.to_lif()
    assert type(back) is neuron.LIFNode
    for attr in ("tau", "decay_input", "v_threshold", "v_reset", "detach_reset", "step_mode", "store_v_seq"):
        assert getattr(back, attr) == getattr(lif, attr), attr
        assert type(getattr(back, attr)) is type(getattr(lif, attr)), attr
    assert type(back.surrogate_function) is type(lif.surrogate_function)
    assert back.surrogate_function._sg_params == lif.surrogate_function._sg_params
    assert back.surrogate_function.spiking == lif.surrogate_function.spiking
    x = _x(9, seed=8)
    functional.reset_net(lif)
    assert torch.equal(back(x), lif(x))


def test_parametric_lif_converts_and_round_trips():
    torch.manual_seed(0)
    plif = neuron.ParametricLIFNode(
        init_tau=3.0, decay_input=True, v_reset=None, surrogate_function=surrogate.Erf(), step_mode="m"
    ).double()
    with torch.no_grad():
        plif.w.add_(0.123)  # a "trained" leak
    net = torch.nn.Sequential(plif)
    convert_lif_to_fpt(net, K=16, mode="hard")
    fpt = net[0]
    assert isinstance(fpt, FPTLIFNode) and fpt.learnable_decay and type(fpt.surrogate_function) is surrogate.Erf
    x = _x(16, seed=9) * 2.0
    assert torch.equal(fpt(x), plif(x))
    fpt(x).sum().backward()
    assert fpt.decay_logit.grad is not None and fpt.decay_logit.grad != 0
    back = fpt.to_lif()
    assert type(back) is neuron.ParametricLIFNode and torch.equal(back.w, plif.w)
    assert type(back.surrogate_function) is surrogate.Erf and back.decay_input and back.v_reset is None
    functional.reset_net(plif)
    assert torch.equal(back(x), plif(x))


def test_parametric_lif_subclass_is_refused_with_reason():
    class Custom(neuron.ParametricLIFNode):
        pass

    net = torch.nn.Sequential(Custom(v_reset=None, step_mode="m"))
    with pytest.raises(ValueError, match="Custom"):
        convert_lif_to_fpt(net)
    assert type(net[0]) is Custom
