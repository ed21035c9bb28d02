"""Alignment of the auxiliary models at the S-server (Alg. 3) and its schedule.

The schedule lives here, in :func:`is_alignment_round`, and nowhere else: the in-process loop
(:class:`fsl_sage.sage.FSLSAGE`), the Flower strategy (:class:`fsl_sage.flower.FSLSAGEStrategy`) and the closed-form
byte count (:func:`fsl_sage.comm.expected_bytes`) all ask it.

An alignment event for client i (1) recomputes the true per-sample cut gradients G_n = ∂ℓ(x_s(z_n), y_n)/∂z_n
on the client's FIFO buffer D_i with the current server model, then (2) runs ``align_epochs`` epochs of Adam on
L(x_a) = Σ_n ‖ĝ_n(z_n; x_a) − G_n‖² in shuffled minibatches. Targets are per-sample (sum reduction), so L does
not depend on how the buffer is chunked. The aux Adam is functional (state in :class:`AuxAdamState`) so that
one client's alignment in a loop and ten clients' alignments vectorised with ``torch.func.vmap`` take the same
steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, grad_and_value, vmap

from fsl_sage.config import FSLConfig
from fsl_sage.models import GradScalarAux
from icml25_shared.training import kept_buffers
from icml25_shared.validate import check_int

__all__ = [
    "is_alignment_round",
    "align_client",
    "RingBuffer",
    "AuxAdamState",
    "adam_step",
    "cut_gradients",
    "align_aux",
    "align_many_vmap",
    "linear_alignment_grads",
    "alignment_generator",
]


def is_alignment_round(t: int, config: FSLConfig, *, lazy: bool, rounds: int | None = None) -> bool:
    """Whether the S-server aligns the aux models in round ``t`` (0-based).

    Rounds are counted from the end of the warm start, s = t − ``warm_start_rounds``; alignment happens when
    s ≥ 0 and s % l == 0 (l = ``align_interval``; Alg. 3). Eager (the official code): client i aligns at its
    first local iteration k = 0 of that round. Lazy (a message-driven server such as Flower): every client
    aligns at the *end* of round t and the aux is used from round t + 1, so nothing aligns after the last round
    (t < R − 1, with R = ``rounds`` or ``config.rounds``).
    """
    s = t - config.warm_start_rounds
    if s < 0 or s % config.align_interval:
        return False
    return not lazy or t < (config.rounds if rounds is None else rounds) - 1


class RingBuffer:
    """FIFO of the most recent ``capacity`` uploaded (z, y) samples, preallocated on first push."""

    def __init__(self, capacity: int) -> None:
        self.capacity = check_int("buffer capacity (buffer_size)", capacity, min=1)
        self._z: torch.Tensor | None = None
        self._y: torch.Tensor | None = None
        self._ptr = 0  # next write position
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def push(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """Append a batch (oldest samples are overwritten once full)."""
        z, y = z.detach(), y.detach()
        if len(z) != len(y):
            raise ValueError(f"z has {len(z)} samples but y has {len(y)}")
        if self._z is None:
            self._z = torch.empty((self.capacity, *z.shape[1:]), dtype=z.dtype, device=z.device)
            self._y = torch.empty((self.capacity,), dtype=y.dtype, device=y.device)
        if z.shape[1:] != self._z.shape[1:]:
            raise ValueError(f"z has per-sample shape {tuple(z.shape[1:])}, buffer holds {tuple(self._z.shape[1:])}")
        if len(z) > self.capacity:
            z, y = z[-self.capacity :], y[-self.capacity :]
        n = len(z)
        pos = (self._ptr + torch.arange(n, device=z.device)) % self.capacity
        assert self._z is not None and self._y is not None  # allocated on the first add above
        self._z[pos] = z
        self._y[pos] = y
        self._ptr = (self._ptr + n) % self.capacity
        self._len = min(self.capacity, self._len + n)

    def state_dict(self) -> dict:
        """Everything needed to restore the buffer exactly (its storage, write position and length)."""
        return {"capacity": self.capacity, "z": self._z, "y": self._y, "ptr": self._ptr, "len": self._len}

    def load_state_dict(self, state: dict) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"buffer capacity {self.capacity} here, {state['capacity']} in the checkpoint")
        self._z = None if state["z"] is None else state["z"].clone()
        self._y = None if state["y"] is None else state["y"].clone()
        self._ptr, self._len = int(state["ptr"]), int(state["len"])

    def get(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(z, y) in chronological order (oldest first)."""
        if self._z is None or self._len == 0:
            raise ValueError("the alignment buffer is empty")
        assert self._y is not None
        if self._len < self.capacity:
            return self._z[: self._len], self._y[: self._len]
        idx = (self._ptr + torch.arange(self.capacity, device=self._z.device)) % self.capacity
        return self._z[idx], self._y[idx]


@dataclass
class AuxAdamState:
    """State of the aux model's Adam (persistent across alignments): step count and the two moments."""

    step: int = 0
    exp_avg: list[torch.Tensor] = field(default_factory=list)
    exp_avg_sq: list[torch.Tensor] = field(default_factory=list)

    def state_dict(self) -> dict:
        return {"step": self.step, "exp_avg": list(self.exp_avg), "exp_avg_sq": list(self.exp_avg_sq)}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
        self.exp_avg = [m.clone() for m in state["exp_avg"]]
        self.exp_avg_sq = [v.clone() for v in state["exp_avg_sq"]]


@torch.no_grad()
def adam_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    state: AuxAdamState,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> None:
    """One Adam step in place, the arithmetic of ``torch.optim.Adam`` (single-tensor path, no weight decay)."""
    b1, b2 = betas
    if not state.exp_avg:
        state.exp_avg = [torch.zeros_like(p) for p in params]
        state.exp_avg_sq = [torch.zeros_like(p) for p in params]
    state.step += 1
    bc1 = 1 - b1**state.step
    bc2_sqrt = math.sqrt(1 - b2**state.step)
    for p, g, m, v in zip(params, grads, state.exp_avg, state.exp_avg_sq):
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v.sqrt() / bc2_sqrt).add_(eps)
        p.addcdiv_(m, denom, value=-lr / bc1)


def cut_gradients(server: nn.Module, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """True per-sample cut-layer gradients G_n = ∂ NLL(x_s(z_n), y_n) / ∂z_n (sum reduction) with the current
    server, in its current train/eval mode; its buffers (BN running statistics) are left untouched."""
    with kept_buffers(server), torch.enable_grad():
        zz = z.detach().requires_grad_(True)
        loss = F.nll_loss(server(zz), y, reduction="sum")
        (g,) = torch.autograd.grad(loss, zz)
    return g


def alignment_generator(seed: int, client: int, round: int) -> torch.Generator:
    """The minibatch shuffles of client ``client``'s alignment in round ``round`` (a pure function of its
    arguments, shared by the in-process loop and the Flower strategy)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + 7_919 * client) * 10_007 + round + 17)


def align_aux(
    aux: GradScalarAux,
    state: AuxAdamState,
    z: torch.Tensor,
    y: torch.Tensor,
    server: nn.Module,
    epochs: int,
    batch_size: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    generator: torch.Generator | None = None,
    analytic: bool | None = None,
    targets: torch.Tensor | None = None,
) -> dict[str, float]:
    """Align ``aux`` on the buffer (z, y): targets from ``server`` (or given), then ``epochs`` epochs of Adam on
    the alignment loss in shuffled minibatches. Returns the buffer loss before and after."""
    if len(z) == 0:
        raise ValueError("cannot align on an empty buffer")
    g_true = cut_gradients(server, z, y) if targets is None else targets
    params = list(aux.parameters())
    norm = float((g_true.double() ** 2).sum())
    before = _buffer_loss(aux, z, y, g_true)
    n = len(z)
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        for s in range(0, n, batch_size):
            idx = perm[s : s + batch_size]
            _, grads = aux.alignment_grads(z[idx], y[idx], g_true[idx], analytic=analytic)
            adam_step(params, grads, state, lr, betas)
    after = _buffer_loss(aux, z, y, g_true) if epochs else before
    return {"loss_before": before, "loss_after": after, "target_sq_norm": norm, "n": float(n)}


def align_client(
    aux: GradScalarAux,
    state: AuxAdamState,
    buffer: RingBuffer,
    server: nn.Module,
    config: FSLConfig,
    client: int,
    round: int,
) -> dict[str, float]:
    """One alignment event of Alg. 3 for client ``client`` in round ``round``: :func:`align_aux` on its buffer
    D_i with ``config``'s epochs, minibatch size, aux learning rate and betas, shuffled by
    :func:`alignment_generator`. Returns the statistics of :func:`align_aux` plus ``client`` and ``round``."""
    z, y = buffer.get()
    stats = align_aux(
        aux,
        state,
        z,
        y,
        server,
        config.align_epochs,
        config.align_batch_size,
        config.effective_aux_lr,
        config.betas,
        generator=alignment_generator(config.seed, client, round),
    )
    stats.update(client=client, round=round)
    return stats


def _buffer_loss(aux: GradScalarAux, z: torch.Tensor, y: torch.Tensor, g: torch.Tensor) -> float:
    est = aux.estimate(z, y)
    return float(((est.detach().double() - g.double()) ** 2).sum())


def linear_alignment_grads(
    w: torch.Tensor, b: torch.Tensor, z: torch.Tensor, y: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Closed-form (∂L/∂W, ∂L/∂b, L) of the alignment loss of a linear log-softmax aux (vmap-friendly, no
    in-place ops); see :meth:`GradScalarAux.alignment_grads`."""
    zf = z.flatten(1)
    p = torch.softmax(zf @ w.T + b, dim=1)
    r = p - F.one_hot(y, w.shape[0]).to(p.dtype)
    e = r @ w - g.flatten(1)
    u = 2.0 * (e @ w.T)
    delta = p * (u - (p * u).sum(1, keepdim=True))
    return 2.0 * (r.T @ e) + delta.T @ zf, delta.sum(0), (e**2).sum()


def align_many_vmap(
    auxes: Sequence[GradScalarAux],
    states: Sequence[AuxAdamState],
    zs: Sequence[torch.Tensor],
    ys: Sequence[torch.Tensor],
    targets: Sequence[torch.Tensor],
    epochs: int,
    batch_size: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    generators: Sequence[torch.Generator] | None = None,
) -> None:
    """Align several clients' aux models at once: stacked parameters, ``torch.func.vmap`` over clients of the
    alignment gradient (closed form for linear heads, double back-propagation otherwise), one Adam step on the
    stacked tensors (Adam is elementwise, so this equals per-client Adams with equal step counts).

    Needs equal buffer sizes, equal aux architectures without buffers, and equal Adam step counts."""
    c = len(auxes)
    if c == 0:
        return
    n = len(zs[0])
    if any(len(z) != n for z in zs):
        raise ValueError(f"vmapped alignment needs equal buffer sizes, got {[len(z) for z in zs]}")
    if any(len(list(a.buffers())) for a in auxes):
        raise ValueError("vmapped alignment needs aux models without buffers (e.g. no BatchNorm)")
    if len({s.step for s in states}) != 1:
        raise ValueError(f"vmapped alignment needs equal Adam step counts, got {[s.step for s in states]}")
    base = auxes[0]
    names = [nm for nm, _ in base.named_parameters()]
    stacked = [torch.stack([dict(a.named_parameters())[nm].detach() for a in auxes]) for nm in names]
    z_all, y_all, g_all = torch.stack(list(zs)), torch.stack(list(ys)), torch.stack(list(targets))
    st = AuxAdamState(step=states[0].step)
    if states[0].exp_avg:
        st.exp_avg = [torch.stack([s.exp_avg[j] for s in states]) for j in range(len(names))]
        st.exp_avg_sq = [torch.stack([s.exp_avg_sq[j] for s in states]) for j in range(len(names))]

    # the closed form assumes log-probabilities log_softmax(Wz + b), as GradScalarAux.alignment_grads does
    lin = base.linear if base.analytic and base._applies_log_softmax else None
    if lin is not None:
        ids = [id(p) for p in base.parameters()]
        iw = ids.index(id(lin.weight))
        ib = ids.index(id(lin.bias)) if lin.bias is not None else None

        def per_client(params: list[torch.Tensor], z, y, g):
            w = params[iw]
            b = params[ib] if ib is not None else w.new_zeros(w.shape[0])
            dw, db, _ = linear_alignment_grads(w, b, z, y, g)
            out = [torch.zeros_like(p) for p in params]
            out[iw] = dw
            if ib is not None:
                out[ib] = db
            return out

        batched = vmap(per_client)
    else:

        def loss_fn(params: list[torch.Tensor], z, y, g):
            pd = dict(zip(names, params))

            def nll(zz, yy):
                out = functional_call(base, pd, (zz[None],))
                return F.nll_loss(out, yy[None], reduction="sum")

            # per-sample input gradient, vmapped over the minibatch
            est = vmap(grad(nll))(z, y)
            return ((est - g) ** 2).sum()

        gv = grad_and_value(loss_fn)

        def per_client_autograd(params, z, y, g):
            return gv(params, z, y, g)[0]

        batched = vmap(per_client_autograd)

    gens = list(generators) if generators is not None else [None] * c
    ar = torch.arange(c)[:, None]
    for _ in range(epochs):
        perms = torch.stack([torch.randperm(n, generator=gen) for gen in gens])
        for s in range(0, n, batch_size):
            idx = perms[:, s : s + batch_size]
            grads = batched(stacked, z_all[ar, idx], y_all[ar, idx], g_all[ar, idx])
            adam_step(stacked, grads, st, lr, betas)
    with torch.no_grad():
        for i, (a, s) in enumerate(zip(auxes, states)):
            pd = dict(a.named_parameters())
            for j, nm in enumerate(names):
                pd[nm].copy_(stacked[j][i])
            s.step = st.step
            if st.exp_avg:
                s.exp_avg = [m[i].clone() for m in st.exp_avg]
                s.exp_avg_sq = [v[i].clone() for v in st.exp_avg_sq]
