"""icml25_shared.kernels: references against independent formulations, the autograd Functions against autograd
through the references and gradcheck (torch path, float64), every Triton kernel against its reference forward and
backward under Triton's CPU interpreter (small shapes), bad input, and the real kernels on CUDA (``-m gpu``)."""

import sys

import pytest
import torch

from icml25_shared.kernels import (
    CSR,
    _dispatch,
    grouped_lora,
    grouped_lora_reference,
    grouped_matmul,
    grouped_matmul_reference,
    linear_scan,
    linear_scan_reference,
    masked_spmm,
    masked_spmm_reference,
    triton_available,
)
from icml25_shared.kernels._dispatch import use_triton
from icml25_shared.validate import ArgumentTypeError

needs_triton = pytest.mark.skipif(not triton_available(), reason="triton is not installed")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
RTOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.bfloat16: 2e-2, torch.float16: 2e-2}


@pytest.fixture
def interpret(monkeypatch):
    """Triton's CPU interpreter for this test (the kernels are decorated per setting, on first use)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> None:
    """max |a - b| <= rtol * max |b| (relative to the largest entry: sums of products cancel entrywise)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    scale = b.double().abs().max().item() if b.numel() else 0.0
    assert err <= rtol * max(scale, 1e-30), f"max error {err:.3g} > {rtol} x {scale:.3g}"


def grads(out: torch.Tensor, inputs: list[torch.Tensor], seed: int = 7) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A fixed random cotangent of ``out`` (in float32 or wider) and the gradients it gives ``inputs``."""
    g = torch.Generator().manual_seed(seed)
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64)
    cot = cot.to(device=out.device, dtype=torch.promote_types(out.dtype, torch.float32))
    return cot, list(torch.autograd.grad(out, inputs, cot.to(out.dtype)))


def leaf(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.detach().to(dtype).requires_grad_()


# ------------------------------------------------------------------------------------------------------------------
# segmented matmul
# ------------------------------------------------------------------------------------------------------------------
def seg_problem(N=37, K=24, M=20, G=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, K, generator=g, dtype=dtype)
    W = torch.randn(G, K, M, generator=g, dtype=dtype)
    group = torch.randint(-1, G, (N,), generator=g)
    group[:2] = torch.tensor([G - 1, -1])  # both ends of the range present
    return x, W, group


def test_grouped_matmul_reference_is_the_per_row_product():
    x, W, group = seg_problem()
    dense = torch.einsum("nk,nkm->nm", x, W[group.clamp(min=0)]) * (group >= 0).unsqueeze(1)
    close(grouped_matmul_reference(x, W, group, scale=0.5), 0.5 * dense, 1e-12)


def test_grouped_lora_reference_is_the_per_row_low_rank_product():
    x, A, group = seg_problem(M=3)
    B = torch.randn(A.shape[0], 3, 11, dtype=torch.float64)
    rows = [2.0 * (x[i] @ A[g]) @ B[g] if g >= 0 else torch.zeros(11, dtype=x.dtype) for i, g in enumerate(group)]
    close(grouped_lora_reference(x, A, B, group, 2.0), torch.stack(rows), 1e-12)


@pytest.mark.parametrize("group_sorted", [False, True])
def test_grouped_matmul_torch_path_matches_autograd_of_reference(group_sorted):
    x, W, group = seg_problem()
    if group_sorted:
        group = group.sort().values
    x, W = leaf(x, torch.float64), leaf(W, torch.float64)
    y = grouped_matmul(x, W, group, scale=0.7, group_sorted=group_sorted, impl="torch")
    yr = grouped_matmul_reference(x, W, group, 0.7)
    close(y, yr, 1e-12)
    for a, b in zip(grads(y, [x, W])[1], grads(yr, [x, W])[1]):
        close(a, b, 1e-12)


def test_gradcheck_grouped_matmul_and_lora_torch_path():
    x, W, group = seg_problem(N=9, K=4, M=3, G=3)
    x, W = leaf(x, torch.float64), leaf(W, torch.float64)
    assert torch.autograd.gradcheck(lambda a, w: grouped_matmul(a, w, group, scale=1.5, impl="torch"), (x, W))
    A = leaf(torch.randn(3, 4, 2, dtype=torch.float64), torch.float64)
    B = leaf(torch.randn(3, 2, 5, dtype=torch.float64), torch.float64)
    fn = lambda a, p, q: grouped_lora(a, p, q, group, scale=0.5, impl="torch")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, A, B))


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_matmul_triton_matches_reference(interpret, dtype):
    x, W, group = seg_problem(K=40)
    # strided inputs: x a column slice, W read through a transpose of a (G, M, K) stack
    x = leaf(torch.cat([x, x[:, :5]], 1), dtype)[:, :40]
    W_mk = leaf(W.transpose(1, 2).contiguous(), dtype)
    W = W_mk.transpose(1, 2)
    y = grouped_matmul(x, W, group, scale=0.5, impl="triton")
    yr = grouped_matmul_reference(x.double(), W.double(), group, 0.5)
    close(y, yr, RTOL[dtype])
    assert y.dtype == dtype
    for a, b in zip(grads(y, [x, W_mk])[1], grads(yr, [x, W_mk])[1]):
        close(a, b, RTOL[dtype])


@needs_triton
def test_grouped_matmul_triton_sorted_rows(interpret):
    x, W, group = seg_problem(N=40, G=3)
    group = group.sort().values
    x, W = leaf(x, torch.float32), leaf(W, torch.float32)
    y = grouped_matmul(x, W, group, group_sorted=True, impl="triton")
    yr = grouped_matmul_reference(x.double(), W.double(), group)
    close(y, yr, 1e-5)
    for a, b in zip(grads(y, [x, W])[1], grads(yr, [x, W])[1]):
        close(a, b, 1e-5)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_lora_triton_matches_reference(interpret, dtype):
    x, _, group = seg_problem(N=24, G=3)
    G, K, R, M = 3, x.shape[1], 4, 20
    gen = torch.Generator().manual_seed(3)
    x = leaf(x, dtype)
    A_rk = leaf(torch.randn(G, R, K, generator=gen), dtype)  # peft's lora_A layout, stacked
    B_mr = leaf(torch.randn(G, M, R, generator=gen), dtype)  # peft's lora_B layout, stacked
    y = grouped_lora(x, A_rk.transpose(1, 2), B_mr.transpose(1, 2), group, scale=2.0, impl="triton")
    yr = grouped_lora_reference(x.double(), A_rk.double().transpose(1, 2), B_mr.double().transpose(1, 2), group, 2.0)
    close(y, yr, RTOL[dtype])
    for a, b in zip(grads(y, [x, A_rk, B_mr])[1], grads(yr, [x, A_rk, B_mr])[1]):
        close(a, b, RTOL[dtype])


def test_grouped_matmul_per_request_ids_over_tokens():
    # x (batch, tokens, K) with one id per request equals the flat rows with the id repeated over the tokens
    x, W, _ = seg_problem(N=12)
    x3, req = x.view(4, 3, -1), torch.tensor([2, -1, 0, 2])
    flat = grouped_matmul(x, W, req.repeat_interleave(3), impl="torch")
    close(grouped_matmul(x3, W, req, impl="torch"), flat.view(4, 3, -1), 1e-12)
    close(grouped_matmul(x3, W, req.repeat_interleave(3).view(4, 3), impl="torch"), flat.view(4, 3, -1), 1e-12)
    A, B = W[:, :, :2], W[:, :2, :]
    lora = grouped_lora(x, A, B, req.repeat_interleave(3), impl="torch")
    close(grouped_lora(x3, A, B, req, impl="torch"), lora.view(4, 3, -1), 1e-12)
    with pytest.raises(ValueError, match=r"group must have shape \(4, 3\) or a prefix of it"):
        grouped_matmul(x3, W, req[:3])


@needs_triton
def test_grouped_matmul_tile_schedule_kernel_equals_torch_construction(interpret):
    from icml25_shared.kernels.segmm import _Schedule

    gen = torch.Generator().manual_seed(1)
    for N, G, block_m in [(37, 5, 16), (5, 40, 16), (0, 3, 16), (300, 9, 32)]:
        sched = _Schedule(torch.randint(-1, G, (N,), generator=gen), G, group_sorted=False)
        n_tiles = -(-N // block_m) + G + 1
        assert torch.equal(sched.tiles(block_m, triton=True), sched._tiles_torch(block_m, n_tiles))


def test_grouped_matmul_bad_input():
    x, W, group = seg_problem(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"weight must have shape \(G >= 1, 24, M\)"):
        grouped_matmul(x, W[:, :5], group)
    with pytest.raises(ArgumentTypeError, match="weight must have dtype torch.float32"):
        grouped_matmul(x, W.double(), group)
    with pytest.raises(ValueError, match="weight must be on device meta"):
        grouped_matmul(x.to("meta"), W, group.to("meta"))
    with pytest.raises(ValueError, match="group must have shape"):
        grouped_matmul(x, W, group[:-1])
    with pytest.raises(ArgumentTypeError, match="group must have an integer dtype"):
        grouped_matmul(x, W, group.float())
    with pytest.raises(ValueError, match=r"group ids must lie in \[-1, 5\).*got ids from -1 to 5"):
        grouped_matmul(x, W, torch.where(group == 0, 5, group))
    with pytest.raises(ValueError, match="from -2"):
        grouped_matmul(x, W, torch.where(group == 0, -2, group))
    with pytest.raises(ValueError, match="non-decreasing when group_sorted=True"):
        grouped_matmul(x, W, group, group_sorted=True)
    with pytest.raises(ValueError, match="B must have shape"):
        grouped_lora(x, W[:, :, :3], W[:, :4], group)
    with pytest.raises(ValueError, match="impl must be one of"):
        grouped_matmul(x, W, group, impl="cuda")


# ------------------------------------------------------------------------------------------------------------------
# masked CSR SpMM
# ------------------------------------------------------------------------------------------------------------------
def spmm_problem(n=13, m=11, E=60, F=20, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    row, col = torch.randint(0, n, (E,), generator=g), torch.randint(0, m, (E,), generator=g)
    row[0], col[0] = row[1], col[1]  # a duplicate entry (summed)
    csr = CSR.from_coo(row, col, (n, m))
    values = torch.randn(E, generator=g, dtype=dtype)[csr.order]
    x = torch.randn(m, F, generator=g, dtype=dtype)
    keep = torch.rand(E, generator=g) < 0.6
    score = torch.rand(E, generator=g, dtype=dtype)
    return csr, values, x, keep, score, (row, col)


def dense_masked(csr: CSR, values: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The masked adjacency as a dense matrix, entry by entry (duplicates summed)."""
    a = torch.zeros(csr.shape, dtype=values.dtype)
    crow, col = csr.crow.tolist(), csr.col.tolist()
    for r in range(csr.shape[0]):
        for e in range(crow[r], crow[r + 1]):
            if m[e]:
                a[r, col[e]] += values[e]
    return a


@pytest.mark.parametrize("mask", ["none", "keep", "score", "both"])
def test_masked_spmm_reference_is_the_dense_masked_product(mask):
    csr, values, x, keep, score, _ = spmm_problem()
    thr = torch.tensor(0.4, dtype=torch.float64)
    kw = {"none": {}, "keep": {"keep": keep}, "score": {"score": score, "threshold": 0.4},
          "both": {"keep": keep, "score": score, "threshold": thr}}[mask]  # fmt: skip
    m = torch.ones_like(keep)
    if "keep" in kw:
        m &= keep
    if "score" in kw:
        m &= score >= 0.4
    out = masked_spmm_reference(csr, values, x, **kw)
    close(out, dense_masked(csr, values, m) @ x, 1e-12)
    close(masked_spmm(csr, values, x, impl="torch", **kw), out, 1e-12)


def test_csr_from_coo_and_from_sparse_agree_with_torch_sparse():
    csr, values, x, *_, (row, col) = spmm_problem()
    coo = torch.sparse_coo_tensor(
        torch.stack([row, col]), values[csr.order.argsort()], csr.shape, check_invariants=True
    )
    ref = torch.sparse.mm(coo, x)
    close(masked_spmm(csr, values, x), ref, 1e-12)
    csr2, vals2 = CSR.from_sparse(coo)
    close(masked_spmm(csr2, vals2, x), ref, 1e-12)
    t, eid = csr.transposed()  # the transpose's structure, read through the edge order
    everything = torch.ones(csr.nnz, dtype=torch.bool)
    close(
        masked_spmm(t, values[eid], torch.eye(csr.shape[0], dtype=x.dtype)),
        dense_masked(csr, values, everything).t(),
        1e-12,
    )


def test_masked_spmm_torch_path_matches_autograd_of_reference_and_gradcheck():
    csr, values, x, keep, score, _ = spmm_problem(n=6, m=5, E=14, F=3)
    values, x = leaf(values, torch.float64), leaf(x, torch.float64)
    kw = {"keep": keep, "score": score, "threshold": 0.3}
    out = masked_spmm(csr, values, x, impl="torch", **kw)
    ref = masked_spmm_reference(csr, values, x, **kw)
    close(out, ref, 1e-12)
    for a, b in zip(grads(out, [values, x])[1], grads(ref, [values, x])[1]):
        close(a, b, 1e-12)
    fn = lambda v, z: masked_spmm(csr, v, z, impl="torch", **kw)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (values, x))


@needs_triton
@pytest.mark.parametrize(
    ("dtype", "mask"),
    [(torch.float32, "none"), (torch.float32, "keep"), (torch.float32, "score"), (torch.bfloat16, "both")],
)
def test_masked_spmm_triton_matches_reference(interpret, dtype, mask):
    csr, values, x, keep, score, _ = spmm_problem()
    thr = torch.tensor(0.4) if mask == "both" else 0.4
    kw = {"none": {}, "keep": {"keep": keep}, "score": {"score": score.float(), "threshold": thr},
          "both": {"keep": keep, "score": score.to(dtype), "threshold": thr}}[mask]  # fmt: skip
    values = leaf(values, dtype)
    x_t = leaf(x.t().contiguous(), dtype)  # x read through a transpose (strided)
    out = masked_spmm(csr, values, x_t.t(), impl="triton", **kw)
    ref = masked_spmm_reference(csr, values.double(), x_t.t().double(), **kw)
    close(out, ref, RTOL[dtype])
    for a, b in zip(grads(out, [values, x_t])[1], grads(ref, [values, x_t])[1]):
        close(a, b, RTOL[dtype])


def test_masked_spmm_bad_input():
    csr, values, x, keep, score, _ = spmm_problem(dtype=torch.float32)
    with pytest.raises(ValueError, match="crow must be non-decreasing"):
        CSR(torch.tensor([0, 2, 1, 3]), torch.tensor([0, 1, 2]), (3, 3))
    with pytest.raises(ValueError, match="crow must be a CSR row pointer from 0 to nnz"):
        CSR(torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]), (2, 3))
    with pytest.raises(ValueError, match="crow must have shape"):
        CSR(torch.tensor([0, 2, 3]), torch.tensor([0, 1, 2]), (3, 3))
    with pytest.raises(ValueError, match=r"col must lie in \[0, 3\)"):
        CSR(torch.tensor([0, 2, 3]), torch.tensor([0, 1, 3]), (2, 3))
    with pytest.raises(ArgumentTypeError, match="csr must be an icml25_shared.kernels.CSR"):
        masked_spmm(torch.eye(3).to_sparse_csr(), values, x)
    with pytest.raises(ArgumentTypeError, match="adj must be a 2-D torch.sparse_csr"):
        CSR.from_sparse(torch.eye(3))
    with pytest.raises(ValueError, match=r"x must have shape \(11, F\)"):
        masked_spmm(csr, values, x[:-1])
    with pytest.raises(ArgumentTypeError, match="values must have dtype torch.float32"):
        masked_spmm(csr, values.double(), x)
    with pytest.raises(ValueError, match="values must have shape"):
        masked_spmm(csr, values[:-1], x)
    with pytest.raises(ArgumentTypeError, match="keep must have dtype torch.bool"):
        masked_spmm(csr, values, x, keep=keep.float())
    with pytest.raises(ValueError, match="score and threshold go together"):
        masked_spmm(csr, values, x, score=score)
    with pytest.raises(ValueError, match="x must be on device meta"):
        masked_spmm(CSR(csr.crow.to("meta"), csr.col.to("meta"), csr.shape, check=False), values, x)


# ------------------------------------------------------------------------------------------------------------------
# decayed linear scan
# ------------------------------------------------------------------------------------------------------------------
def scan_problem(T=7, shape=(3, 4), seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, *shape, generator=g, dtype=dtype)
    lam = 0.3 + 0.7 * torch.rand(T, *shape, generator=g, dtype=dtype)
    h0 = torch.randn(*shape, generator=g, dtype=dtype)
    return x, lam, h0


def test_linear_scan_reference_is_the_closed_form():
    x, lam, h0 = scan_problem()
    T = x.shape[0]
    want = torch.zeros_like(x)
    for t in range(T):  # h_t = sum_s (prod_{s < u <= t} λ_u) x_s + (prod_{u <= t} λ_u) h0
        want[t] = torch.prod(lam[: t + 1], 0) * h0
        for s in range(t + 1):
            want[t] += torch.prod(lam[s + 1 : t + 1], 0) * x[s]
    close(linear_scan_reference(x, lam, h0), want, 1e-12)


def test_linear_scan_scalar_decay_is_the_leak_matrix_product():
    x, *_ = scan_problem(T=9, shape=(5,))
    i = torch.arange(9)
    leak = torch.where(i[:, None] >= i[None, :], 0.8 ** (i[:, None] - i[None, :]).clamp(min=0).double(), 0.0)
    close(linear_scan_reference(x, 0.8), leak @ x, 1e-12)
    close(linear_scan(x, 0.8, impl="torch"), leak @ x, 1e-12)


@pytest.mark.parametrize("decay_shape", ["scalar", "element", "step", "full"])
def test_linear_scan_torch_path_matches_autograd_of_reference_and_gradcheck(decay_shape):
    x, lam, h0 = scan_problem(T=5, shape=(2, 3))
    lam = {"scalar": lam[0, 0, 0], "element": lam[0], "step": lam[:, :1, :1], "full": lam}[decay_shape]
    x, lam, h0 = leaf(x, torch.float64), leaf(lam, torch.float64), leaf(h0, torch.float64)
    h = linear_scan(x, lam, h0, impl="torch")
    hr = linear_scan_reference(x, lam, h0)
    close(h, hr, 1e-12)
    for a, b in zip(grads(h, [x, lam, h0])[1], grads(hr, [x, lam, h0])[1]):
        close(a, b, 1e-12)
    assert torch.autograd.gradcheck(lambda a, d, s: linear_scan(a, d, s, impl="torch"), (x, lam, h0))


@needs_triton
@pytest.mark.parametrize(
    ("dtype", "decay_shape", "chunk"),
    [(torch.float32, "full", None), (torch.float32, "scalar", 4), (torch.bfloat16, "step", 3),
     (torch.float16, "element", 5)],
)  # fmt: skip
def test_linear_scan_triton_matches_reference(interpret, dtype, decay_shape, chunk):
    x, lam, h0 = scan_problem(T=13, shape=(3, 5))
    lam = {"scalar": lam[0, 0, 0], "element": lam[0], "step": lam[:, :1, :1], "full": lam}[decay_shape]
    x_t = leaf(x.transpose(1, 2).contiguous(), dtype)  # x read through a transpose (strided)
    lam, h0 = leaf(lam, torch.float32), leaf(h0, dtype)
    h = linear_scan(x_t.transpose(1, 2), lam, h0, chunk_size=chunk, impl="triton")
    hr = linear_scan_reference(x_t.transpose(1, 2).double(), lam.double(), h0.double())
    close(h, hr, RTOL[dtype])
    assert h.dtype == dtype
    for a, b in zip(grads(h, [x_t, lam, h0])[1], grads(hr, [x_t, lam, h0])[1]):
        close(a, b, RTOL[dtype])


def test_linear_scan_bad_input():
    x, lam, h0 = scan_problem(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"decay must be broadcastable to x's shape \(7, 3, 4\)"):
        linear_scan(x, lam[:, :2])
    with pytest.raises(ValueError, match="h0 must have shape"):
        linear_scan(x, lam, h0[:1])
    with pytest.raises(ArgumentTypeError, match="x must have a floating dtype"):
        linear_scan(x.long(), 0.5)
    with pytest.raises(ValueError, match="decay must be a float"):
        linear_scan(x, float("nan"))
    with pytest.raises(ValueError, match="decay must be on device meta"):
        linear_scan(x.to("meta"), lam)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        linear_scan(x, lam, chunk_size=0)


# ------------------------------------------------------------------------------------------------------------------
# dispatch
# ------------------------------------------------------------------------------------------------------------------
def test_auto_takes_the_torch_path_on_cpu_without_triton(monkeypatch):
    # CPU users never reach Triton: importing it fails and building a kernel raises, yet all three ops run
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setattr(_dispatch, "_build", lambda *a: pytest.fail("a Triton kernel was built on the CPU path"))
    x, W, group = seg_problem(dtype=torch.float32)
    x = x.requires_grad_()
    grouped_matmul(x, W, group).sum().backward()
    csr, values, xs, keep, *_ = spmm_problem(dtype=torch.float32)
    masked_spmm(csr, values, xs.requires_grad_(), keep=keep).sum().backward()
    xt = torch.randn(6, 2, requires_grad=True)
    linear_scan(xt, 0.9).sum().backward()
    assert x.grad is not None and xs.grad is not None and xt.grad is not None


def test_impl_triton_needs_cuda_or_the_interpreter(monkeypatch):
    x = torch.randn(3, 2)
    assert use_triton("op", "auto", [x]) is False
    assert use_triton("op", "torch", [x]) is False
    if triton_available():
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="impl='triton' runs on CUDA tensors, or on CPU tensors under"):
            linear_scan(x, 0.5, impl="triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        with pytest.raises(ValueError, match="float32, float16 or bfloat16, got torch.float64"):
            linear_scan(x.double(), 0.5, impl="triton")
    else:
        with pytest.raises(RuntimeError, match="needs the triton package"):
            linear_scan(x, 0.5, impl="triton")


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
def test_empty_inputs(monkeypatch, impl):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.randn(0, 4, requires_grad=True)
    W = torch.randn(2, 4, 3, requires_grad=True)
    y = grouped_matmul(x, W, torch.zeros(0, dtype=torch.long), impl=impl)
    y.sum().backward()
    assert y.shape == (0, 3) and torch.equal(W.grad, torch.zeros_like(W))
    csr = CSR(torch.zeros(4, dtype=torch.long), torch.zeros(0, dtype=torch.long), (3, 5))
    out = masked_spmm(csr, torch.zeros(0), torch.randn(5, 2), impl=impl)
    assert torch.equal(out, torch.zeros(3, 2))
    h = linear_scan(torch.randn(0, 3), 0.5, torch.randn(3), impl=impl)
    assert h.shape == (0, 3)


# ------------------------------------------------------------------------------------------------------------------
# every kernel compiles to an sm_90 binary (Triton's offline compiler and bundled ptxas; no device needed)
# ------------------------------------------------------------------------------------------------------------------
def _signatures(dt: str) -> dict:
    i32 = "i32"
    return {
        ("segmm", "_segmm_fwd"): (
            {"x_ptr": f"*{dt}", "w_ptr": f"*{dt}", "y_ptr": f"*{dt}", "perm_ptr": "*i64", "tiles_ptr": "*i64",
             "K": i32, "N_OUT": i32, "stride_xn": i32, "stride_xk": i32, "stride_wg": i32, "stride_wk": i32,
             "stride_wn": i32, "stride_yn": i32, "stride_yo": i32, "scale": "fp32"},
            {"HAS_PERM": True, "UPCAST": False, "PRECISION": "ieee" if dt == "fp32" else "tf32", "BLOCK_M": 64,
             "BLOCK_N": 64, "BLOCK_K": 32},
        ),
        ("segmm", "_segmm_dw"): (
            {"x_ptr": f"*{dt}", "dy_ptr": f"*{dt}", "dw_ptr": f"*{dt}", "perm_ptr": "*i64", "seg_ptr": "*i64",
             "K": i32, "N_OUT": i32, "stride_xn": i32, "stride_xk": i32, "stride_dn": i32, "stride_do": i32,
             "stride_wg": i32, "stride_wk": i32, "stride_wn": i32, "scale": "fp32"},
            {"HAS_PERM": True, "UPCAST": False, "PRECISION": "tf32", "BLOCK_R": 32, "BLOCK_K": 64, "BLOCK_N": 16},
        ),
        ("segmm", "_segmm_tiles"): (
            {"seg_ptr": "*i64", "tiles_ptr": "*i64", "G": i32, "n_tiles": i32},
            {"BLOCK_M": 64, "P": 128, "TB": 64},
        ),
        ("spmm", "_spmm_fwd"): (
            {"crow_ptr": "*i64", "col_ptr": "*i64", "eid_ptr": "*i64", "val_ptr": f"*{dt}", "keep_ptr": "*u8",
             "score_ptr": "*fp32", "thr_ptr": "*fp64", "x_ptr": f"*{dt}", "out_ptr": f"*{dt}", "F": i32,
             "stride_xn": i32, "stride_xf": i32, "stride_on": i32, "stride_of": i32},
            {"HAS_EID": True, "HAS_KEEP": True, "HAS_SCORE": True, "BLOCK_E": 32, "BLOCK_F": 64},
        ),
        ("spmm", "_sddmm"): (
            {"row_ptr": "*i64", "col_ptr": "*i64", "keep_ptr": "*u8", "score_ptr": "*fp32", "thr_ptr": "*fp32",
             "dout_ptr": f"*{dt}", "x_ptr": f"*{dt}", "dval_ptr": f"*{dt}", "NNZ": i32, "F": i32,
             "stride_dn": i32, "stride_df": i32, "stride_xn": i32, "stride_xf": i32},
            {"HAS_KEEP": True, "HAS_SCORE": True, "BLOCK_E": 64, "BLOCK_F": 64},
        ),
        ("scan", "_scan"): (
            {"x_ptr": f"*{dt}", "lam_ptr": "*fp32", "out_ptr": f"*{dt}", "init_ptr": "*fp32", "carry_ptr": "*fp32",
             "hprev_ptr": f"*{dt}", "h0_ptr": "*fp32", "dlam_ptr": "*fp32", "end_ptr": "*fp32", "prod_ptr": "*fp32",
             "T": i32, "M": i32, "CHUNK": i32, "stride_xt": i32, "stride_xm": i32, "stride_lt": i32,
             "stride_lm": i32},
            {"REVERSE": True, "HAS_INIT": True, "HAS_CARRY": True, "SUMMARY": False, "STORE_DLAM": True,
             "HAS_H0": True, "BLOCK_M": 512},
        ),
    }  # fmt: skip


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize("dt", ["fp32", "bf16"])
@pytest.mark.parametrize("kernel", list(_signatures("fp32")), ids=lambda k: k[1])
def test_kernel_compiles_for_sm90(monkeypatch, kernel, dt):
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    module = importlib.import_module(f"icml25_shared.kernels._{kernel[0]}_triton")
    fn = triton.jit(getattr(module, kernel[1]))
    sig, consts = _signatures(dt)[kernel]
    full = {name: sig.get(name, "constexpr") for name in fn.arg_names}
    options = {"num_warps": 4, "num_stages": 3, "enable_fp_fusion": True}
    compiled = triton.compile(ASTSource(fn, full, constexprs=consts), target=GPUTarget("cuda", 90, 32), options=options)
    assert compiled.asm["cubin"]


# ------------------------------------------------------------------------------------------------------------------
# the compiled kernels on CUDA (-m gpu)
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@cuda
@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gpu_grouped_matmul_and_lora(dtype):
    torch.manual_seed(0)
    dev = "cuda"
    N, K, M, G, R = 1000, 512, 384, 16, 16
    x = leaf(torch.randn(N, K, device=dev), dtype)
    W = leaf(torch.randn(G, K, M, device=dev) / K**0.5, dtype)
    group = torch.randint(-1, G, (N,), device=dev)
    y = grouped_matmul(x, W, group, scale=0.5, impl="triton")
    yr = grouped_matmul_reference(x.double(), W.double(), group, 0.5)
    close(y, yr, RTOL[dtype])
    for a, b in zip(grads(y, [x, W])[1], grads(yr, [x, W])[1]):
        close(a, b, RTOL[dtype])
    A = leaf(torch.randn(G, R, K, device=dev) / K**0.5, dtype)
    B = leaf(torch.randn(G, M, R, device=dev), dtype)
    y = grouped_lora(x, A.transpose(1, 2), B.transpose(1, 2), group, scale=2.0)  # auto -> Triton on CUDA
    yr = grouped_lora_reference(x.double(), A.double().transpose(1, 2), B.double().transpose(1, 2), group, 2.0)
    close(y, yr, RTOL[dtype])
    for a, b in zip(grads(y, [x, A, B])[1], grads(yr, [x, A, B])[1]):
        close(a, b, RTOL[dtype])


@pytest.mark.gpu
@cuda
@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_masked_spmm(dtype):
    torch.manual_seed(0)
    dev = "cuda"
    n, E, F = 5000, 60000, 96
    csr = CSR.from_coo(torch.randint(0, n, (E,), device=dev), torch.randint(0, n, (E,), device=dev), (n, n))
    values = leaf(torch.rand(E, device=dev), dtype)
    x = leaf(torch.randn(n, F, device=dev), dtype)
    keep = torch.rand(E, device=dev) < 0.5
    score = torch.rand(E, device=dev)
    kw = {"keep": keep, "score": score, "threshold": score.mean() * 0.5}
    out = masked_spmm(csr, values, x, **kw)
    ref = masked_spmm_reference(csr, values.double(), x.double(), **kw)
    close(out, ref, RTOL[dtype])
    for a, b in zip(grads(out, [values, x])[1], grads(ref, [values, x])[1]):
        close(a, b, RTOL[dtype])


@pytest.mark.gpu
@cuda
@needs_triton
@pytest.mark.parametrize(("dtype", "T", "N"), [(torch.float32, 300, 2000), (torch.bfloat16, 256, 70000)])
def test_gpu_linear_scan(dtype, T, N):
    torch.manual_seed(0)
    dev = "cuda"
    x = leaf(torch.randn(T, N, device=dev), dtype)
    lam = leaf(0.5 + 0.5 * torch.rand(T, N, device=dev), torch.float32)
    h0 = leaf(torch.randn(N, device=dev), dtype)
    h = linear_scan(x, lam, h0)
    hr = linear_scan_reference(x.double(), lam.double(), h0.double())
    close(h, hr, RTOL[dtype])
    for a, b in zip(grads(h, [x, lam, h0])[1], grads(hr, [x, lam, h0])[1]):
        close(a, b, RTOL[dtype])
    lam_s = leaf(torch.tensor(0.9, device=dev), torch.float32)
    h = linear_scan(x, lam_s)
    hr = linear_scan_reference(x.double(), lam_s.double())
    close(h, hr, RTOL[dtype])
    for a, b in zip(grads(h, [x, lam_s])[1], grads(hr, [x, lam_s])[1]):
        close(a, b, RTOL[dtype])
