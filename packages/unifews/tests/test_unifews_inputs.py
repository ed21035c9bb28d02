"""Bad input raises a clear error naming the argument, the value and what was expected."""

import math

import pytest
import torch

from unifews import UnifewsConfig, UnifewsGATv2Conv, UnifewsGCNConv, UnifewsGNN
from unifews.prop import unifews_propagate

from .helpers import random_graph


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delta_a": -0.1}, "delta_a"),
        ({"delta_a": math.nan}, "delta_a"),
        ({"delta_w": -1.0}, "delta_w"),
        ({"delta_w": math.nan}, "delta_w"),
        ({"threshold": "median"}, "threshold must be one of 'relative', 'absolute'"),
        ({"r": 1.5}, "r must be"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        UnifewsConfig(**kwargs)


def test_config_type_errors():
    with pytest.raises(TypeError, match="delta_a"):
        UnifewsConfig(delta_a="big")
    with pytest.raises(TypeError, match="edge_prune_inc"):
        UnifewsConfig(edge_prune_inc=1)


def test_conv_input_errors():
    x, ei = random_graph()
    conv = UnifewsGCNConv(8, 4).double()
    with pytest.raises(TypeError, match="int64"):
        conv(x, ei.int())
    with pytest.raises(ValueError, match=r"shape \[2, num_edges\]"):
        conv(x, ei[:1])
    with pytest.raises(ValueError, match=r"node 30 .* num_nodes=30"):
        conv(x, torch.cat([ei, torch.tensor([[0], [30]])], 1))
    with pytest.raises(ValueError, match="negative"):
        conv(x, torch.cat([ei, torch.tensor([[0], [-1]])], 1))
    with pytest.raises(ValueError, match="edge_weight must have shape"):
        conv(x, ei, torch.ones(3, dtype=x.dtype))
    with pytest.raises(ValueError, match="edge_weight contains NaN"):
        conv(x, ei, torch.full((ei.size(1),), math.nan, dtype=x.dtype))
    with pytest.raises(TypeError, match="floating"):
        conv(x.long(), ei)
    with pytest.raises(ValueError, match="2-D"):
        conv(x[0], ei)
    with pytest.raises(ValueError, match="8 columns"):
        conv(x[:, :5], ei)
    bad = x.clone()
    bad[0, 0] = math.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        conv(bad, ei)
    with pytest.raises(ValueError, match="zero nodes"):
        conv(x[:0], ei[:, :0])
    with pytest.raises(ValueError, match=r"lock as a bool mask must have shape \[30\]"):
        conv(x, ei, lock=torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="lock must have dtype"):
        conv(x, ei, lock=torch.ones(30))
    with pytest.raises(ValueError, match="scheme_a must be one of"):
        conv.set_scheme("prune_some", "keep")
    with pytest.raises(ValueError, match="scheme_w must be one of"):
        conv.set_scheme("keep", "rewind")
    with pytest.raises(ValueError, match="edge_attr needs a layer built with edge_dim"):
        UnifewsGATv2Conv(8, 4).double()(x, ei, torch.ones(ei.size(1), dtype=x.dtype))
    with pytest.raises(ValueError, match="conv must be one of"):
        UnifewsGNN(8, 16, 3, conv="gin")


def test_keep_on_a_different_graph_is_refused():
    x, ei = random_graph()
    conv = UnifewsGCNConv(8, 4).double()
    conv(x, ei)
    conv.set_scheme("keep", "keep")
    with pytest.raises(ValueError, match="scheme_a='keep' needs the graph"):
        conv(x, ei[:, :10])


def test_no_edges_is_valid():
    x, _ = random_graph()
    empty = torch.empty(2, 0, dtype=torch.long)
    conv = UnifewsGCNConv(8, 4).double()
    out = conv(x, empty)  # self-loops only
    torch.testing.assert_close(out, x @ (conv.lin.weight * conv.lin_mask).t() + conv.bias)
    p, st = unifews_propagate(x, empty, 3, 0.5, generator=0)
    torch.testing.assert_close(p, x)
    p, _ = unifews_propagate(x, empty, 3, 0.5, mode="row")
    torch.testing.assert_close(p, x)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hops": 0}, "hops must be a positive int"),
        ({"kind": "gcn"}, "kind must be one of 'sgc', 'appnp'"),
        ({"mode": "col"}, "mode must be one of"),
        ({"push": "keep"}, "push must be one of"),
        ({"alpha": 0.0}, r"alpha must be a float in \(0.0, 1.0\]"),
        ({"alpha": 1.5}, "alpha must be a float in"),
        ({"delta_a": -1.0}, "delta_a"),
        ({"threshold": "mean"}, "threshold must be one of"),
        ({"impl": "fast"}, "impl must be one of"),
    ],
)
def test_propagate_argument_errors(kwargs, match):
    x, ei = random_graph()
    args = {"hops": 2, "delta_a": 0.1, **kwargs}
    hops, delta_a = args.pop("hops"), args.pop("delta_a")
    with pytest.raises(ValueError, match=match):
        unifews_propagate(x, ei, hops, delta_a, **args)


def test_propagate_generator_type():
    x, ei = random_graph()
    with pytest.raises(TypeError, match="generator"):
        unifews_propagate(x, ei, 2, 0.5, generator="seed")


def test_finite_check_is_exact_when_the_sum_overflows():
    from unifews.functional import check_edge_weight, check_x

    big = torch.full((4, 3), 3e38)  # finite, but the float32 sum overflows: the exact check must run
    check_x(big)
    check_edge_weight(big[:, 0], 4)
    for bad in (float("nan"), float("inf")):
        x = big.clone()
        x[2, 1] = bad
        with pytest.raises(ValueError, match="NaN or inf"):
            check_x(x)
        with pytest.raises(ValueError, match="NaN or inf"):
            check_edge_weight(x[:, 1], 4)


@pytest.mark.parametrize("push", ["random", "drop"])
@pytest.mark.parametrize("kind", ["sgc", "appnp"])
def test_infinite_delta_keeps_only_self_loop_terms(push, kind):
    from torch_geometric.utils import degree

    x, ei = random_graph(n=30, m=120, f=5, seed=70)
    p, st = unifews_propagate(x, ei, 3, math.inf, kind=kind, push=push, generator=0)
    loop = (1.0 + degree(ei[1], 30, dtype=x.dtype)).reciprocal().unsqueeze(1)  # T[u, u] = 1 / d̄_u
    if kind == "sgc":
        ref = loop**3 * x
    else:  # APPNP: Z = α Σ_{l<L} ((1-α) T_loop)^l X + ((1-α) T_loop)^L X
        a, c = 0.1, 0.9 * loop
        ref = a * (x + c * x + c**2 * x) + c**3 * x
    torch.testing.assert_close(p, ref)
    assert st.random_pushes == [0, 0, 0] and all(m == 30 * 5 for m in st.macs)


def test_chunk_size_must_be_positive():
    x, ei = random_graph()
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        unifews_propagate(x, ei, 2, 0.1, chunk_size=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_layer_runs_on_cpu(dtype):
    """Half-precision layers on the CPU, where torch's CSR kernel and numba have no half types: the selection runs
    in torch and the SpMMs in float32, cast back; outputs and gradients follow the float32 layer to half
    rounding, and a pruning forward works too."""
    x, ei = random_graph(n=40, m=200, f=6, seed=21, dtype=torch.float32)
    x = x.to(dtype).float()  # representable in both
    for delta in (0.0, 0.8):
        torch.manual_seed(0)
        ref = UnifewsGCNConv(6, 4, config=UnifewsConfig(delta_a=delta, delta_w=0.0))
        half = UnifewsGCNConv(6, 4, config=UnifewsConfig(delta_a=delta, delta_w=0.0))
        half.load_state_dict(ref.state_dict())
        half = half.to(dtype)
        xh, xr = x.to(dtype).requires_grad_(), x.clone().requires_grad_()
        out = half(xh, ei)
        out.float().sum().backward()
        assert out.dtype == dtype and xh.grad is not None and xh.grad.dtype == dtype
        assert torch.isfinite(out.float()).all() and 0 < int(half.edge_keep.sum()) <= half.edge_keep.numel()
        if delta == 0.0:  # every edge kept: the same sum, in half rounding
            o_ref = ref(xr, ei)
            o_ref.sum().backward()
            tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 3e-3, "rtol": 3e-3}
            torch.testing.assert_close(out.float(), o_ref.detach(), **tol)
            torch.testing.assert_close(xh.grad.float(), xr.grad, **tol)
