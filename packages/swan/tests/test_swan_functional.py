"""GradNorm (Alg. 3) and GradWhitening (Alg. 2) against closed forms, the SVD and exact symmetries."""

from __future__ import annotations

import math

import pytest
import torch

from swan import grad_norm, grad_whitening, rescale_to_unit_rms, swan_direction

f64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _orthogonal(n: int, g: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=f64))
    return q * torch.sign(torch.diagonal(r))


def _with_condition(m: int, n: int, cond: float, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """A (m, n) matrix, m <= n, with log-spaced singular values from 1 down to 1/cond."""
    U = _orthogonal(m, g)
    V = _orthogonal(n, g)[:, :m]
    s = torch.logspace(0, -math.log10(cond), m, dtype=f64)
    return ((U * s) @ V.T).to(dtype)


def _polar(G: torch.Tensor) -> torch.Tensor:
    U, _, Vh = torch.linalg.svd(G, full_matrices=False)
    return U @ Vh


# ---------------------------------------------------------------- GradNorm (Algorithm 3)
def test_grad_norm_rows_have_mean_zero_std_one_and_frobenius_sqrt_mn():
    G = torch.randn(3, 12, 40, generator=_gen(), dtype=f64) * 5 + 2
    Gn = grad_norm(G, eps=0.0)
    torch.testing.assert_close(Gn.mean(-1), torch.zeros(3, 12, dtype=f64), atol=1e-12, rtol=0)
    torch.testing.assert_close(Gn.std(-1, correction=0), torch.ones(3, 12, dtype=f64), atol=1e-12, rtol=0)
    torch.testing.assert_close(Gn.square().sum((-2, -1)), torch.full((3,), 12.0 * 40, dtype=f64))
    Gf = grad_norm(G.float())  # default eps: still within 1e-6 in float32
    assert (Gf.mean(-1).abs().max() < 1e-6) and ((Gf.std(-1, correction=0) - 1).abs().max() < 1e-6)


def test_grad_norm_is_invariant_to_row_affine_maps():
    g = _gen(1)
    G = torch.randn(8, 30, generator=g, dtype=f64)
    a = torch.rand(8, 1, generator=g, dtype=f64) * 10 + 0.1
    c = torch.randn(8, 1, generator=g, dtype=f64) * 100
    torch.testing.assert_close(grad_norm(a * G + c, eps=0.0), grad_norm(G, eps=0.0), atol=1e-10, rtol=0)


def test_grad_norm_column_axis_and_uncentred_deviation():
    G = torch.randn(10, 7, generator=_gen(2), dtype=f64) + 3
    torch.testing.assert_close(grad_norm(G, dim=-2, eps=0.0), grad_norm(G.T, eps=0.0).T)
    rms = grad_norm(G, eps=0.0, center=False)
    torch.testing.assert_close(rms, G / G.square().mean(-1, keepdim=True).sqrt())
    assert rms.mean(-1).abs().min() > 0.1  # not centred


def test_grad_norm_constant_row_gives_zeros_not_nan():
    G = torch.randn(4, 16, generator=_gen(3))
    G[1] = 7.5
    G[2] = 0.0
    Gn = grad_norm(G)
    assert torch.isfinite(Gn).all()
    assert torch.equal(Gn[1], torch.zeros(16)) and torch.equal(Gn[2], torch.zeros(16))
    D = swan_direction(G)  # and the whole pipeline stays finite
    assert torch.isfinite(D).all()


# ---------------------------------------------------------------- GradWhitening (Algorithm 2)
def test_whitening_beta_half_converges_to_polar_factor():
    G = _with_condition(24, 80, 30.0, _gen(4), f64)
    D = grad_whitening(G, ns_steps=40, ns_beta=0.5)
    assert (D - _polar(G)).abs().max() < 1e-8
    torch.testing.assert_close(D @ D.T, torch.eye(24, dtype=f64), atol=1e-8, rtol=0)


def test_whitening_svd_method_is_polar_factor_and_scale_invariant():
    G = torch.randn(2, 10, 30, generator=_gen(5), dtype=f64)
    torch.testing.assert_close(grad_whitening(G, method="svd"), _polar(G))
    for method in ("newton_schulz", "nsds", "svd"):
        torch.testing.assert_close(grad_whitening(37.0 * G, method=method), grad_whitening(G, method=method))
        torch.testing.assert_close(grad_whitening(1e-4 * G, method=method), grad_whitening(G, method=method))


@pytest.mark.parametrize(("ns_steps", "ns_beta"), [(10, 0.8), (6, 0.5), (3, 0.3), (2, 1.0)])
def test_whitening_is_orthogonally_equivariant(ns_steps, ns_beta):
    g = _gen(6)
    G = torch.randn(12, 20, generator=g, dtype=f64)
    Q, R = _orthogonal(12, g), _orthogonal(20, g)
    lhs = grad_whitening(Q @ G @ R, ns_steps, ns_beta)
    rhs = Q @ grad_whitening(G, ns_steps, ns_beta) @ R
    torch.testing.assert_close(lhs, rhs, rtol=1e-9, atol=1e-12)


def test_whitening_matches_an_independent_transcription_of_algorithm_2():
    """The folded, last-Y-skipping loop equals the literal coupled iteration (catches T·Z vs Z·T, β placement)."""
    G = torch.randn(9, 25, generator=_gen(7), dtype=f64)
    X = G / G.norm()
    Y, Z, eye = X @ X.T, torch.eye(9, dtype=f64), torch.eye(9, dtype=f64)
    for _ in range(7):
        T = 3 * eye - Z @ Y
        Y, Z = 0.8 * Y @ T, 0.8 * T @ Z
    torch.testing.assert_close(grad_whitening(G, 7, 0.8), Z @ X, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("method", ["newton_schulz", "nsds", "svd"])
@pytest.mark.parametrize("shape", [(30, 8), (8, 30), (3, 17, 5)])
def test_transpose_rule_and_shape(method, shape):
    G = torch.randn(*shape, generator=_gen(8), dtype=f64)
    D = grad_whitening(G, method=method)
    assert D.shape == G.shape and D.dtype == G.dtype
    torch.testing.assert_close(grad_whitening(G.transpose(-2, -1), method=method), D.transpose(-2, -1))


def test_batched_equals_per_matrix():
    G = torch.randn(5, 16, 24, generator=_gen(9))
    batched = grad_whitening(G)
    for i in range(5):
        torch.testing.assert_close(batched[i], grad_whitening(G[i]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("cond", "lo"), [(1e2, 0.5), (1e3, 0.5), (1e4, 0.25)])
def test_default_iteration_band_and_cosine_to_polar(cond, lo):
    G = _with_condition(64, 256, cond, _gen(10))
    D = grad_whitening(G, 10, 0.8)  # the raw output, before the rescale
    s = torch.linalg.svdvals(D.double())
    assert lo <= s.min() and s.max() <= 1.7, (s.min(), s.max())
    P = _polar(G.double())
    cosine = (D.double() * P).sum() / (D.double().norm() * P.norm())
    assert cosine > 0.9


def test_centred_square_input_keeps_null_space():
    G = torch.randn(64, 64, generator=_gen(11))
    Gn = grad_norm(G)  # centring: Gn·1 = 0, rank <= 63
    D = grad_whitening(Gn, 10, 0.8)
    assert torch.isfinite(D).all()
    ones = torch.ones(64, 1)
    assert (D @ ones).norm() / D.norm() < 1e-4
    D64 = grad_whitening(grad_norm(G.double()), 10, 0.8)
    assert (D64 @ ones.double()).norm() / D64.norm() < 1e-12


def test_rank_deficient_and_zero_inputs_stay_finite():
    g = _gen(12)
    rank1 = torch.randn(20, 1, generator=g) @ torch.randn(1, 50, generator=g)
    D = grad_whitening(rank1)
    assert torch.isfinite(D).all()
    # rank 1: the polar factor is u vᵀ, a multiple of the input
    cos = (D * rank1).sum() / (D.norm() * rank1.norm())
    assert cos > 0.999
    Z = grad_whitening(torch.zeros(6, 9))
    assert torch.equal(Z, torch.zeros(6, 9))
    assert torch.equal(rescale_to_unit_rms(torch.zeros(6, 9)), torch.zeros(6, 9))


def test_nsds_collapses_to_gradnorm_after_row_normalisation():
    """NSDS caveat (README): every row of Gn has norm sqrt(n), so diag(X Xᵀ) ∝ I and NSDS is a scalar multiple."""
    G = torch.randn(32, 96, generator=_gen(13))
    Gn = grad_norm(G)
    nsds = swan_direction(G, whitening="nsds")
    torch.testing.assert_close(nsds, Gn, rtol=1e-5, atol=1e-5)
    newton = swan_direction(G, whitening="newton_schulz")
    assert (newton - Gn).norm() / Gn.norm() > 0.1  # the full iteration does change the direction
    # without the row normalisation NSDS is a genuine row scaling: rows with larger norm shrink
    raw = torch.randn(4, 50, generator=_gen(14)) * torch.tensor([[1.0], [2.0], [4.0], [8.0]])
    d = grad_whitening(raw, method="nsds")
    ratio = d.norm(dim=-1) / raw.norm(dim=-1)
    assert torch.all(ratio[1:] < ratio[:-1])


def test_bf16_input_is_whitened_in_float32():
    G = torch.randn(16, 40, generator=_gen(15))
    out = grad_whitening(G.bfloat16())
    assert out.dtype == torch.bfloat16
    ref = grad_whitening(G.bfloat16().float())
    torch.testing.assert_close(out, ref.bfloat16(), rtol=0, atol=0)
    assert grad_whitening(G.double()).dtype == f64


def test_rescale_gives_unit_rms():
    D = swan_direction(torch.randn(2, 48, 20, generator=_gen(16)))
    torch.testing.assert_close(D.square().mean((-2, -1)), torch.ones(2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ns_steps": 0}, "ns_steps"),
        ({"ns_steps": 2.5}, "ns_steps"),
        ({"ns_beta": 0.0}, "ns_beta"),
        ({"ns_beta": 1.5}, "ns_beta"),
        ({"method": "eigh"}, "method"),
    ],
)
def test_whitening_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        grad_whitening(torch.randn(3, 4), **kwargs)


def test_bad_tensors():
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        grad_whitening(torch.randn(5))
    with pytest.raises(ValueError, match="floating"):
        grad_whitening(torch.ones(3, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="eps"):
        grad_norm(torch.randn(3, 3), eps=-1.0)
    with pytest.raises(ValueError, match="dim"):
        grad_norm(torch.randn(3, 3), dim=2)
    with pytest.raises(TypeError, match="torch.Tensor"):
        grad_norm([[1.0, 2.0]])
