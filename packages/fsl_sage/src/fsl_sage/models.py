"""Split models: the client-side x_c, the server-side x_s and the auxiliary model x_a of the paper.

The gradient estimator of FSL-SAGE is the input gradient of the aux model's own NLL loss at the smashed activation
z (the "grad-scalar" aux): ĝ(z, y) = ∂/∂z NLL(f_a(z), y). :class:`GradScalarAux` computes it per sample (sum
reduction) with a first-order VJP, or in closed form ĝ = Wᵀ(softmax(Wz + b) − e_y) for a linear head.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "SplitModel",
    "split_module",
    "GradScalarAux",
    "digits_cnn_split",
    "resnet18_split",
    "check_split_shapes",
    "BasicBlock",
]


class SplitModel(nn.Module):
    """The global model x = (x_c, x_s) cut at one layer: ``forward(x) = server(client(x))``."""

    def __init__(self, client: nn.Module, server: nn.Module) -> None:
        super().__init__()
        self.client = client
        self.server = server

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.server(self.client(x))


def split_module(model: nn.Module, cut: str = "layer2") -> SplitModel:
    """Cut ``model`` after its named child ``cut``: children up to and including ``cut`` form the client side,
    the rest the server side (both ``nn.Sequential`` of deep copies, in registration order)."""
    names = [n for n, _ in model.named_children()]
    if cut not in names:
        raise ValueError(f"cut must name a child of the model, got {cut!r}; children are {names}")
    idx = names.index(cut) + 1
    if idx == len(names):
        raise ValueError(f"cut={cut!r} is the last child: nothing would be left for the server")
    children = list(model.named_children())
    client = nn.Sequential(OrderedDict((n, copy.deepcopy(m)) for n, m in children[:idx]))
    server = nn.Sequential(OrderedDict((n, copy.deepcopy(m)) for n, m in children[idx:]))
    return SplitModel(client, server)


def _linear_of(head: nn.Module) -> nn.Linear | None:
    """The ``nn.Linear`` of a head of the form [Flatten], Linear, [LogSoftmax]; ``None`` otherwise."""
    if isinstance(head, nn.Linear):
        return head
    if not isinstance(head, nn.Sequential):
        return None
    mods = list(head)
    lin = [m for m in mods if isinstance(m, nn.Linear)]
    allowed = all(isinstance(m, (nn.Linear, nn.Flatten, nn.LogSoftmax, nn.Identity)) for m in mods)
    if not allowed or len(lin) != 1:
        return None
    i = mods.index(lin[0])
    if any(isinstance(m, nn.LogSoftmax) for m in mods[:i]) or any(isinstance(m, nn.Flatten) for m in mods[i + 1 :]):
        return None
    for m in mods:
        if isinstance(m, nn.LogSoftmax) and m.dim not in (1, -1, None):
            return None
        if isinstance(m, nn.Flatten) and (m.start_dim != 1 or m.end_dim != -1):
            return None
    return lin[0]


class GradScalarAux(nn.Module):
    """The FSL-SAGE auxiliary model: a small network ``head`` mapping z to class log-probabilities, whose input
    gradient of NLL estimates the server's cut-layer feedback.

    Args:
        head: z ↦ log-probabilities (a final ``LogSoftmax``) of shape (B, n_classes).
        analytic: use the closed forms of a linear head (``None``: whenever the head is [Flatten], Linear,
            [LogSoftmax]).
    """

    def __init__(self, head: nn.Module, analytic: bool | None = None) -> None:
        super().__init__()
        self.head = head
        lin = _linear_of(head)
        if analytic and lin is None:
            raise ValueError("analytic=True needs a head of the form [Flatten], Linear, [LogSoftmax]")
        self.analytic = lin is not None if analytic is None else bool(analytic)
        self._applies_log_softmax = isinstance(head, nn.Sequential) and any(isinstance(m, nn.LogSoftmax) for m in head)

    @property
    def linear(self) -> nn.Linear | None:
        return _linear_of(self.head)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.head(z)

    def _logits_linear(self, z: torch.Tensor) -> torch.Tensor:
        lin = self.linear
        assert lin is not None
        return F.linear(z.flatten(1), lin.weight, lin.bias)

    def estimate(self, z: torch.Tensor, y: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
        """Per-sample (sum-reduced) estimate ĝ_n = ∂/∂z_n NLL(f_a(z_n), y_n), shape of ``z``.

        ``create_graph=True`` keeps the graph for double back-propagation (the official code's second-order path;
        only alignment needs it). A linear head uses the closed form Wᵀ(softmax(Wz + b) − e_y) unless
        ``create_graph`` is set. ``y``: one integer class index per sample of ``z``.
        """
        y = _check_labels(z, y, self.n_classes)
        if self.analytic and not create_graph and self._applies_log_softmax_or_logits():
            with torch.no_grad():
                lin = self.linear
                assert lin is not None  # analytic implies a linear head
                r = torch.softmax(self._logits_linear(z), dim=1)
                r[torch.arange(len(y), device=y.device), y] -= 1.0
                return (r @ lin.weight).view_as(z)
        with torch.enable_grad():
            zz = z.detach().requires_grad_(True)
            loss = F.nll_loss(self.head(zz), y, reduction="sum")
            (g,) = torch.autograd.grad(loss, zz, create_graph=create_graph)
        return g

    @property
    def n_classes(self) -> int | None:
        """Output classes of a linear head (``None`` for other heads: their labels are checked by the loss)."""
        lin = self.linear
        return None if lin is None else int(lin.out_features)

    def _applies_log_softmax_or_logits(self) -> bool:
        # the closed form assumes log-probabilities = log_softmax(Wz + b)
        return self._applies_log_softmax

    def alignment_loss(self, z: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """L = Σ_n ‖ĝ_n(z; x_a) − G_n‖² by double back-propagation (differentiable w.r.t. the aux parameters)."""
        g = self.estimate(z, y, create_graph=True)
        return ((g - target) ** 2).sum()

    def alignment_grads(
        self, z: torch.Tensor, y: torch.Tensor, target: torch.Tensor, analytic: bool | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(loss, gradients of :meth:`alignment_loss` w.r.t. ``self.parameters()``, in that order).

        For a linear head the gradient has a closed form (a handful of matmuls, no second-order graph):
        with P = softmax(ZWᵀ + b), R = P − Y, E = RW − G, U = 2EWᵀ, Δ = P ⊙ (U − rowsum(P ⊙ U)):
        ∂L/∂W = 2RᵀE + ΔᵀZ, ∂L/∂b = Σ_n Δ_n.
        """
        y = _check_labels(z, y, self.n_classes)
        if not isinstance(target, torch.Tensor) or target.shape != z.shape:
            raise ValueError(
                f"target must be the true cut gradients, shaped like z {tuple(z.shape)}, got "
                f"{tuple(getattr(target, 'shape', ())) if isinstance(target, torch.Tensor) else type(target).__name__}"
            )
        use_analytic = self.analytic if analytic is None else analytic
        if use_analytic and self.linear is not None and self._applies_log_softmax:
            lin = self.linear
            with torch.no_grad():
                zf = z.detach().flatten(1)
                p = torch.softmax(F.linear(zf, lin.weight, lin.bias), dim=1)
                r = p.clone()
                r[torch.arange(len(y), device=y.device), y] -= 1.0
                e = r @ lin.weight - target.detach().flatten(1)
                u = 2.0 * (e @ lin.weight.T)
                delta = p * (u - (p * u).sum(1, keepdim=True))
                d_w = 2.0 * (r.T @ e) + delta.T @ zf
                loss = (e**2).sum()
                grads = {id(lin.weight): d_w}
                if lin.bias is not None:
                    grads[id(lin.bias)] = delta.sum(0)
            return loss, [grads.get(id(p_), torch.zeros_like(p_)) for p_ in self.parameters()]
        with torch.enable_grad():
            loss = self.alignment_loss(z, y, target)
            params = list(self.parameters())
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        return loss.detach(), [torch.zeros_like(p_) if g is None else g for p_, g in zip(params, grads)]


def _check_labels(z: torch.Tensor, y: torch.Tensor, n_classes: int | None) -> torch.Tensor:
    """``y`` must be a 1-d integer tensor with one class index in [0, n_classes) per sample of ``z`` (the closed
    forms index with it: a label of -1 would silently pick the last class, a missing one leave a row unchanged)."""
    int_dtypes = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
    if not isinstance(y, torch.Tensor) or y.dtype not in int_dtypes:
        what = f"a {y.dtype} tensor" if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(f"y must be a tensor of integer class indices, got {what}")
    if y.ndim != 1 or len(y) != len(z):
        raise ValueError(
            f"y must have shape ({len(z)},), one label per sample of z {tuple(z.shape)}, got {tuple(y.shape)}"
        )
    if n_classes is not None and y.numel() and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise ValueError(f"y must lie in [0, {n_classes - 1}], got range [{int(y.min())}, {int(y.max())}]")
    return y.long()  # int64, as nll_loss needs (a no-op for int64)


def check_split_shapes(
    client: nn.Module,
    server: nn.Module,
    aux: nn.Module | None,
    sample_input: torch.Tensor,
    n_classes: int | None = None,
) -> tuple[torch.Size, int]:
    """Probe the split with ``sample_input`` (a small batch): the client output must feed both the server and
    the aux, and both must return log-probabilities (B, n_classes). Returns (smashed shape without batch,
    n_classes). Raises ``ValueError`` naming both shapes on a mismatch."""
    was = [m.training for m in (client, server, aux) if m is not None]
    mods = [m for m in (client, server, aux) if m is not None]
    for m in mods:
        m.eval()
    try:
        with torch.no_grad():
            z = client(sample_input)
            try:
                out_s = server(z)
            except RuntimeError as exc:
                raise ValueError(f"client output shape {tuple(z.shape)} does not fit the server input: {exc}") from exc
            _check_log_probs("server", out_s, z, n_classes)
            n_classes = out_s.shape[1]
            if aux is not None:
                try:
                    out_a = aux(z)
                except RuntimeError as exc:
                    raise ValueError(f"client output shape {tuple(z.shape)} does not fit the aux input: {exc}") from exc
                _check_log_probs("aux", out_a, z, n_classes)
    finally:
        for m, w in zip(mods, was):
            m.train(w)
    assert n_classes is not None  # read from the server's output above when not given
    return z.shape[1:], int(n_classes)


def _check_log_probs(name: str, out: torch.Tensor, z: torch.Tensor, n_classes: int | None) -> None:
    if out.ndim != 2 or out.shape[0] != z.shape[0] or (n_classes is not None and out.shape[1] != n_classes):
        want = f"(B={z.shape[0]}, n_classes={n_classes})" if n_classes is not None else f"(B={z.shape[0]}, C)"
        raise ValueError(f"{name} output shape {tuple(out.shape)} on client output {tuple(z.shape)}; expected {want}")
    lse = torch.logsumexp(out.double(), dim=1)
    # rows of log-probabilities sum to one up to the output dtype's rounding (bfloat16 keeps 8 bits)
    atol = max(1e-4, 8 * torch.finfo(out.dtype).eps) if out.is_floating_point() else 1e-4
    if not torch.allclose(lse, torch.zeros_like(lse), atol=atol):
        raise ValueError(
            f"{name} output must be log-probabilities (end with LogSoftmax): logsumexp per row is "
            f"{lse[:3].tolist()}..., expected 0"
        )


# ---------------------------------------------------------------------------------------------------------------
# model zoo


def digits_cnn_split(n_classes: int = 10) -> tuple[nn.Module, nn.Module, GradScalarAux]:
    """The "digits split CNN" of our CPU reproduction on (1, 8, 8) inputs: client 4,800 params → z ∈ R^{32×4×4};
    server 66,954 params; linear aux 5,130 params. Returns (client, server, aux)."""
    client = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU()
    )
    server = nn.Sequential(
        nn.Flatten(), nn.Linear(512, 128), nn.ReLU(), nn.Linear(128, n_classes), nn.LogSoftmax(dim=1)
    )
    aux = GradScalarAux(nn.Sequential(nn.Flatten(), nn.Linear(512, n_classes), nn.LogSoftmax(dim=1)))
    return client, server, aux


class BasicBlock(nn.Module):
    """ResNet basic block (two 3×3 convs, BN, identity or 1×1-conv shortcut)."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x if self.downsample is None else self.downsample(x)
        return F.relu(out + short)


def _stage(in_planes: int, planes: int, stride: int) -> nn.Sequential:
    return nn.Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1))


def resnet18_split(num_classes: int = 10) -> tuple[nn.Module, nn.Module, GradScalarAux]:
    """The paper's ResNet-18 split of its CIFAR experiments (ImageNet-style stem even on 32×32): client = conv1,
    bn1, relu, maxpool, layer1, layer2 (z ∈ R^{128×4×4} on 32×32); server = layer3, layer4, avgpool, fc, log_softmax;
    aux = one stage (2 BasicBlocks 128→256, stride 2) + avgpool + fc + log_softmax."""
    client = nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            bn1=nn.BatchNorm2d(64),
            relu=nn.ReLU(),
            maxpool=nn.MaxPool2d(3, stride=2, padding=1),
            layer1=_stage(64, 64, 1),
            layer2=_stage(64, 128, 2),
        )
    )
    server = nn.Sequential(
        OrderedDict(
            layer3=_stage(128, 256, 2),
            layer4=_stage(256, 512, 2),
            avgpool=nn.AdaptiveAvgPool2d(1),
            flatten=nn.Flatten(),
            fc=nn.Linear(512, num_classes),
            log_softmax=nn.LogSoftmax(dim=1),
        )
    )
    aux = GradScalarAux(
        nn.Sequential(
            OrderedDict(
                stage=_stage(128, 256, 2),
                avgpool=nn.AdaptiveAvgPool2d(1),
                flatten=nn.Flatten(),
                fc=nn.Linear(256, num_classes),
                log_softmax=nn.LogSoftmax(dim=1),
            )
        )
    )
    return client, server, aux


def as_aux(aux: nn.Module) -> GradScalarAux:
    """Wrap a plain head in :class:`GradScalarAux` (no-op for one)."""
    return aux if isinstance(aux, GradScalarAux) else GradScalarAux(aux)


def param_list(modules: Sequence[nn.Module]) -> list[nn.Parameter]:
    return [p for m in modules for p in m.parameters()]
