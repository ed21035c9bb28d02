"""EaglesConfig: every hyper-parameter of EAGLES (Shi et al., ICML 2025), validated at construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = ["EaglesConfig", "DEFAULT_BANDS"]

DEFAULT_BANDS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
"""Consensus-mask densities visited in the pre-train phase (Sec. 4.2), in decreasing order."""


def _sequence(name: str, value: Any, what: str) -> tuple:
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of {what}, got {value!r} ({type(value).__name__})")
    return tuple(value)


@dataclass
class EaglesConfig:
    """Hyper-parameters of the two sparsifiers, the client objective and the server.

    Defaults follow the official code for Cora-like data (with the fixes listed in the README, "Choices").
    """

    keep_ratios: tuple[float, ...] = (0.9, 0.7, 0.5, 0.3)
    """Keep ratio k_i of each edge expert (one expert per ratio, Sec. 4.3); each in [0, 1]."""
    top_s: int = 3
    """Experts each node routes to (noisy top-s gating); 1 <= top_s <= len(keep_ratios)."""
    expert_hidden: int = 128
    """Hidden width h of each edge expert's MLP (2F+1 -> h -> 1)."""
    topo_scores: Literal["networkit"] | None = None
    """Add classical edge scores (local degree, forest fire, local similarity, SCAN) to the experts' scores;
    ``"networkit"`` computes them once per client with networkit (extra ``topo``), ``None`` turns them off."""
    topo_weight: float = 0.1
    """λ in ``λ·z_i + topo[:, i mod 4]`` when ``topo_scores`` is on."""
    balance_weight: float = 0.1
    """λ2, weight of the router's load-balance loss in the client objective."""
    threshold_decay: float = 1e-3
    """β, weight of the sparsity pressure β Σ exp(−t) on the weight thresholds."""
    lr: float = 0.01
    """Adam learning rate of the local steps."""
    threshold_lr: float | None = None
    """Adam learning rate of the thresholds t (None: ``lr``, as the official code). Sets how fast density falls."""
    local_epochs: int = 10
    """Full-batch local steps per round."""
    bands: tuple[float, ...] = DEFAULT_BANDS
    """Density bands of the pre-train phase, strictly decreasing, each in (0, 1]."""
    band_tolerance: float = 0.03
    """Half-width of a density band."""
    select_on: Literal["val", "test"] = "val"
    """Which client accuracy picks the best mask inside a band (``"test"`` reproduces the official code's leak)."""
    aggregation: Literal["personalized", "fedavg"] = "personalized"
    """Server rule: similarity-weighted personalised models, or one size-weighted average."""
    distance: Literal["both", "mask", "ctx"] = "both"
    """Which structural distances build the similarity (ablations: D_mask only, D_ctx only)."""
    graph_sparsifier: bool = True
    """Learn the mixture-of-experts edge mask (False: every edge kept, no sparsifier parameters)."""
    weight_sparsifier: bool = True
    """Threshold-mask the GNN's linear maps (False: a dense GNN, the FedAvg baseline's model)."""
    hidden_channels: int = 256
    """Width of the GNN's hidden layers (official 256 for Cora)."""
    num_layers: int = 3
    """Number of GNN layers (official 3)."""
    dropout: float = 0.5
    """Dropout between GNN layers."""
    edge_norm: Literal["sym", "none"] = "sym"
    """Message weight w_e: symmetric degree normalisation, or a plain sum."""
    temp_n: int = 20
    """Rounds r with (r − 1) mod temp_n = 0 anneal the temperature τ = max(0.05, exp(−temp_r·step))."""
    temp_r: float = 1e-3
    """Annealing rate of the temperature."""
    seed: int = 0
    """Seeds the initial weights (identical on every client) and the per-(client, round) local randomness."""

    def __post_init__(self) -> None:
        ratios = _sequence("keep_ratios", self.keep_ratios, "floats in [0, 1], one per edge expert, e.g. (0.9, 0.5)")
        if len(ratios) == 0:
            raise ValueError(f"keep_ratios must be a non-empty sequence of floats in [0, 1], got {self.keep_ratios!r}")
        self.keep_ratios = tuple(check_float(f"keep_ratios[{i}]", k, min=0.0, max=1.0) for i, k in enumerate(ratios))
        self.top_s = check_int("top_s", self.top_s, min=1, max=len(self.keep_ratios))
        self.expert_hidden = check_int("expert_hidden", self.expert_hidden, min=1)
        self.topo_scores = check_choice("topo_scores", self.topo_scores, (None, "networkit"))
        self.topo_weight = check_float("topo_weight", self.topo_weight, min=0.0)
        self.balance_weight = check_float("balance_weight", self.balance_weight, min=0.0)
        self.threshold_decay = check_float("threshold_decay", self.threshold_decay, min=0.0)
        self.lr = check_float("lr", self.lr, min=0.0, min_open=True)
        self.threshold_lr = check_float("threshold_lr", self.threshold_lr, min=0.0, allow_none=True)
        self.local_epochs = check_int("local_epochs", self.local_epochs, min=1)
        bands = _sequence("bands", self.bands, "strictly decreasing densities in (0, 1], e.g. (0.9, 0.5, 0.3)")
        if len(bands) == 0:
            raise ValueError(f"bands must be a non-empty sequence of densities in (0, 1], got {self.bands!r}")
        self.bands = tuple(check_float(f"bands[{i}]", b, min=0.0, max=1.0, min_open=True) for i, b in enumerate(bands))
        if any(b >= a for a, b in zip(self.bands, self.bands[1:], strict=False)):
            raise ValueError(f"bands must be strictly decreasing, got {self.bands}")
        self.band_tolerance = check_float("band_tolerance", self.band_tolerance, min=0.0, max=0.5)
        self.select_on = check_choice("select_on", self.select_on, ("val", "test"))
        self.aggregation = check_choice("aggregation", self.aggregation, ("personalized", "fedavg"))
        self.distance = check_choice("distance", self.distance, ("both", "mask", "ctx"))
        self.graph_sparsifier = check_bool("graph_sparsifier", self.graph_sparsifier)
        self.weight_sparsifier = check_bool("weight_sparsifier", self.weight_sparsifier)
        self.hidden_channels = check_int("hidden_channels", self.hidden_channels, min=1)
        self.num_layers = check_int("num_layers", self.num_layers, min=1)
        self.dropout = check_float("dropout", self.dropout, min=0.0, max=1.0, max_open=True)
        self.edge_norm = check_choice("edge_norm", self.edge_norm, ("sym", "none"))
        self.temp_n = check_int("temp_n", self.temp_n, min=1)
        self.temp_r = check_float("temp_r", self.temp_r, min=0.0)
        self.seed = check_int("seed", self.seed, min=0)

    @property
    def effective_threshold_lr(self) -> float:
        """The thresholds' learning rate (``threshold_lr`` or ``lr``)."""
        return self.lr if self.threshold_lr is None else self.threshold_lr

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (tuples as lists), for Flower's ConfigRecord-free transport and JSON settings."""
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EaglesConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error (dashes read as underscores)."""
        names = {f.name for f in fields(cls)}
        kw = {}
        for k, v in d.items():
            key = k.replace("-", "_")
            if key not in names:
                raise ValueError(f"unknown EaglesConfig field {k!r}; expected one of {sorted(names)}")
            kw[key] = tuple(v) if isinstance(v, list) else v
        return cls(**kw)
