"""Group fusion: mixes features across sub-dimensions so that inactive groups still inform the active ones.

The paper introduces *group fusion* to preserve the activation flow under sparsity (abstract); its form is not
public. We offer a Monarch matrix (Dao et al., 2022; the paper's choice per a third-party re-implementation), an
N x N group-mixing matrix and per-group blocks. All start at the identity, so training starts from the unfused model.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mohd.config import MoHDConfig

__all__ = ["MonarchFusion", "GroupFusion", "BlockDiagFusion", "build_fusion"]


class MonarchFusion(nn.Module):
    r"""A Monarch matrix on vectors of width ``dim = b * m``:

    .. math:: M = P^\top \,\mathrm{BlockDiag}(L_1, \dots, L_m)\, P \,\mathrm{BlockDiag}(R_1, \dots, R_b),

    ``R_i`` of shape (m, m), ``L_j`` of shape (b, b), ``P`` the permutation reshape (b, m) -> transpose -> (m, b).
    Parameters ``dim * (m + b)``; identity at init.
    """

    def __init__(self, dim: int, blocks: int) -> None:
        super().__init__()
        if dim % blocks:
            raise ValueError(f"blocks must divide dim={dim}, got {blocks}")
        self.dim, self.blocks, self.block_size = dim, blocks, dim // blocks
        b, m = blocks, self.block_size
        self.right = nn.Parameter(torch.eye(m).repeat(b, 1, 1))  # (b, m, m)
        self.left = nn.Parameter(torch.eye(b).repeat(m, 1, 1))  # (m, b, b)

    def reset_parameters(self) -> None:
        """Identity blocks."""
        with torch.no_grad():
            self.right.copy_(torch.eye(self.block_size).expand_as(self.right))
            self.left.copy_(torch.eye(self.blocks).expand_as(self.left))

    def forward(self, x: Tensor) -> Tensor:
        """``M x`` along the last axis."""
        shape = x.shape
        y = x.reshape(-1, self.blocks, self.block_size).transpose(0, 1)  # (b, M, m)
        y = torch.bmm(y, self.right.transpose(1, 2))  # R_i on block i
        y = torch.bmm(y.permute(2, 1, 0), self.left.transpose(1, 2))  # P, then L_j on block j: (m, M, b)
        return y.permute(1, 2, 0).reshape(shape)  # P^T

    def dense_matrix(self) -> Tensor:
        """The explicit (dim, dim) matrix M (for tests and inspection)."""
        eye = torch.eye(self.dim, dtype=self.right.dtype, device=self.right.device)
        return self.forward(eye).t()


class GroupFusion(nn.Module):
    """An N x N matrix mixing the N groups, shared over the d_s positions of a group (N^2 parameters)."""

    def __init__(self, num_groups: int, group_size: int) -> None:
        super().__init__()
        self.num_groups, self.group_size = num_groups, group_size
        self.weight = nn.Parameter(torch.eye(num_groups))

    def reset_parameters(self) -> None:
        """Identity."""
        with torch.no_grad():
            self.weight.copy_(torch.eye(self.num_groups))

    def forward(self, x: Tensor) -> Tensor:
        """``out[..., i, :] = sum_j G[i, j] x[..., j, :]`` on the grouped view of the last axis."""
        shape = x.shape
        y = x.reshape(-1, self.num_groups, self.group_size)
        return torch.einsum("ij,njd->nid", self.weight, y).reshape(shape)


class BlockDiagFusion(nn.Module):
    """Per-group d_s x d_s blocks (H d_s parameters); mixes within a group only."""

    def __init__(self, num_groups: int, group_size: int) -> None:
        super().__init__()
        self.num_groups, self.group_size = num_groups, group_size
        self.weight = nn.Parameter(torch.eye(group_size).repeat(num_groups, 1, 1))

    def reset_parameters(self) -> None:
        """Identity blocks."""
        with torch.no_grad():
            self.weight.copy_(torch.eye(self.group_size).expand_as(self.weight))

    def forward(self, x: Tensor) -> Tensor:
        """Block ``i`` applied to group ``i`` of the last axis."""
        shape = x.shape
        y = x.reshape(-1, self.num_groups, self.group_size)
        return torch.einsum("ipq,niq->nip", self.weight, y).reshape(shape)


def build_fusion(config: MoHDConfig) -> nn.Module | None:
    """The fusion module of one sublayer (acting on H), or ``None`` for ``fusion="none"``.

    With ``placement="ffn"`` the groups of ``"group"``/``"blockdiag"`` are N equal slices of H."""
    h, n = config.hidden_size, config.num_subdims
    if config.fusion == "none":
        return None
    if config.fusion == "monarch":
        return MonarchFusion(h, config.resolved_monarch_blocks)
    if h % n:
        raise ValueError(f"fusion={config.fusion!r} needs hidden_size divisible by num_subdims={n}, got {h}")
    if config.fusion == "group":
        return GroupFusion(n, h // n)
    return BlockDiagFusion(n, h // n)
