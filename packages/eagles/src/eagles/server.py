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
    DensityBandSelector,
    consensus_mask,
    context_distance,
    mask_density,
    mask_distance,
    personalized_aggregate,
    personalized_weights,
    select_score,
    weighted_average,
)
from eagles.metrics import CommMeter, FlopsMeter, payload_bytes

__all__ = ["ClientReply", "EaglesServer", "GATE_KEY"]

GATE_KEY = "sparsifier.router.w_gate"
"""The router weights the context distance compares."""


@dataclass
class ClientReply:
    """What one client uploads after its local steps."""

    partition_id: int
    state: dict[str, Tensor]
    masks: dict[str, Tensor]
    metrics: dict[str, float]


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
        parts = payload_bytes(state, self.masks_of(state), mask_known=self.fixed_mask is not None)
        self.comm.add_payload(server_round, partition_id, "down", parts)

    def aggregate_train(self, server_round: int, replies: list[ClientReply]) -> dict[str, float]:
        """One round of server work; returns the round's record (also appended to ``history``)."""
        replies = sorted(replies, key=lambda r: r.partition_id)
        cfg = self.config
        for r in replies:
            masks = self.fixed_mask if self.fixed_mask is not None else r.masks
            parts = payload_bytes(r.state, masks, mask_known=self.fixed_mask is not None)
            self.comm.add_payload(server_round, r.partition_id, "up", parts)
            self.flops.add(server_round, "gnn", int(r.metrics["macs-gnn"]), cfg.local_epochs)
            self.flops.add(server_round, "sparsifier", int(r.metrics["macs-sparsifier"]), cfg.local_epochs)
        states = [r.state for r in replies]
        masks = [r.masks for r in replies]
        has_masks = bool(masks[0])
        if cfg.aggregation == "fedavg":
            avg = weighted_average(states, [r.metrics["num-examples"] for r in replies])
            new = [avg] * len(replies)
            self.last_weights = None
        else:
            d_mask = mask_distance(masks) if has_masks and cfg.distance in ("both", "mask") else None
            has_gate = GATE_KEY in states[0]
            d_ctx = context_distance([s[GATE_KEY] for s in states]) if has_gate and cfg.distance != "mask" else None
            if d_mask is None and d_ctx is None:  # nothing to compare: unweighted FedAvg
                a = torch.full((len(states), len(states)), 1.0 / len(states), dtype=torch.float64)
            else:
                a = personalized_weights(d_mask, d_ctx)
            self.last_weights = a
            new = personalized_aggregate(states, a)
        record = {
            "round": float(server_round),
            "val-acc": _mean([r.metrics["val-acc"] for r in replies]),
            "test-acc": _mean([r.metrics["test-acc"] for r in replies]),
            "kept-edges": _mean([r.metrics["kept-edges"] for r in replies]),
            "density": 1.0,
        }
        if has_masks and self.fixed_mask is None:
            cons = consensus_mask(masks)
            record["density"] = mask_density(cons)
            self.selector.update(server_round, cons, select_score([r.metrics for r in replies], cfg.select_on))
            if self.stop_band is not None and self.selector.has(self.stop_band):
                self.stopped = True
        elif self.fixed_mask is not None:
            record["density"] = mask_density(self.fixed_mask)
        for r, st in zip(replies, new, strict=True):
            self.personal[r.partition_id] = st
        self.history.append(record)
        return record

    def record_evaluate(self, server_round: int, metrics: list[dict[str, float]]) -> None:
        """Mean client accuracy of the personalised models after aggregation (unweighted over clients)."""
        rec = next((h for h in self.history if h["round"] == server_round), None)
        if rec is None:
            return
        rec["eval-val-acc"] = _mean([m["val-acc"] for m in metrics])
        rec["eval-test-acc"] = _mean([m["test-acc"] for m in metrics])
