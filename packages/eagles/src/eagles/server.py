"""The EAGLES server's state across rounds (Sec. 4.4, server side), shared by every engine: personalised
models, the consensus mask and its density bands, and the cost meters.

:class:`EaglesServer` consumes what clients upload (state dicts, layer masks, metrics) through the pure
functions of :mod:`eagles.fl`; the in-process loop (:func:`eagles.sim.run_federated`) and the Flower strategy
(:class:`eagles.flower.EaglesStrategy`) both drive it, so they agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from eagles.config import EaglesConfig
from eagles.fl import (
    BufferPool,
    DensityBandSelector,
    consensus_stacked,
    context_distance_stacked,
    mask_density,
    mask_distance_stacked,
    mask_grams,
    personalized_mix,
    personalized_weights,
    select_score,
    stack_masks,
    stack_states,
    unstack,
    weighted_mean_stacked,
)
from eagles.metrics import CommMeter, FlopsMeter, kept_counts, payload_bytes, payload_bytes_rows

__all__ = ["ClientReply", "EaglesServer", "GATE_KEY", "StackedReplies"]

GATE_KEY = "sparsifier.router.w_gate"
"""The router weights the context distance compares."""


@dataclass
class ClientReply:
    """What one client uploads after its local steps."""

    partition_id: int
    state: dict[str, Tensor]
    masks: dict[str, Tensor]
    metrics: dict[str, float]


@dataclass
class StackedReplies:
    """One round's replies side by side, in partition order: every state key and every layer mask as a
    ``(C, numel)`` matrix (one row per client), built once and shared by the metering, the consensus, the
    distances and the mixing. :meth:`of` stacks :class:`ClientReply` objects; the Flower strategy fills the
    matrices straight from the reply payloads (:func:`eagles.flower.stack_replies`)."""

    partition_ids: list[int]
    metrics: list[dict[str, float]]
    states: dict[str, Tensor]
    """Key → ``(C, numel)`` (the state's dtype)."""
    shapes: dict[str, tuple[int, ...]]
    """Key → the tensor's shape (state keys and mask keys)."""
    masks: dict[str, Tensor]
    """Layer weight name → ``(C, numel)`` bool; empty when the clients send no masks."""

    @classmethod
    def of(cls, replies: list[ClientReply]) -> StackedReplies:
        if not replies:
            raise ValueError("replies must hold at least one client's reply, got none")
        replies = sorted(replies, key=lambda r: r.partition_id)
        shapes = {k: tuple(t.shape) for k, t in replies[0].state.items()}
        has_masks = bool(replies[0].masks)
        if has_masks:
            shapes.update({k: tuple(m.shape) for k, m in replies[0].masks.items()})
        return cls(
            [r.partition_id for r in replies],
            [r.metrics for r in replies],
            stack_states([r.state for r in replies]),
            shapes,
            stack_masks([r.masks for r in replies]) if has_masks else {},
        )


def _mean(vals: list[float]) -> float:
    return sum(vals) / len(vals) if vals else float("nan")


class EaglesServer:
    """Per-client personalised states, band bookkeeping, history and meters.

    Args:
        config: the method's configuration.
        initial_state: θ_0, sent to every client in round 1.
        num_clients: C.
        fixed_mask: the re-train phase's mask (layer weight name → bool); both sides know it, so payloads carry
            only its kept values.
        stop_band: pre-train stops once this band's mask is stored (``stopped`` turns True).
    """

    def __init__(
        self,
        config: EaglesConfig,
        initial_state: Mapping[str, Tensor],
        num_clients: int,
        *,
        fixed_mask: Mapping[str, Tensor] | None = None,
        stop_band: float | None = None,
    ) -> None:
        self.config = config
        self.num_clients = num_clients
        self.initial_state = {k: v.detach().clone() for k, v in initial_state.items()}
        self.personal: dict[int, dict[str, Tensor]] = {}
        self.fixed_mask = None if fixed_mask is None else {k: v.bool() for k, v in fixed_mask.items()}
        self.selector = DensityBandSelector(config.bands, config.band_tolerance)
        self.stop_band = stop_band
        self.stopped = False
        self.comm = CommMeter()
        self.flops = FlopsMeter()
        self.history: list[dict[str, float]] = []
        self.last_weights: Tensor | None = None
        self._pool = BufferPool(keep=2, huge_pages=False)
        """The personalised states' buffers: the one of the round before last is reused once nothing holds it."""
        self._stacked: tuple[list[int], dict[str, Tensor]] | None = None
        """(partition ids, key → (C, numel)) of the last personalised states, which ``personal`` holds as views."""
        self.failures: list[tuple[int, int, str | None]] = []
        """(round, node id, reason) of each client that failed (Flower engines: an error reply)."""

    def state_for(self, partition_id: int) -> dict[str, Tensor]:
        return self.personal.get(partition_id, self.initial_state)

    def masks_of(self, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The layer masks a state dict implies (the fixed mask in re-train; |W| > t otherwise)."""
        if self.fixed_mask is not None:
            return self.fixed_mask
        out = {}
        for k, w in state.items():
            t = state.get(k[: -len("weight")] + "threshold") if k.endswith(".weight") else None
            if t is not None:
                out[k] = w.abs() > t.unsqueeze(1)
        return out

    def count_down(self, server_round: int, partition_id: int, state: Mapping[str, Tensor]) -> None:
        """Meter the download of ``state`` to one client."""
        parts = payload_bytes(state, self.masks_of(state), mask_known=self.fixed_mask is not None)
        self.comm.add_payload(server_round, partition_id, "down", parts)

    def count_down_many(self, server_round: int, sent: Mapping[int, Mapping[str, Tensor]]) -> None:
        """:meth:`count_down` of several clients at once (partition id → the state sent), the same bytes. When the
        states sent are this server's personalised states of the last round, their stacked matrices are read as
        they are (no copy); otherwise the states are stacked once."""
        if not sent:
            return
        pids = sorted(sent)
        last = self._stacked
        if last is not None and last[0] == pids and all(sent[p] is self.personal.get(p) for p in pids):
            states = last[1]
        else:
            states = stack_states([sent[p] for p in pids])
        masks: dict[str, Tensor] = {}
        nnz: dict[str, Tensor] = {}
        if self.fixed_mask is not None:
            masks = dict(self.fixed_mask)
        else:
            shape0 = {k: tuple(t.shape) for k, t in sent[pids[0]].items()}
            for k, w in states.items():
                t = states.get(k[: -len("weight")] + "threshold") if k.endswith(".weight") else None
                if t is None:
                    continue
                if len(shape0[k]) == 2:  # |W| > t per output row, counted client by client
                    nnz[k] = kept_counts(w.view(len(pids), *shape0[k]), t)
                else:
                    masks[k] = torch.stack([self.masks_of(sent[p])[k].reshape(-1) for p in pids])
        rows = payload_bytes_rows(states, masks, mask_known=self.fixed_mask is not None, nnz=nnz)
        self.comm.add_payloads(server_round, pids, "down", rows)

    def aggregate_train(self, server_round: int, replies: list[ClientReply] | StackedReplies) -> dict[str, float]:
        """One round of server work; returns the round's record (also appended to ``history``). Each reply's
        tensors are stacked once (:class:`StackedReplies`): every step below works on ``(C, numel)`` matrices."""
        st = replies if isinstance(replies, StackedReplies) else StackedReplies.of(replies)
        cfg = self.config
        fixed = self.fixed_mask
        has_masks = bool(st.masks)
        # the mask products serve the distance and, on their diagonal, the uplink meter's kept counts
        use_mask = has_masks and cfg.aggregation != "fedavg" and cfg.distance in ("both", "mask")
        grams = mask_grams(st.masks) if use_mask else None
        if fixed is not None:
            up = payload_bytes_rows(st.states, fixed, mask_known=True)
        elif grams is not None:
            kept = {k: g.diagonal().round().to(torch.int64) for k, g in grams.items()}
            up = payload_bytes_rows(st.states, nnz=kept)
        else:
            up = payload_bytes_rows(st.states, st.masks)
        self.comm.add_payloads(server_round, st.partition_ids, "up", up)
        for m in st.metrics:
            self.flops.add(server_round, "gnn", int(m["macs-gnn"]), cfg.local_epochs)
            self.flops.add(server_round, "sparsifier", int(m["macs-sparsifier"]), cfg.local_epochs)
        c = len(st.partition_ids)
        if cfg.aggregation == "fedavg":
            avg = weighted_mean_stacked(st.states, [m["num-examples"] for m in st.metrics])
            avg = {k: v.view(st.shapes[k]) for k, v in avg.items()}
            new = [avg] * c
            self.last_weights = None
            self._stacked = None
        else:
            d_mask = mask_distance_stacked(st.masks, grams) if grams is not None else None
            has_gate = GATE_KEY in st.states
            d_ctx = context_distance_stacked(st.states[GATE_KEY]) if has_gate and cfg.distance != "mask" else None
            if d_mask is None and d_ctx is None:  # nothing to compare: unweighted FedAvg
                a = torch.full((c, c), 1.0 / c, dtype=torch.float64)
            else:
                a = personalized_weights(d_mask, d_ctx)
            self.last_weights = a
            mixed = personalized_mix(st.states, a, self._pool)
            new = unstack(mixed, st.shapes)
            self._stacked = (list(st.partition_ids), mixed)
        record = {
            "round": float(server_round),
            "val-acc": _mean([m["val-acc"] for m in st.metrics]),
            "test-acc": _mean([m["test-acc"] for m in st.metrics]),
            "kept-edges": _mean([m["kept-edges"] for m in st.metrics]),
            "density": 1.0,
        }
        if has_masks and fixed is None:
            cons = {k: v.view(st.shapes[k]) for k, v in consensus_stacked(st.masks).items()}
            record["density"] = mask_density(cons)
            self.selector.update(server_round, cons, select_score(st.metrics, cfg.select_on))
            if self.stop_band is not None and self.selector.has(self.stop_band):
                self.stopped = True
        elif fixed is not None:
            record["density"] = mask_density(fixed)
        for pid, state in zip(st.partition_ids, new, strict=True):
            self.personal[pid] = state
        self.history.append(record)
        return record

    def record_evaluate(self, server_round: int, metrics: list[dict[str, float]]) -> None:
        """Mean client accuracy of the personalised models after aggregation (unweighted over clients)."""
        rec = next((h for h in self.history if h["round"] == server_round), None)
        if rec is None:
            return
        rec["eval-val-acc"] = _mean([m["val-acc"] for m in metrics])
        rec["eval-test-acc"] = _mean([m["test-acc"] for m in metrics])
