"""Data and training loops of the reproduction and the benchmark (Cora, Louvain clients, FedAvg vs EAGLES).

``run_protocol(setup)`` runs, on one split: FedAvg (dense GNN, Flower's size-weighted ``FedAvg``), the EAGLES
pre-train until the target band's consensus mask is stored, and EAGLES re-trains with that mask fixed, (a) with
the graph sparsifier off and (b) complete. Accuracy is the mean client test accuracy of the personalised models
at the round of best mean validation accuracy.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

from torch_geometric.data import Data

import eagles._pyg  # noqa: F401  (before torch_geometric)
from eagles.config import EaglesConfig
from eagles.partition import make_clients
from eagles.sim import FederatedRun, run_federated, run_inprocess

__all__ = ["Setup", "load_planetoid", "run_protocol", "summarise"]


@dataclass
class Setup:
    """Sizes of one reproduction run (quick defaults; ``full()`` the official widths)."""

    dataset: str = "Cora"
    num_clients: int = 10
    split: str = "louvain"
    seeds: tuple[int, ...] = (0,)
    rounds: int = 10
    """FedAvg's and each re-train's rounds."""
    max_pretrain_rounds: int = 60
    target_band: float = 0.3
    hidden_channels: int = 64
    num_layers: int = 2
    expert_hidden: int = 16
    local_epochs: int = 5
    threshold_lr: float = 1e-3
    keep_ratios_b: tuple[float, ...] = (0.95, 0.9, 0.85, 0.8)
    extra_keep_ratios: tuple[tuple[float, ...], ...] = ()
    ablations: bool = False
    engine: str = "plain"
    """EAGLES runs: ``"flower"`` the Flower apps on a loopback grid; ``"plain"`` the Flower-free loop (identical)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def full(cls) -> Setup:
        return cls(
            seeds=(0, 1, 2),
            rounds=100,
            max_pretrain_rounds=150,
            hidden_channels=256,
            num_layers=3,
            expert_hidden=128,
            extra_keep_ratios=((0.9, 0.7, 0.5, 0.3),),
            ablations=True,
        )


def load_planetoid(name: str = "Cora", *, download: bool = False) -> Data:
    """The Planetoid graph (bundled copy through :mod:`icml25_shared.data`, copied to a temporary root)."""
    from torch_geometric.datasets import Planetoid

    from icml25_shared import data as shared_data

    with tempfile.TemporaryDirectory(prefix="eagles-") as tmp:
        shared_data.copy_to(name, tmp, download=download)
        data = Planetoid(tmp, name)[0]
    return Data(x=data.x, edge_index=data.edge_index, y=data.y)


def base_config(setup: Setup, seed: int, **kw: Any) -> EaglesConfig:
    return EaglesConfig(
        hidden_channels=setup.hidden_channels,
        num_layers=setup.num_layers,
        expert_hidden=setup.expert_hidden,
        local_epochs=setup.local_epochs,
        threshold_lr=setup.threshold_lr,
        seed=seed,
        **kw,
    )


def _run(setup: Setup, clients, config, rounds, **kw) -> FederatedRun:
    """FedAvg always through Flower's own ``FedAvg`` (in process); EAGLES through the Flower apps (``"flower"``)
    or the Flower-free loop (``"plain"``, identical bit for bit and cheaper: no per-call model rebuild)."""
    if kw.get("strategy") == "fedavg" or setup.engine == "flower":
        return run_inprocess(clients, config, rounds, **kw)
    return run_federated(clients, config, rounds, **kw)


def _summary(run: FederatedRun) -> dict[str, Any]:
    best_round, acc = run.best()
    h = run.history
    s = run.server
    return {
        "acc": 100 * acc,
        "best_round": best_round,
        "rounds": run.rounds,
        "density": h[-1]["density"],
        "kept_edges": sum(r["kept-edges"] for r in h) / len(h),
        "up_gnn": s.comm.per_round("up", "gnn"),
        "up_sparsifier": s.comm.per_round("up", "sparsifier"),
        "down_gnn": s.comm.per_round("down", "gnn"),
        "down_sparsifier": s.comm.per_round("down", "sparsifier"),
        "macs_gnn": s.flops.per_round("gnn"),
        "macs_sparsifier": s.flops.per_round("sparsifier"),
        "curve": [r.get("eval-test-acc", float("nan")) * 100 for r in h],
        "density_curve": [r["density"] for r in h],
    }


def run_protocol(setup: Setup, seed: int, data: Data) -> dict[str, Any]:
    """FedAvg, EAGLES pre-train, re-train (a) without and (b) with the graph sparsifier, on one split."""
    clients = make_clients(data, setup.num_clients, setup.split, seed)
    out: dict[str, Any] = {}
    dense = base_config(setup, seed, weight_sparsifier=False, graph_sparsifier=False, aggregation="fedavg")
    out["fedavg"] = _summary(_run(setup, clients, dense, setup.rounds, strategy="fedavg"))
    pre_cfg = base_config(setup, seed, graph_sparsifier=False)
    pre = _run(setup, clients, pre_cfg, setup.max_pretrain_rounds, stop_band=setup.target_band)
    out["pretrain"] = _summary(pre)
    sel = pre.server.selector
    if not sel.has(setup.target_band):
        out["missing_band"] = True
        return out
    stored = sel.get(setup.target_band)
    out["band"] = {"round": stored.round, "density": stored.density, "in_band": stored.in_band}
    mask = stored.mask
    out["a"] = _summary(_run(setup, clients, pre_cfg, setup.rounds, fixed_mask=mask))
    variants = {"b": setup.keep_ratios_b}
    variants.update({f"b{i + 2}": k for i, k in enumerate(setup.extra_keep_ratios)})
    for name, ratios in variants.items():
        cfg = base_config(setup, seed, keep_ratios=ratios)
        out[name] = _summary(_run(setup, clients, cfg, setup.rounds, fixed_mask=mask))
        out[name]["keep_ratios"] = list(ratios)
    if setup.ablations:
        for name, kw in {
            "d_mask_only": {"distance": "mask"},
            "d_ctx_only": {"distance": "ctx"},
            "uniform_a": {"aggregation": "fedavg"},
        }.items():
            cfg = base_config(setup, seed, keep_ratios=setup.keep_ratios_b, **kw)
            out[name] = _summary(_run(setup, clients, cfg, setup.rounds, fixed_mask=mask))
    return out


def summarise(setup: Setup, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds and the ratios of the claims (EAGLES / FedAvg)."""

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    ok = [r for r in runs if "a" in r]
    res: dict[str, Any] = {"setup": asdict(setup), "runs": runs, "complete": len(ok) == len(runs)}
    if not ok:
        return res
    fed = lambda k: mean([r["fedavg"][k] for r in ok])  # noqa: E731
    res["fedavg_acc"] = fed("acc")
    for v in [
        k for k in ok[0] if k in ("a", "b") or k.startswith("b") or k in ("d_mask_only", "d_ctx_only", "uniform_a")
    ]:
        if not isinstance(ok[0][v], dict) or "acc" not in ok[0][v]:
            continue
        g = lambda k, v=v: mean([r[v][k] for r in ok])  # noqa: E731
        res[v] = {
            "acc": g("acc"),
            "kept_edges": g("kept_edges"),
            "density": g("density"),
            "up_gnn_ratio": g("up_gnn") / fed("up_gnn"),
            "macs_gnn_ratio": g("macs_gnn") / fed("macs_gnn"),
            "up_total_ratio": (g("up_gnn") + g("up_sparsifier")) / fed("up_gnn"),
            "macs_total_ratio": (g("macs_gnn") + g("macs_sparsifier")) / fed("macs_gnn"),
        }
    return res
