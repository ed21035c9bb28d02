r"""The USAM heads (Sec. 3.2): one small MLP per target on the mask decoder's output tokens.

.. math::
    u = \sigma\big(W_3 \, \mathrm{ReLU}(W_2 \, \mathrm{ReLU}(W_1 [t_{IoU}; t_{mask}] + b_1) + b_2) + b_3\big)

with :math:`W_1 \in \mathbb{R}^{512 \times 2d}` (d = 256 for every SAM/SAM2 size), :math:`W_2 \in
\mathbb{R}^{512 \times 512}`, :math:`W_3 \in \mathbb{R}^{1 \times 512}` (525,825 parameters at 2d = 512). The
parameter names ``layers.{0,1,2}.weight/bias`` are those of the released heads, so their state dicts load as they
are. :class:`USAMHeads` runs H heads as three batched matmuls (``baddbmm``) with the same result as the loop.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import torch
from torch import nn

from icml25_shared.validate import check_int, check_tensor

__all__ = ["USAMHead", "USAMHeads"]


class USAMHead(nn.Module):
    """Linear(in, hidden) – ReLU – Linear(hidden, hidden) – ReLU – Linear(hidden, 1) – Sigmoid.

    Args:
        in_features: 2d for concat(IoU token, mask token), d for one token.
        hidden: width of both hidden layers (512 in the paper).
    """

    def __init__(self, in_features: int = 512, hidden: int = 512) -> None:
        super().__init__()
        self.in_features = check_int("in_features", in_features, min=1)
        self.hidden = check_int("hidden", hidden, min=1)
        self.layers = nn.ModuleList([nn.Linear(in_features, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (…, in_features) → scores (…,) in (0, 1)."""
        if x.shape[-1] != self.in_features:
            raise ValueError(f"tokens: the head expects {self.in_features} input features, got {x.shape[-1]}")
        if x.dtype != self.layers[0].weight.dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(
                f"tokens must have the head's dtype {self.layers[0].weight.dtype}, got {x.dtype} "
                "(cast one to the other)"
            )
        h = torch.relu(self.layers[0](x))
        h = torch.relu(self.layers[1](h))
        return torch.sigmoid(self.layers[2](h)).squeeze(-1)

    @classmethod
    def from_state_dict(cls, state: Mapping[str, torch.Tensor], source: str = "state_dict") -> USAMHead:
        """A head with the shapes of ``state`` (``layers.{0,1,2}.weight/bias``); ``source`` names it in errors."""
        need = [f"layers.{i}.{p}" for i in range(3) for p in ("weight", "bias")]
        missing = [k for k in need if k not in state]
        if missing:
            raise ValueError(f"{source}: not a USAM head state dict, missing {missing} (has {sorted(state)[:6]})")
        w0, w1, w2 = (state[f"layers.{i}.weight"] for i in range(3))
        ok = w0.ndim == 2 and w1.shape == (w0.shape[0], w0.shape[0]) and w2.shape == (1, w0.shape[0])
        if not ok:
            shapes = [tuple(w.shape) for w in (w0, w1, w2)]
            raise ValueError(f"{source}: expected weights (h, in), (h, h), (1, h), got {shapes}")
        head = cls(int(w0.shape[1]), int(w0.shape[0]))
        head.load_state_dict({k: state[k] for k in need})
        return head


class USAMHeads(nn.Module):
    """Several :class:`USAMHead` fused: stacked weights (H, in, hidden) and three ``baddbmm`` calls.

    ``forward(x)`` returns (…, H) scores equal to ``[head(x) for head in heads]`` stacked on the last axis.
    """

    def __init__(self, names: tuple[str, ...] | list[str], in_features: int = 512, hidden: int = 512) -> None:
        super().__init__()
        self.names = tuple(names)
        self.in_features = check_int("in_features", in_features, min=1)
        self.hidden = check_int("hidden", hidden, min=1)
        heads = [USAMHead(in_features, hidden) for _ in self.names]  # PyTorch's default init, head by head
        n = len(heads)
        self.w1 = nn.Parameter(torch.empty(n, in_features, hidden))
        self.b1 = nn.Parameter(torch.empty(n, 1, hidden))
        self.w2 = nn.Parameter(torch.empty(n, hidden, hidden))
        self.b2 = nn.Parameter(torch.empty(n, 1, hidden))
        self.w3 = nn.Parameter(torch.empty(n, hidden, 1))
        self.b3 = nn.Parameter(torch.empty(n, 1, 1))
        for i, h in enumerate(heads):
            self.set_head(i, h)

    @classmethod
    def from_heads(cls, heads: Mapping[str, USAMHead]) -> USAMHeads:
        """Fuse named heads (all with the same sizes)."""
        names = tuple(heads)
        if not names:
            return cls((), 1, 1)
        first = heads[names[0]]
        fused = cls(names, first.in_features, first.hidden)
        for name in names:
            fused.set_head(name, heads[name])
        return fused

    def index(self, name: str | int) -> int:
        """Position of head ``name`` (a name or an index, numpy integers included)."""
        if isinstance(name, numbers.Integral) and not isinstance(name, bool):
            name = int(name)
            if not 0 <= name < len(self.names):
                raise ValueError(f"head index must be in [0, {len(self.names)}), got {name}")
            return name
        if name not in self.names:
            raise ValueError(f"head must be one of {list(self.names)}, got {name!r}")
        return self.names.index(name)

    @torch.no_grad()
    def set_head(self, name: str | int, head: USAMHead) -> None:
        """Copy ``head``'s weights into slot ``name``."""
        i = self.index(name)
        if head.in_features != self.in_features or head.hidden != self.hidden:
            raise ValueError(
                f"head: expected in_features {self.in_features} and hidden {self.hidden}, "
                f"got {head.in_features} and {head.hidden}"
            )
        l0, l1, l2 = _linears(head)
        self.w1[i].copy_(l0.weight.T)
        self.b1[i, 0].copy_(l0.bias)
        self.w2[i].copy_(l1.weight.T)
        self.b2[i, 0].copy_(l1.bias)
        self.w3[i].copy_(l2.weight.T)
        self.b3[i, 0].copy_(l2.bias)

    def head(self, name: str | int) -> USAMHead:
        """A standalone copy of head ``name``."""
        i = self.index(name)
        h = USAMHead(self.in_features, self.hidden).to(device=self.w1.device, dtype=self.w1.dtype)
        with torch.no_grad():
            l0, l1, l2 = _linears(h)
            l0.weight.copy_(self.w1[i].T)
            l0.bias.copy_(self.b1[i, 0])
            l1.weight.copy_(self.w2[i].T)
            l1.bias.copy_(self.b2[i, 0])
            l2.weight.copy_(self.w3[i].T)
            l2.bias.copy_(self.b3[i, 0])
        return h

    def heads(self) -> dict[str, USAMHead]:
        """Every head as a standalone :class:`USAMHead` (the loop form)."""
        return {n: self.head(n) for n in self.names}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (…, in_features) → (…, H) scores."""
        check_tensor("tokens", x, dtype="floating")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"tokens: the heads expect {self.in_features} input features, got {x.shape[-1]}")
        if x.dtype != self.w1.dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(f"tokens must have the heads' dtype {self.w1.dtype}, got {x.dtype} (cast one to the other)")
        lead = x.shape[:-1]
        n = len(self.names)
        if n == 0:
            return x.new_zeros(*lead, 0)
        flat = x.reshape(1, -1, self.in_features).expand(n, -1, -1)
        h = torch.relu(torch.baddbmm(self.b1, flat, self.w1))
        h = torch.relu(torch.baddbmm(self.b2, h, self.w2))
        out = torch.sigmoid(torch.baddbmm(self.b3, h, self.w3))[..., 0]  # (H, N)
        return out.T.reshape(*lead, n)

    def state_dict_per_head(self) -> dict[str, torch.Tensor]:
        """``{name}.layers.{i}.weight/bias`` for every head (the layout ``save_pretrained`` writes)."""
        out: dict[str, torch.Tensor] = {}
        for name in self.names:
            for k, v in self.head(name).state_dict().items():
                out[f"{name}.{k}"] = v.detach().contiguous()
        return out


def _linears(head: USAMHead) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
    """The three linear layers of a head (``layers.{0,1,2}``, the released state-dict names)."""
    l0, l1, l2 = (m for m in head.layers if isinstance(m, nn.Linear))
    return l0, l1, l2
