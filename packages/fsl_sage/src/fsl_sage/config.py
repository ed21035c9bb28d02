"""Hyper-parameters of FSL-SAGE and its baselines (the defaults of the paper's experiments and official code:
3 clients, 200 rounds, E = 1, B = 128, q = 5, l = 10, Adam 1e-3 with weight decay 1e-4)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = ["FSLConfig", "MODES", "Mode"]

Mode = Literal["eager", "lazy"]
MODES: tuple[str, ...] = get_args(Mode)


@dataclass
class FSLConfig:
    """Every hyper-parameter of the federated split-learning loops, validated on construction.

    Attributes:
        rounds: communication rounds R (the paper: 200).
        local_epochs: local epochs E per round; the local iteration index k runs across them.
        batch_size: client mini-batch size B (the last batch of an epoch may be shorter).
        server_update_interval: q; the client uploads its smashed activations (and the server steps) when k % q == 0.
        align_interval: l; auxiliary models are aligned in rounds t with t % l == 0.
        align_epochs: Adam epochs over the alignment buffer per alignment event (0: targets only).
        align_batch_size: minibatch size of alignment.
        buffer_size: M; the per-client FIFO of most recent uploaded (z, y) samples kept by the server.
        mode: ``"eager"`` (the official code: client i aligns at k = 0 of an alignment round) or ``"lazy"``
            (all clients align at the end of round t, the aux is used from round t + 1; what Flower runs).
        lr: Adam learning rate of client, server and aux models.
        aux_lr: Adam learning rate of the aux models (``None``: ``lr``).
        weight_decay: L2 weight decay of the client and server Adam optimizers (the aux optimizer has none).
        betas: Adam betas.
        warm_start_rounds: rounds of CSE-FSL run first to initialise the aux models (FSL-SAGE only).
        comm_budget_bytes: stop after the round in which the ledger total reaches this many bytes.
        count_labels: also count the uploaded labels (int64, 8 bytes each) in the ledger.
        seed: seeds model initialisation, batch order and alignment shuffles.
    """

    rounds: int = 200
    local_epochs: int = 1
    batch_size: int = 128
    server_update_interval: int = 5
    align_interval: int = 10
    align_epochs: int = 100
    align_batch_size: int = 1000
    buffer_size: int = 1000
    mode: Mode = "eager"
    lr: float = 1e-3
    aux_lr: float | None = None
    weight_decay: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    warm_start_rounds: int = 0
    comm_budget_bytes: int | None = None
    count_labels: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        self.rounds = check_int("rounds", self.rounds, min=1)
        self.local_epochs = check_int("local_epochs", self.local_epochs, min=1)
        self.batch_size = check_int("batch_size", self.batch_size, min=1)
        self.server_update_interval = check_int("server_update_interval (q)", self.server_update_interval, min=1)
        self.align_interval = check_int("align_interval (l)", self.align_interval, min=1)
        self.align_epochs = check_int("align_epochs", self.align_epochs, min=0)
        self.align_batch_size = check_int("align_batch_size", self.align_batch_size, min=1)
        self.buffer_size = check_int("buffer_size (M)", self.buffer_size, min=1)
        self.mode = check_choice("mode", self.mode, MODES)
        self.lr = check_float("lr", self.lr, min=0.0, min_open=True)
        self.aux_lr = check_float("aux_lr", self.aux_lr, min=0.0, min_open=True, allow_none=True)
        self.weight_decay = check_float("weight_decay", self.weight_decay, min=0.0)
        if isinstance(self.betas, str) or not hasattr(self.betas, "__iter__"):
            raise ValueError(f"betas must be two floats in [0, 1), got {self.betas!r}")
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        if len(self.betas) != 2:
            raise ValueError(f"betas must be two floats in [0, 1), got {self.betas!r}")
        self.betas = tuple(check_float("betas", b, min=0.0, max=1.0, max_open=True) for b in self.betas)  # type: ignore[assignment]
        self.warm_start_rounds = check_int("warm_start_rounds", self.warm_start_rounds, min=0)
        self.comm_budget_bytes = check_int("comm_budget_bytes", self.comm_budget_bytes, min=1, allow_none=True)
        self.count_labels = check_bool("count_labels", self.count_labels)
        self.seed = check_int("seed", self.seed, min=0)

    @property
    def q(self) -> int:
        """Alias of ``server_update_interval``."""
        return self.server_update_interval

    @property
    def effective_aux_lr(self) -> float:
        return self.lr if self.aux_lr is None else self.aux_lr

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FSLConfig:
        """Build from a dict (e.g. a Flower run config), ignoring unknown keys; dashes may replace underscores."""
        names = {f.name for f in fields(cls)}
        kw = {}
        for k, v in d.items():
            k2 = k.replace("-", "_")
            if k2 in names:
                kw[k2] = v
        if "betas" in kw and isinstance(kw["betas"], str):
            kw["betas"] = tuple(float(b) for b in kw["betas"].split(","))
        if kw.get("aux_lr") in ("", None, 0, 0.0):
            kw["aux_lr"] = None
        if kw.get("comm_budget_bytes") in ("", 0, None):
            kw["comm_budget_bytes"] = None
        return cls(**kw)
