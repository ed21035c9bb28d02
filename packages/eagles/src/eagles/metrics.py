"""Cost accounting (the paper's "economical" and "efficient", Sec. 5): payload bytes per client and round, and
multiply-accumulates of the local steps, GNN and sparsifier apart.

Bytes (float32): a dense tensor costs 4·numel; a masked layer in pre-train 4·nnz + ⌈numel/8⌉ (values plus
bitmask); a masked layer whose mask both sides know (re-train) 4·nnz. MACs per forward pass: a GNN layer
ρ_l n f_in f_out + ρ_r n f_in f_out + |kept edges| f_out (ρ the layer's weight density); the factorised
sparsifier K (2nFh + 2mh) plus the router's n F K (twice in training: the noise path). Training counts
``TRAIN_FACTOR`` = 3 forward passes per step (forward, and a backward of about twice its cost).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from eagles.fl import check_binary
from icml25_shared.validate import check_choice, check_int, check_tensor

__all__ = [
    "TRAIN_FACTOR",
    "payload_bytes",
    "payload_bytes_rows",
    "kept_counts",
    "CommMeter",
    "FlopsMeter",
    "gnn_macs",
    "sparsifier_macs",
]

TRAIN_FACTOR = 3
"""Forward-pass equivalents of one training step (forward + backward ≈ 3 × forward)."""


def payload_bytes(
    state: Mapping[str, Tensor], masks: Mapping[str, Tensor] | None = None, *, mask_known: bool = False
) -> dict[str, int]:
    """Bytes of one state dict, split into ``gnn`` and ``sparsifier`` (keys starting with ``sparsifier.``).

    Tensors named in ``masks`` (layer weight name → bool mask of the weight's shape) cost nnz values
    (+ ⌈numel/8⌉ bitmask bytes unless ``mask_known``); every other tensor its own ``nbytes`` (float32: 4·numel).
    """
    out = {"gnn": 0, "sparsifier": 0}
    masks = masks or {}
    unknown = sorted(set(masks) - set(state))
    if unknown:
        raise ValueError(f"masks must name tensors of state, got {unknown} which state does not hold")
    for k, t in state.items():
        if k in masks:
            m = check_binary(f"masks[{k!r}]", masks[k])
            if tuple(m.shape) != tuple(t.shape):
                raise ValueError(
                    f"masks[{k!r}] must have the shape of state[{k!r}], {tuple(t.shape)}, got {tuple(m.shape)}"
                )
            b = t.element_size() * int(m.count_nonzero()) + (0 if mask_known else math.ceil(m.numel() / 8))
        else:
            b = t.numel() * t.element_size()
        out["sparsifier" if k.startswith("sparsifier.") else "gnn"] += b
    return out


def payload_bytes_rows(
    states: Mapping[str, Tensor],
    masks: Mapping[str, Tensor] | None = None,
    *,
    mask_known: bool = False,
    nnz: Mapping[str, Tensor] | None = None,
) -> list[dict[str, int]]:
    """:func:`payload_bytes` of every client at once: ``states`` maps each key to a ``(C, numel)`` matrix (one
    row per client, :func:`eagles.fl.stack_states`), ``masks`` each masked key to a ``(C, numel)`` bool matrix or
    to one mask shared by every client (the re-train's fixed mask, any shape of ``numel`` entries).

    ``nnz``: masked key → every client's kept count, ``(C,)`` integers, when already known (the diagonal of the
    mask products, :func:`eagles.fl.mask_grams`, or :func:`kept_counts`); those keys need no entry in ``masks``.
    Only shapes, dtypes and those counts enter the sum: nothing is serialised."""
    masks = masks or {}
    nnz = nnz or {}
    unknown = sorted((set(masks) | set(nnz)) - set(states))
    if unknown:
        raise ValueError(f"masks must name tensors of state, got {unknown} which state does not hold")
    c = next(iter(states.values())).size(0) if states else 0
    out = {"gnn": torch.zeros(c, dtype=torch.int64), "sparsifier": torch.zeros(c, dtype=torch.int64)}
    for k, t in states.items():
        numel, size = t.size(1), t.element_size()
        if k in nnz:
            cnt = torch.as_tensor(nnz[k]).reshape(-1).to(torch.int64)
            if cnt.numel() != c or bool((cnt < 0).any()) or bool((cnt > numel).any()):
                raise ValueError(f"nnz[{k!r}] must hold {c} counts in [0, {numel}], got {cnt.tolist()}")
            b = size * cnt + (0 if mask_known else math.ceil(numel / 8))
        elif k in masks:
            m = check_binary(f"masks[{k!r}]", masks[k])
            if tuple(m.shape) == (c, numel):
                cnt = torch.from_numpy(np.count_nonzero(m.bool().numpy(), axis=1).astype(np.int64))  # per client
            elif m.numel() == numel:  # one mask shared by every client: counted once
                cnt = torch.full((c,), int(m.count_nonzero()), dtype=torch.int64)
            else:
                raise ValueError(
                    f"masks[{k!r}] must be ({c}, {numel}) or hold {numel} entries (state[{k!r}]), got {tuple(m.shape)}"
                )
            b = size * cnt + (0 if mask_known else math.ceil(numel / 8))
        else:
            b = torch.full((c,), numel * size, dtype=torch.int64)
        out["sparsifier" if k.startswith("sparsifier.") else "gnn"] += b
    return [{"gnn": int(g), "sparsifier": int(s)} for g, s in zip(out["gnn"].tolist(), out["sparsifier"].tolist())]


def kept_counts(weights: Tensor, thresholds: Tensor) -> Tensor:
    """Every client's count of :math:`|W| > t` (the mask a state dict implies, each output row against its own
    threshold): ``weights`` ``(C, out, in)``, ``thresholds`` ``(C, out)``; ``(C,)`` int64. One client at a time
    through two small reused buffers (they stay in cache), instead of a ``(C, out, in)`` temporary per step."""
    check_tensor("weights", weights, ndim=3, dtype="floating")
    c, rows, cols = weights.shape
    check_tensor("thresholds", thresholds, shape=(c, rows))
    if weights.dtype == torch.bfloat16 or thresholds.dtype == torch.bfloat16:  # no NumPy dtype: one torch pass
        return (weights.abs() > thresholds.unsqueeze(-1)).reshape(c, -1).sum(1)
    w = weights.detach().cpu().numpy()
    t = thresholds.detach().cpu().numpy()[:, :, None]  # NumPy promotes the comparison as torch does
    mag = np.empty((rows, cols), dtype=w.dtype)
    kept = np.empty((rows, cols), dtype=bool)
    out = np.empty(c, dtype=np.int64)
    for i in range(c):
        np.abs(w[i], out=mag)
        np.greater(mag, t[i], out=kept)
        out[i] = np.count_nonzero(kept)
    return torch.from_numpy(out)


@dataclass
class CommMeter:
    """Bytes per (round, client, direction, part); ``direction`` is ``"up"`` or ``"down"``."""

    records: dict[tuple[int, int, str, str], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, server_round: int, client: int, direction: str, part: str, nbytes: int) -> None:
        check_choice("direction", direction, ("up", "down"))
        self.records[(server_round, client, direction, part)] += check_int("nbytes", nbytes, min=0)

    def add_payload(self, server_round: int, client: int, direction: str, parts: Mapping[str, int]) -> None:
        for part, b in parts.items():
            self.add(server_round, client, direction, part, b)

    def add_payloads(
        self, server_round: int, clients: Sequence[int], direction: str, rows: Sequence[Mapping[str, int]]
    ) -> None:
        """:meth:`add_payload` of several clients (one row of parts per client), checked once for all."""
        check_choice("direction", direction, ("up", "down"))
        if len(clients) != len(rows):
            raise ValueError(f"rows must hold one payload per client, got {len(rows)} for {len(clients)} clients")
        for client, parts in zip(clients, rows, strict=True):
            for part, b in parts.items():
                if not isinstance(b, int) or isinstance(b, bool) or b < 0:
                    check_int("nbytes", b, min=0)  # raises the usual error
                self.records[(server_round, client, direction, part)] += b

    def total(self, *, server_round: int | None = None, direction: str | None = None, part: str | None = None) -> int:
        return sum(
            b
            for (r, _, d, p), b in self.records.items()
            if (server_round is None or r == server_round)
            and (direction is None or d == direction)
            and (part is None or p == part)
        )

    @property
    def rounds(self) -> list[int]:
        return sorted({r for r, _, _, _ in self.records})

    def per_round(self, direction: str, part: str | None = None) -> float:
        """Mean bytes per round (all clients together)."""
        rs = self.rounds
        return self.total(direction=direction, part=part) / len(rs) if rs else 0.0


def gnn_macs(layer_shapes: list[tuple[int, int]], densities: list[tuple[float, float]], n: int, kept: int) -> int:
    """Forward MACs of the GNN: Σ_l (ρ_l + ρ_r) n f_in f_out + kept·f_out."""
    total = 0.0
    for (f_in, f_out), (rho_l, rho_r) in zip(layer_shapes, densities, strict=True):
        total += (rho_l + rho_r) * n * f_in * f_out + kept * f_out
    return round(total)


def sparsifier_macs(n: int, m: int, f: int, h: int, k: int, *, training: bool) -> int:
    """Forward MACs of the factorised sparsifier: K (2nFh + 2mh) + nFK (router; twice in training)."""
    return k * (2 * n * f * h + 2 * m * h) + n * f * k * (2 if training else 1)


@dataclass
class FlopsMeter:
    """Training MACs per (round, part) summed over clients and local steps (``TRAIN_FACTOR`` × forward)."""

    records: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, server_round: int, part: str, forward_macs: int, steps: int = 1) -> None:
        self.records[(server_round, part)] += TRAIN_FACTOR * int(forward_macs) * int(steps)

    def total(self, part: str | None = None) -> int:
        return sum(v for (_, p), v in self.records.items() if part is None or p == part)

    def per_round(self, part: str | None = None) -> float:
        rs = {r for r, _ in self.records}
        return self.total(part) / len(rs) if rs else 0.0
