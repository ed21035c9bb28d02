"""Byte accounting: a ledger of every payload and the closed-form per-round totals of FSL-SAGE and its peers.

Payload conventions (the official code's): tensors count ``numel · itemsize``; a model counts its parameters and
buffers (BN running statistics and the int64 ``num_batches_tracked`` included); labels are not counted unless
``count_labels`` (int64, 8 bytes each); the initial models, built from the shared seed on every side, are not
counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fsl_sage.align import is_alignment_round
from fsl_sage.config import FSLConfig
from icml25_shared.validate import check_choice, check_int

__all__ = ["ByteCounter", "Transfer", "nbytes", "expected_bytes", "local_batch_sizes", "METHODS"]

METHODS = ("fsl_sage", "cse_fsl", "splitfed_v1", "splitfed_v2", "fedavg")
DIRECTIONS = ("up", "down")


def nbytes(module: nn.Module | dict[str, torch.Tensor]) -> int:
    """Bytes of a model on the wire: parameters + buffers (or every tensor of a state_dict)."""
    if isinstance(module, dict):
        return int(sum(t.numel() * t.element_size() for t in module.values()))
    n = sum(p.numel() * p.element_size() for p in module.parameters())
    n += sum(b.numel() * b.element_size() for b in module.buffers())
    return int(n)


@dataclass(frozen=True)
class Transfer:
    """One payload: in round ``round``, client ``client`` sent (``up``) or received (``down``) ``bytes``."""

    round: int
    client: int
    direction: str
    kind: str
    bytes: int


class ByteCounter:
    """The communication ledger: a list of :class:`Transfer` with totals by round, client, direction and kind."""

    def __init__(self) -> None:
        self.transfers: list[Transfer] = []

    def add(self, round: int, client: int, direction: str, kind: str, n: int) -> None:
        check_choice("direction", direction, DIRECTIONS)
        n = check_int("bytes", n, min=0)
        self.transfers.append(Transfer(int(round), int(client), direction, kind, int(n)))

    def up(self, round: int, client: int, kind: str, n: int) -> None:
        """Client → server."""
        self.add(round, client, "up", kind, n)

    def down(self, round: int, client: int, kind: str, n: int) -> None:
        """Server → client."""
        self.add(round, client, "down", kind, n)

    @property
    def total(self) -> int:
        return sum(t.bytes for t in self.transfers)

    def total_where(
        self, round: int | None = None, client: int | None = None, direction: str | None = None, kind: str | None = None
    ) -> int:
        """Sum of the transfers matching every given field."""
        return sum(
            t.bytes
            for t in self.transfers
            if (round is None or t.round == round)
            and (client is None or t.client == client)
            and (direction is None or t.direction == direction)
            and (kind is None or t.kind == kind)
        )

    def by_round(self) -> dict[int, int]:
        out: dict[int, int] = defaultdict(int)
        for t in self.transfers:
            out[t.round] += t.bytes
        return dict(out)

    def by_kind(self, round: int | None = None) -> dict[str, int]:
        """{"up/smashed": ..., "down/client": ...} (optionally for one round)."""
        out: dict[str, int] = defaultdict(int)
        for t in self.transfers:
            if round is None or t.round == round:
                out[f"{t.direction}/{t.kind}"] += t.bytes
        return dict(out)

    def cumulative(self, rounds: int) -> list[int]:
        """Cumulative total at the end of each round 0..rounds-1."""
        per = self.by_round()
        acc, out = 0, []
        for r in range(rounds):
            acc += per.get(r, 0)
            out.append(acc)
        return out

    def __len__(self) -> int:
        return len(self.transfers)

    def __repr__(self) -> str:
        return f"ByteCounter({len(self.transfers)} transfers, total={self.total})"


def local_batch_sizes(n_samples: int, batch_size: int, local_epochs: int = 1) -> list[int]:
    """Sizes b_k of the local iterations k of one round (the last batch of each epoch may be short)."""
    if n_samples < 1:
        raise ValueError(f"a client needs at least one sample, got {n_samples}")
    full, rest = divmod(n_samples, batch_size)
    one = [batch_size] * full + ([rest] if rest else [])
    return one * local_epochs


def expected_bytes(
    method: str,
    client_sizes: Sequence[int],
    batch_size: int,
    q: int,
    align_interval: int,
    rounds: int,
    smashed_numel: int,
    client_bytes: int,
    server_bytes: int,
    aux_bytes: int,
    mode: str = "eager",
    local_epochs: int = 1,
    count_labels: bool = False,
    warm_start_rounds: int = 0,
    smashed_itemsize: int = 4,
) -> list[int]:
    """The closed form of the per-round communication: total bytes (all clients, both directions) of each round
    0..rounds-1. Per client and round (d = values per sample at the cut, s = their itemsize, 4 for float32,
    b_k = the size of local batch k):

    * FedAvg: 2·nbytes(x_c + x_s);
    * SplitFed-v1/v2: Σ_k 2·b_k·d·s + 2·nbytes(x_c) (smashed activations up, their gradients down);
    * CSE-FSL: Σ_{k ≡ 0 (q)} b_k·d·s + 2·nbytes(x_c) + 2·nbytes(x_a);
    * FSL-SAGE: Σ_{k ≡ 0 (q)} b_k·d·s + 2·nbytes(x_c), plus nbytes(x_a) down in each alignment round (eager) or
      in the round after it (lazy), on the schedule of :func:`fsl_sage.align.is_alignment_round`.

    Args:
        method: one of ``fsl_sage``, ``cse_fsl``, ``splitfed_v1``, ``splitfed_v2``, ``fedavg``.
        client_sizes: samples n_i per client.
        smashed_numel: values per sample at the cut (d).
        client_bytes: ``nbytes`` of the client model x_c.
        server_bytes: ``nbytes`` of the server model x_s.
        aux_bytes: ``nbytes`` of the auxiliary model x_a.
        mode: ``eager`` (aux sent in the alignment round t ≡ 0 (l)) or ``lazy`` (sent in round t + 1, for
            t < rounds − 1).
        smashed_itemsize: bytes per value at the cut (4 for float32, 8 for float64, 2 for bfloat16).
    """
    check_choice("method", method, METHODS)
    check_choice("mode", mode, ("eager", "lazy"))
    q, align_interval, rounds, batch_size, local_epochs, smashed_numel, smashed_itemsize = (
        check_int(name, value, min=1)
        for name, value in (
            ("q", q),
            ("align_interval", align_interval),
            ("rounds", rounds),
            ("batch_size", batch_size),
            ("local_epochs", local_epochs),
            ("smashed_numel", smashed_numel),
            ("smashed_itemsize", smashed_itemsize),
        )
    )
    client_bytes, server_bytes, aux_bytes = (
        check_int(name, value, min=0)
        for name, value in (("client_bytes", client_bytes), ("server_bytes", server_bytes), ("aux_bytes", aux_bytes))
    )
    client_sizes = [check_int(f"client_sizes[{i}]", n, min=1) for i, n in enumerate(client_sizes)]
    schedule = FSLConfig(rounds=rounds, align_interval=align_interval, warm_start_rounds=warm_start_rounds)
    label = 8 if count_labels else 0
    per_sample = smashed_numel * smashed_itemsize + label
    out = []
    for t in range(rounds):
        total = 0
        for n in client_sizes:
            sizes = local_batch_sizes(n, batch_size, local_epochs)
            if method == "fedavg":
                total += 2 * (client_bytes + server_bytes)
                continue
            if method in ("splitfed_v1", "splitfed_v2"):
                total += sum(b * per_sample + b * smashed_numel * smashed_itemsize for b in sizes) + 2 * client_bytes
                continue
            total += sum(b * per_sample for k, b in enumerate(sizes) if k % q == 0) + 2 * client_bytes
            warm = method == "fsl_sage" and t < warm_start_rounds
            if method == "cse_fsl" or warm:
                total += 2 * aux_bytes
                continue
            if mode == "eager" and is_alignment_round(t, schedule, lazy=False):
                total += aux_bytes  # aligned and sent at k = 0 of this round
            if mode == "lazy" and t >= 1 and is_alignment_round(t - 1, schedule, lazy=True):
                total += aux_bytes  # aligned at the end of round t - 1, sent with this round's message
        out.append(total)
    return out


def bytes_to_reach(accuracies: Sequence[float], cumulative_bytes: Sequence[int], target: float) -> float:
    """Cumulative bytes at the first round whose accuracy is ≥ ``target`` (``inf`` if never)."""
    for a, b in zip(accuracies, cumulative_bytes):
        if a >= target:
            return float(b)
    return math.inf
