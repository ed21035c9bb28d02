"""Closed forms of the three shape transformations (slice, Kronecker, gate)."""

from __future__ import annotations

import pytest
import torch

from bslora import functional as F


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_kron_delta_closed_forms():
    g = _g()
    r, S, kin, kout = 3, 4, 5, 2
    A, B = torch.randn(r, S, generator=g, dtype=torch.float64), torch.randn(S, r, generator=g, dtype=torch.float64)
    a, b = torch.randn(1, kin, generator=g, dtype=torch.float64), torch.randn(kout, 1, generator=g, dtype=torch.float64)
    d = F.kron_delta(A, B, a, b)
    assert d.shape == (kout * S, kin * S)
    explicit = torch.kron(b, B) @ torch.kron(a, A)
    torch.testing.assert_close(d, explicit, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(d, torch.kron(b @ a, B @ A), rtol=1e-12, atol=1e-12)
    Ae, Be = F.kron_factors(A, B, a, b)
    torch.testing.assert_close(Be @ Ae, d)


def test_kron_apply_equals_explicit():
    g = _g(1)
    r, S, kin, kout = 2, 8, 3, 4
    A, B = torch.randn(r, S, generator=g), torch.randn(S, r, generator=g)
    a, b = torch.randn(1, kin, generator=g), torch.randn(kout, 1, generator=g)
    x = torch.randn(2, 5, kin * S, generator=g)
    y = F.kron_apply(x, A, B, a, b)
    ref = x @ (torch.kron(b, B) @ torch.kron(a, A)).t()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("shared", "size", "expected"), [(10, 4, 3), (11, 4, 3), (9, 4, 2), (8, 8, 0), (7, 2, 2)])
def test_slice_offset_centred_rounds_down(shared, size, expected):
    assert F.slice_offset(shared, size, "center") == expected
    assert F.slice_offset(shared, size, "start") == 0


def test_slice_delta_is_centred_window():
    A = torch.arange(2 * 9, dtype=torch.float64).reshape(2, 9)
    B = torch.arange(7 * 2, dtype=torch.float64).reshape(7, 2)
    d = F.slice_delta(A, B, in_features=4, out_features=4)  # c = 2, c' = 1
    torch.testing.assert_close(d, B[1:5] @ A[:, 2:6])
    assert not torch.equal(d, B[:4] @ A[:, :4])
    torch.testing.assert_close(F.slice_delta(A, B, 4, 4, "start"), B[:4] @ A[:, :4])
    x = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(F.slice_apply(x, A, B, 4), x @ d.t())


def test_gate_delta_rank_one_and_apply():
    g = _g(2)
    r, G, fin, fout = 4, 16, 12, 20
    A, B = torch.randn(r, G, generator=g, dtype=torch.float64), torch.randn(G, r, generator=g, dtype=torch.float64)
    u_in, v_in = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((1, fin), (G, 1)))
    u_out, v_out = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((1, G), (fout, 1)))
    d = F.gate_delta(A, B, u_in, v_in, u_out, v_out)
    assert d.shape == (fout, fin)
    assert torch.linalg.matrix_rank(d).item() == 1
    # the official forward, step by step: z = v_in (u_in x); z <- B A z; out = v_out (u_out z)
    x = torch.randn(5, fin, generator=g, dtype=torch.float64)
    z = (x @ u_in.t()) @ v_in.t()
    z = z @ A.t() @ B.t()
    ref = (z @ u_out.t()) @ v_out.t()
    torch.testing.assert_close(x @ d.t(), ref)
    torch.testing.assert_close(F.gate_apply(x, A, B, u_in, v_in, u_out, v_out), ref)
    a, b = F.gate_factors(A, B, u_in, v_in, u_out, v_out)
    torch.testing.assert_close(b @ a, d)


def test_slice_window_too_large_raises():
    with pytest.raises(ValueError, match="exceeds"):
        F.slice_offset(4, 5)


def test_kron_bad_sampler_shape():
    with pytest.raises(ValueError, match="sampler a"):
        F.kron_delta(torch.ones(2, 4), torch.ones(4, 2), torch.ones(3, 1), torch.ones(2, 1))
