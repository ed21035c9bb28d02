"""The pure-torch core against the sequential LIF, closed forms and autograd references."""

from __future__ import annotations

import pytest
import torch

from fpt_snn.config import FPTConfig, auto_chunk_size
from fpt_snn.functional import (
    apply_lambda,
    flat_slope,
    fpt_iterate,
    fpt_lif,
    lambda_matrix,
    lif_reference,
    mismatch_rate,
    soft_spike,
)


def assert_close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """|a - b| ≤ atol + rtol·|b| elementwise (torch.testing.assert_close is slow to import on a loaded machine)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    err = (a - b).abs() - (atol + rtol * b.abs())
    assert err.max().item() <= 0, f"max abs diff {(a - b).abs().max().item():.3g}"


def _x(T: int, M: int = 512, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, M, generator=g, dtype=dtype) + 0.5


# ----- Λ ---------------------------------------------------------------------------------------------------------
def test_lambda_matrix_entries_and_stability():
    L = lambda_matrix(5, 0.5, torch.float64)
    for i in range(5):
        for j in range(5):
            assert L[i, j].item() == (0.5 ** (i - j) if i >= j else 0.0)
    big = lambda_matrix(4096, 0.5, torch.float32)
    assert torch.isfinite(big).all() and big.diagonal().eq(1).all() and big.triu(1).eq(0).all()
    assert torch.isfinite(lambda_matrix(4096, 1.0, torch.float32)).all()


def test_lambda_matrix_is_the_linear_recurrence():
    x = _x(37, 9)
    u, out = torch.zeros(9, dtype=x.dtype), []
    for t in range(37):
        u = 0.8 * u + x[t]
        out.append(u)
    assert_close(lambda_matrix(37, 0.8, torch.float64) @ x, torch.stack(out), rtol=0, atol=1e-12)


@pytest.mark.parametrize("T,B", [(100, 16), (257, 64), (33, 32), (7, 16)])
@pytest.mark.parametrize("decay", [0.5, 0.9, 1.0])
def test_chunked_equals_dense(T, B, decay):
    x64 = _x(T, 64, seed=T)
    dense = apply_lambda(x64, decay, path="dense")
    chunked = apply_lambda(x64, decay, path="chunked", chunk_size=B)
    assert_close(chunked, dense, rtol=1e-12, atol=1e-12)
    x32 = x64.float()
    d32, c32 = apply_lambda(x32, decay, path="dense"), apply_lambda(x32, decay, path="chunked", chunk_size=B)
    scale = dense.abs().max().item()
    assert (d32 - c32).abs().max().item() <= 1e-6 * max(1.0, scale)


def test_chunked_equals_dense_through_fpt_and_gradients():
    x = _x(150, 64).float().requires_grad_(True)
    outs, grads = [], []
    for path in ("dense", "chunked"):
        x.grad = None
        s, info = fpt_lif(x, K=3, output="soft", path=path, chunk_size=32, return_info=True)
        (s * torch.linspace(0, 1, 64)).sum().backward()
        outs.append(info.h_seq.detach())
        grads.append(x.grad.clone())
    assert (outs[0] - outs[1]).abs().max() <= 1e-5
    assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-5)


def test_auto_chunk_size():
    assert [auto_chunk_size(T) for T in (8, 128, 512, 2048, 1 << 16)] == [16, 16, 16, 64, 64]


# ----- exactness -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("decay_input", [False, True])
@pytest.mark.parametrize("theta", [1.0, 0.6])
@pytest.mark.parametrize("tau", [2.0, 10.0])
def test_hard_K_equals_T_is_exact(decay_input, theta, tau):
    T = 24
    x = _x(T, 300, seed=1) * (3.0 if decay_input else 1.0)
    ref, v_ref = lif_reference(x, tau=tau, decay_input=decay_input, v_threshold=theta, return_membrane=True)
    for path in ("dense", "chunked", "scan"):
        s, info = fpt_lif(
            x, tau=tau, decay_input=decay_input, v_threshold=theta, K=T, mode="hard", path=path, return_info=True
        )
        assert torch.equal(s, ref)
        assert_close(info.v_seq, v_ref, rtol=0, atol=1e-12)
    assert ref.mean() > 0.05  # the test is not vacuous


def test_prefix_exactness_every_k():
    T = 20
    x = _x(T, 400, seed=2)
    ref = lif_reference(x, decay=0.9)
    for k in range(1, T + 1):
        s = fpt_lif(x, decay=0.9, K=k, mode="hard")
        assert torch.equal(s[:k], ref[:k]), k
    assert not torch.equal(fpt_lif(x, decay=0.9, K=3, mode="hard"), ref)  # K=3 is not exact at λ=0.9


def test_K1_is_lif_without_reset():
    x = _x(16, 200, seed=3)
    expected = (lambda_matrix(16, 0.5, torch.float64) @ x - 1.0 >= 0).double()
    assert torch.equal(fpt_lif(x, tau=2.0, K=1, mode="hard"), expected)


def test_K_auto_reaches_lif_and_stops_early():
    x = _x(64, 1000, seed=4)
    for decay in (0.5, 0.9):
        ref = lif_reference(x, decay=decay)
        s, info = fpt_lif(x, decay=decay, K="auto", mode="hard", return_info=True)
        assert torch.equal(s, ref)
        assert info.iterations < 64
    _, info = fpt_lif(x, decay=0.5, K="auto", mode="hard", return_info=True)
    assert info.iterations <= 16


def test_fidelity_table_lambda_half():
    """The README's fidelity table (hard mode vs the sequential LIF): λ = 0.5, x ~ N(0.5, 1): mismatch(K=3) ≤ 3%,
    and mismatch falls with K."""
    x = _x(64, 4096, seed=5)
    ref = lif_reference(x, decay=0.5)
    rates = [mismatch_rate(fpt_lif(x, decay=0.5, K=k, mode="hard"), ref) for k in range(1, 7)]
    assert rates[2] <= 0.03
    assert all(a >= b for a, b in zip(rates, rates[1:]))


# ----- gradients -------------------------------------------------------------------------------------------------
def test_gradcheck_soft_path_exact_sigmoid():
    x = (torch.randn(6, 5, dtype=torch.float64) * 0.5 + 0.8).requires_grad_(True)
    for path in ("dense", "chunked", "scan"):

        def f(inp, path=path):
            return fpt_lif(
                inp,
                K=3,
                alpha_schedule=(1.0, 2.0, 3.0),
                output="soft",
                surrogate_backward="sigmoid",
                path=path,
                chunk_size=4,
            )

        assert torch.autograd.gradcheck(f, (x,))


def test_flat_sigmoid_backward_formula():
    z = torch.linspace(-3, 3, 41, dtype=torch.float64, requires_grad=True)
    for alpha in (2.0, 6.0, 12.0):
        z.grad = None
        out = soft_spike(z, alpha)
        assert_close(out, torch.sigmoid(alpha * z))
        out.sum().backward()
        ab = flat_slope(alpha)
        sb = torch.sigmoid(ab * z.detach())
        assert_close(z.grad, ab * sb * (1 - sb))
    assert flat_slope(2.0) == 1.0 and flat_slope(12.0) == 4.0


def test_detach_reset_cuts_gradient_through_reset():
    x = _x(12, 50, seed=6).requires_grad_(True)
    kw = {"K": 3, "output": "soft", "surrogate_backward": "sigmoid"}
    fpt_lif(x, detach_reset=True, **kw).sum().backward()
    g_detached = x.grad.clone()
    # the same with the reset term explicitly built from detached soft iterates
    x2 = x.detach().clone().requires_grad_(True)
    L = lambda_matrix(12, 0.5, torch.float64)
    A = L - torch.eye(12, dtype=torch.float64)
    C = L @ x2
    s = torch.sigmoid(2.0 * (C - 1))
    s = torch.sigmoid(6.0 * (C - A @ s.detach() - 1))
    s = torch.sigmoid(12.0 * (C - A @ s.detach() - 1))
    s.sum().backward()
    assert_close(g_detached, x2.grad)
    x.grad = None
    fpt_lif(x, detach_reset=False, **kw).sum().backward()
    assert not torch.allclose(x.grad, g_detached)


def test_bernoulli_straight_through():
    x = _x(8, 2000, seed=7).requires_grad_(True)
    g = torch.Generator().manual_seed(0)
    s = fpt_lif(x, K=3, output="bernoulli", generator=g)
    assert set(s.unique().tolist()) <= {0.0, 1.0}
    w = torch.randn_like(s)
    (s * w).sum().backward()
    g_bern = x.grad.clone()
    x.grad = None
    p = fpt_lif(x, K=3, output="soft")
    (p * w).sum().backward()
    assert_close(g_bern, x.grad)
    # samples follow the soft probabilities
    assert abs(s.mean().item() - p.mean().item()) < 0.01
    s2 = fpt_lif(x, K=3, output="bernoulli", generator=torch.Generator().manual_seed(0))
    assert torch.equal(s, s2)


def test_learnable_decay_gradient_matches_finite_difference():
    x = _x(10, 20, seed=8)
    cfg = FPTConfig(K=3, output="soft", surrogate_backward="sigmoid", alpha_schedule=(1.0,))
    lam = torch.tensor(0.6, dtype=torch.float64, requires_grad=True)
    for path in ("dense", "chunked"):
        cfg.path = path
        cfg.chunk_size = 4

        def f(d):
            return fpt_iterate(x, cfg, decay=d)[0].sum()

        assert torch.autograd.gradcheck(f, (lam,))


# ----- bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tau": 1.0}, "tau"),
        ({"tau": 0.5}, "tau"),
        ({"decay": 0.0}, "decay"),
        ({"decay": 1.5}, "decay"),
        ({"K": 0}, "K must"),
        ({"K": 2.5}, "K must"),
        ({"K": "three"}, "K must"),
        ({"alpha_schedule": ()}, "alpha_schedule"),
        ({"alpha_schedule": (2.0, -1.0, 3.0)}, "alpha_schedule"),
        ({"alpha_schedule": (2.0, 3.0)}, "alpha_schedule"),
        ({"mode": "fuzzy"}, "mode"),
        ({"output": "spike"}, "output"),
        ({"path": "fft"}, "path"),
        ({"v_threshold": 0.0}, "v_threshold"),
        ({"K": "auto"}, "mode='hard'"),
        ({"mode": "hard", "output": "bernoulli"}, "heaviside"),
    ],
)
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fpt_lif(torch.randn(4, 3), **kwargs)


def test_bad_inputs():
    with pytest.raises(ValueError, match="floating"):
        fpt_lif(torch.ones(4, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="at least 2 dims"):
        fpt_lif(torch.randn(4))
    with pytest.raises(ValueError, match="empty"):
        fpt_lif(torch.randn(4, 0))
    with pytest.raises(ValueError, match="NaN"):
        fpt_lif(torch.tensor([[float("nan")], [0.0]]))
    with pytest.raises(ValueError, match="torch.Tensor"):
        fpt_lif([[1.0]])


# ----- the scan path and the fused solve ----------------------------------------------------------------------
@pytest.mark.parametrize("path", ["dense", "chunked", "scan"])
@pytest.mark.parametrize("decay", [0.5, 0.9, 1.0])
def test_apply_lambda_and_its_transpose(path, decay):
    y = _x(29, 11, seed=11)
    L = lambda_matrix(29, decay, torch.float64)
    assert_close(apply_lambda(y, decay, path=path, chunk_size=8), L @ y, rtol=1e-12, atol=1e-12)
    assert_close(apply_lambda(y, decay, path=path, chunk_size=8, transpose=True), L.t() @ y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "kw",
    [
        {"mode": "soft", "output": "soft", "surrogate_backward": "sigmoid"},
        {"mode": "soft", "output": "heaviside", "decay_input": True},
        {"mode": "soft", "output": "bernoulli", "detach_reset": True},
        {"mode": "hard", "output": "heaviside", "K": 4, "v_threshold": 0.7},
        {"mode": "soft", "output": "soft", "K": 1},
        {"mode": "soft", "output": "soft", "K": 2, "alpha_schedule": (3.0,)},
    ],
)
def test_scan_path_equals_dense_over_column_blocks(kw, monkeypatch):
    """The CPU scan walks time over column blocks (3 blocks of 7 here) with K running states; its spikes, membrane
    and input gradient equal the dense Λ-matrix solve."""
    import fpt_snn.functional as fn

    monkeypatch.setattr(fn, "COLUMN_BLOCK", 7)
    x = (_x(23, 20, seed=12) * 1.3).requires_grad_(True)
    w = torch.randn(23, 20, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    res = {}
    for path in ("dense", "scan"):
        x.grad = None
        s, info = fpt_lif(x, path=path, generator=torch.Generator().manual_seed(1), return_info=True, **kw)
        (s * w).sum().backward()
        res[path] = (s.detach(), info.v_seq.detach(), x.grad.clone())
    (sd, vd, gd), (ss, vs, gs) = res["dense"], res["scan"]
    if kw["output"] == "soft":
        assert_close(ss, sd, rtol=1e-12, atol=1e-12)
    else:
        assert torch.equal(ss, sd)
    assert_close(vs, vd, rtol=1e-12, atol=1e-12)
    assert_close(gs, gd, rtol=1e-10, atol=1e-12)
    assert gd.abs().sum() > 0


def test_fused_solve_saves_only_its_input():
    """Activation memory: the fused solve keeps a reference to its input for backward and nothing else (autograd
    through the K sweeps kept ~(K+2) tensors of the input's size)."""
    x = _x(40, 64, seed=14).requires_grad_(True)
    for path in ("dense", "chunked", "scan"):
        saved: list[torch.Tensor] = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t, saved=saved: saved.append(t) or t, lambda t: t):
            out = fpt_lif(x, K=3, path=path)
        assert len(saved) == 1, path
        assert saved[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr(), path
        out.sum().backward()


_TRITON_CHECK = """
import torch
from fpt_snn.functional import fpt_lif
g = torch.Generator().manual_seed(15)
x = (torch.randn(9, 6, 3, generator=g) * 1.2 + 0.6).requires_grad_(True)
outs = {}
for impl in ("torch", "triton"):
    x.grad = None
    s = fpt_lif(x, K=3, output="soft", path="scan", impl=impl)
    s.sum().backward()
    outs[impl] = (s.detach(), x.grad.clone())
ds = (outs["triton"][0] - outs["torch"][0]).abs().max().item()
dg = (outs["triton"][1] - outs["torch"][1]).abs().max().item()
assert ds <= 1e-5 and dg <= 1e-4, (ds, dg)
assert outs["torch"][1].abs().sum() > 0
print("ok")
"""


@pytest.mark.slow
def test_triton_scan_under_the_interpreter_matches_torch():
    """The GPU route (the shared Triton linear_scan behind the scan path) on CPU tensors through Triton's interpreter,
    in a fresh process: the interpreter setting is read when triton is first imported."""
    import os
    import subprocess
    import sys

    from icml25_shared.kernels import triton_available

    if not triton_available():
        pytest.skip("triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", _TRITON_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-2000:]


@pytest.mark.parametrize("detach_reset", [False, True])
def test_K_auto_gradient_equals_K_T(detach_reset):
    """K="auto" (stops early) and K=T (every sweep) have the same spikes and the same gradient: BPTT's."""
    x = _x(64, 30, seed=9).requires_grad_(True)
    kw = {"tau": 2.0, "mode": "hard", "alpha_schedule": 9.0, "detach_reset": detach_reset}
    a, info = fpt_lif(x, K="auto", return_info=True, **kw)
    b = fpt_lif(x, K=64, **kw)
    assert info.iterations < 64 and torch.equal(a, b)
    w = torch.randn(a.shape, generator=torch.Generator().manual_seed(10), dtype=a.dtype)
    (ga,) = torch.autograd.grad((a * w).sum(), x)
    (gb,) = torch.autograd.grad((b * w).sum(), x)
    torch.testing.assert_close(ga, gb, rtol=1e-10, atol=1e-12)
