"""The residual MLP of the paper's power-law regression experiments (Sec. 2 and App.).

``h_0 = W_in x`` (no bias); N residual blocks ``h ← h + (c/N)·fc2(gelu(fc1(rmsnorm(h))))`` with ``fc2``
zero-initialised and an RMSNorm without a learned scale; a zero-initialised readout ``D → out``. Every weight is a
bias-free ``nn.Linear``, so the per-example noise tracker and the μP rule apply to all of them.
"""

from __future__ import annotations

import torch
from torch import nn

from icml25_shared.validate import check_float, check_int

__all__ = ["ResidualMLP"]


def _rmsnorm(h: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


class ResidualMLP(nn.Module):
    """Residual MLP of width ``width`` and ``depth`` blocks.

    Args:
        width: hidden width D.
        depth: number of residual blocks N.
        in_dim, out_dim: input and output sizes.
        mlp_ratio: hidden size of a block's MLP is ``mlp_ratio · D``.
        residual_scale: ``c`` in the residual branch ``c/N``; the paper uses 6 (our reading), so ``6/N``.
    """

    def __init__(
        self, width: int, depth: int, in_dim: int = 8, out_dim: int = 1, mlp_ratio: int = 4, residual_scale: float = 6.0
    ) -> None:
        super().__init__()
        self.width = check_int("width", width, min=1)
        self.depth = check_int("depth", depth, min=1)
        in_dim = check_int("in_dim", in_dim, min=1)
        out_dim = check_int("out_dim", out_dim, min=1)
        hidden = check_int("mlp_ratio", mlp_ratio, min=1) * self.width
        self.branch_scale = check_float("residual_scale", residual_scale, min=0.0) / self.depth
        self.embed = nn.Linear(in_dim, self.width, bias=False)
        self.fc1 = nn.ModuleList(nn.Linear(self.width, hidden, bias=False) for _ in range(self.depth))
        self.fc2 = nn.ModuleList(nn.Linear(hidden, self.width, bias=False) for _ in range(self.depth))
        self.readout = nn.Linear(self.width, out_dim, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """N(0, 1/fan_in) for the embedding and fc1; zeros for fc2 and the readout."""
        for lin in [self.embed, *self.fc1]:
            nn.init.normal_(lin.weight, std=lin.in_features**-0.5)
        for lin in [*self.fc2, self.readout]:
            nn.init.zeros_(lin.weight)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last hidden representation (before the readout), shape (n, D)."""
        h = self.embed(x)
        for fc1, fc2 in zip(self.fc1, self.fc2):
            h = h + self.branch_scale * fc2(nn.functional.gelu(fc1(_rmsnorm(h))))
        return _rmsnorm(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.embed.weight.dtype:
            raise TypeError(
                f"x has dtype {x.dtype} but the model's parameters are {self.embed.weight.dtype}; "
                f"cast one of them (x.to({self.embed.weight.dtype}) or model.to({x.dtype}))"
            )
        return self.readout(self.features(x))
