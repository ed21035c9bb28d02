"""The experiments behind ``icml25 reproduce unifews`` and the benchmark: data (Cora/CiteSeer as in the official
protocol, a synthetic power-law graph), the official training schedule for iterative GNNs, the decoupled MLP head,
and the runs whose figures the reproduction compares with the paper (Table III, the shapes of Fig. 4 and 11).

>>> from unifews.experiments import load_planetoid_lcc, stratified_split, fit_mlp  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import logging
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25_shared.metrics import accuracy
from icml25_shared.progress import track
from icml25_shared.report import save_figure, subplots
from icml25_shared.seed import seed_everything
from icml25_shared.validate import check_float, check_int
from unifews import _pyg  # noqa: F401  (imports torch_geometric quietly)
from unifews.config import Scheme, UnifewsConfig
from unifews.models import UnifewsGNN
from unifews.prop import Kind, PropGraph, Push, unifews_propagate

from torch_geometric.data import Data  # isort: skip
from torch_geometric.utils import dropout_edge  # isort: skip

__all__ = [
    "Split",
    "load_planetoid_lcc",
    "stratified_split",
    "synthetic_powerlaw_graph",
    "FitResult",
    "fit",
    "MLP",
    "fit_mlp",
    "standardize",
    "decoupled_runs",
    "gcn_runs",
    "hook_macs",
    "gcn_hook_run",
    "gcn_hook_comparison",
    "delta_sweep",
    "depth_sweep",
    "random_edge_baselines",
    "PhaseTimer",
    "plot_decoupled",
    "plot_progressive",
    "plot_lines",
]

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------------ data
@dataclass
class Split:
    """Train / validation / test node indices."""

    train: Tensor
    val: Tensor
    test: Tensor


def graph_tensors(data: Data) -> tuple[Tensor, Tensor, Tensor]:
    """``(x, edge_index, y)`` of a PyG ``Data``.

    Raises:
        ValueError: when one of them is missing.
    """
    x, ei, y = data.x, data.edge_index, data.y
    if not isinstance(x, Tensor) or not isinstance(ei, Tensor) or not isinstance(y, Tensor):
        raise ValueError("data needs the tensors x, edge_index and y")
    return x, ei, y


def load_planetoid_lcc(name: Literal["Cora", "CiteSeer"] = "Cora", *, download: bool = False) -> Data:
    """The Planetoid graph ``name`` (the bundled copy, through :mod:`icml25_shared.data`; ``download`` fetches it
    when it is missing, sha256-verified) restricted to its largest connected component, as in the official
    protocol (Cora: 2,485 nodes, 10,138 directed edges). Raises :class:`icml25_shared.data.DataNotFoundError` when
    the data set is neither installed (the ``[data]`` extra) nor downloadable."""
    from torch_geometric.datasets import Planetoid
    from torch_geometric.transforms import LargestConnectedComponents

    from icml25_shared import data as shared_data

    with tempfile.TemporaryDirectory(prefix="unifews-") as tmp:
        shared_data.copy_to(name, tmp, download=download)
        ds = Planetoid(tmp, name)
        data = ds[0]
    return LargestConnectedComponents()(data)


def stratified_split(y: Tensor, seed: int, fractions: tuple[float, float] = (0.5, 0.25)) -> Split:
    """Per-class random split: ``fractions[0]`` train, ``fractions[1]`` validation, the rest test."""
    g = torch.Generator().manual_seed(seed)
    parts: list[list[Tensor]] = [[], [], []]
    for c in torch.unique(y):
        idx = (y == c).nonzero().view(-1)
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        n_tr = round(fractions[0] * idx.numel())
        n_va = round(fractions[1] * idx.numel())
        parts[0].append(idx[:n_tr])
        parts[1].append(idx[n_tr : n_tr + n_va])
        parts[2].append(idx[n_tr + n_va :])
    return Split(*(torch.cat(p).sort().values for p in parts))


def synthetic_powerlaw_graph(n: int, avg_degree: float, exponent: float = 2.5, seed: int = 0) -> Tensor:
    """An undirected Chung-Lu graph with power-law expected degrees (``P(d) ∝ d^{-exponent}``), int64 ``[2, m]``,
    both directions, no self-loops, duplicates removed."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    wts = (1 - u).pow(-1.0 / (exponent - 1.0))  # Pareto(exponent - 1) weights
    wts = wts * (avg_degree / wts.mean())
    m_half = int(n * avg_degree / 2)
    p = wts / wts.sum()
    src = torch.multinomial(p, m_half, replacement=True, generator=g)
    dst = torch.multinomial(p, m_half, replacement=True, generator=g)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    ei = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    key = torch.unique(ei[0] * n + ei[1])
    return torch.stack([key // n, key % n])


# -------------------------------------------------------------------------------------------------------- training
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

    @property
    def strict_acc(self) -> float:
        """``test_acc_strict``, set by :func:`fit`.

        Raises:
            ValueError: for a result without it (:func:`fit_mlp` sets only ``test_acc``).
        """
        if self.test_acc_strict is None:
            raise ValueError("this result has no strict accuracy (fit_mlp results have only test_acc)")
        return self.test_acc_strict


def _acc(logits: Tensor, y: Tensor) -> float:
    return float(accuracy(logits.argmax(-1).cpu().numpy(), y.cpu().numpy()))


@torch.no_grad()
def _evaluate(model: UnifewsGNN, x, ei, y, idx: Tensor, lock: bool, edge_scheme: Scheme = "keep") -> float:
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
    """Full-batch training with the official Unifews schedule for iterative GNNs.

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
    check_int("epochs", epochs, min=1)
    check_float("edge_dropout", edge_dropout, min=0.0, max=1.0, max_open=True)
    eval_edges: Scheme = "prune_all" if edge_dropout > 0 else "keep"
    lock = model.config.eval_lock if eval_lock is None else eval_lock
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", factor=0.5, patience=patience)
    best, best_state, best_epoch, hist = -1.0, None, -1, []
    bar = track(range(epochs), "unifews fit", disable=None if progress is None else not progress)
    for epoch in bar:
        model.train()
        late = epoch >= epochs // 2
        edge_scheme: Scheme = "prune_inc" if late and model.config.edge_prune_inc else "prune_all"
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
    assert best_state is not None  # epochs >= 1: the first epoch sets it
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


# ----------------------------------------------------------------------------------------------------- experiments
def decoupled_runs(
    data: Data,
    G: PropGraph,
    kind: Kind,
    delta_a: float,
    seeds: Sequence[int],
    hops: int,
    epochs: int,
    prop_seeds: Sequence[int] | None = None,
    *,
    alpha: float = 0.1,
    mlp_hidden: int = 64,
    mlp_lr: float = 1e-2,
    push: Push = "random",
    dense: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Dense vs Unifews propagation (entry mode, ``push`` random or drop) with the same MLP head, one head per split
    seed: the decoupled rows of the paper's Table III. Returns accuracies (%), MAC counts per hop and totals, the
    entries kept in the deterministic regime per hop, and times.

    ``prop_seeds``: the random-push draws; one per split seed (``None``: the split seeds themselves), or fewer,
    reused cyclically (quick mode draws the propagation once and varies the split). ``dense``: an earlier result
    with the same seeds and head, whose dense side is reused instead of recomputed."""
    x, ei, y = graph_tensors(data)
    prop_seeds = tuple(seeds) if prop_seeds is None or push == "drop" else tuple(prop_seeds)
    if push == "drop":
        prop_seeds = prop_seeds[:1]  # deterministic: one propagation serves every split
    t0 = time.perf_counter()
    if dense is None:
        p_dense, s_dense = unifews_propagate(x, ei, hops, 0.0, kind=kind, alpha=alpha, graph=G)
    t_dense = time.perf_counter() - t0 if dense is None else dense["time_dense_s"]
    props, t_uf = {}, []
    for ps in prop_seeds:
        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(ps)
        props[ps] = unifews_propagate(x, ei, hops, delta_a, kind=kind, alpha=alpha, graph=G, push=push, generator=gen)
        t_uf.append(time.perf_counter() - t0)
    acc_d, acc_u = [], []
    for i, seed in enumerate(seeds):
        split = stratified_split(y, seed)
        p_uf = props[prop_seeds[i % len(prop_seeds)]][0]
        kw = {"hidden": mlp_hidden, "epochs": epochs, "lr": mlp_lr, "seed": seed}
        if dense is None:
            acc_d.append(100 * fit_mlp(p_dense, y, split, **kw).test_acc)
        acc_u.append(100 * fit_mlp(p_uf, y, split, **kw).test_acc)
    if dense is not None:
        acc_d = list(dense["acc_dense"])
        s_dense = dense["_dense_stats"]
    stats = [s for _, s in props.values()]
    per_hop = stats[0]
    return {
        "acc_dense": acc_d,
        "acc_unifews": acc_u,
        "mac_ratio": statistics.fmean([s.total_macs / s_dense.total_macs for s in stats]),
        "dense_macs": s_dense.total_macs,
        "full_macs": s_dense.full_macs,
        "unifews_macs": per_hop.total_macs,
        "dense_per_hop": s_dense.macs,
        "unifews_per_hop": per_hop.macs,
        "random_per_hop": per_hop.random_pushes,
        "kept_per_hop": per_hop.kept,
        "push": push,
        "prop_seeds": list(prop_seeds),
        "time_dense_s": t_dense,
        "time_unifews_s": statistics.fmean(t_uf),
        "_dense_stats": s_dense,
    }


def gcn_runs(
    data: Data,
    seeds: Sequence[int],
    cfg: UnifewsConfig,
    hidden: int,
    epochs: int,
    lr: float,
    num_layers: int = 2,
    edge_index: Tensor | None = None,
    edge_dropout: float = 0.0,
) -> list[FitResult]:
    """An iterative Unifews GCN trained by :func:`fit` on the stratified split of each seed (the model seeded
    with the same seed); ``edge_index`` replaces the graph (random-subset baseline), ``edge_dropout`` is DropEdge."""
    x, ei_data, y = graph_tensors(data)
    runs = []
    for seed in seeds:
        split = stratified_split(y, seed)
        seed_everything(seed)
        model = UnifewsGNN(x.size(1), hidden, int(y.max()) + 1, num_layers, "gcn", 0.5, cfg)
        ei = ei_data if edge_index is None else edge_index
        runs.append(fit(model, x, ei, y, split, epochs=epochs, lr=lr, edge_dropout=edge_dropout, progress=False))
    return runs


def hook_macs(model: UnifewsGNN, x: Tensor, edge_index: Tensor) -> int:
    """MACs of one strict forward (``keep`` masks, no lock) of a GCN-type :class:`UnifewsGNN`, counted by hooks on
    what the layers execute: PyG's ``message_and_aggregate`` pre-hook reads the kept ``adj_t`` handed to the SpMM
    (its non-loop entries × the propagated width), a forward hook reads the effective weight ``W ⊙ M`` (its
    non-zeros × n) and the output (one self-loop/bias add per entry). An independent count of the analytic
    :meth:`UnifewsGNN.macs` (paper Sec. 3.8 / the MAC columns of Table III)."""
    counts: list[int] = []

    def on_spmm(mod, inputs):
        adj_t, kwargs = inputs
        crow, col = adj_t.crow_indices(), adj_t.col_indices()
        rows = torch.repeat_interleave(torch.arange(crow.numel() - 1, device=col.device), crow.diff())
        counts.append(int((rows != col).sum()) * kwargs["x"].size(1))

    def on_forward(mod, args, out):
        weight = mod.lin.weight * mod.lin_mask
        counts.append(int(torch.count_nonzero(weight)) * args[0].size(0) + out.numel())

    handles = [h for c in model.layers() for h in (c.register_message_and_aggregate_forward_pre_hook(on_spmm),
                                                c.register_forward_hook(on_forward))]  # fmt: skip
    try:
        with torch.no_grad():
            model.eval()
            model.set_scheme("keep", "keep")
            model(x, edge_index)
    finally:
        for h in handles:
            h.remove()
    return sum(counts)


def gcn_hook_run(
    data: Data, seed: int, cfg: UnifewsConfig, hidden: int, epochs: int, lr: float
) -> tuple[FitResult, int, int]:
    """One iterative GCN (2 layers) trained by :func:`fit` on split ``seed``; returns the result, the MACs the hooks
    count (:func:`hook_macs`) and the analytic count of the same strict forward."""
    x, ei, y = graph_tensors(data)
    split = stratified_split(y, seed)
    seed_everything(seed)
    model = UnifewsGNN(x.size(1), hidden, int(y.max()) + 1, 2, "gcn", 0.5, cfg, cached=True)
    res = fit(model, x, ei, y, split, epochs=epochs, lr=lr, progress=False)
    counted = hook_macs(model, x, ei)
    return res, counted, model.macs()


def gcn_hook_comparison(
    data: Data, seeds: Sequence[int], cfg: UnifewsConfig, hidden: int, epochs: int, lr: float
) -> dict[str, Any]:
    """Dense (δa = δw = 0) vs ``cfg`` iterative GCNs per seed (:func:`gcn_hook_run`): strict accuracies (%), the
    MACs counted by hooks and analytically, whether they agree in every run, and the mean hook-counted MAC ratio."""
    dense = [gcn_hook_run(data, s, UnifewsConfig(delta_a=0.0, delta_w=0.0), hidden, epochs, lr) for s in seeds]
    uf = [gcn_hook_run(data, s, cfg, hidden, epochs, lr) for s in seeds]
    return {
        "seeds": list(seeds),
        "acc_dense": [100 * r.strict_acc for r, _, _ in dense],
        "acc_unifews": [100 * r.strict_acc for r, _, _ in uf],
        "hook_macs_dense": [c for _, c, _ in dense],
        "hook_macs_unifews": [c for _, c, _ in uf],
        "analytic_macs_dense": [a for _, _, a in dense],
        "analytic_macs_unifews": [a for _, _, a in uf],
        "hooks_equal_analytic": all(c == a for _, c, a in dense + uf),
        "mac_ratio": statistics.fmean(u[1] / d[1] for u, d in zip(uf, dense)),
        "edge_sparsity": [r.sparsity["edge_total"] for r, _, _ in uf],
        "weight_sparsity": [r.sparsity["weight"] for r, _, _ in uf],
    }


def delta_sweep(
    data: Data, pairs: Sequence[tuple[float, float]], hidden: int, epochs: int, lr: float = 1e-2, seed: int = 0
) -> list[dict[str, float]]:
    """Accuracy (%, strict) and edge / weight sparsity of the iterative GCN for each ``(δa, δw)`` (the shape of the
    paper's Fig. 4), one seed."""
    sweep = []
    for da, dw in pairs:
        r = gcn_runs(data, (seed,), UnifewsConfig(delta_a=da, delta_w=dw), hidden, epochs, lr)[0]
        sweep.append(
            {
                "delta_a": da,
                "delta_w": dw,
                "acc": 100 * r.strict_acc,
                "edge": r.sparsity["edge_total"],
                "weight": r.sparsity["weight"],
            }
        )
    return sweep


def depth_sweep(
    data: Data, G: PropGraph, depths: Sequence[int], delta_a: float, *, mlp_hidden: int, mlp_epochs: int, mlp_lr: float
) -> list[dict[str, float]]:
    """Test accuracy (%) of dense and Unifews SGC (random-push seed 0) for each number of hops L, split seed 0 (the
    shape of the paper's Fig. 11)."""
    x, ei, y = graph_tensors(data)
    split = stratified_split(y, 0)
    depth = []
    for L in depths:
        pd, _ = unifews_propagate(x, ei, L, 0.0, graph=G)
        pu, _ = unifews_propagate(x, ei, L, delta_a, graph=G, generator=0)
        kw = {"hidden": mlp_hidden, "epochs": mlp_epochs, "lr": mlp_lr}
        depth.append(
            {
                "L": L,
                "dense": 100 * fit_mlp(pd, y, split, **kw).test_acc,
                "unifews": 100 * fit_mlp(pu, y, split, **kw).test_acc,
            }
        )
    return depth


def random_edge_baselines(
    data: Data, edge_sparsity: float, seeds: Sequence[int], hidden: int, epochs: int, lr: float, delta_w: float = 0.5
) -> tuple[list[FitResult], list[FitResult]]:
    """The GCN (weights pruned with ``delta_w``, no edge rule) on a fixed random edge subset of the given sparsity
    (train and test), and with DropEdge at that rate (a fresh random subset per training epoch, the whole graph at
    test: dense inference)."""
    g = torch.Generator().manual_seed(0)
    ei = graph_tensors(data)[1]
    keep = torch.rand(ei.size(1), generator=g) >= edge_sparsity
    cfg_w = UnifewsConfig(delta_a=0.0, delta_w=delta_w)
    rnd = gcn_runs(data, seeds, cfg_w, hidden, epochs, lr, edge_index=ei[:, keep])
    drop = gcn_runs(data, seeds, cfg_w, hidden, epochs, lr, edge_dropout=edge_sparsity)
    return rnd, drop


class PhaseTimer:
    """Wall and CPU seconds of the consecutive phases of a long run, logged as each one ends."""

    def __init__(self, label: str) -> None:
        self.label, self.phases = label, {}
        self._clock = (time.perf_counter(), time.process_time())

    def lap(self, name: str) -> None:
        now = (time.perf_counter(), time.process_time())
        wall, cpu = now[0] - self._clock[0], now[1] - self._clock[1]
        self.phases[name] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
        log.info("%s: %s done in %.0f s wall / %.0f s CPU", self.label, name, wall, cpu)
        self._clock = now


# ------------------------------------------------------------------------------------------------------------ plots
def plot_decoupled(out_dir: Path, res: dict[str, Any], kind: str) -> str:
    """Per-hop MACs (dense, Unifews, random pushes) and the accuracies of a :func:`decoupled_runs` result."""
    fig, (a1, a2) = subplots(1, 2, figsize=(11, 3.8))
    hops = range(1, len(res["dense_per_hop"]) + 1)
    a1.plot(hops, [m / 1e6 for m in res["dense_per_hop"]], "o-", label="dense (non-zero messages)")
    a1.plot(hops, [m / 1e6 for m in res["unifews_per_hop"]], "s-", label="Unifews executed")
    a1.plot(hops, [m / 1e6 for m in res["random_per_hop"]], "^--", label="of which random pushes")
    a1.set(xlabel="hop", ylabel="MACs (millions)", title=f"{kind.upper()} propagation on Cora LCC")
    a1.legend()
    accs = [res["acc_dense"], res["acc_unifews"]]
    a2.bar(
        ["dense", "Unifews"],
        [statistics.fmean(a) for a in accs],
        yerr=[(statistics.stdev(a) if len(a) > 1 else 0.0) for a in accs],
        capsize=6,
        color=["#888", "#3a7"],
    )
    a2.set(ylabel="test accuracy (%)", ylim=(70, 92), title=f"MAC ratio {res['mac_ratio']:.2f}×")
    return str(save_figure(fig, out_dir, f"{kind}_cora"))


def plot_progressive(out_dir: Path, random: dict[str, Any], drop: dict[str, Any]) -> str:
    """Entries left in the deterministic regime and MACs executed per hop, random vs deterministic push (Sec. 3.3:
    removal is progressive, so the regime only shrinks)."""
    fig, (a1, a2) = subplots(1, 2, figsize=(11, 3.8))
    hops = range(1, len(drop["kept_per_hop"]) + 1)
    for res, marker, label in ((random, "s-", "random push"), (drop, "o-", "deterministic push (drop)")):
        a1.plot(hops, [k / 1e6 for k in res["kept_per_hop"]], marker, label=label)
        a2.plot(hops, [m / 1e6 for m in res["unifews_per_hop"]], marker, label=label)
    a2.plot(hops, [m / 1e6 for m in drop["dense_per_hop"]], "k--", label="dense (non-zero messages)")
    a1.set(xlabel="hop", ylabel="entries in the deterministic regime (M)", title="Progressive sparsification")
    a2.set(xlabel="hop", ylabel="MACs executed (M)", title="SGC on Cora LCC")
    a1.legend()
    a2.legend()
    return str(save_figure(fig, out_dir, "sgc_progressive"))


def plot_lines(out_dir: Path, name: str, series: dict[str, tuple[list, list]], xlabel: str, title: str) -> str:
    """Test accuracy against ``xlabel``, one line per ``{label: (xs, ys)}``."""
    fig, ax = subplots(1, 1, figsize=(6, 4))
    for (label, (xs, ys)), marker in zip(series.items(), ("o-", "s-")):
        ax.plot(xs, ys, marker, label=label)
    ax.set(xlabel=xlabel, ylabel="test accuracy (%)", title=title)
    ax.legend()
    return str(save_figure(fig, out_dir, name))
