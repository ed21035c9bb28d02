r"""The server side of EAGLES as pure functions (Sec. 4.2 and 4.4): the consensus mask, the structural distances
between clients, the personalised aggregation, and the density bands of the pre-train phase.

Every function takes what clients upload (state dicts, layer masks, router weights) and nothing else.

.. math::
    M_{global} = \bigvee_c M_c, \qquad
    D^{mask}_{ij} = \sum_l \mathrm{mean}(M^l_i \ne M^l_j), \qquad
    D^{ctx}_{ij} = W_2^2(\mathrm{flat}(W^{gate}_i), \mathrm{flat}(W^{gate}_j))

    S = \mathrm{clip}\big(1 - (\tilde D^{mask} + \tilde D^{ctx})/2, 0, 1\big), \quad A = S / S\mathbf 1, \quad
    \theta_i \leftarrow \sum_j A_{ij} \theta_j
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from icml25_shared.validate import check_choice, check_float, check_int, check_tensor

__all__ = [
    "consensus_mask",
    "consensus_stacked",
    "mask_density",
    "mask_distance",
    "mask_distance_stacked",
    "context_distance",
    "context_distance_stacked",
    "mask_grams",
    "check_binary",
    "minmax_normalize",
    "personalized_weights",
    "personalized_aggregate",
    "personalized_mix",
    "empty_blocks",
    "BufferPool",
    "stack_masks",
    "stack_states",
    "unstack",
    "weighted_average",
    "weighted_mean_stacked",
    "StoredMask",
    "DensityBandSelector",
]

MaskDict = Mapping[str, Tensor]


def _check_masks(masks: Sequence[MaskDict]) -> list[str]:
    if len(masks) == 0:
        raise ValueError("masks must hold at least one client's masks, got an empty sequence")
    keys = list(masks[0])
    for c, m in enumerate(masks):
        if list(m) != keys:
            raise ValueError(f"masks[{c}] must have the layers {keys}, got {list(m)}")
        for k in keys:
            check_binary(f"masks[{c}][{k!r}]", m[k])
            if tuple(m[k].shape) != tuple(masks[0][k].shape):
                raise ValueError(
                    f"masks[{c}][{k!r}] must have shape {tuple(masks[0][k].shape)}, got {tuple(m[k].shape)}"
                )
    return keys


def check_binary(name: str, mask: Tensor) -> Tensor:
    """A layer mask: a bool tensor, or a numeric one holding only 0 and 1 (anything else would be read as
    "kept" by ``bool()`` and give a wrong distance); returns it."""
    check_tensor(name, mask)
    if mask.dtype != torch.bool:
        bad = (mask != 0) & (mask != 1)
        if bool(bad.any()):
            raise ValueError(
                f"{name} must be a bool mask or hold only 0 and 1, got {int(bad.sum())} other entries "
                f"(e.g. {mask[bad].reshape(-1)[0].item()!r})"
            )
    return mask


def stack_masks(masks: Sequence[MaskDict]) -> dict[str, Tensor]:
    """Layer name → the C clients' masks of that layer side by side, a ``(C, numel)`` bool matrix (one copy;
    validated as in :func:`mask_distance`)."""
    keys = _check_masks(masks)
    return {k: torch.stack([m[k].reshape(-1).bool() for m in masks]) for k in keys}


def consensus_stacked(stacked: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """:func:`consensus_mask` of masks stacked by :func:`stack_masks`: a flat bool mask per layer."""
    return {k: m.view(torch.uint8).amax(0).bool() for k, m in stacked.items()}  # OR over rows


def consensus_mask(masks: Sequence[MaskDict]) -> dict[str, Tensor]:
    """Elementwise OR of the clients' layer masks (Sec. 4.2): a weight is kept if any client keeps it."""
    keys = _check_masks(masks)
    out = {}
    for k in keys:
        acc = masks[0][k].bool().clone()
        for m in masks[1:]:
            acc |= m[k].bool()
        out[k] = acc
    return out


def mask_density(mask: MaskDict) -> float:
    """nnz / numel over all layers of one mask dict."""
    nnz = sum(int(m.bool().sum()) for m in mask.values())
    numel = sum(m.numel() for m in mask.values())
    return nnz / numel if numel else 1.0


_BLOCK = 1 << 23
"""Columns per float32 product in :func:`_gram_float` (integer counts below 2^24 are exact in float32)."""


def _gram_float(rows: Tensor) -> Tensor:
    """M Mᵀ of a ``(C, n)`` bool matrix, exact, as float32 products of column blocks accumulated in float64."""
    c, n = rows.shape
    inter = torch.zeros(c, c, dtype=torch.float64)
    for lo in range(0, n, _BLOCK):
        f = rows[:, lo : lo + _BLOCK].to(torch.float32)
        inter += (f @ f.t()).to(torch.float64)
    return inter


def _gram(rows: Tensor) -> Tensor:
    """M Mᵀ of a ``(C, n)`` bool matrix (the pairwise counts of common kept entries), exact, float64. One int8
    product with int32 accumulation (``torch._int_mm``: a bool tensor is read as int8 0/1 without a copy; exact for
    n < 2^31), else float32 products (:func:`_gram_float`)."""
    int_mm = getattr(torch, "_int_mm", None)
    if int_mm is not None and rows.size(1) < 2**31:
        i8 = rows.contiguous().view(torch.int8)
        try:
            return int_mm(i8, i8.t()).to(torch.float64)
        except (RuntimeError, NotImplementedError):  # a build without the CPU int8 kernel
            pass
    return _gram_float(rows)


def mask_grams(stacked: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Layer name → :math:`M M^T` of its ``(C, numel)`` bool masks, ``(C, C)`` float64 exact counts: the pairwise
    common kept entries, and on the diagonal every client's nnz (what the uplink meter counts)."""
    if not stacked:
        raise ValueError("stacked must hold at least one layer's (C, numel) masks, got none")
    c = next(iter(stacked.values())).size(0)
    out = {}
    for k, rows in stacked.items():
        check_tensor(f"stacked[{k!r}]", rows, ndim=2, dtype=torch.bool)
        if rows.size(0) != c:
            raise ValueError(f"stacked[{k!r}] must have {c} rows (one per client), got {rows.size(0)}")
        out[k] = _gram(rows) if rows.size(1) else torch.zeros(c, c, dtype=torch.float64)
    return out


def mask_distance_stacked(stacked: Mapping[str, Tensor], grams: Mapping[str, Tensor] | None = None) -> Tensor:
    """:func:`mask_distance` of masks stacked by :func:`stack_masks` (``(C, numel)`` bool per layer); ``grams``:
    their :func:`mask_grams` when already computed (the server shares them with the uplink meter)."""
    if grams is None:
        grams = mask_grams(stacked)
    c = next(iter(stacked.values())).size(0)
    d = torch.zeros(c, c, dtype=torch.float64)
    for k, rows in stacked.items():
        n = rows.size(1)
        if n == 0:
            continue
        inter = grams[k]
        cnt = inter.diagonal().clone()  # |M_i| = M_i · M_i
        d += (cnt[:, None] + cnt[None, :] - 2 * inter) / n
    d.fill_diagonal_(0.0)
    return d


def mask_distance(masks: Sequence[MaskDict]) -> Tensor:
    r""":math:`D^{mask}_{ij} = \sum_l \mathrm{mean}(M^l_i \ne M^l_j)` (normalised Hamming distance summed over
    layers), ``(C, C)`` float64, from one matrix product per layer: :math:`|M_i| + |M_j| - 2 M_i \cdot M_j` with
    exact integer counts (an int8 product, or float32 products of blocks below 2^24 columns)."""
    return mask_distance_stacked(stack_masks(masks))


def context_distance(gates: Sequence[Tensor]) -> Tensor:
    r"""Squared 2-Wasserstein distance between the empirical distributions of each client's flattened router
    weights (uniform weights, equal sizes), by the 1-D closed form :math:`\mathrm{mean}((\mathrm{sort}\,a -
    \mathrm{sort}\,b)^2)`; ``(C, C)`` float64. Equals POT's ``ot.emd2`` with the squared-distance cost."""
    if len(gates) == 0:
        raise ValueError("gates must hold at least one client's router weights, got an empty sequence")
    flat = []
    for c, g in enumerate(gates):
        check_tensor(f"gates[{c}]", g, dtype="floating", finite=True, nonempty=True)
        flat.append(g.detach().reshape(-1))
    if any(f.numel() != flat[0].numel() for f in flat):
        raise ValueError(f"gates must all have {flat[0].numel()} entries, got {[f.numel() for f in flat]}")
    dt = functools.reduce(torch.promote_types, [f.dtype for f in flat])
    return context_distance_stacked(torch.stack([f.to(dt) for f in flat]))


def context_distance_stacked(rows: Tensor) -> Tensor:
    r""":func:`context_distance` of router weights stacked as a ``(C, n)`` matrix (one flattened client per row).

    Each row is sorted once (in its own dtype: the float64 conversion after the sort is exact and keeps the
    order), and every pair from one Gram matrix of the sorted rows taken relative to client 0's,
    :math:`u_i = s_i - s_0`: :math:`\mathrm{mean}((s_i - s_j)^2) = (u_i\cdot u_i + u_j\cdot u_j - 2\,u_i\cdot
    u_j)/n`. Relative to client 0 the cancellation error stays at float64 rounding of the largest distance
    (:math:`D_{0j} = u_j\cdot u_j/n`); clients identical to client 0 are at distance 0 exactly. Symmetric with a
    zero diagonal by construction; negative rounding residues are clipped to 0."""
    check_tensor("rows", rows, ndim=2, dtype="floating", finite=True, nonempty=True)
    c, n = rows.shape
    r = rows.detach()
    if r.dtype in (torch.float16, torch.bfloat16):
        r = r.to(torch.float32)
    s = torch.from_numpy(np.sort(r.cpu().numpy(), axis=1).astype(np.float64, copy=False))
    u = s[1:] - s[0]  # client 0's row is 0: left out of the product
    gram = torch.zeros(c, c, dtype=torch.float64)
    if c > 1:
        gram[1:, 1:] = u @ u.t()
    q = gram.diagonal()
    d = (q[:, None] + q[None, :] - 2.0 * gram).div_(n).clamp_(min=0.0).triu_(1)
    return d + d.t()


def minmax_normalize(d: Tensor) -> Tensor:
    """(D − min D) / (max D − min D) over all entries; the zero matrix when max = min."""
    lo, hi = d.min(), d.max()
    if float(hi - lo) <= 0:
        return torch.zeros_like(d)
    return (d - lo) / (hi - lo)


def personalized_weights(d_mask: Tensor | None, d_ctx: Tensor | None) -> Tensor:
    r"""Aggregation weights :math:`A = S / S\mathbf 1`, :math:`S = \mathrm{clip}(1 - \mathrm{mean}(\tilde D), 0,
    1)` over the distances given (both: the paper's rule; one: the ablations). Rows sum to 1; identical clients
    get the uniform matrix, i.e. unweighted FedAvg."""
    ds = [d for d in (d_mask, d_ctx) if d is not None]
    if not ds:
        raise ValueError("personalized_weights needs d_mask, d_ctx or both, got neither")
    c = ds[0].size(0)
    for name, d in (("d_mask", d_mask), ("d_ctx", d_ctx)):
        if d is not None:
            check_tensor(name, d, shape=(c, c), dtype="floating", finite=True)
            if bool((d < 0).any()):
                raise ValueError(f"{name} must hold distances ≥ 0, got a minimum of {float(d.min())!r}")
    dn = minmax_normalize(ds[0].to(torch.float64))
    for d in ds[1:]:
        dn = dn + minmax_normalize(d.to(torch.float64))
    dn = dn / len(ds)
    s = (1 - dn).clamp(0, 1)
    return s / s.sum(1, keepdim=True)


def _float_keys(states: Sequence[Mapping[str, Tensor]]) -> list[str]:
    if len(states) == 0:
        raise ValueError("states must hold at least one client's state dict, got an empty sequence")
    keys = list(states[0])
    for c, st in enumerate(states):
        if list(st) != keys:
            raise ValueError(f"states[{c}] must have the keys of states[0], got {sorted(set(st) ^ set(keys))} apart")
        for k in keys:
            if tuple(st[k].shape) != tuple(states[0][k].shape):
                raise ValueError(
                    f"states[{c}][{k!r}] must have the shape of states[0][{k!r}], {tuple(states[0][k].shape)}, "
                    f"got {tuple(st[k].shape)}"
                )
    return keys


def stack_states(states: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """Key → the C clients' tensors of that key side by side, a ``(C, numel)`` matrix (one copy; keys and shapes
    checked as in :func:`personalized_aggregate`)."""
    keys = _float_keys(states)
    return {k: torch.stack([st[k].reshape(-1) for st in states]) for k in keys}


def unstack(stacked: Mapping[str, Tensor], shapes: Mapping[str, Sequence[int]]) -> list[dict[str, Tensor]]:
    """One dict per row of :func:`stack_states`-shaped matrices, each tensor a view of its row in ``shapes``."""
    c = next(iter(stacked.values())).size(0) if stacked else 0
    rows = {k: m.view(c, *shapes[k]).unbind(0) for k, m in stacked.items()}
    return [{k: r[i] for k, r in rows.items()} for i in range(c)]


def _check_weights(weights: Tensor, c: int) -> Tensor:
    check_tensor("weights", weights, shape=(c, c), dtype="floating", finite=True)
    a = weights.to(torch.float64)
    if bool((a < 0).any()):
        raise ValueError(f"weights must be non-negative (A = S / S1, Sec. 4.4), got a minimum of {float(a.min())!r}")
    rows = a.sum(1)
    if not torch.allclose(rows, torch.ones_like(rows), rtol=0.0, atol=1e-6):
        raise ValueError(
            f"weights must be row-stochastic (every row sums to 1, so that θ_i is a weighted mean), got row sums "
            f"{[round(float(r), 6) for r in rows]}"
        )
    return a


def personalized_mix(
    stacked: Mapping[str, Tensor], weights: Tensor, pool: BufferPool | None = None
) -> dict[str, Tensor]:
    r""":math:`\Theta \leftarrow A\,\Theta` on :func:`stack_states`-shaped ``(C, numel)`` matrices: one matrix
    product per floating key (in its dtype, float32 at least) written straight into its block of one output
    buffer (:func:`empty_blocks`, from ``pool`` when given); integer and bool rows stay the clients' own."""
    if not stacked:
        raise ValueError("stacked must hold at least one (C, numel) matrix, got none")
    c = next(iter(stacked.values())).size(0)
    for k, m in stacked.items():
        check_tensor(f"stacked[{k!r}]", m, ndim=2)
        if m.size(0) != c:
            raise ValueError(f"stacked[{k!r}] must have {c} rows (one per client), got {m.size(0)}")
    a = _check_weights(weights, c)
    direct = [k for k, m in stacked.items() if m.dtype in (torch.float32, torch.float64)]
    blocks = empty_blocks({k: (tuple(stacked[k].shape), stacked[k].dtype) for k in direct}, pool)
    a_dt = {dt: a.to(dt) for dt in {stacked[k].dtype for k in direct}}
    out = {}
    for k, m in stacked.items():
        if k in blocks:  # one product straight into its block of the output
            torch.mm(a_dt[m.dtype], m, out=blocks[k])
            out[k] = blocks[k]
        elif not m.is_floating_point():
            out[k] = m.clone()
        else:  # half precision: the product in float32
            out[k] = (a.to(torch.float32) @ m.to(torch.float32)).to(m.dtype)
    return out


class BufferPool:
    """Flat NumPy buffers kept from one round to the next, handed out again only once nothing else holds them.

    A fresh buffer of 100+ MB costs the kernel tens of ms of page zeroing every round; a buffer this pool kept is
    reused when no tensor or array made from it is still alive anywhere (its reference count is back to what the
    pool alone holds), so a caller that keeps a view (a personalised state, a stacked matrix) keeps its values:
    the pool then allocates a new buffer instead. At most ``keep`` buffers of each dtype are tracked.

    ``huge_pages``: allocate through NumPy, which asks for transparent huge pages on large buffers (fast to fault
    in: the buffers the replies are read into); False: through torch (4 KiB pages: slower the first time, but
    ``torch.mm`` writes about 10% faster into them, which the reused output buffers of the mixing want).
    """

    def __init__(self, keep: int = 2, *, huge_pages: bool = True) -> None:
        self.keep = check_int("keep", keep, min=1)
        self.huge_pages = bool(huge_pages)
        self._bufs: list[np.ndarray] = []
        self._probe: list[np.ndarray] = [np.empty(0)]  # held as the buffers are, never shared: the free count

    def _free(self, i: int) -> bool:
        return sys.getrefcount(self._bufs[i]) <= sys.getrefcount(self._probe[0])

    def take(self, numel: int, dtype: np.dtype) -> np.ndarray:
        """A flat uninitialised buffer of ``numel`` entries of ``dtype``: a kept one nobody holds, else a new one."""
        dtype = np.dtype(dtype)
        for i in range(len(self._bufs)):
            if self._bufs[i].size == numel and self._bufs[i].dtype == dtype and self._free(i):
                self._bufs.append(self._bufs.pop(i))  # most recently used last
                return self._bufs[-1]
        if self.huge_pages:
            buf = np.empty(numel, dtype=dtype)
        else:  # torch's memory seen as an array (the array holds the tensor): reference counts as above
            buf = torch.from_numpy(np.empty(0, dtype=dtype)).new_empty(numel).numpy()
        same = [i for i in range(len(self._bufs)) if self._bufs[i].dtype == dtype]
        if len(same) >= self.keep:  # forget a free buffer of this dtype first, else the oldest (its holders keep it)
            free = [i for i in same if self._free(i)]
            self._bufs.pop(free[0] if free else same[0])
        self._bufs.append(buf)
        return buf


_ALIGN = 64
"""Bytes every block of :func:`empty_blocks` starts on (a cache line: products write into unaligned blocks ~10%
slower)."""


def empty_blocks(
    layout: Mapping[str, tuple[tuple[int, ...], torch.dtype]], pool: BufferPool | None = None
) -> dict[str, Tensor]:
    """Key → an uninitialised contiguous tensor of (shape, dtype), all those of one dtype laid one after the other
    in one buffer allocated by NumPy (which asks the kernel for transparent huge pages on large buffers: far fewer
    page faults than ``torch.empty``), or taken from ``pool`` (no page faults at all). Per key, the products stay
    on contiguous matrices, each starting on a cache line. Dtypes without a NumPy equivalent get one
    ``torch.empty`` each."""
    out: dict[str, Tensor] = {}
    by_dtype: dict[torch.dtype, list[str]] = {}
    for k, (_, dt) in layout.items():
        by_dtype.setdefault(dt, []).append(k)
    for dt, keys in by_dtype.items():
        numels = [math.prod(layout[k][0]) for k in keys]
        try:
            np_dt = torch.empty(0, dtype=dt).numpy().dtype
        except TypeError:
            out.update({k: torch.empty(layout[k][0], dtype=dt) for k in keys})
            continue
        align = max(1, _ALIGN // np_dt.itemsize)
        offsets, total = [], 0
        for n in numels:
            total = -(-total // align) * align
            offsets.append(total)
            total += n
        buf = torch.from_numpy(pool.take(total, np_dt) if pool is not None else np.empty(total, dtype=np_dt))
        for k, off, n in zip(keys, offsets, numels, strict=True):
            out[k] = buf[off : off + n].view(layout[k][0])
    return out


def personalized_aggregate(states: Sequence[Mapping[str, Tensor]], weights: Tensor) -> list[dict[str, Tensor]]:
    r""":math:`\theta_i = \sum_j A_{ij}\theta_j` for every floating tensor (one matrix product per tensor, in the
    tensor's dtype, float32 at least); integer and bool tensors keep the client's own value. Returns one state
    dict per client."""
    stacked = stack_states(states)
    _check_weights(weights, len(states))
    return unstack(personalized_mix(stacked, weights), {k: t.shape for k, t in states[0].items()})


def weighted_mean_stacked(stacked: Mapping[str, Tensor], sizes: Sequence[float]) -> dict[str, Tensor]:
    """Size-weighted mean of the rows of :func:`stack_states`-shaped matrices (float64 accumulation), a flat
    tensor per key in its dtype; non-floating keys take the first row."""
    if not stacked:
        raise ValueError("stacked must hold at least one (C, numel) matrix, got none")
    c = next(iter(stacked.values())).size(0)
    w = torch.tensor([check_float(f"sizes[{i}]", s, min=0.0) for i, s in enumerate(sizes)], dtype=torch.float64)
    if w.numel() != c or float(w.sum()) <= 0:
        raise ValueError(f"sizes must hold one non-negative weight per state with a positive sum, got {list(sizes)}")
    w = w / w.sum()
    return {
        k: (w @ m.to(torch.float64)).to(m.dtype) if m.is_floating_point() else m[0].clone() for k, m in stacked.items()
    }


def weighted_average(states: Sequence[Mapping[str, Tensor]], sizes: Sequence[float]) -> dict[str, Tensor]:
    """Size-weighted FedAvg of floating tensors (float64 accumulation); other tensors from the first client."""
    stacked = stack_states(states)
    if len(sizes) != len(states):
        raise ValueError(f"sizes must hold one non-negative weight per state with a positive sum, got {list(sizes)}")
    mean = weighted_mean_stacked(stacked, sizes)
    return {k: v.reshape(states[0][k].shape) for k, v in mean.items()}


@dataclass
class StoredMask:
    """The consensus mask kept for one density band: its round, density and selection score."""

    band: float
    mask: dict[str, Tensor]
    round: int
    density: float
    score: float
    in_band: bool = True
    """False when the density jumped over the band; the mask is then the first consensus below it."""


@dataclass
class DensityBandSelector:
    """Band bookkeeping of the pre-train phase (Sec. 4.2, "harmony" of the two sparsifiers).

    Bands are visited in decreasing order. While the consensus density d lies in ``[b − tol, b + tol]`` the mask
    with the best score (mean client validation accuracy) is remembered; when d falls below ``b − tol`` it is
    stored and the next band becomes current. A band that d jumps over stores the first mask below it, flagged
    ``in_band=False``. Stored masks are clones: reusing one is bit-exact.
    """

    bands: tuple[float, ...]
    tolerance: float = 0.03
    stored: dict[float, StoredMask] = field(default_factory=dict)
    current: int = 0
    _best: StoredMask | None = None
    visits: list[tuple[int, float]] = field(default_factory=list)
    """(round, band) each time a round's consensus lay inside a band."""

    def __post_init__(self) -> None:
        self.bands = tuple(float(b) for b in self.bands)
        if any(b >= a for a, b in zip(self.bands, self.bands[1:], strict=False)):
            raise ValueError(f"bands must be strictly decreasing, got {self.bands}")
        self.tolerance = check_float("tolerance", self.tolerance, min=0.0)

    @property
    def done(self) -> bool:
        return self.current >= len(self.bands)

    def update(self, server_round: int, mask: MaskDict, score: float) -> list[float]:
        """Feed one round's consensus mask and score; returns the bands stored by this call."""
        d = mask_density(mask)
        new = []
        while not self.done:
            band = self.bands[self.current]
            if d > band + self.tolerance:
                break
            if d >= band - self.tolerance:
                self.visits.append((server_round, band))
                if self._best is None or score > self._best.score:
                    self._best = StoredMask(
                        band, {k: v.bool().clone() for k, v in mask.items()}, server_round, d, score
                    )
                break
            # d fell below the band: store its best mask (or this one, when the band was jumped over)
            best = self._best or StoredMask(
                band, {k: v.bool().clone() for k, v in mask.items()}, server_round, d, score, in_band=False
            )
            self.stored[band] = best
            new.append(band)
            self._best = None
            self.current += 1
        return new

    def _key(self, band: float) -> float | None:
        """The stored band equal to ``band`` up to float rounding (0.1 + 0.2 finds 0.3), or None."""
        b = float(check_float("band", band, min=0.0, max=1.0))
        return next((k for k in self.stored if abs(k - b) <= 1e-9), None)

    def has(self, band: float) -> bool:
        return self._key(band) is not None

    def get(self, band: float) -> StoredMask:
        key = self._key(band)
        if key is None:
            raise KeyError(f"band {band} has no stored mask; stored: {sorted(self.stored, reverse=True)}")
        return self.stored[key]


def select_score(metrics: Sequence[Mapping[str, float]], select_on: str) -> float:
    """Mean client accuracy on the selection split (``"val"`` or ``"test"``)."""
    select_on = check_choice("select_on", select_on, ("val", "test"))
    vals = [float(m[f"{select_on}-acc"]) for m in metrics]
    return sum(vals) / len(vals)
