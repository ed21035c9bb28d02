"""One client's local work (Sec. 4.4, client side): the joint objective
L = L_task + λ2 L_bal + β Σ exp(−t), ``local_epochs`` full-batch Adam steps, and evaluation.

Randomness of a local round (dropout, router and logistic noise) is drawn from a generator seeded by
(config seed, partition id, round), inside ``torch.random.fork_rng``: the caller's RNG is untouched and any
engine that runs the same rounds (in process, Flower in process, Ray, deployment) computes the same weights.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import cast

import torch
from torch import Tensor
from torch.nn import functional as tF
from torch_geometric.data import Data

import eagles._pyg  # noqa: F401  (before torch_geometric)
from eagles.config import EaglesConfig
from eagles.graph import temperature, topological_edge_scores
from eagles.metrics import gnn_macs, sparsifier_macs
from eagles.nn import EaglesGCN, EaglesModel, ThresholdMaskedLinear, build_model, masked_layers
from icml25_shared.validate import check_tensor

__all__ = [
    "ClientGraph",
    "prepare_client",
    "graph_dims",
    "initial_model",
    "make_optimizer",
    "local_train",
    "evaluate",
    "local_seed",
    "optimizer_bytes",
    "load_optimizer",
    "forward_macs",
    "edge_scores_for",
]

SPARSE_BELOW = 0.1
"""Node features denser than this stay dense; sparser ones (Cora: 1.3%) are kept as a COO tensor."""


class ClientGraph:
    """A client's graph prepared for training: float32 features (sparse COO when sparse enough), int64 labels."""

    def __init__(self, data: Data) -> None:
        from eagles.partition import check_data, graph_tensors

        n = check_data(data)
        x, edge_index, y = graph_tensors(data)
        x = x.to_dense() if x.layout != torch.strided else x
        x = x.to(torch.float32)
        self.n, self.num_features = n, x.size(1)
        self.x = x.to_sparse().coalesce() if float((x != 0).float().mean()) < SPARSE_BELOW else x
        self.edge_index = edge_index.long()
        self.y = y.long()
        self.masks = {}
        for split in ("train", "val", "test"):
            mask = getattr(data, f"{split}_mask", None)
            if mask is None:
                raise ValueError(f"client data must have a {split}_mask (see eagles.partition), got none")
            self.masks[split] = mask.bool()
            check_tensor(f"data.{split}_mask", self.masks[split], shape=(n,))
            unlabelled = int((self.y[self.masks[split]] < 0).sum())
            if unlabelled:
                raise ValueError(
                    f"data.{split}_mask must select labelled nodes only (data.y ≥ 0; a label < 0 marks an unlabelled "
                    f"node, which may only lie outside the masks), got {unlabelled} nodes with data.y < 0"
                )
        self.num_train = int(self.masks["train"].sum())
        self._topo: dict[int, Tensor] = {}

    def topo_scores(self, seed: int) -> Tensor:
        """The client's classical edge scores (networkit), computed once per seed and kept."""
        if seed not in self._topo:
            self._topo[seed] = topological_edge_scores(self.edge_index, max(1, self.n), seed=seed)
        return self._topo[seed]


def edge_scores_for(model: EaglesModel, g: ClientGraph) -> Tensor | None:
    """``g``'s classical edge scores when the model's sparsifier uses them (``config.topo_scores``), else None."""
    sp = model.sparsifier
    if sp is None or sp.config.topo_scores is None:
        return None
    return g.topo_scores(sp.config.seed)


def prepare_client(data: Data | ClientGraph) -> ClientGraph:
    return data if isinstance(data, ClientGraph) else ClientGraph(data)


def graph_dims(clients: Sequence[Data | ClientGraph]) -> tuple[int, int]:
    """(number of features, number of classes) over all clients (labels < 0 mark unlabelled nodes)."""
    if len(clients) == 0:
        raise ValueError("clients must hold at least one client graph, got none")
    graphs = [prepare_client(c) for c in clients]
    f = {g.num_features for g in graphs}
    if len(f) != 1:
        raise ValueError(f"every client must have the same number of features, got {sorted(f)}")
    return f.pop(), max(2, max(int(g.y.max()) + 1 for g in graphs if g.n))


def initial_model(
    num_features: int, num_classes: int, config: EaglesConfig, fixed_mask: Mapping[str, Tensor] | None = None
) -> EaglesModel:
    """θ_0: the model every client starts from (the re-train phase's ``fixed_mask`` set in its masked layers)."""
    model = build_model(num_features, num_classes, config)
    if fixed_mask is not None:
        model.set_masks(fixed_mask)
    return model


def local_seed(seed: int, partition_id: int, server_round: int) -> int:
    return (seed * 1_000_003 + partition_id * 10_007 + server_round) % (2**63 - 1)


def make_optimizer(model: EaglesModel, config: EaglesConfig) -> torch.optim.Adam:
    """Adam with the thresholds in their own group (learning rate ``threshold_lr``)."""
    thr = [p for n, p in model.named_parameters() if n.endswith(".threshold")]
    rest = [p for n, p in model.named_parameters() if not n.endswith(".threshold")]
    groups = [{"params": rest, "lr": config.lr}]
    if thr:
        groups.append({"params": thr, "lr": config.effective_threshold_lr})
    return torch.optim.Adam(groups, foreach=True)


def optimizer_bytes(opt: torch.optim.Optimizer) -> bytes:
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    return buf.getvalue()


def load_optimizer(opt: torch.optim.Optimizer, data: bytes) -> None:
    opt.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))


def _accuracy(logp: Tensor, y: Tensor, mask: Tensor) -> float:
    k = int(mask.sum())
    return float((logp[mask].argmax(-1) == y[mask]).sum()) / k if k else 0.0


def forward_macs(model: EaglesModel, g: ClientGraph, kept_edges: int, *, training: bool) -> dict[str, int]:
    """Forward MACs of one pass on ``g`` (dense counting), GNN and sparsifier apart."""
    shapes, dens = [], []
    for conv in cast(EaglesGCN, model.gnn).layers:
        shapes.append((conv.in_channels, conv.out_channels))
        rho = []
        for lin in (conv.lin_l, conv.lin_r):
            rho.append(float(lin.hard_mask().float().mean()) if isinstance(lin, ThresholdMaskedLinear) else 1.0)
        dens.append((rho[0], rho[1]))
    out = {"gnn": gnn_macs(shapes, dens, g.n, kept_edges), "sparsifier": 0}
    sp = model.sparsifier
    if sp is not None:
        out["sparsifier"] = sparsifier_macs(
            g.n,
            g.edge_index.size(1),
            sp.in_channels,
            sp.config.expert_hidden,
            len(sp.experts),
            training=training,
        )
    return out


def local_train(
    model: EaglesModel,
    optimizer: torch.optim.Optimizer,
    g: ClientGraph,
    config: EaglesConfig,
    partition_id: int,
    server_round: int,
) -> dict[str, float]:
    """``local_epochs`` Adam steps on the client objective; returns the metrics of the reply (after training):
    num-examples, train-loss, val-acc, test-acc, kept-edges (fraction), density (weight mask), and the forward
    MACs of one step (macs-gnn, macs-sparsifier)."""
    kept = float(g.edge_index.size(1))
    loss_val = 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(local_seed(config.seed, partition_id, server_round))
        model.train()
        topo = edge_scores_for(model, g)
        for step in range(config.local_epochs):
            tau = temperature(server_round, step, config.temp_n, config.temp_r)
            logp, edge_mask, aux = model(g.x, g.edge_index, tau, topo)
            loss = tF.nll_loss(logp[g.masks["train"]], g.y[g.masks["train"]])
            loss = loss + config.balance_weight * aux + config.threshold_decay * model.sparsity_loss()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_val = float(loss.detach())
            if edge_mask is not None:
                kept = float(edge_mask.detach().sum())
    macs = forward_macs(model, g, round(kept), training=True)
    out = evaluate(model, g)
    m = max(1, g.edge_index.size(1))
    out.update(
        {
            "num-examples": g.num_train,
            "train-loss": loss_val,
            "kept-edges": kept / m if g.edge_index.size(1) else 1.0,
            "macs-gnn": float(macs["gnn"]),
            "macs-sparsifier": float(macs["sparsifier"]),
        }
    )
    return out


@torch.no_grad()
def evaluate(model: EaglesModel, g: ClientGraph) -> dict[str, float]:
    """Accuracy on the client's val and test nodes (evaluation mode: no noise; kept edges executed)."""
    model.eval()
    logp, _, _ = model(g.x, g.edge_index, topo=edge_scores_for(model, g))
    dens = [lin.hard_mask().float() for lin in masked_layers(model).values()]
    density = float(sum(d.sum() for d in dens) / sum(d.numel() for d in dens)) if dens else 1.0
    return {
        "val-acc": _accuracy(logp, g.y, g.masks["val"]),
        "test-acc": _accuracy(logp, g.y, g.masks["test"]),
        "num-val": int(g.masks["val"].sum()),
        "density": density,
    }


def state_of(model: EaglesModel) -> dict[str, Tensor]:
    """A detached copy of the model's state dict."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def load_state(model: EaglesModel, state: Mapping[str, Tensor]) -> None:
    model.load_state_dict(dict(state), strict=True)
