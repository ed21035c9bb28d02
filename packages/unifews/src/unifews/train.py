"""Training protocols: the official Unifews schedule for iterative GNNs (spec 3.5) and the decoupled MLP head."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import dropout_edge

from icml25_shared.metrics import accuracy
from icml25_shared.progress import track

from .data import Split
from .models import UnifewsGNN

__all__ = ["FitResult", "fit", "MLP", "fit_mlp", "standardize"]

log = logging.getLogger(__name__)


@dataclass
class FitResult:
    """Outcome of :func:`fit` / :func:`fit_mlp` (accuracies in [0, 1]).

    ``test_acc`` follows the evaluation protocol asked for (lock on the evaluated nodes or strict);
    ``test_acc_strict`` is strict pruned inference (``lock=None``) of the same checkpoint.
    """

    best_val: float
    test_acc: float
    test_acc_strict: float | None = None
    best_epoch: int = -1
    macs: int | None = None
    sparsity: dict = field(default_factory=dict)
    history: list[float] = field(default_factory=list)


def _acc(logits: Tensor, y: Tensor) -> float:
    return float(accuracy(logits.argmax(-1).cpu().numpy(), y.cpu().numpy()))


@torch.no_grad()
def _evaluate(model: UnifewsGNN, x, ei, y, idx: Tensor, lock: bool, edge_scheme: str = "keep") -> float:
    model.eval()
    model.set_scheme(edge_scheme, "keep")  # reuse the last training forward's masks (official protocol)
    out = model(x, ei, lock=idx if lock else None)
    return _acc(out[idx], y[idx])


def fit(
    model: UnifewsGNN,
    x: Tensor,
    edge_index: Tensor,
    y: Tensor,
    split: Split,
    *,
    epochs: int = 200,
    lr: float = 1e-3,
    weight_decay: float = 1e-5,
    eval_lock: bool | None = None,
    patience: int = 15,
    edge_dropout: float = 0.0,
    progress: bool | None = None,
) -> FitResult:
    """Full-batch training with the official schedule (spec 3.5).

    Epochs ``< E/2``: ``prune_all`` for edges and weights (weights rewind); from ``E/2``: weights ``prune_inc``
    (edges ``prune_inc`` too when ``config.edge_prune_inc``). Evaluation reuses the masks (``keep``) with
    ``lock`` = the evaluated nodes when ``eval_lock`` (default: ``model.config.eval_lock``). Adam,
    ``ReduceLROnPlateau(max, 0.5, patience)`` on validation accuracy, best-validation checkpoint for test.

    ``edge_dropout = p > 0`` is the DropEdge baseline: every training forward sees a fresh random subset of the
    input edges, each kept independently with probability ``1 − p`` (``torch_geometric.utils.dropout_edge``, the
    global torch RNG), and evaluation sees the whole graph. The training graph then differs from the evaluated
    one, so evaluation recomputes the edge mask (edge scheme ``prune_all``) instead of reusing it; weights still
    ``keep``.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if isinstance(edge_dropout, bool) or not isinstance(edge_dropout, (int, float)) or not 0.0 <= edge_dropout < 1.0:
        raise ValueError(f"edge_dropout must lie in [0, 1), got {edge_dropout!r}")
    eval_edges = "prune_all" if edge_dropout > 0 else "keep"
    lock = model.config.eval_lock if eval_lock is None else eval_lock
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", factor=0.5, patience=patience)
    best, best_state, best_epoch, hist = -1.0, None, -1, []
    bar = track(range(epochs), "unifews fit", disable=None if progress is None else not progress)
    for epoch in bar:
        model.train()
        late = epoch >= epochs // 2
        edge_scheme = "prune_inc" if late and model.config.edge_prune_inc else "prune_all"
        model.set_scheme(edge_scheme, "prune_inc" if late else "prune_all")
        opt.zero_grad()
        # DropEdge: PyG's own edge dropout (each edge kept with probability 1 - p, global torch RNG)
        ei_train = dropout_edge(edge_index, p=edge_dropout)[0] if edge_dropout > 0 else edge_index
        out = model(x, ei_train)
        loss = F.cross_entropy(out[split.train], y[split.train])
        loss.backward()
        opt.step()
        val = _evaluate(model, x, edge_index, y, split.val, lock, eval_edges)
        sched.step(val)
        hist.append(val)
        if val > best:
            best, best_epoch = val, epoch
            best_state = copy.deepcopy(model.state_dict())
        bar.set_postfix(loss=float(loss.detach()), val=val)
    model.load_state_dict(best_state)
    test = _evaluate(model, x, edge_index, y, split.test, lock, eval_edges)
    strict = _evaluate(model, x, edge_index, y, split.test, False, eval_edges)
    sp = model.sparsity()
    macs = model.macs()  # the strict forward above: kept edges only
    log.info("fit: best val %.4f at epoch %d, test %.4f (strict %.4f)", best, best_epoch, test, strict)
    return FitResult(best, test, strict, best_epoch, macs, sp, hist)


class MLP(nn.Module):
    """The decoupled head: ``(Linear → ReLU → BatchNorm → Dropout) × (layers − 1) → Linear``."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int = 2, dropout: float = 0.5):
        super().__init__()
        dims = [in_channels] + [hidden] * (num_layers - 1)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.bns = nn.ModuleList(nn.BatchNorm1d(b) for b in dims[1:])
        self.out = nn.Linear(dims[-1], out_channels)
        self.dropout = dropout

    def forward(self, x: Tensor) -> Tensor:
        for lin, bn in zip(self.hidden, self.bns):
            x = F.dropout(bn(F.relu(lin(x))), self.dropout, self.training)
        return self.out(x)


def standardize(features: Tensor, train_idx: Tensor) -> Tensor:
    """StandardScaler fitted on the training rows (zero-variance columns left centred)."""
    mu = features[train_idx].mean(0)
    sd = features[train_idx].std(0, unbiased=False)
    return (features - mu) / torch.where(sd > 0, sd, torch.ones_like(sd))


def fit_mlp(
    features: Tensor,
    y: Tensor,
    split: Split,
    *,
    hidden: int = 64,
    num_layers: int = 2,
    dropout: float = 0.5,
    epochs: int = 150,
    lr: float = 1e-2,
    weight_decay: float = 5e-4,
    seed: int = 0,
    progress: bool | None = None,
) -> FitResult:
    """Train the decoupled MLP head full-batch on standardised propagated features; best-validation epoch."""
    torch.manual_seed(seed)
    xs = standardize(features.float(), split.train)
    model = MLP(xs.size(1), hidden, int(y.max()) + 1, num_layers, dropout)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_test, best_epoch = -1.0, 0.0, -1
    x_tr, y_tr = xs[split.train], y[split.train]
    x_ev = xs[torch.cat([split.val, split.test])]  # evaluation rows only (the MLP is row-wise)
    n_val = split.val.numel()
    y_val, y_test = y[split.val], y[split.test]
    for epoch in track(range(epochs), "unifews mlp", disable=None if progress is None else not progress):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(x_tr), y_tr).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            out = model(x_ev)
        val = _acc(out[:n_val], y_val)
        if val > best:
            best, best_epoch, best_test = val, epoch, _acc(out[n_val:], y_test)
    return FitResult(best, best_test, best_test, best_epoch)
