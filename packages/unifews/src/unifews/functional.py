"""The core math of Unifews as small pure functions (paper eq. 9 for edges, eq. 14 for weights).

* :func:`diffusion_weights` -- ``T = D̄^{-(1-r)} Ā D̄^{-r}`` as edge weights ``w_e = T[u, v]``.
* :func:`message_scores` -- the factorised message norm ``s_e = |w_e| · ‖Z[src_e]‖₂ == ‖τ_e‖₂``
  (the score eq. 9 thresholds).
* :func:`edge_keep_mask` -- ``keep_e = s_e >= θ_a ∨ is_loop(e)`` (paper eq. 9, relative or absolute).
* :func:`weight_mask` -- the input-norm weight rule (paper eq. 14).
* :func:`spmm` -- ``out[u] = Σ_{e: dst_e = u} w_e Z[src_e]`` as one CSR SpMM, differentiable in ``Z`` and ``w``,
  without an ``m × f`` message tensor in the forward pass.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from icml25_shared.validate import check_choice
from unifews.config import THRESHOLDS, Threshold

__all__ = [
    "check_x",
    "check_edge_index",
    "check_edge_weight",
    "check_lock",
    "add_remaining_self_loops",
    "diffusion_weights",
    "message_scores",
    "edge_threshold",
    "edge_keep_mask",
    "weight_mask",
    "check_batch",
    "edge_keep_mask_per_graph",
    "weight_mask_per_graph",
    "spmm",
    "edge_keys",
]


# --------------------------------------------------------------------------------------------------- validation
def _all_finite(t: Tensor) -> bool:
    """``torch.isfinite(t).all()`` in one pass for the common case: a NaN or inf anywhere makes the sum
    non-finite, so a finite sum proves it; only a non-finite sum (a bad entry, or an overflow) runs the exact check."""
    with torch.no_grad():
        return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def check_x(x: Tensor, in_channels: int | None = None, name: str = "x") -> None:
    """Raise when ``x`` is not a finite floating 2-D tensor with ``in_channels`` columns and at least one row."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got dtype {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [num_nodes, channels], got shape {tuple(x.shape)}")
    if x.size(0) == 0:
        raise ValueError(f"{name} has zero nodes (shape {tuple(x.shape)}); expected at least one row")
    if in_channels is not None and x.size(1) != in_channels:
        raise ValueError(f"{name} must have {in_channels} columns, got shape {tuple(x.shape)}")
    if not _all_finite(x):
        raise ValueError(f"{name} contains NaN or inf values; expected finite features")


def check_edge_index(edge_index: Tensor, num_nodes: int) -> None:
    """Raise when ``edge_index`` is not an int64 ``[2, m]`` tensor with indices in ``[0, num_nodes)``."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"edge_index must be a torch.Tensor, got {type(edge_index).__name__}")
    if edge_index.dtype != torch.long:
        raise TypeError(f"edge_index must have dtype torch.int64, got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must have shape [2, num_edges], got {tuple(edge_index.shape)}")
    if edge_index.numel() > 0:
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0:
            raise ValueError(f"edge_index contains a negative node index ({lo}); expected indices in [0, {num_nodes})")
        if hi >= num_nodes:
            raise ValueError(
                f"edge_index refers to node {hi} but there are only num_nodes={num_nodes} nodes "
                f"(expected max index < {num_nodes})"
            )


def check_edge_weight(edge_weight: Tensor | None, num_edges: int) -> None:
    """Raise when ``edge_weight`` is not a finite floating vector of length ``num_edges``."""
    if edge_weight is None:
        return
    if not isinstance(edge_weight, Tensor) or not edge_weight.is_floating_point():
        raise TypeError(
            f"edge_weight must be a floating torch.Tensor, got {getattr(edge_weight, 'dtype', edge_weight)}"
        )
    if edge_weight.dim() != 1 or edge_weight.numel() != num_edges:
        raise ValueError(f"edge_weight must have shape [num_edges] = [{num_edges}], got {tuple(edge_weight.shape)}")
    if not _all_finite(edge_weight):
        raise ValueError("edge_weight contains NaN or inf values; expected finite weights")


def check_lock(lock: Tensor | None, num_nodes: int, device: torch.device) -> Tensor | None:
    """``lock`` as a bool mask of shape ``[num_nodes]``; accepts a bool mask or an int64 index tensor."""
    if lock is None:
        return None
    if not isinstance(lock, Tensor):
        raise TypeError(f"lock must be None, a bool mask or an int64 index tensor, got {type(lock).__name__}")
    if lock.dtype == torch.bool:
        if lock.dim() != 1 or lock.numel() != num_nodes:
            raise ValueError(f"lock as a bool mask must have shape [{num_nodes}], got {tuple(lock.shape)}")
        return lock.to(device)
    if lock.dtype == torch.long:
        if lock.dim() != 1:
            raise ValueError(f"lock as an index tensor must be 1-D, got shape {tuple(lock.shape)}")
        if lock.numel() and (int(lock.min()) < 0 or int(lock.max()) >= num_nodes):
            raise ValueError(
                f"lock indices must lie in [0, {num_nodes}), got range [{int(lock.min())}, {int(lock.max())}]"
            )
        mask = torch.zeros(num_nodes, dtype=torch.bool, device=device)
        mask[lock.to(device)] = True
        return mask
    raise TypeError(f"lock must have dtype torch.bool (mask) or torch.int64 (indices), got {lock.dtype}")


# ------------------------------------------------------------------------------------------------- graph weights
def add_remaining_self_loops(
    edge_index: Tensor,
    edge_weight: Tensor | None,
    num_nodes: int,
    fill_value: float = 1.0,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """PyG's layout (``torch_geometric.utils.add_remaining_self_loops``): the non-loop edges in their order, then one
    self-loop per node, of weight ``fill_value`` where the node had none (an existing loop keeps its weight).

    Explainers rely on this layout: their edge mask covers the input edges and is extended by ones for the loops.
    """
    device = edge_index.device
    dtype = dtype or (edge_weight.dtype if edge_weight is not None else torch.get_default_dtype())
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=device)
    src, dst = edge_index
    is_loop = src == dst
    loop_w = torch.full((num_nodes,), fill_value, dtype=dtype, device=device)
    if bool(is_loop.any()):
        loop_w[src[is_loop]] = edge_weight[is_loop].to(dtype)
        edge_index, edge_weight = edge_index[:, ~is_loop], edge_weight[~is_loop]
    loops = torch.arange(num_nodes, device=device)
    edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    return edge_index, torch.cat([edge_weight.to(dtype), loop_w])


def diffusion_weights(
    edge_index: Tensor,
    num_nodes: int,
    edge_weight: Tensor | None = None,
    *,
    r: float = 0.5,
    add_self_loops: bool = True,
    fill_value: float = 1.0,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """Edge weights of ``T = D̄^{-(1-r)} Ā D̄^{-r}``: ``w_e = d̄_u^{-(1-r)} · a_e · d̄_v^{-r}`` for ``e = (v → u)``.

    Degrees are weighted in-degrees at the target (PyG's ``gcn_norm`` convention, equal to out-degrees on
    undirected graphs), counted with the self-loop. ``r = 0.5`` reproduces ``torch_geometric``'s ``gcn_norm``.
    Returns ``(edge_index, w)`` with the loops appended when ``add_self_loops`` (weight ``fill_value`` for nodes
    without one: 2 is ``GCNConv(improved=True)``; PyG's layout, see :func:`add_remaining_self_loops`).
    """
    dtype = dtype or (edge_weight.dtype if edge_weight is not None else torch.get_default_dtype())
    if edge_weight is not None:
        edge_weight = edge_weight.to(dtype)
    if add_self_loops:
        edge_index, edge_weight = add_remaining_self_loops(edge_index, edge_weight, num_nodes, fill_value, dtype)
    elif edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    src, dst = edge_index
    deg = torch.zeros(num_nodes, dtype=dtype, device=edge_index.device).index_add_(0, dst, edge_weight)
    safe = deg > 0
    inv_out = torch.zeros_like(deg)
    inv_in = torch.zeros_like(deg)
    inv_out[safe] = deg[safe].pow(-(1.0 - r))
    inv_in[safe] = deg[safe].pow(-r)
    return edge_index, inv_out[dst] * edge_weight * inv_in[src]


# ---------------------------------------------------------------------------------------------- pruning rules
def message_scores(edge_index: Tensor, edge_weight: Tensor, z: Tensor) -> Tensor:
    """``s_e = |w_e| · ‖Z[src_e]‖₂``, which equals ``‖w_e Z[src_e]‖₂ = ‖τ_e‖₂`` exactly, in O(n·f + m)."""
    return edge_weight.abs() * torch.linalg.vector_norm(z, dim=1)[edge_index[0]]


def edge_threshold(
    scores: Tensor, delta_a: float, threshold: Threshold = "relative", active: Tensor | None = None
) -> Tensor:
    """``θ_a``: ``δa · mean s`` over the (``active``) edges of the layer (relative, official code) or ``δa``
    (absolute, paper eq. 9), as a 0-d tensor."""
    check_choice("threshold", threshold, THRESHOLDS)
    if threshold == "absolute":
        return scores.new_tensor(delta_a)
    live = scores if active is None else scores[active]
    return delta_a * live.mean() if live.numel() else scores.new_tensor(0.0)


def edge_keep_mask(
    scores: Tensor,
    is_loop: Tensor,
    delta_a: float,
    threshold: Threshold = "relative",
    *,
    active: Tensor | None = None,
) -> Tensor:
    """``keep_e = (s_e >= θ_a ∨ is_loop(e)) ∧ active_e``, ``θ_a`` of :func:`edge_threshold`.

    The mean runs over every (active) edge of the layer, loops included (official code). Self-loops are never
    removed. ``active``: the edges still in the graph (progressive sparsification: the previous layer's kept set).
    """
    check_choice("threshold", threshold, THRESHOLDS)
    if delta_a == 0:
        keep = torch.ones_like(is_loop)
    elif delta_a == float("inf"):
        keep = is_loop.clone()
    else:
        keep = (scores >= edge_threshold(scores, delta_a, threshold, active)) | is_loop
    return keep if active is None else keep & active


def weight_mask(
    weight: Tensor, h: Tensor, delta_w: float, threshold: Threshold = "relative", *, eps: float = 1e-12
) -> Tensor:
    """The input-norm weight rule (paper eq. 14): a bool mask of ``weight``'s shape ``(f_out, f_in)``.

    ``c_j = max(‖H[:, j]‖₂, eps)``; ``θ_j = δw · s / c_j`` with ``s = ‖H‖_F / f_in`` (relative, official,
    invariant to ``H → cH``) or ``s = 1`` (absolute, paper); ``θ_j`` is clamped at ``0.999 · max|W|`` so the
    largest weight always survives; ``M[o, j] = |W[o, j]| >= θ_j``.
    """
    check_choice("threshold", threshold, THRESHOLDS)
    if weight.dim() != 2 or h.dim() != 2 or h.size(1) != weight.size(1):
        raise ValueError(
            f"weight_mask needs weight (f_out, f_in) and h (n, f_in); got {tuple(weight.shape)} and {tuple(h.shape)}"
        )
    if delta_w == 0:
        return torch.ones_like(weight, dtype=torch.bool)
    with torch.no_grad():
        w_abs = weight.detach().abs()
        hd = h.detach().to(w_abs.dtype)
        col = torch.linalg.vector_norm(hd, dim=0).clamp_min(eps)
        scale = torch.linalg.vector_norm(hd) / h.size(1) if threshold == "relative" else col.new_tensor(1.0)
        theta = (delta_w * scale / col).clamp_max(0.999 * w_abs.max())
        return w_abs >= theta.unsqueeze(0)


def check_batch(batch: Tensor | None, num_nodes: int, device: torch.device) -> tuple[Tensor | None, int]:
    """``batch`` (PyG's node-to-graph vector of a ``Batch``) checked: ``(batch, number of graphs)``, ``(None, 1)``
    when None."""
    if batch is None:
        return None, 1
    if not isinstance(batch, Tensor) or batch.dtype != torch.long or batch.dim() != 1:
        raise TypeError(
            f"batch must be None or a 1-D int64 tensor (the graph of each node), got "
            f"{getattr(batch, 'dtype', type(batch).__name__)} with shape {tuple(getattr(batch, 'shape', ()))}"
        )
    if batch.numel() != num_nodes:
        raise ValueError(f"batch must have one entry per node ({num_nodes}), got {batch.numel()}")
    if int(batch.min()) < 0:
        raise ValueError(f"batch holds graph ids >= 0, got {int(batch.min())}")
    return batch.to(device), int(batch.max()) + 1


def edge_keep_mask_per_graph(
    scores: Tensor,
    is_loop: Tensor,
    edge_graph: Tensor,
    num_graphs: int,
    delta_a: float,
    threshold: Threshold = "relative",
    *,
    active: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`edge_keep_mask` applied to each graph of a batch on its own: ``θ_a[g] = δa · mean s`` over graph
    ``g``'s (active) edges (``edge_graph``: the graph of each edge), so a graph prunes as it would alone, whatever its
    batch mates. Returns ``(keep, θ_a per graph)``."""
    check_choice("threshold", threshold, THRESHOLDS)
    if threshold == "absolute":
        theta = scores.new_full((num_graphs,), float(delta_a))
    else:
        live = torch.ones_like(is_loop) if active is None else active
        sums = scores.new_zeros(num_graphs).index_add_(0, edge_graph[live], scores[live])
        count = torch.bincount(edge_graph[live], minlength=num_graphs).to(scores.dtype)
        theta = delta_a * sums / count.clamp_min(1)
    keep = (scores >= theta[edge_graph]) | is_loop
    return (keep if active is None else keep & active), theta


def weight_mask_per_graph(
    weight: Tensor,
    h: Tensor,
    batch: Tensor,
    num_graphs: int,
    delta_w: float,
    threshold: Threshold = "relative",
    *,
    eps: float = 1e-12,
) -> Tensor:
    """:func:`weight_mask` of each graph of a batch from its own rows of ``h`` (``batch``: the graph of each row):
    ``(num_graphs, f_out, f_in)`` bool."""
    check_choice("threshold", threshold, THRESHOLDS)
    if delta_w == 0:
        return torch.ones((num_graphs, *weight.shape), dtype=torch.bool, device=weight.device)
    with torch.no_grad():
        w_abs = weight.detach().abs()
        hd = h.detach().to(w_abs.dtype)
        col2 = hd.new_zeros(num_graphs, h.size(1)).index_add_(0, batch, hd * hd)
        col = col2.sqrt().clamp_min(eps)
        if threshold == "relative":
            scale = col2.sum(1).sqrt() / h.size(1)
        else:
            scale = col.new_ones(num_graphs)
        theta = (delta_w * scale.unsqueeze(1) / col).clamp_max(0.999 * w_abs.max())
        return w_abs.unsqueeze(0) >= theta.unsqueeze(1)


# -------------------------------------------------------------------------------------------------- sparse ops
def edge_keys(edge_index: Tensor, num_nodes: int) -> Tensor:
    """One int64 key per edge, ``src · n + dst`` (for set operations on edge lists)."""
    return edge_index[0] * num_nodes + edge_index[1]


def _csr(rows: Tensor, cols: Tensor, vals: Tensor, n_rows: int, n_cols: int) -> Tensor:
    order = torch.argsort(rows, stable=True) if rows.numel() > 1 and bool((rows[1:] < rows[:-1]).any()) else None
    if order is not None:
        rows, cols, vals = rows[order], cols[order], vals[order]
    crow = torch.zeros(n_rows + 1, dtype=torch.long, device=rows.device)
    crow[1:] = torch.bincount(rows, minlength=n_rows).cumsum(0)
    with warnings.catch_warnings():
        # torch warns once that CSR support is "beta"; the operations used here are stable since torch 2.0
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        return torch.sparse_csr_tensor(crow, cols, vals, (n_rows, n_cols), check_invariants=False)


class _SpMM(torch.autograd.Function):
    """``out = A @ Z`` with ``A[dst_e, src_e] = w_e`` (duplicates summed) as a CSR product in both passes."""

    @staticmethod
    def forward(ctx, src: Tensor, dst: Tensor, w: Tensor, z: Tensor, num_dst: int) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(src, dst, w, z)
        ctx.num_dst = num_dst
        if src.numel() == 0:
            return z.new_zeros(num_dst, z.size(1))
        return _csr(dst, src, w.detach(), num_dst, z.size(0)) @ z.detach()

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        src, dst, w, z = ctx.saved_tensors
        grad_w = grad_z = None
        if ctx.needs_input_grad[3]:
            if src.numel() == 0:
                grad_z = torch.zeros_like(z)
            else:
                grad_z = _csr(src, dst, w.detach(), z.size(0), ctx.num_dst) @ grad_out
        if ctx.needs_input_grad[2]:
            # d out[dst_e] / d w_e = Z[src_e]: an m-vector, computed in chunks to bound the m × f product
            grad_w = torch.empty_like(w)
            step = max(1, (1 << 22) // max(1, z.size(1)))
            for i in range(0, src.numel(), step):
                s, d = src[i : i + step], dst[i : i + step]
                grad_w[i : i + step] = (grad_out[d] * z[s]).sum(-1)
        return None, None, grad_w, grad_z, None


def spmm(edge_index: Tensor, edge_weight: Tensor, z: Tensor, num_dst: int | None = None) -> Tensor:
    """``out[u] = Σ_{e: dst_e = u} w_e Z[src_e]`` through a CSR matrix (sorted by target once per call).

    Differentiable in ``z`` (backward is the transposed CSR product) and in ``edge_weight`` (used by attention).
    """
    num_dst = z.size(0) if num_dst is None else num_dst
    return _SpMM.apply(edge_index[0], edge_index[1], edge_weight, z, num_dst)
