"""The F-server's weighted model averaging (Alg. 2): x̄_c = Σ_i w_i x_{c,i} with w_i = n_i / Σ_j n_j."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["weighted_average", "sample_weights"]


def sample_weights(sizes: Sequence[int]) -> list[float]:
    """w_i = n_i / Σ n."""
    if not sizes or any(n <= 0 for n in sizes):
        raise ValueError(f"client sizes must be a non-empty list of positive ints, got {list(sizes)}")
    tot = sum(sizes)
    return [n / tot for n in sizes]


def weighted_average(
    state_dicts: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float], tol: float = 1e-6
) -> dict[str, torch.Tensor]:
    """x̄ = Σ_i w_i x_i of every entry (BN running statistics included), accumulated in float64 and cast back;
    integer entries (``num_batches_tracked``) become the weighted mean rounded down. Weights must sum to 1."""
    if len(state_dicts) == 0:
        raise ValueError("weighted_average needs at least one state_dict")
    if len(weights) != len(state_dicts):
        raise ValueError(f"got {len(weights)} weights for {len(state_dicts)} state_dicts")
    w = [float(x) for x in weights]
    if any(x < 0 for x in w) or abs(sum(w) - 1.0) > tol:
        raise ValueError(f"weights must be non-negative and sum to 1 (tol {tol}), got {w} (sum {sum(w)!r})")
    keys = list(state_dicts[0].keys())
    for i, sd in enumerate(state_dicts[1:], 1):
        if list(sd.keys()) != keys:
            raise ValueError(f"state_dict {i} has different keys from state_dict 0")
    out: dict[str, torch.Tensor] = {}
    for k in keys:
        ref = state_dicts[0][k]
        acc = torch.stack([wi * sd[k].detach().to(torch.float64) for wi, sd in zip(w, state_dicts)]).sum(0)
        if ref.is_floating_point():
            out[k] = acc.to(ref.dtype)
        else:
            out[k] = torch.floor(acc + 1e-9).to(ref.dtype)
    return out
