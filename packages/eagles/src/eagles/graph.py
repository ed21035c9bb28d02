r"""Heterogeneity-aware graph sparsification (Sec. 4.3): edge experts with keep ratios, a noisy top-s router and
their mixture, which every local step turns into a binary mask over the client's edges.

For an edge :math:`e = (u \to v)` expert :math:`i` scores :math:`z_i = \mathrm{MLP}_i([x_u \Vert x_v \Vert a_e])`,
normalises the scores over the source's out-edges, perturbs them with logistic noise (training only), and keeps the
top :math:`\kappa_i(u) = \max(1, \mathrm{round}(k_i \deg(u)))` edges of every source. The router's gates
:math:`G` mix the experts, :math:`s_e = \frac1K \sum_i G_{u,i} \hat s_{i,e}`, and the node's own keep ratio
:math:`k(u) = \sum_i G_{u,i} k_i` decides how many of its edges stay. Binary decisions are made in the forward
pass; :class:`BinaryStep`'s surrogate gradient trains the experts and the router.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import Tensor, nn
from torch.nn import functional as tF
from torch_geometric.utils import softmax as segment_softmax

import eagles._pyg  # noqa: F401  (before torch_geometric)
from eagles.config import EaglesConfig
from icml25_shared.validate import check_bool, check_float, check_int, check_tensor

__all__ = [
    "BinaryStep",
    "binary_step",
    "segment_topk",
    "EdgeExpert",
    "NoisyTopKRouter",
    "MixtureGraphSparsifier",
    "prune",
    "temperature",
    "cv_squared",
    "topological_edge_scores",
    "check_graph",
]


def _is_sparse(x: Tensor) -> bool:
    return x.layout in (torch.sparse_coo, torch.sparse_csr)


class _SparseDenseMM(torch.autograd.Function):
    """``x @ w`` for a constant sparse COO ``x``; the backward is one SpMM with the transpose (no densifying)."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        ctx.x = x
        return torch.sparse.mm(x, w)

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[None, Tensor]:  # type: ignore[override]
        return None, torch.sparse.mm(ctx.x.t(), g)


def matmul(x: Tensor, w_t: Tensor) -> Tensor:
    """``x @ w_t`` for a dense or sparse (COO/CSR) ``x``; gradients reach the dense ``w_t`` (never ``x``)."""
    if x.layout == torch.sparse_coo and not x.requires_grad:
        # a transposed weight is laid out once row-major: the SpMM adds one dense row per non-zero of x, which
        # is 2.5x faster on contiguous rows than on a stride-F view (same values bit for bit)
        return _SparseDenseMM.apply(x, w_t.contiguous())
    return torch.sparse.mm(x, w_t) if _is_sparse(x) else x @ w_t


def check_graph(x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None) -> int:
    """Validate node features and edges; returns the number of nodes."""
    check_tensor("x", x, ndim=2, dtype="floating")
    values = x._values() if x.layout == torch.sparse_coo else x.values() if _is_sparse(x) else x
    if not bool(torch.isfinite(values).all()):
        bad = int((~torch.isfinite(values)).sum())
        raise ValueError(f"x must be finite (no NaN or inf), got {bad} non-finite entries ({x.layout})")
    check_tensor("edge_index", edge_index, ndim=2, dtype="integer")
    n = x.size(0)
    if edge_index.size(0) != 2:
        raise ValueError(f"edge_index must have shape (2, m), got {tuple(edge_index.shape)}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
        raise ValueError(
            f"edge_index must index nodes in [0, {n}) (x has {n} rows), got values in "
            f"[{int(edge_index.min())}, {int(edge_index.max())}]"
        )
    if edge_attr is not None:
        check_tensor("edge_attr", edge_attr, ndim=2, dtype="floating", finite=True)
        if edge_attr.size(0) != edge_index.size(1):
            raise ValueError(
                f"edge_attr must have one row per edge ({edge_index.size(1)}), got {edge_attr.size(0)} rows"
            )
    return n


class BinaryStep(torch.autograd.Function):
    r"""Forward :math:`\mathbb 1[x > 0]`; backward the piecewise surrogate of the official code,
    :math:`g\,(2 - 4|x|)` for :math:`|x| \le 0.4`, :math:`0.4\,g` for :math:`0.4 < |x| \le 1`, 0 beyond."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, g: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        a = x.abs()
        slope = torch.where(a <= 0.4, 2 - 4 * a, torch.where(a <= 1, torch.full_like(a, 0.4), torch.zeros_like(a)))
        return g * slope


def binary_step(x: Tensor, hard: Tensor | None = None) -> Tensor:
    """:class:`BinaryStep` of ``x``; when ``hard`` (bool) is given its values replace the forward output (exact
    top-k counts under ties) while the backward stays the surrogate of ``x``."""
    out = BinaryStep.apply(x)
    if hard is not None:
        out = out + (hard.to(out.dtype) - out).detach()
    return out


def segment_topk(score: Tensor, src: Tensor, num_nodes: int, ratio: float | Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Keep the top :math:`\max(1, \mathrm{round}(k(u)\deg(u)))` edges of every source ``u`` by ``score``.

    One stable sort on (source, −score), so ties keep the lower edge index; ``torch.round`` rounds half to even,
    computed in float64. Nodes without out-edges keep none. ``ratio`` is one float or one value per node.

    Returns ``(keep, kappa, threshold)``: the bool mask per edge, the count per node, and per node the score of
    its κ-th kept edge (0 for nodes without edges).
    """
    m = score.numel()
    deg = torch.bincount(src, minlength=num_nodes)
    r = torch.as_tensor(ratio, dtype=torch.float64, device=score.device)
    kappa = torch.round(r * deg.to(torch.float64)).clamp_min(1).to(torch.long)
    kappa = torch.where(deg > 0, torch.minimum(kappa, deg), torch.zeros_like(deg))
    order = torch.argsort(-score.detach(), stable=True)
    order = order[torch.argsort(src[order], stable=True)]
    ptr = torch.cumsum(deg, 0) - deg
    s_sorted = src[order]
    rank = torch.arange(m, device=score.device) - ptr[s_sorted]
    keep = torch.zeros(m, dtype=torch.bool, device=score.device)
    keep[order] = rank < kappa[s_sorted]
    thr = torch.zeros(num_nodes, dtype=score.dtype, device=score.device)
    has = deg > 0
    if bool(has.any()):
        thr[has] = score.detach()[order[ptr[has] + kappa[has] - 1]]
    return keep, kappa, thr


def cv_squared(v: Tensor) -> Tensor:
    """Squared coefficient of variation, var(v) / (mean(v)² + 1e-10), unbiased variance; 0 for one entry."""
    if v.numel() <= 1:
        return v.new_zeros(())
    v = v.float() if not v.is_floating_point() else v
    return v.var() / (v.mean() ** 2 + 1e-10)


def temperature(server_round: int, local_step: int, temp_n: int = 20, temp_r: float = 1e-3) -> float:
    """τ = max(0.05, exp(−temp_r · step)) in rounds with (round − 1) mod temp_n = 0, else 1 (official schedule)."""
    if (server_round - 1) % temp_n == 0:
        return max(0.05, math.exp(-temp_r * local_step))
    return 1.0


class EdgeExpert(nn.Module):
    r"""One edge expert: :math:`z_e = w_2^\top \mathrm{ReLU}(W_1 [x_u \Vert x_v \Vert a_e] + b_1) + b_2`.

    The first layer is evaluated factorised: :math:`W_1 = [A \; B \; C]`, so :math:`W_1[x_u \Vert x_v \Vert a_e]
    = (xA^\top)_u + (xB^\top)_v + C a_e` costs :math:`2nFh + mh` instead of :math:`m(2F+1)h` MACs (exact).
    ``self.mlp`` is the plain concatenated MLP with the same parameters.
    """

    def __init__(self, in_channels: int, hidden_channels: int, edge_dim: int = 1) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, min=1)
        self.hidden_channels = check_int("hidden_channels", hidden_channels, min=1)
        self.edge_dim = check_int("edge_dim", edge_dim, min=1)
        self.mlp = nn.Sequential(
            nn.Linear(2 * in_channels + edge_dim, hidden_channels), nn.ReLU(), nn.Linear(hidden_channels, 1)
        )
        self.reset_parameters()

    @property
    def lin1(self) -> nn.Linear:
        """The first linear map of the MLP (input ``[x_u, x_v, a_e]``, output ``h``)."""
        return cast(nn.Linear, self.mlp[0])

    @property
    def lin2(self) -> nn.Linear:
        """The second linear map of the MLP (``h`` to one score)."""
        return cast(nn.Linear, self.mlp[2])

    def reset_parameters(self) -> None:
        for lin in (self.lin1, self.lin2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def edge_term(self, edge_attr: Tensor | None, m: int) -> Tensor:
        """:math:`C a_e + b_1` for every edge (``a_e = 1`` without edge features)."""
        lin1 = self.lin1
        c = lin1.weight[:, 2 * self.in_channels :]
        if edge_attr is None:
            return (c.sum(1) + lin1.bias).expand(m, -1)
        return edge_attr @ c.t() + lin1.bias

    def hidden(self, xa: Tensor, xb: Tensor, edge_index: Tensor, edge_attr: Tensor | None) -> Tensor:
        return torch.relu(xa[edge_index[0]] + xb[edge_index[1]] + self.edge_term(edge_attr, edge_index.size(1)))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        """Scores ``(m,)`` of every edge, factorised."""
        f = self.in_channels
        w = self.lin1.weight
        ab = matmul(x, torch.cat([w[:, :f].t(), w[:, f : 2 * f].t()], 1))
        h = self.hidden(ab[:, : self.hidden_channels], ab[:, self.hidden_channels :], edge_index, edge_attr)
        return self.lin2(h).squeeze(-1)


class NoisyTopKRouter(nn.Module):
    r"""Noisy top-s gating: logits :math:`xW_g + \epsilon\,(\mathrm{softplus}(xW_n) + 10^{-2})`, :math:`\epsilon
    \sim \mathcal N(0, 1)` in training only; softmax over each node's ``top_s`` logits, zeros elsewhere.

    Returns ``(gates (n, K), balance_loss)`` with ``balance_loss = loss_coef · (CV²(Σ_nodes G) + CV²(load))``,
    ``load`` the number of nodes routed to each expert. Both weight matrices start at zero (uniform gates).
    """

    def __init__(self, in_channels: int, num_experts: int, top_s: int, loss_coef: float = 1e-2) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, min=1)
        self.num_experts = check_int("num_experts", num_experts, min=1)
        self.top_s = check_int("top_s", top_s, min=1, max=num_experts)
        self.loss_coef = check_float("loss_coef", loss_coef, min=0.0)
        self.w_gate = nn.Parameter(torch.zeros(in_channels, num_experts))
        self.w_noise = nn.Parameter(torch.zeros(in_channels, num_experts))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.w_gate)
        nn.init.zeros_(self.w_noise)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        logits = matmul(x, self.w_gate)
        if self.training:
            std = tF.softplus(matmul(x, self.w_noise)) + 1e-2
            logits = logits + torch.randn_like(logits) * std
        top, idx = logits.topk(self.top_s, dim=1)
        gates = torch.zeros_like(logits).scatter(1, idx, torch.softmax(top, dim=1))
        load = (gates > 0).sum(0).to(gates.dtype)
        return gates, self.loss_coef * (cv_squared(gates.sum(0)) + cv_squared(load))


class MixtureGraphSparsifier(nn.Module):
    r"""The client's edge sparsifier: K :class:`EdgeExpert` (one per keep ratio) mixed by a
    :class:`NoisyTopKRouter` ("graph synergy expert").

    ``forward(x, edge_index, edge_attr=None, tau=1.0, topo=None) -> (edge_mask, aux_loss)``: a binary mask
    (float, one entry per edge, surrogate gradient) and the router's balance loss. ``topo`` (m × T) adds
    classical edge scores, :math:`\lambda z_i + \mathrm{topo}_{:, i \bmod T}`. Evaluation mode draws no noise.
    """

    eps = 1e-6

    def __init__(self, in_channels: int, config: EaglesConfig | None = None, edge_dim: int = 1) -> None:
        super().__init__()
        self.config = config if config is not None else EaglesConfig()
        if not isinstance(self.config, EaglesConfig):
            raise TypeError(f"config must be an EaglesConfig, got {type(config).__name__}")
        self.in_channels = check_int("in_channels", in_channels, min=1)
        k = len(self.config.keep_ratios)
        self.experts = nn.ModuleList(EdgeExpert(in_channels, self.config.expert_hidden, edge_dim) for _ in range(k))
        self.router = NoisyTopKRouter(in_channels, k, self.config.top_s)
        self.register_buffer("keep_ratios", torch.tensor(self.config.keep_ratios, dtype=torch.float64), False)

    @property
    def expert_list(self) -> list[EdgeExpert]:
        """The K edge experts, typed."""
        return cast(list[EdgeExpert], list(self.experts))

    def expert_scores(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        """Raw scores ``(m, K)`` of every expert: their node projections stacked in one GEMM of width 2Kh."""
        f, h = self.in_channels, self.config.expert_hidden
        w_t = torch.cat(
            [p.t() for e in self.expert_list for p in (e.lin1.weight[:, :f], e.lin1.weight[:, f : 2 * f])], 1
        )
        ab = matmul(x, w_t)  # (n, 2Kh); the (F, 2Kh) operand is built row-major in one copy
        cols = []
        for i, e in enumerate(self.expert_list):
            xa, xb = ab[:, 2 * i * h : (2 * i + 1) * h], ab[:, (2 * i + 1) * h : (2 * i + 2) * h]
            cols.append(e.lin2(e.hidden(xa, xb, edge_index, edge_attr)).squeeze(-1))
        return torch.stack(cols, 1)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_attr: Tensor | None = None,
        tau: float = 1.0,
        topo: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        n = check_graph(x, edge_index, edge_attr)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x must have {self.in_channels} columns (in_channels), got {x.size(1)}")
        tau = check_float("tau", tau, min=0.0, min_open=True)
        if x.dtype != self.router.w_gate.dtype:
            raise ValueError(f"x must have the model's dtype {self.router.w_gate.dtype}, got {x.dtype}")
        gates, aux = self.router(x)
        m = edge_index.size(1)
        if m == 0:
            return x.new_zeros(0, dtype=gates.dtype), aux
        src = edge_index[0]
        z = self.expert_scores(x, edge_index, edge_attr)
        z = z / z.norm(dim=0, keepdim=True).clamp_min(1e-12)
        if topo is not None:
            check_tensor("topo", topo, ndim=2, shape=(m, None), dtype="floating", finite=True)
            t = topo.to(z.dtype)
            z = self.config.topo_weight * z + t[:, torch.arange(z.size(1)) % t.size(1)]
        logit = torch.log(segment_softmax(z, src, num_nodes=n) + 1e-8)
        if self.training:  # logistic noise, training only (the official code also adds it at evaluation)
            u = torch.rand_like(logit).clamp(1e-10, 1 - 1e-10)
            logit = logit + torch.log(u) - torch.log1p(-u)
        y = segment_softmax(torch.sigmoid(logit / tau).clamp(0, 1), src, num_nodes=n)
        s_hat = []
        for i, k in enumerate(self.config.keep_ratios):
            keep, _, thr = segment_topk(y[:, i], src, n, k)
            s_hat.append(binary_step(y[:, i] - thr[src] + self.eps, keep) * y[:, i])
        s = (gates[src] * torch.stack(s_hat, 1)).sum(1) / len(self.experts)
        k_node = gates.detach().to(torch.float64) @ self.keep_ratios
        keep, _, thr = segment_topk(s, src, n, k_node)
        return binary_step(s - thr[src] + self.eps, keep), aux


def prune(edge_index: Tensor, edge_mask: Tensor, edge_attr: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """The kept edges (``edge_mask > 0``), and their attributes when given."""
    check_tensor("edge_index", edge_index, ndim=2, dtype="integer")
    check_tensor("edge_mask", edge_mask, ndim=1, shape=(edge_index.size(1),))
    keep = edge_mask > 0
    if edge_attr is None:
        return edge_index[:, keep]
    return edge_index[:, keep], edge_attr[keep]


def topological_edge_scores(edge_index: Tensor, num_nodes: int, *, seed: int = 0, normalize: bool = True) -> Tensor:
    """Four classical edge scores (local degree, forest fire (0.6, 5.0), local similarity (e = 0.5), SCAN
    structural similarity), computed by networkit on the undirected simple graph, one row per column of
    ``edge_index`` (both directions of an edge share its scores; self-loops score 0); ``(m, 4)`` float32, each
    column L2-normalised unless ``normalize=False``.

    networkit runs on one thread with its seed set to ``seed`` (forest fire is random), so the scores are the same
    on every engine; the caller's networkit thread count is restored. Needs the ``topo`` extra (networkit).
    """
    try:
        import networkit as nk
    except ImportError as err:  # pragma: no cover - exercised only without networkit
        raise ImportError("topological_edge_scores needs networkit: pip install 'icml25-eagles[topo]'") from err
    check_tensor("edge_index", edge_index, ndim=2, shape=(2, None), dtype="integer")
    num_nodes = check_int("num_nodes", num_nodes, min=1)
    seed = check_int("seed", seed, min=0)
    normalize = check_bool("normalize", normalize)
    pairs_list = edge_index.t().tolist()
    if edge_index.numel() and not (int(edge_index.min()) >= 0 and int(edge_index.max()) < num_nodes):
        raise ValueError(f"edge_index must hold node ids in [0, {num_nodes}), got {int(edge_index.max())}")
    g = nk.Graph(num_nodes, weighted=False, directed=False)
    for u, v in sorted({(min(u, v), max(u, v)) for u, v in pairs_list if u != v}):
        g.addEdge(u, v)
    g.indexEdges()
    threads = nk.getMaxNumberOfThreads()
    nk.setNumberOfThreads(1)
    try:
        nk.setSeed(seed, False)
        tri = nk.sparsification.TriangleEdgeScore(g)
        tri.run()
        scorers = [
            nk.sparsification.LocalDegreeScore(g),
            nk.sparsification.ForestFireScore(g, 0.6, 5.0),
            nk.sparsification.LocalSimilarityScore(g, tri.scores()),
            nk.sparsification.SCANStructuralSimilarityScore(g, tri.scores()),
        ]
        cols = []
        for sc in scorers:
            sc.run()
            per_edge = sc.scores()
            vals = [per_edge[g.edgeId(u, v)] if u != v else 0.0 for u, v in pairs_list]
            cols.append(torch.tensor(vals, dtype=torch.float32))
    finally:
        nk.setNumberOfThreads(threads)
    out = torch.stack(cols, 1)
    return out / out.norm(dim=0, keepdim=True).clamp_min(1e-12) if normalize else out
