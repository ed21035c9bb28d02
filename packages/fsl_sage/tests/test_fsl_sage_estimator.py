"""The gradient estimator and alignment math against closed forms, autograd and gradcheck."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fsl_sage import FSLSAGE, FSLConfig, GradScalarAux, SplitFedV2, cut_gradients, digits_cnn_split
from fsl_sage.align import AuxAdamState, adam_step, align_aux, align_many_vmap, alignment_generator


def _double_models():
    torch.manual_seed(1)
    c, s, a = digits_cnn_split()
    return c.double(), s.double(), a.double()


def test_frozen_server_copy_aux_gives_true_cut_gradient():
    c, s, _ = _double_models()
    aux = GradScalarAux(copy.deepcopy(s))
    assert not aux.analytic
    x = torch.rand(16, 1, 8, 8, dtype=torch.float64)
    y = torch.randint(0, 10, (16,))
    z = c(x).detach()
    torch.testing.assert_close(aux.estimate(z, y), cut_gradients(s, z, y), atol=1e-10, rtol=0)
    # batch-mean feedback of SplitFed == per-sample estimate / B
    zz = z.clone().requires_grad_(True)
    F.nll_loss(s(zz), y).backward()
    torch.testing.assert_close(aux.estimate(z, y) / 16, zz.grad, atol=1e-12, rtol=0)


def test_one_fsl_sage_step_with_exact_aux_equals_splitfed_v2_step():
    c, s, _ = _double_models()
    x = torch.rand(8, 1, 8, 8, dtype=torch.float64)
    y = torch.randint(0, 10, (8,))
    cfg = FSLConfig(rounds=1, batch_size=8, server_update_interval=1, align_epochs=0, weight_decay=1e-4)
    sage = FSLSAGE(c, s, GradScalarAux(copy.deepcopy(s)), cfg)
    sage.fit([(x, y)])
    sf = SplitFedV2(c, s, None, cfg)
    sf.fit([(x, y)])
    for p, q in zip(sage.clients[0].parameters(), sf.clients[0].parameters()):
        torch.testing.assert_close(p, q, atol=1e-10, rtol=0)
    for p, q in zip(sage.server.parameters(), sf.server.parameters()):
        torch.testing.assert_close(p, q, atol=1e-10, rtol=0)
    # and the step did move the client (the test can fail)
    assert not torch.allclose(next(sage.clients[0].parameters()), next(c.parameters()))


def test_linear_aux_closed_form_estimate():
    _, _, aux = _double_models()
    assert aux.analytic
    z = torch.randn(12, 32, 4, 4, dtype=torch.float64)
    y = torch.randint(0, 10, (12,))
    lin = aux.linear
    p = torch.softmax(z.flatten(1) @ lin.weight.T + lin.bias, 1)
    expected = ((p - F.one_hot(y, 10).double()) @ lin.weight).view_as(z) / 12
    torch.testing.assert_close(aux.estimate(z, y) / 12, expected, atol=1e-12, rtol=0)
    aux.analytic = False  # autograd path
    torch.testing.assert_close(aux.estimate(z, y) / 12, expected, atol=1e-12, rtol=0)


def test_analytic_alignment_gradient_equals_double_backprop():
    _, _, aux = _double_models()
    z = torch.randn(20, 32, 4, 4, dtype=torch.float64)
    y = torch.randint(0, 10, (20,))
    g = torch.randn_like(z) * 0.1
    l1, g1 = aux.alignment_grads(z, y, g, analytic=True)
    l2, g2 = aux.alignment_grads(z, y, g, analytic=False)
    torch.testing.assert_close(l1, l2, atol=1e-10, rtol=1e-10)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_alignment_loss_gradcheck():
    torch.manual_seed(0)
    head = nn.Sequential(nn.Flatten(), nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3), nn.LogSoftmax(1)).double()
    aux = GradScalarAux(head)
    z = torch.randn(4, 6, dtype=torch.float64)
    y = torch.tensor([0, 2, 1, 2])
    g = torch.randn(4, 6, dtype=torch.float64)
    names = [n for n, _ in aux.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in aux.parameters())

    def loss(*ps):
        zz = z.clone().requires_grad_(True)
        lp = torch.func.functional_call(aux, dict(zip(names, ps)), (zz,))
        (gz,) = torch.autograd.grad(F.nll_loss(lp, y, reduction="sum"), zz, create_graph=True)
        return ((gz - g) ** 2).sum()

    assert torch.autograd.gradcheck(loss, params)
    # and the module's own gradients agree with that function
    _, grads = aux.alignment_grads(z, y, g)
    auto = torch.autograd.grad(loss(*params), params)
    for a, b in zip(grads, auto):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_functional_adam_matches_torch_adam():
    torch.manual_seed(0)
    p1 = torch.randn(5, 3)
    p2 = p1.clone().requires_grad_(True)
    opt = torch.optim.Adam([p2], lr=1e-2)
    st = AuxAdamState()
    for _ in range(5):
        g = torch.randn(5, 3)
        adam_step([p1], [g], st, 1e-2)
        p2.grad = g.clone()
        opt.step()
    torch.testing.assert_close(p1, p2.detach(), atol=1e-6, rtol=1e-6)


def _realisable(seed: int):
    torch.manual_seed(seed)
    server = nn.Sequential(nn.Flatten(), nn.Linear(12, 4), nn.LogSoftmax(1)).double()
    aux = GradScalarAux(nn.Sequential(nn.Flatten(), nn.Linear(12, 4), nn.LogSoftmax(1)).double())
    z = torch.randn(200, 12, dtype=torch.float64)
    y = torch.randint(0, 4, (200,))
    return server, aux, z, y


def test_realisable_alignment_reaches_small_nmse():
    server, aux, z, y = _realisable(0)
    g = cut_gradients(server, z, y)
    stats = align_aux(aux, AuxAdamState(), z, y, server, 400, 200, 5e-2, generator=torch.Generator().manual_seed(0))
    nmse = stats["loss_after"] / stats["target_sq_norm"]
    assert stats["loss_before"] / stats["target_sq_norm"] > 0.1
    assert nmse < 1e-3
    assert float(((aux.estimate(z, y) - g) ** 2).sum() / (g**2).sum()) < 1e-3


def test_alignment_never_raises_buffer_loss_on_average():
    ratios = []
    for seed in range(4):
        server, aux, z, y = _realisable(seed)
        st = align_aux(aux, AuxAdamState(), z, y, server, 20, 50, 1e-3, generator=torch.Generator().manual_seed(seed))
        ratios.append(st["loss_after"] / st["loss_before"])
    assert sum(ratios) / len(ratios) < 1.0


def test_per_sample_targets_are_chunk_invariant_and_official_mean_convention_is_not():
    server, aux, z, y = _realisable(3)
    g_full = cut_gradients(server, z, y)
    g_chunks = torch.cat([cut_gradients(server, z[i : i + 50], y[i : i + 50]) for i in range(0, 200, 50)])
    torch.testing.assert_close(g_full, g_chunks, atol=1e-12, rtol=0)
    l_full, _ = aux.alignment_grads(z, y, g_full)
    l_chunks = sum(aux.alignment_grads(z[i : i + 50], y[i : i + 50], g_full[i : i + 50])[0] for i in range(0, 200, 50))
    torch.testing.assert_close(l_full, l_chunks, atol=1e-9, rtol=1e-12)
    # the official convention: targets from a mean over |D|, aux gradients from a mean over the minibatch B
    zz = z.clone().requires_grad_(True)
    (g_mean_d,) = torch.autograd.grad(F.nll_loss(server(zz), y), zz)
    est_mean_b = aux.estimate(z[:50], y[:50]) / 50
    ratio = (est_mean_b / (aux.estimate(z[:50], y[:50]) / 200)).mean()
    torch.testing.assert_close(ratio, torch.tensor(200 / 50, dtype=torch.float64))
    torch.testing.assert_close(g_mean_d * 200, g_full)


HEADS = {
    "linear": lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 4), nn.LogSoftmax(1)),
    # no bias: the closed form must not look for one
    "linear_no_bias": lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 4, bias=False), nn.LogSoftmax(1)),
    # raw scores (no LogSoftmax): not the closed form's log-softmax head, so the loop's autograd path applies
    "linear_logits": lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 4)),
    "mlp": lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 4), nn.LogSoftmax(1)),
}


@pytest.mark.parametrize("head", sorted(HEADS))
def test_vmapped_alignment_equals_loop(head):
    torch.manual_seed(0)
    make = lambda: GradScalarAux(HEADS[head]())  # noqa: E731
    server = nn.Sequential(nn.Flatten(), nn.Linear(12, 6), nn.ReLU(), nn.Linear(6, 4), nn.LogSoftmax(1))
    auxes = [make() for _ in range(3)]
    loop = copy.deepcopy(auxes)
    zs = [torch.randn(40, 12) for _ in range(3)]
    ys = [torch.randint(0, 4, (40,)) for _ in range(3)]
    gs = [cut_gradients(server, z, y) for z, y in zip(zs, ys)]
    st_v = [AuxAdamState() for _ in range(3)]
    st_l = [AuxAdamState() for _ in range(3)]
    for a, s, z, y, g, i in zip(loop, st_l, zs, ys, gs, range(3)):
        align_aux(a, s, z, y, server, 3, 16, 1e-2, generator=alignment_generator(0, i, 0), targets=g)
    align_many_vmap(auxes, st_v, zs, ys, gs, 3, 16, 1e-2, generators=[alignment_generator(0, i, 0) for i in range(3)])
    for a, b in zip(auxes, loop):
        for p, q in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(next(auxes[0].parameters()), next(make().parameters()))


def test_estimate_and_alignment_grads_refuse_labels_that_do_not_fit():
    aux = GradScalarAux(nn.Sequential(nn.Flatten(), nn.Linear(12, 4), nn.LogSoftmax(1)))
    z, y = torch.randn(5, 12), torch.tensor([0, 1, 2, 3, 0])
    # a label of -1 used to pick the last class in the closed form, one label too few left a row without its e_y
    for bad, match in (
        (torch.tensor([0, 1, 2, 3, -1]), r"y must lie in \[0, 3\]"),
        (torch.tensor([0, 1, 2, 3, 4]), r"y must lie in \[0, 3\]"),
        (y[:4], r"y must have shape \(5,\)"),
        (y[:, None], r"y must have shape \(5,\)"),
        (y.float(), "integer class indices"),
    ):
        with pytest.raises(ValueError, match=match):
            aux.estimate(z, bad)
        with pytest.raises(ValueError, match=match):
            aux.alignment_grads(z, bad, torch.zeros_like(z))
    with pytest.raises(ValueError, match="target must be the true cut gradients"):
        aux.alignment_grads(z, y, torch.zeros(5, 11))
    # int32 labels are class indices too: the same estimate as int64, on both paths
    torch.testing.assert_close(aux.estimate(z, y.int()), aux.estimate(z, y))
    torch.testing.assert_close(aux.estimate(z, y.int(), create_graph=True), aux.estimate(z, y))
