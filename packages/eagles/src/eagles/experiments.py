"""Data and training loops of the reproduction and the benchmark (Cora, Louvain clients, FedAvg vs EAGLES).

``run_protocol(setup)`` runs, on one split: FedAvg (dense GNN, Flower's size-weighted ``FedAvg``), the EAGLES
pre-train until the target band's consensus mask is stored, and EAGLES re-trains with that mask fixed, (a) with
the graph sparsifier off and (b) complete. Accuracy is the mean client test accuracy of the personalised models
at the round of best mean validation accuracy.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

import eagles._pyg  # noqa: F401  (before torch_geometric)
from eagles.config import EaglesConfig
from eagles.partition import graph_tensors, make_clients
from eagles.sim import FederatedRun, run_federated, run_inprocess

__all__ = ["Setup", "PartStore", "load_planetoid", "part_plan", "run_parts", "run_protocol", "setup_hash", "summarise"]


@dataclass
class Setup:
    """Sizes of one reproduction run (quick defaults; ``full()`` the official widths)."""

    dataset: str = "Cora"
    num_clients: int = 10
    split: str = "louvain"
    seeds: tuple[int, ...] = (0, 1)
    """Seeds of the run (each: its own split, initial weights and local randomness); ``reproduce`` replaces them
    by ``seed_list(seed, len(seeds))``. Not part of a stored part's configuration digest."""
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
    """The aggregation ablations (D_mask only, D_ctx only, uniform A) with (b)'s keep ratios."""
    random_split: bool = False
    """FedAvg, pre-train and (b) again on a random (IID) split."""
    engine: str = "plain"
    """EAGLES runs: ``"flower"`` the Flower apps on a loopback grid; ``"plain"`` the Flower-free loop (identical)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def full(cls) -> Setup:
        """The official Cora widths (GNN 3 × 256, expert hidden 128) on 3 seeds, 25 rounds for FedAvg and every
        re-train (the paper: 100; every best-validation round of a 100-round run fell at or before round 13, while
        the whole-method cost ratios depend on the rounds by construction: ``cost_tradeoff`` extends them to any
        number), and the aggressive keep ratios (0.9, 0.7, 0.5, 0.3) as a second (b). About 800 CPU-s on one
        torch thread. The aggregation ablations and the random split are off (``ablations``, ``random_split``)."""
        return cls(
            seeds=(0, 1, 2),
            rounds=25,
            max_pretrain_rounds=150,
            hidden_channels=256,
            num_layers=3,
            expert_hidden=128,
            extra_keep_ratios=((0.9, 0.7, 0.5, 0.3),),
        )


def load_planetoid(name: str = "Cora", *, download: bool = False) -> Data:
    """The Planetoid graph (bundled copy through :mod:`icml25_shared.data`, copied to a temporary root)."""
    from torch_geometric.datasets import Planetoid

    from icml25_shared import data as shared_data

    with tempfile.TemporaryDirectory(prefix="eagles-") as tmp:
        shared_data.copy_to(name, tmp, download=download)
        x, edge_index, y = graph_tensors(cast(Data, Planetoid(tmp, name)[0]))
    return Data(x=x, edge_index=edge_index, y=y)


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


ABLATIONS: dict[str, dict[str, str]] = {
    "d_mask_only": {"distance": "mask"},
    "d_ctx_only": {"distance": "ctx"},
    "uniform_a": {"aggregation": "fedavg"},
}
"""Aggregation ablations (Sec. 4.4): similarity from the masks only, from the router weights only, uniform A."""

RANDOM_SPLIT_PARTS = ("fedavg", "pretrain", "b")
"""What the random-split ablation runs (IID clients instead of Louvain communities)."""


def _setup_fields(setup: Setup) -> dict[str, Any]:
    """Every field of ``setup`` that changes a part's result (all but the list of seeds), as stored in JSON."""
    return json.loads(json.dumps({k: v for k, v in asdict(setup).items() if k != "seeds"}, default=repr))


def setup_hash(setup: Setup) -> str:
    """A digest of :func:`_setup_fields`: a stored part is reused only under the same digest."""
    return hashlib.sha256(json.dumps(_setup_fields(setup), sort_keys=True).encode()).hexdigest()[:16]


def part_plan(setup: Setup) -> list[tuple[int, str, str]]:
    """Every part of a run as (seed, split, name), in the order they run: the headline (FedAvg, pre-train,
    re-trains (a) and (b)) for every seed first, then the extra keep-ratio sets, the aggregation ablations and
    the random-split ablation."""
    seeds, split = setup.seeds, setup.split
    plan = [(s, split, n) for s in seeds for n in ("fedavg", "pretrain", "a", "b")]
    plan += [(s, split, f"b{i + 2}") for i in range(len(setup.extra_keep_ratios)) for s in seeds]
    if setup.ablations:
        plan += [(s, split, n) for n in ABLATIONS for s in seeds]
    if setup.random_split and split != "random":
        plan += [(s, "random", n) for s in seeds for n in RANDOM_SPLIT_PARTS]
    return plan


def part_key(seed: int, split: str, name: str) -> str:
    return f"s{seed}-{split}-{name}"


class PartStore:
    """Finished parts of a run, one ``<folder>/<key>.json`` each (a pre-train's consensus mask beside it,
    bit-packed, in ``<key>.mask.pt``), written atomically as each part finishes.

    With ``resume=True`` a stored part is reused when its configuration digest (:func:`setup_hash`) equals this
    run's, and refused with an error otherwise; with ``resume=False`` every part is run again and overwritten.
    """

    def __init__(self, folder: str | Path, setup: Setup, *, resume: bool = False) -> None:
        self.folder = Path(folder)
        self.setup = setup
        self.hash = setup_hash(setup)
        self.resume = resume

    def _path(self, key: str, suffix: str = ".json") -> Path:
        return self.folder / f"{key}{suffix}"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored part ``key`` (None when absent or when not resuming); refuses a part of another setup."""
        path = self._path(key)
        if not self.resume or not path.exists():
            return None
        try:
            part = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(
                f"resume: part {key!r} in {path} is not valid JSON ({err}; a copy cut short?): delete {path} so "
                "that this part runs again, or restore it"
            ) from err
        if not isinstance(part, dict) or "result" not in part:
            raise ValueError(f"resume: part {key!r} in {path} holds no 'result': delete {path} so that it runs again")
        if part.get("config_hash") != self.hash:
            mine = _setup_fields(self.setup)
            theirs = part.get("setup", {})
            diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            raise ValueError(
                f"resume: part {key!r} in {path} was made with another configuration (digest "
                f"{part.get('config_hash')!r}, this run's {self.hash!r}; fields that differ: {diff}); resume with "
                "the setup that made it, or run into a new folder (or without resume, which recomputes every part)"
            )
        return part

    def put(self, key: str, result: dict[str, Any], cpu_s: float, wall_s: float, mask=None) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if mask is not None:
            packed = {k: (tuple(v.shape), torch.from_numpy(np.packbits(v.numpy().ravel()))) for k, v in mask.items()}
            tmp = self._path(key, ".mask.pt.tmp")
            torch.save(packed, tmp)
            os.replace(tmp, self._path(key, ".mask.pt"))
        part = {
            "key": key,
            "config_hash": self.hash,
            "setup": _setup_fields(self.setup),
            "cpu_s": round(cpu_s, 2),
            "wall_s": round(wall_s, 2),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "result": result,
        }
        tmp = self._path(key, ".json.tmp")
        tmp.write_text(json.dumps(part, indent=1, default=repr))
        os.replace(tmp, self._path(key))

    def mask(self, key: str) -> dict[str, Tensor]:
        """The consensus mask stored with the pre-train part ``key``."""
        path = self._path(key, ".mask.pt")
        if not path.exists():
            raise FileNotFoundError(
                f"resume: the pre-train part {key!r} is stored ({self._path(key)}) but its consensus mask {path} is "
                f"missing, and the re-trains need it: delete {self._path(key)} so that the pre-train runs again "
                "(it stores its mask), or restore the mask file"
            )
        try:
            packed = torch.load(path, weights_only=True)
        except Exception as err:
            raise ValueError(
                f"resume: the consensus mask {path} of part {key!r} cannot be read ({err}): delete it and "
                f"{self._path(key)} so that the pre-train runs again"
            ) from err
        return {
            k: torch.from_numpy(np.unpackbits(v.numpy(), count=math.prod(shape)).astype(bool)).reshape(shape)
            for k, (shape, v) in packed.items()
        }


def _run_part(setup: Setup, seed: int, name: str, clients, mask) -> tuple[dict[str, Any], Any]:
    """One part on one split; returns (its summary, the pre-train's stored mask or None)."""
    if name == "fedavg":
        dense = base_config(setup, seed, weight_sparsifier=False, graph_sparsifier=False, aggregation="fedavg")
        return _summary(_run(setup, clients, dense, setup.rounds, strategy="fedavg")), None
    pre_cfg = base_config(setup, seed, graph_sparsifier=False)
    if name == "pretrain":
        pre = _run(setup, clients, pre_cfg, setup.max_pretrain_rounds, stop_band=setup.target_band)
        res: dict[str, Any] = {"summary": _summary(pre), "band": None}
        sel = pre.server.selector
        if not sel.has(setup.target_band):
            return res, None
        stored = sel.get(setup.target_band)
        res["band"] = {"round": stored.round, "density": stored.density, "in_band": stored.in_band}
        return res, stored.mask
    if name == "a":
        return _summary(_run(setup, clients, pre_cfg, setup.rounds, fixed_mask=mask)), None
    if name in ABLATIONS:
        cfg = base_config(setup, seed, keep_ratios=setup.keep_ratios_b, **ABLATIONS[name])
        return _summary(_run(setup, clients, cfg, setup.rounds, fixed_mask=mask)), None
    ratios = setup.keep_ratios_b if name == "b" else setup.extra_keep_ratios[int(name[1:]) - 2]
    out = _summary(_run(setup, clients, base_config(setup, seed, keep_ratios=ratios), setup.rounds, fixed_mask=mask))
    out["keep_ratios"] = list(ratios)
    return out, None


def run_parts(
    setup: Setup, data: Data, store: PartStore | None = None, *, run_missing: bool = True
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every part of :func:`part_plan` (stored ones reused from ``store``, new ones stored as they finish).

    Returns one dict per seed (``fedavg``, ``pretrain``, ``band``, ``a``, ``b``, ``b2``…, ablations; the random
    split's parts as ``random_<name>``) and a log: per part its CPU and wall seconds and whether it was reused,
    and ``missing``, the parts not run (``run_missing=False``: summarise only what is stored).
    """
    runs: dict[int, dict[str, Any]] = {s: {} for s in setup.seeds}
    clients: dict[tuple[int, str], list] = {}
    masks: dict[tuple[int, str], Any] = {}
    log: dict[str, Any] = {"parts": {}, "missing": []}
    for seed, split, name in part_plan(setup):
        key, out = part_key(seed, split, name), runs[seed]
        prefix = "" if split == setup.split else f"{split}_"
        pre_key = part_key(seed, split, "pretrain")
        if name not in ("fedavg", "pretrain"):
            if f"{prefix}missing_band" in out:
                continue  # the target band was never reached: nothing to re-train
            if pre_key in log["missing"]:
                log["missing"].append(key)
                continue
        hit = store.get(key) if store is not None else None
        if hit is not None:
            result = hit["result"]
            log["parts"][key] = {"cpu_s": hit["cpu_s"], "wall_s": hit["wall_s"], "reused": True}
        elif not run_missing:
            log["missing"].append(key)
            continue
        else:
            if (seed, split) not in clients:
                clients[seed, split] = make_clients(data, setup.num_clients, split, seed)
            if name not in ("fedavg", "pretrain") and (seed, split) not in masks:
                masks[seed, split] = store.mask(pre_key)  # type: ignore[union-attr]  (a stored pre-train's)
            c0, w0 = time.process_time(), time.perf_counter()
            result, mask = _run_part(setup, seed, name, clients[seed, split], masks.get((seed, split)))
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            if store is not None:
                store.put(key, result, cpu, wall, mask)
            if mask is not None:
                masks[seed, split] = mask
            log["parts"][key] = {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "reused": False}
        if name == "pretrain":
            out[f"{prefix}pretrain"] = result["summary"]
            if result["band"] is None:
                out[f"{prefix}missing_band"] = True
            else:
                out[f"{prefix}band"] = result["band"]
        else:
            out[prefix + name] = result
    return [runs[s] for s in setup.seeds], log


def run_protocol(setup: Setup, seed: int, data: Data) -> dict[str, Any]:
    """FedAvg, EAGLES pre-train, re-train (a) without and (b) with the graph sparsifier (and the extras the
    setup asks for), on one split and one seed."""
    return run_parts(replace(setup, seeds=(seed,)), data)[0][0]


def method_cost(variant: dict[str, Any], pretrain: dict[str, Any], fedavg: dict[str, Any], kind: str) -> float:
    """The whole method's cost over FedAvg's, one seed: (pre-training rounds that find the band + re-training
    rounds) × (GNN + graph sparsifier) per round, over FedAvg's rounds × its per-round cost. ``kind``: ``"up"``
    (upload bytes) or ``"macs"`` (training MACs). Without the pre-training term, the GNN part alone would equal the
    chosen band's weight density by construction."""
    parts = {"up": ("up_gnn", "up_sparsifier"), "macs": ("macs_gnn", "macs_sparsifier")}[kind]

    def total(run: dict[str, Any]) -> float:
        return run["rounds"] * sum(run[p] for p in parts)

    return (total(pretrain) + total(variant)) / total(fedavg)


def summarise(setup: Setup, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds and the ratios of the claims (EAGLES / FedAvg). Each variant is averaged over the seeds
    that have it, against FedAvg on the same seeds and split (``fedavg_acc``, ``seeds``): a run summarised
    before all its parts finished compares like with like. ``per_seed`` holds, per seed (``seed_ids``), the
    figures the claims are judged on: the accuracy gap to FedAvg and the whole method's upload and MACs
    (:func:`method_cost`)."""

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    ok = [r for r in runs if "a" in r]
    res: dict[str, Any] = {"setup": asdict(setup), "runs": runs, "complete": not any("missing_band" in r for r in runs)}
    if not ok:
        return res
    res["fedavg_acc"] = mean([r["fedavg"]["acc"] for r in ok])
    names = ["a", "b", *(f"b{i + 2}" for i in range(len(setup.extra_keep_ratios))), *ABLATIONS, "random_b"]
    for v in names:
        rand = v.startswith("random_")
        base, pre = ("random_fedavg", "random_pretrain") if rand else ("fedavg", "pretrain")
        have = [(s, r) for s, r in zip(setup.seeds, runs, strict=True) if v in r and base in r]
        if not have:
            continue
        fed = lambda k, have=have, base=base: mean([r[base][k] for _, r in have])  # noqa: E731
        g = lambda k, v=v, have=have: mean([r[v][k] for _, r in have])  # noqa: E731
        res[v] = {
            "acc": g("acc"),
            "kept_edges": g("kept_edges"),
            "density": g("density"),
            "up_gnn_ratio": g("up_gnn") / fed("up_gnn"),
            "macs_gnn_ratio": g("macs_gnn") / fed("macs_gnn"),
            "up_total_ratio": (g("up_gnn") + g("up_sparsifier")) / fed("up_gnn"),
            "macs_total_ratio": (g("macs_gnn") + g("macs_sparsifier")) / fed("macs_gnn"),
            "fedavg_acc": fed("acc"),
            "seeds": len(have),
            "seed_ids": [s for s, _ in have],
            "pretrain_rounds": [r[pre]["rounds"] for _, r in have],
            "per_seed": {
                "acc_gap": [r[v]["acc"] - r[base]["acc"] for _, r in have],
                "up_method": [method_cost(r[v], r[pre], r[base], "up") for _, r in have],
                "macs_method": [method_cost(r[v], r[pre], r[base], "macs") for _, r in have],
                "up_gnn": [r[v]["up_gnn"] / r[base]["up_gnn"] for _, r in have],
            },
        }
        res[v]["up_method_ratio"] = mean(res[v]["per_seed"]["up_method"])
        res[v]["macs_method_ratio"] = mean(res[v]["per_seed"]["macs_method"])
    return res


OGBN_PROTEINS = {"features": 8, "mean_degree": 2 * 39_561_252 / 132_534}
"""The paper's headline graph: 8 input features, 132,534 nodes, 39.6 M undirected edges (OGB)."""


def cost_tradeoff(setup: Setup, res: dict[str, Any], data: Data) -> dict[str, Any]:
    """When the graph sparsifier pays for itself, from the package's cost model (:mod:`eagles.metrics`) anchored
    at a run's measured per-round costs (``res`` from :func:`summarise`, needs ``a`` and ``b``).

    - ``rounds``: the whole method's upload and MACs over FedAvg's against the number of re-train rounds R (FedAvg
      runs R rounds too; the measured pre-training rounds are paid once), for (a) and (b); the R from which (a)
      meets 1× and the target, and (b)'s limit as R grows.
    - ``width``: the sparsifier's upload per round over FedAvg's GNN upload against the expert width h, at this
      graph's feature width and at ogbn-proteins' (8); parameter counts from real model states
      (``payload_bytes``), exact since they are affine in h.
    - ``degree``: the training MACs the sparsifier adds minus those its dropped edges save, over FedAvg's GNN
      MACs, against the mean degree m/n; it pays for itself (negative) only when h < (1 − kept)·Σ f_out / (2K),
      above the break-even degree d* = 2KF(h + 1) / ((1 − kept)·Σ f_out − 2Kh).
    """
    from eagles.client import initial_model, state_of
    from eagles.metrics import gnn_macs, payload_bytes, sparsifier_macs

    b = res["b"]
    runs = [r for r in res["runs"] if "b" in r]
    fed = {k: sum(r["fedavg"][k] for r in runs) / len(runs) for k in ("up_gnn", "macs_gnn")}
    pre = {k: sum(r["pretrain"]["rounds"] * r["pretrain"][k] for r in runs) / len(runs) for k in ("up_gnn", "macs_gnn")}
    per_round = {
        name: {
            k: sum(r[name][f"{k}_gnn"] + r[name][f"{k}_sparsifier"] for r in runs) / len(runs) for k in ("up", "macs")
        }
        for name in ("a", "b")
    }
    rounds = sorted({*range(1, 10), *range(10, 100, 5), *range(100, 1001, 50), setup.rounds})
    curve = {
        f"{name}_{k}": [(pre[f"{k}_gnn"] + r * per_round[name][k]) / (r * fed[f"{k}_gnn"]) for r in rounds]
        for name in ("a", "b")
        for k in ("up", "macs")
    }
    target = {"up": 0.35, "macs": 0.40}

    def first_round(name: str, k: str, bound: float) -> int | None:
        slope = fed[f"{k}_gnn"] * bound - per_round[name][k]  # pays off once R · slope ≥ pre-training cost
        return None if slope <= 0 else max(1, math.ceil(pre[f"{k}_gnn"] / slope))

    out: dict[str, Any] = {
        "rounds": {
            "R": rounds,
            **curve,
            "pretrain_rounds": [r["pretrain"]["rounds"] for r in runs],
            "a_reaches_fedavg_upload_at_R": first_round("a", "up", 1.0),
            "a_reaches_target_upload_at_R": first_round("a", "up", target["up"]),
            "a_reaches_target_macs_at_R": first_round("a", "macs", target["macs"]),
            "b_reaches_fedavg_upload_at_R": first_round("b", "up", 1.0),
            "b_limit_up": per_round["b"]["up"] / fed["up_gnn"],
            "b_limit_macs": per_round["b"]["macs"] / fed["macs_gnn"],
        }
    }
    # expert width: parameter counts of real states (affine in h: two widths give every width exactly)
    x_data, _, y_data = graph_tensors(data)
    f_data = int(x_data.size(1))
    num_classes = max(2, int(y_data.max()) + 1)
    widths = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    ratios = setup.keep_ratios_b
    cfg = base_config(setup, 0, keep_ratios=ratios)
    width: dict[str, Any] = {"h": widths}
    for label, f in (("data", f_data), ("ogbn_proteins", OGBN_PROTEINS["features"])):
        dense = state_of(initial_model(f, num_classes, replace(cfg, graph_sparsifier=False, weight_sparsifier=False)))
        gnn = payload_bytes(dense)["gnn"]
        sp = [
            payload_bytes(state_of(initial_model(f, num_classes, replace(cfg, expert_hidden=h))))["sparsifier"]
            for h in (1, 2)
        ]
        width[f"{label}_sparsifier_over_gnn"] = [(sp[0] + (h - 1) * (sp[1] - sp[0])) / gnn for h in widths]
        width[f"{label}_features"] = f
    width["measured_at_h"] = setup.expert_hidden
    width["measured"] = b["up_total_ratio"] - b["up_gnn_ratio"]
    out["width"] = width
    # degree: MACs the sparsifier adds minus those its dropped edges save, per training step (factor 3 cancels)
    clients = make_clients(data, setup.num_clients, setup.split, setup.seeds[0])
    n = sum(int(graph_tensors(c)[0].size(0)) for c in clients)
    m = sum(int(graph_tensors(c)[1].size(1)) for c in clients)
    shapes = [(f_data if i == 0 else setup.hidden_channels, setup.hidden_channels) for i in range(setup.num_layers)]
    shapes[-1] = (shapes[-1][0], num_classes)
    sum_out = sum(fo for _, fo in shapes)
    k_exp, kept = len(ratios), float(b["kept_edges"])
    degrees = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]

    def net(f: int, h: int, d: float) -> float:
        mm = round(d * n)
        dense_shapes = [(f if i == 0 else fi, fo) for i, (fi, fo) in enumerate(shapes)]
        base = gnn_macs(dense_shapes, [(1.0, 1.0)] * len(shapes), n, mm)
        saved = base - gnn_macs(dense_shapes, [(1.0, 1.0)] * len(shapes), n, round(kept * mm))
        return (sparsifier_macs(n, mm, f, h, k_exp, training=True) - saved) / base

    def break_even(f: int, h: int) -> float | None:
        gain = (1 - kept) * sum_out - 2 * k_exp * h
        return None if gain <= 0 else 2 * k_exp * f * (h + 1) / gain

    deg: dict[str, Any] = {"mean_degree": degrees, "kept_edges": kept, "sum_f_out": sum_out, "experts": k_exp}
    deg["data_mean_degree"] = m / n
    deg["ogbn_proteins_mean_degree"] = OGBN_PROTEINS["mean_degree"]
    deg["h_max_to_pay"] = (1 - kept) * sum_out / (2 * k_exp)
    deg["h_max_to_pay_at_kept"] = {k: (1 - k) * sum_out / (2 * k_exp) for k in (0.9, 0.7, 0.5, 0.3)}
    for label, f in (("data", f_data), ("ogbn_proteins", OGBN_PROTEINS["features"])):
        deg[f"{label}_net_over_gnn"] = [net(f, setup.expert_hidden, d) for d in degrees]
        deg[f"{label}_break_even_degree"] = break_even(f, setup.expert_hidden)
        deg[f"{label}_break_even_degree_h"] = {h: break_even(f, h) for h in (1, 2, 4, 8, 16)}
    out["degree"] = deg
    return out


def plot_tradeoff(tradeoff: dict[str, Any], target: tuple[float, float] = (0.35, 0.40)):
    """Three panels of :func:`cost_tradeoff`: the whole method's cost against re-train rounds, the sparsifier's
    upload against expert width, its net MACs against mean degree."""
    from icml25_shared.report import subplots

    fig, ax = subplots(1, 3, figsize=(15, 3.8))
    r = tradeoff["rounds"]
    for name, label in (("a", "(a) sparsifier off"), ("b", "(b) complete")):
        ax[0].plot(r["R"], r[f"{name}_up"], label=f"{label}, upload")
        ax[0].plot(r["R"], r[f"{name}_macs"], ls="--", label=f"{label}, MACs")
    ax[0].axhline(1.0, c="gray", lw=0.8)
    ax[0].axhline(target[0], c="gray", ls=":", lw=0.8)
    ax[0].set(xscale="log", yscale="log", xlabel="re-train rounds R (FedAvg: R rounds)", ylabel="whole method / FedAvg")
    ax[0].set_title("pre-training paid once", fontsize=10)
    w = tradeoff["width"]
    for label in ("data", "ogbn_proteins"):
        ax[1].plot(w["h"], w[f"{label}_sparsifier_over_gnn"], marker="o", label=f"F = {w[f'{label}_features']}")
    ax[1].plot([w["measured_at_h"]], [w["measured"]], "k*", ms=10, label="measured")
    ax[1].axhline(1.0, c="gray", lw=0.8)
    ax[1].set(xscale="log", yscale="log", xlabel="expert width h", ylabel="sparsifier upload / FedAvg GNN")
    ax[1].set_title("upload per round (it never saves any)", fontsize=10)
    d = tradeoff["degree"]
    for label in ("data", "ogbn_proteins"):
        ax[2].plot(
            d["mean_degree"],
            d[f"{label}_net_over_gnn"],
            marker="o",
            label=f"F = {tradeoff['width'][f'{label}_features']}",
        )
    ax[2].axvline(d["data_mean_degree"], c="C0", ls=":", lw=0.8)
    ax[2].axvline(d["ogbn_proteins_mean_degree"], c="C1", ls=":", lw=0.8)
    ax[2].axhline(0.0, c="gray", lw=0.8)
    ax[2].set(xscale="log", xlabel="mean degree m/n", ylabel="(sparsifier − saved) MACs / FedAvg GNN")
    ax[2].set_title(f"net MACs at h = {w['measured_at_h']}, kept {d['kept_edges']:.2f}", fontsize=10)
    for a in ax:
        a.legend(fontsize=7)
    return fig


def plot_runs(setup: Setup, runs: list[dict[str, Any]]):
    """The first seed's accuracy curves (FedAvg, (a), (b)) and its pre-training density against the target band."""
    from icml25_shared.report import subplots

    fig, axes = subplots(1, 2, figsize=(10, 3.6))
    first = runs[0]
    for name, key in (("FedAvg", "fedavg"), ("EAGLES (a)", "a"), ("EAGLES (b)", "b")):
        if key in first:
            axes[0].plot(range(1, len(first[key]["curve"]) + 1), first[key]["curve"], label=name)
    axes[0].set(xlabel="round", ylabel="mean client test acc (%)", title=f"Cora, seed {setup.seeds[0]}")
    axes[0].legend()
    dens = first.get("pretrain", {}).get("density_curve", [])
    axes[1].plot(range(1, len(dens) + 1), dens)
    axes[1].axhline(setup.target_band, ls="--", c="gray")
    axes[1].set(xlabel="pre-train round", ylabel="consensus density", title="density bands")
    return fig


def curves_of(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per seed and part: the best validation round and the test-accuracy curve (%, 2 decimals)."""
    return [
        {
            k: {"best_round": v["best_round"], "test_acc": [round(a, 2) for a in v["curve"]]}
            for k, v in r.items()
            if isinstance(v, dict) and "curve" in v
        }
        for r in runs
    ]
