"""TimeBase as a plug-in complexity reducer for patch-based models (paper Sec. 4, Table 4).

After patching, (B, C, patch_len, num_patches), a ``Linear(num_patches -> R)`` over the patch axis extracts R basis
patches; the encoder then sees R tokens instead of num_patches, the positional encoding has R rows and the
flatten head d_model * R inputs. :class:`PatchTST` is a compact PatchTST (RevIN, end-padded patching, transformer
encoder over patches, flatten head) with ``basis_num`` switching the reducer on; :func:`add_basis_reducer` puts the
same reducer into Hugging Face ``transformers.PatchTSTForPrediction``.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from icml25_shared.validate import check_bool, check_float, check_int
from timebase.model import check_window, param_dtype

__all__ = ["BasisReducer", "PatchTST", "RevIN", "add_basis_reducer"]


class BasisReducer(nn.Module):
    """``Linear(num_patches -> basis_num)`` over the last (patch) axis: (..., num_patches) -> (..., basis_num)."""

    def __init__(self, num_patches: int, basis_num: int) -> None:
        super().__init__()
        num_patches, basis_num = check_int("num_patches", num_patches, min=1), check_int("basis_num", basis_num, min=1)
        if basis_num > num_patches:
            raise ValueError(f"basis_num must be <= num_patches={num_patches}, got {basis_num}")
        self.num_patches, self.basis_num = num_patches, basis_num
        self.linear = nn.Linear(num_patches, basis_num)

    def forward(self, patches: Tensor) -> Tensor:
        if patches.shape[-1] != self.num_patches:
            raise ValueError(f"patches must have num_patches={self.num_patches} on the last axis, got {patches.shape}")
        return self.linear(patches)

    def macs(self, rows: int) -> int:
        """MACs for ``rows`` rows of patches (e.g. C * patch_len per sample)."""
        return rows * self.num_patches * self.basis_num


class RevIN(nn.Module):
    """Reversible instance normalisation (Kim et al. 2022), used by PatchTST (not by TimeBase)."""

    def __init__(self, n_channels: int, affine: bool = True, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = nn.Parameter(torch.ones(n_channels))
            self.bias = nn.Parameter(torch.zeros(n_channels))

    def normalize(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        mean = x.mean(dim=1, keepdim=True).detach()
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()
        z = (x - mean) / std
        if self.affine:
            z = z * self.weight + self.bias
        return z, mean, std

    def denormalize(self, y: Tensor, mean: Tensor, std: Tensor) -> Tensor:
        if self.affine:
            y = (y - self.bias) / (self.weight + self.eps * self.eps)
        return y * std + mean


class PatchTST(nn.Module):
    """A channel-independent PatchTST (Nie et al., ICLR 2023) with an optional TimeBase reducer.

    ``basis_num=None``: the plain model; an int R: :class:`BasisReducer` after patching, R tokens downstream.
    Defaults follow the official plug-in script for ETTh1 (patch_len = stride = 24 here, d_model 16, 3 layers,
    4 heads, d_ff 128, dropout 0.3). The encoder uses ``nn.TransformerEncoderLayer`` (LayerNorm, GELU) where the
    original uses BatchNorm.
    """

    def __init__(
        self,
        seq_len: int,
        pred_len: int,
        n_channels: int,
        patch_len: int = 24,
        stride: int = 24,
        d_model: int = 16,
        n_layers: int = 3,
        n_heads: int = 4,
        d_ff: int = 128,
        dropout: float = 0.3,
        basis_num: int | None = None,
        revin: bool = True,
    ) -> None:
        super().__init__()
        for name, v in (
            ("seq_len", seq_len),
            ("pred_len", pred_len),
            ("n_channels", n_channels),
            ("patch_len", patch_len),
            ("stride", stride),
            ("d_model", d_model),
            ("n_layers", n_layers),
            ("n_heads", n_heads),
            ("d_ff", d_ff),
        ):
            check_int(name, v, min=1)
        dropout = check_float("dropout", dropout, min=0.0, max=1.0, max_open=True)
        revin = check_bool("revin", revin)
        if seq_len < patch_len:
            raise ValueError(f"seq_len must be >= patch_len={patch_len}, got {seq_len}")
        if d_model % n_heads:
            raise ValueError(f"d_model must be divisible by n_heads={n_heads}, got {d_model}")
        self.seq_len, self.pred_len, self.n_channels = seq_len, pred_len, n_channels
        self.patch_len, self.stride, self.d_model = patch_len, stride, d_model
        self.n_layers, self.d_ff = n_layers, d_ff
        # end padding by `stride` repeated last values, as PatchTST's padding_patch="end"
        self.num_patches = (seq_len - patch_len) // stride + 2
        self.reducer = BasisReducer(self.num_patches, basis_num) if basis_num is not None else None
        self.n_tokens = basis_num if basis_num is not None else self.num_patches
        self.revin = RevIN(n_channels) if revin else None
        self.embed = nn.Linear(patch_len, d_model)  # W_P
        self.pos = nn.Parameter(torch.empty(self.n_tokens, d_model).uniform_(-0.02, 0.02))
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model * self.n_tokens, pred_len)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, H, C)."""
        check_window(x, self.seq_len, self.n_channels, dtype=param_dtype(self))
        b, _, c = x.shape
        if self.revin is not None:
            x, mean, std = self.revin.normalize(x)
        z = x.transpose(1, 2)  # (B, C, T)
        z = torch.cat([z, z[..., -1:].expand(-1, -1, self.stride)], dim=-1)
        patches = z.unfold(-1, self.patch_len, self.stride)  # (B, C, num_patches, patch_len)
        if self.reducer is not None:  # the plug-in: Linear over the patch axis
            patches = self.reducer(patches.transpose(-1, -2)).transpose(-1, -2)  # (B, C, R, patch_len)
        tokens = self.dropout(self.embed(patches) + self.pos).reshape(b * c, self.n_tokens, self.d_model)
        h = self.encoder(tokens).reshape(b, c, self.n_tokens * self.d_model)
        y = self.head(h).transpose(1, 2)  # (B, H, C)
        if self.revin is not None:
            y = self.revin.denormalize(y, mean, std)
        return y

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def macs(self, n_channels: int | None = None) -> int:
        """Analytic MACs per sample: reducer, patch embedding, attention projections and products, feed-forward
        and head (the dominant terms; norms, softmax and RevIN are not counted)."""
        c = n_channels or self.n_channels
        n, d = self.n_tokens, self.d_model
        per_channel = n * self.patch_len * d  # W_P
        if self.reducer is not None:
            per_channel += self.reducer.macs(self.patch_len)
        per_layer = 4 * n * d * d + 2 * n * n * d + 2 * n * d * self.d_ff
        per_channel += self.n_layers * per_layer + n * d * self.pred_len
        return c * per_channel


class _ReducedPatchify(nn.Module):
    """A ``transformers`` PatchTST patchifier followed by a :class:`BasisReducer` over its patches:
    (B, C, num_patches, patch_len) -> (B, C, R, patch_len); ``num_patches`` reports R to the modules built after."""

    def __init__(self, patchifier: nn.Module, basis_num: int) -> None:
        super().__init__()
        self.patchifier = patchifier
        self.reducer = BasisReducer(int(cast(int, patchifier.num_patches)), basis_num)
        self.num_patches = basis_num

    def forward(self, past_values: Tensor) -> Tensor:
        patches = self.patchifier(past_values)  # (B, C, N, patch_len)
        return self.reducer(patches.transpose(-1, -2)).transpose(-1, -2)  # (B, C, R, patch_len)


def add_basis_reducer(model: nn.Module, basis_num: int) -> nn.Module:
    """Put the TimeBase reducer (paper Sec. 4) into a ``transformers.PatchTSTForPrediction``, in place.

    After its patchifier, a ``Linear(num_patches -> basis_num)`` over the patch axis turns the N patches into R
    basis patches; the positional encoding is rebuilt with R rows and the prediction head with ``d_model * R``
    inputs (both freshly initialised, as in the compact :class:`PatchTST`), so the encoder attends over R tokens.
    Call it on a new (untrained) model; a trained model's encoder weights are kept but its head is replaced. To
    reload a saved model, build the same structure (``add_basis_reducer(PatchTSTForPrediction(config), R)``) and
    ``load_state_dict``: ``from_pretrained`` alone rebuilds the model without the reducer.
    """
    from transformers import PatchTSTForPrediction
    from transformers.models.patchtst.modeling_patchtst import PatchTSTPositionalEncoding, PatchTSTPredictionHead

    if not isinstance(model, PatchTSTForPrediction):
        raise ValueError(f"model must be a transformers.PatchTSTForPrediction, got {type(model).__name__}")
    core, config = model.model, model.config
    if isinstance(core.patchifier, _ReducedPatchify):
        raise ValueError("model already has a basis reducer")
    basis_num = check_int("basis_num", basis_num, min=1)
    if basis_num > core.patchifier.num_patches:
        raise ValueError(f"basis_num must be <= num_patches={core.patchifier.num_patches}, got {basis_num}")
    if config.do_mask_input:
        raise ValueError("add_basis_reducer is for forecasting models (config.do_mask_input=False)")
    ref = next(model.parameters())
    # transformers annotates the attribute with its own patchifier class; ours has the same call and num_patches
    core.patchifier = _ReducedPatchify(core.patchifier, basis_num).to(ref.device, ref.dtype)  # pyright: ignore[reportAttributeAccessIssue]
    core.encoder.positional_encoder = PatchTSTPositionalEncoding(config, basis_num).to(ref.device, ref.dtype)
    model.head = PatchTSTPredictionHead(config, basis_num, distribution_output=model.distribution_output).to(
        ref.device, ref.dtype
    )
    return model
