"""FPTLIFNode inside spikingjelly: the peer neurons on the same input, the network utilities, conversion, training."""

from __future__ import annotations

import io

import pytest
import torch

sj = pytest.importorskip("spikingjelly.activation_based")
from spikingjelly.activation_based import functional, layer, neuron, surrogate  # noqa: E402

from fpt_snn import FPTLIFNode, convert_fpt_to_lif, convert_lif_to_fpt  # noqa: E402
from fpt_snn.functional import lif_reference  # noqa: E402


def _x(T: int, N: int = 64, F: int = 5, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, N, F, generator=g, dtype=dtype) + 0.5


@pytest.mark.parametrize("decay_input", [False, True])
@pytest.mark.parametrize("theta", [1.0, 0.7])
@pytest.mark.parametrize("path", ["dense", "chunked"])
def test_hard_K_equals_T_matches_spikingjelly_lifnode(decay_input, theta, path):
    T = 40
    x = _x(T, seed=1) * (2.5 if decay_input else 1.0)
    lif = neuron.LIFNode(tau=3.0, decay_input=decay_input, v_threshold=theta, v_reset=None, step_mode="m")
    node = FPTLIFNode(
        T=T, tau=3.0, decay_input=decay_input, v_threshold=theta, K=T, mode="hard", output="heaviside", path=path
    )
    ref = lif(x)
    assert ref.mean() > 0.05
    assert torch.equal(node(x), ref)
    auto = FPTLIFNode(
        T=T, tau=3.0, decay_input=decay_input, v_threshold=theta, K="auto", mode="hard", output="heaviside"
    )
    assert torch.equal(auto(x), ref)


def test_K1_learnable_kernel_equals_psn():
    T = 12
    torch.manual_seed(0)
    psn = neuron.PSN(T, surrogate_function=surrogate.ATan())
    node = FPTLIFNode(T=T, decay_input=False, K=1, mode="hard", output="heaviside", learnable_kernel=True)
    with torch.no_grad():
        w = torch.randn(T, T)
        node.weight.copy_(w)
        node.bias.copy_(torch.randn(T, 1))
        psn.weight.copy_(torch.tril(w))  # PSN's weight is full; FPT's kernel is causal
        psn.bias.copy_(node.bias)
    x = _x(T, seed=2, dtype=torch.float32)
    assert torch.equal(node(x), psn(x))


def test_learnable_kernel_initialised_to_lif():
    T = 10
    x = _x(T, seed=3, dtype=torch.float32)
    fixed = FPTLIFNode(T=T, decay_input=False, K=3, mode="hard", output="heaviside")
    learn = FPTLIFNode(T=T, decay_input=False, K=3, mode="hard", output="heaviside", learnable_kernel=True)
    assert torch.equal(fixed(x), learn(x))
    learn(x).sum().backward()
    assert learn.weight.grad is not None and learn.weight.grad.triu(1).abs().sum() == 0  # causal


def test_learnable_decay_trains_and_starts_at_tau():
    node = FPTLIFNode(T=8, decay_input=False, tau=4.0, learnable_decay=True, output="soft")
    assert abs(node.tau - 4.0) < 1e-5
    node(_x(8, dtype=torch.float32)).sum().backward()
    assert node.decay_logit.grad is not None and node.decay_logit.grad != 0


def test_eval_is_deterministic_and_train_is_bernoulli():
    node = FPTLIFNode(T=8, decay_input=False, output="bernoulli")
    x = _x(8, N=256, dtype=torch.float32)
    node.eval()
    a, b = node(x), node(x)
    assert torch.equal(a, b)
    soft = FPTLIFNode(T=8, decay_input=False, output="soft").eval()
    soft.eval_output = "soft"
    assert torch.equal(a, (soft(x) >= 0.5).float())
    node.train()
    torch.manual_seed(0)
    c = node(x)
    torch.manual_seed(1)
    d = node(x)
    assert set(c.unique().tolist()) <= {0.0, 1.0} and not torch.equal(c, d)


def test_step_mode_reset_detach():
    net = torch.nn.Sequential(layer.Linear(5, 7, step_mode="m"), FPTLIFNode(T=6, decay_input=False))
    functional.set_step_mode(net, "m")
    functional.reset_net(net)
    functional.detach_net(net)
    assert net(_x(6, dtype=torch.float32)).shape == (6, 64, 7)
    with pytest.raises(ValueError, match="step_mode"):
        FPTLIFNode(T=6, decay_input=False, step_mode="s")


def _net(T: int) -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        layer.Linear(5, 16, step_mode="m"),
        neuron.LIFNode(tau=2.0, decay_input=False, v_reset=None, step_mode="m"),
        layer.Linear(16, 3, step_mode="m"),
        neuron.LIFNode(tau=4.0, decay_input=True, v_threshold=0.5, v_reset=None, step_mode="m"),
    )


def test_convert_round_trip_keeps_weights_and_dynamics():
    T = 16
    net = _net(T)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x = _x(T, dtype=torch.float64).float()
    ref = net(x)
    convert_lif_to_fpt(net, T=T, K=T, mode="hard", output="heaviside")
    assert isinstance(net[1], FPTLIFNode) and isinstance(net[3], FPTLIFNode)
    assert net[3].tau == pytest.approx(4.0) and net[3].decay_input and net[3].v_threshold == 0.5
    assert torch.equal(net(x), ref)
    convert_fpt_to_lif(net)
    assert type(net[1]) is neuron.LIFNode and net[1].v_reset is None
    functional.reset_net(net)
    assert torch.equal(net(x), ref)
    after = net.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    functional.set_step_mode(net, "s")  # the deployed LIF streams
    functional.reset_net(net)
    assert torch.equal(torch.stack([net(x[t]) for t in range(T)]), ref)


def test_convert_refuses_hard_reset_and_single_step():
    hard = torch.nn.Sequential(layer.Linear(3, 3), neuron.LIFNode(tau=2.0, step_mode="m"))
    with pytest.raises(ValueError, match="v_reset=0.0"):
        convert_lif_to_fpt(hard, T=4)
    assert type(hard[1]) is neuron.LIFNode  # untouched
    single = torch.nn.Sequential(neuron.LIFNode(tau=2.0, v_reset=None))
    with pytest.raises(ValueError, match="step_mode"):
        convert_lif_to_fpt(single, T=4)
    kern = torch.nn.Sequential(FPTLIFNode(T=4, decay_input=False, learnable_kernel=True))
    with pytest.raises(ValueError, match="learnable kernel"):
        convert_fpt_to_lif(kern)


def test_state_dict_round_trip():
    a = FPTLIFNode(T=8, decay_input=False, learnable_kernel=True)
    with torch.no_grad():
        a.weight.add_(torch.randn(8, 8) * 0.1)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = FPTLIFNode(T=8, decay_input=False, learnable_kernel=True)
    b.load_state_dict(torch.load(buf))
    x = _x(8, dtype=torch.float32)
    assert torch.equal(a.eval()(x), b.eval()(x))
    c, d = (
        FPTLIFNode(T=8, decay_input=False, learnable_decay=True, tau=3.0),
        FPTLIFNode(T=8, decay_input=False, learnable_decay=True),
    )
    d.load_state_dict(c.state_dict())
    assert d.tau == pytest.approx(3.0)
    assert FPTLIFNode(T=8, decay_input=False).state_dict() == {}


def test_bad_node_arguments_and_inputs():
    with pytest.raises(ValueError, match="tau"):
        FPTLIFNode(T=8, decay_input=False, tau=1.0)
    with pytest.raises(ValueError, match="K must"):
        FPTLIFNode(T=8, decay_input=False, K=0)
    with pytest.raises(ValueError, match="alpha_schedule"):
        FPTLIFNode(T=8, decay_input=False, alpha_schedule=(1.0, 0.0, 2.0))
    with pytest.raises(ValueError, match="T must"):
        FPTLIFNode(T=0, decay_input=False)
    with pytest.raises(ValueError, match="exclusive"):
        FPTLIFNode(T=8, decay_input=False, learnable_kernel=True, learnable_decay=True)
    with pytest.raises(ValueError, match="dynamic_T"):
        FPTLIFNode(T=8, decay_input=False, learnable_kernel=True, dynamic_T=True)
    node = FPTLIFNode(T=8, decay_input=False)
    with pytest.raises(ValueError, match="T=6"):
        node(torch.randn(6, 3))
    with pytest.raises(ValueError, match="floating"):
        node(torch.ones(8, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="2 dims"):
        node(torch.randn(8))
    assert FPTLIFNode(T=8, decay_input=False, dynamic_T=True)(torch.randn(6, 3)).shape == (6, 3)


def test_training_smoke_digits_loss_falls_like_lif():
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    X = torch.tensor(d.data[:512] / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target[:512])
    T = 8
    losses = {}
    for kind in ("lif", "fpt"):
        torch.manual_seed(0)
        spiking = (
            neuron.LIFNode(tau=2.0, decay_input=False, v_reset=None, step_mode="m")
            if kind == "lif"
            else FPTLIFNode(T=T, decay_input=False, tau=2.0, K=3, output="bernoulli")
        )
        net = torch.nn.Sequential(layer.Linear(64, 128, step_mode="m"), spiking, layer.Linear(128, 10, step_mode="m"))
        opt = torch.optim.Adam(net.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(0)
        hist = []
        for _ in range(20):
            idx = torch.randint(0, 512, (64,), generator=g)
            functional.reset_net(net)
            logits = net(X[idx].unsqueeze(0).expand(T, -1, -1)).mean(0)
            loss = torch.nn.functional.cross_entropy(logits, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            hist.append(loss.item())
        losses[kind] = (sum(hist[:3]) / 3, sum(hist[-3:]) / 3)
    for first, last in losses.values():
        assert last < 0.8 * first
    assert losses["fpt"][1] < 1.5 * losses["lif"][1] + 0.1


def test_fpt_node_equals_lif_reference_surrogate_training_at_K_equal_T():
    """Hard FPT with K = T has the same forward as the sequential LIF; its gradient is a surrogate too."""
    T = 10
    x = _x(T, seed=9).requires_grad_(True)
    node = FPTLIFNode(T=T, decay_input=False, K=T, mode="hard", output="heaviside")
    s = node(x)
    assert torch.equal(s, lif_reference(x.detach()))
    s.sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_K1_learnable_kernel_equals_psn_at_the_default_decay_input():
    """At the default ``decay_input=True`` the kernel sees X/τ: FPT with kernel W is ``PSN`` with weight tril(W)/τ
    (τ = 2: the scaling is exact in floating point, so the spikes must agree bit for bit). PSN with the same W
    differs: the documented 1/τ is real."""
    T = 12
    torch.manual_seed(0)
    node = FPTLIFNode(T=T, K=1, mode="hard", output="heaviside", learnable_kernel=True)
    assert node.decay_input and node.tau == 2.0
    psn = neuron.PSN(T, surrogate_function=surrogate.ATan())
    with torch.no_grad():
        w = torch.randn(T, T)
        node.weight.copy_(w)
        node.bias.copy_(torch.randn(T, 1))
        psn.weight.copy_(torch.tril(w) / node.tau)
        psn.bias.copy_(node.bias)
    x = _x(T, seed=2, dtype=torch.float32)
    assert torch.equal(node(x), psn(x))
    assert torch.equal(node.to_psn()(x), node(x))  # the same mapping, as an API
    with torch.no_grad():
        psn.weight.copy_(torch.tril(w))
    assert not torch.equal(node(x), psn(x))
    with pytest.raises(ValueError, match="only a learnable-kernel FPTLIFNode with K=1 is a PSN"):
        FPTLIFNode(T=T, K=3, learnable_kernel=True).to_psn()


@pytest.mark.parametrize("decay_input", [True, False])
def test_stateful_node_fed_in_chunks_equals_lifnode_on_the_whole_sequence(decay_input):
    x = _x(20, seed=11)
    lif = neuron.LIFNode(tau=3.0, decay_input=decay_input, v_reset=None, step_mode="m")
    ref = lif(x)
    node = FPTLIFNode(tau=3.0, decay_input=decay_input, K="auto", mode="hard", stateful=True)
    chunks = torch.cat([node(x[:7]), node(x[7:15]), node(x[15:])])
    assert torch.equal(chunks, ref)
    assert (node.v - lif.v).abs().max() <= 1e-12  # the carried membrane is LIFNode's
    functional.reset_net(node)
    assert node.v is None and torch.equal(node(x), ref)  # reset_net starts a new sequence
    stateless = FPTLIFNode(tau=3.0, decay_input=decay_input, K="auto", mode="hard")
    assert not torch.equal(torch.cat([stateless(x[:7]), stateless(x[7:])]), ref)  # the default starts at v = 0
    with pytest.raises(ValueError, match="carried membrane has .*reset_net"):
        node(x[:, :3])
    with pytest.raises(ValueError, match="stateful=True carries a LIF membrane"):
        FPTLIFNode(T=8, learnable_kernel=True, stateful=True)


def test_stateful_learnable_decay_chunks_equal_parametric_lif():
    x = _x(16, seed=4)
    plif = neuron.ParametricLIFNode(init_tau=3.0, v_reset=None, step_mode="m").double()
    ref = plif(x)
    node = convert_lif_to_fpt(neuron.ParametricLIFNode(init_tau=3.0, v_reset=None, step_mode="m"), K="auto",
                              mode="hard", stateful=True).double()  # fmt: skip
    assert torch.equal(torch.cat([node(x[:5]), node(x[5:])]), ref)


def test_set_step_mode_switches_every_layer_and_the_forward_explains():
    net = torch.nn.Sequential(
        layer.Linear(5, 8, step_mode="m"), FPTLIFNode(), layer.Linear(8, 4, step_mode="m"),
        neuron.LIFNode(v_reset=None, step_mode="m"),
    )  # fmt: skip
    functional.set_step_mode(net, "s")  # raised half-way before, leaving the first Linear switched
    assert [m.step_mode for m in net] == ["s"] * 4
    with pytest.raises(ValueError, match=r"only step_mode='m'.*set_step_mode\(net, 'm'\).*to_lif"):
        net(torch.randn(3, 5))
    functional.set_step_mode(net, "m")
    assert net(_x(6, N=4, F=5, dtype=torch.float32)).shape == (6, 4, 4)
    with pytest.raises(ValueError, match="step_mode"):
        FPTLIFNode(step_mode="x")
    with pytest.raises(ValueError, match="only step_mode='m'"):
        FPTLIFNode(step_mode="s")  # built single-step: refused at once


def test_convert_warns_about_neurons_it_leaves():
    net = torch.nn.Sequential(
        layer.Linear(3, 3, step_mode="m"), neuron.LIFNode(v_reset=None, step_mode="m"),
        neuron.IFNode(v_reset=None, step_mode="m"),
    )  # fmt: skip
    with pytest.warns(UserWarning, match=r"left unconverted: IFNode '2' .*no leak"):
        convert_lif_to_fpt(net)
    assert isinstance(net[1], FPTLIFNode) and type(net[2]) is neuron.IFNode


@pytest.mark.parametrize("decay_input", [False, True])
@pytest.mark.parametrize("path", ["dense", "chunked"])
def test_K_auto_gradient_is_the_lif_bptt_gradient(decay_input, path):
    """K="auto" stops after fewer than T sweeps; its gradient is still BPTT's through spikingjelly's LIFNode and
    ParametricLIFNode (the input's and w's), not the gradient of a graph truncated at the sweeps run (which
    differed by up to 10 % of the largest entry)."""
    T = 48
    x = (_x(T, N=16, seed=7) * (2.0 if decay_input else 1.0)).requires_grad_(True)
    w = torch.randn(x.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    lif = neuron.LIFNode(tau=3.0, decay_input=decay_input, v_threshold=0.7, v_reset=None, step_mode="m",
                         surrogate_function=surrogate.ATan())  # fmt: skip
    node = FPTLIFNode(3.0, decay_input, 0.7, surrogate_function=surrogate.ATan(), K="auto", mode="hard", path=path)
    s_ref, s = lif(x), node(x)
    assert torch.equal(s, s_ref)
    (g_ref,) = torch.autograd.grad((s_ref * w).sum(), x)
    (g,) = torch.autograd.grad((s * w).sum(), x)
    torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-12)

    plif = neuron.ParametricLIFNode(init_tau=3.0, decay_input=decay_input, v_reset=None, step_mode="m").double()
    fresh = neuron.ParametricLIFNode(init_tau=3.0, decay_input=decay_input, v_reset=None, step_mode="m")
    fpt = convert_lif_to_fpt(fresh, K="auto", mode="hard", path=path).double()
    s_ref, s = plif(x), fpt(x)
    assert torch.equal(s, s_ref)
    g_ref = torch.autograd.grad((s_ref * w).sum(), [x, plif.w])
    g = torch.autograd.grad((s * w).sum(), [x, fpt.decay_logit])
    torch.testing.assert_close(g[0], g_ref[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(-g[1], g_ref[1], rtol=1e-10, atol=1e-12)  # λ = sigmoid(-w)
