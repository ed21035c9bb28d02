"""The paper's math as pure functions (float64 torch): response models, Gauss–Hermite quadrature, the Bock–Aitkin
E-step over a sparse response matrix, item-parallel M-steps, item information and ability estimation.

Conventions (the paper's): Rasch P(y = 1 | θ) = σ(θ − b); 2PL σ(a(θ − b)); 3PL c + (1 − c) σ(a(θ − b)).
The official code writes the Rasch model as σ(θ + z) (mirt's easiness z = −b); see
:func:`amortized_irt.estimators.to_mirt`.

Every sum over responses runs over observed entries only, as four matrix × dense products per EM iteration: CSR
(O(nnz · Q)), or dense blocks when a design is at least a quarter observed and small (``DENSE_MAX_ENTRIES``). Under
the Rasch model the E-step runs once per group of takers with the same answered items and raw score (the score is
sufficient for θ), each group weighted by its size: at most J + 1 rows on complete data with J items.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.functional import logsigmoid

from amortized_irt.data import ResponseMatrix

__all__ = [
    "DTYPE",
    "gauss_hermite",
    "log_probs",
    "item_information",
    "SparseDesign",
    "taker_groups",
    "e_step",
    "rasch_objective",
    "rasch_m_step",
    "item_objective",
    "newton_m_step",
    "eap",
    "theta_newton",
    "FLAG_OK",
    "FLAG_INFINITE",
    "FLAG_NO_ITEMS",
    "FLAG_NOT_CONVERGED",
]

DTYPE = torch.float64
FLAG_OK, FLAG_INFINITE, FLAG_NO_ITEMS, FLAG_NOT_CONVERGED = 0, 1, 2, 3


def gauss_hermite(n_quad: int, prior_sd: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes x_q and log-weights log w_q of probabilists' Gauss–Hermite quadrature for N(0, prior_sd²):
    Σ_q w_q f(x_q) ≈ E f(θ), exact for polynomials of degree < 2Q; weights sum to one."""
    x, w = np.polynomial.hermite_e.hermegauss(n_quad)
    w = w / w.sum()
    return torch.as_tensor(prior_sd * x, dtype=DTYPE), torch.as_tensor(np.log(w), dtype=DTYPE)


def log_probs(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log P(y = 1), log P(y = 0)) of every item [M] at every ability x [Q], shape [M, Q] each."""
    z = a[:, None] * (x[None, :] - b[:, None])
    if c is None:
        return logsigmoid(z), logsigmoid(-z)
    cc = c[:, None]
    return torch.logaddexp(torch.log(cc), torch.log1p(-cc) + logsigmoid(z)), torch.log1p(-cc) + logsigmoid(-z)


def item_information(
    theta: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None
) -> torch.Tensor:
    """Fisher information I_j(θ) (broadcast): Rasch p(1 − p); 2PL a²p(1 − p); 3PL a²(1 − p)/p · ((p − c)/(1 − c))²
    (the paper's adaptive test picks argmax_j I_j(θ̂))."""
    z = a * (theta - b)
    ps = torch.sigmoid(z)
    if c is None:
        return a * a * ps * (1.0 - ps)
    p = c + (1.0 - c) * ps
    return a * a * (1.0 - p) / p * ((p - c) / (1.0 - c)) ** 2


def _csr(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape: tuple[int, int]) -> torch.Tensor:
    """torch CSR from entries sorted by row."""
    crow = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=crow[1:])
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(crow), torch.from_numpy(np.ascontiguousarray(cols)), torch.as_tensor(vals, dtype=DTYPE),
            size=shape, check_invariants=False,
        )  # fmt: skip


def _dense(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape: tuple[int, int]) -> torch.Tensor:
    out = torch.zeros(shape, dtype=DTYPE)
    out[torch.from_numpy(rows), torch.from_numpy(cols)] = torch.as_tensor(vals, dtype=DTYPE)
    return out


# On one thread a dense block product beats torch's CSR product from about a quarter of the entries observed on
# (2,000 × 500 at density 1: 8 ms vs 48 ms per product with 121 nodes; at density 0.1 CSR is 3x faster). Dense blocks
# are used up to 2^22 entries (32 MiB per matrix; four are kept).
DENSE_MIN_DENSITY = 0.25
DENSE_MAX_ENTRIES = 1 << 22


def _item_codes(m: int) -> np.ndarray:
    """A fixed random 64-bit code per item; a mask's hash is the sum of its items' codes modulo 2^64."""
    return np.random.default_rng(20250301).integers(0, np.iinfo(np.uint64).max, size=m, dtype=np.uint64)


def taker_groups(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Group takers by (set of answered items, raw score): under the Rasch model the log-likelihood of taker i at θ is
    s_i θ + Σ_j O_ij log σ(b_j − θ) − Σ_j O_ij y_ij b_j, so the posterior over θ depends on the answered items and
    the raw score s_i only (the score is a sufficient statistic for θ). ``rows``/``cols``/``values``: the entries in
    CSR order (by taker, then item). Returns the group of every taker [n] (groups numbered by their first taker)
    and the number of takers in each group [G].

    Takers are sorted by (number of answered items, a 64-bit hash of the answered items, score); a group is a run of
    neighbours whose answered items are compared exactly and whose scores are equal, so a hash collision can only
    split a group, never merge different masks. O(nnz + n log n)."""
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    count = np.bincount(rows, minlength=n)
    score = np.bincount(rows, weights=values, minlength=n)
    crow = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=crow[1:])
    code = _item_codes(int(cols.max()) + 1 if len(cols) else 1)
    csum = np.zeros(len(cols) + 1, dtype=np.uint64)
    np.cumsum(code[cols], out=csum[1:])  # wraps modulo 2^64; differences of the prefix sums stay exact
    mask_hash = csum[crow[1:]] - csum[crow[:-1]]
    order = np.lexsort((score, mask_hash, count))
    a, b = order[:-1], order[1:]
    same = (count[a] == count[b]) & (mask_hash[a] == mask_hash[b]) & (score[a] == score[b])
    cand = np.flatnonzero(same)
    if len(cand):  # exact comparison of the answered items of each candidate pair of neighbours
        ca, cb, length = a[cand], b[cand], count[a[cand]]
        pair = np.repeat(np.arange(len(cand)), length)
        offset = np.arange(len(pair)) - np.repeat(np.cumsum(length) - length, length)
        differ = cols[crow[ca][pair] + offset] != cols[crow[cb][pair] + offset]
        same[cand[np.bincount(pair[differ], minlength=len(cand)) > 0]] = False
    group_sorted = np.concatenate([[0], np.cumsum(~same)])
    group = np.empty(n, dtype=np.int64)
    group[order] = group_sorted
    _, first = np.unique(group, return_index=True)  # renumber groups in the order of their first taker
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    group = rank[group]
    return group, np.bincount(group)


@dataclass
class SparseDesign:
    """The observation mask O and the observed responses O∘Y of a block of takers, with the transposes that carry
    the row weights, so that an EM iteration is four matrix × dense products (CSR, or dense blocks when at least
    ``DENSE_MIN_DENSITY`` of the entries are observed).

    A grouped design (``build(..., group=True)``, Rasch only) has one row per group of takers with the same answered
    items and raw score (:func:`taker_groups`): row g holds the group's mask and its mean responses C_gj / w_g
    (C_gj the number of its takers who answered item j right, w_g its size), ``Ot``/``OYt`` hold w_g O_gj and C_gj,
    so the posterior of the row is every member's posterior and the item statistics are the per-taker sums.
    """

    O: torch.Tensor  # noqa: E741 (the paper's observation mask O)
    OY: torch.Tensor
    Ot: torch.Tensor
    OYt: torch.Tensor
    n_rows: int
    n_items: int
    row_counts: torch.Tensor  # responses per row
    weight: torch.Tensor | None = None  # takers per row of a grouped design (None: one taker per row)
    inverse: torch.Tensor | None = None  # the row of every taker in a grouped design

    @classmethod
    def build(cls, Y: ResponseMatrix, rows: slice | None = None, group: bool = False) -> SparseDesign:
        """From the rows ``rows`` (a contiguous slice, e.g. one rank's shard) of ``Y``; all items kept.
        ``group=True``: one row per group of takers with the same answered items and raw score (valid for the
        Rasch model only); when no two takers share a group the design is the per-taker one."""
        r, c, v = Y.rows, Y.cols, Y.values
        n = Y.n_takers
        if rows is not None:
            start, stop = rows.start or 0, Y.n_takers if rows.stop is None else rows.stop
            keep = (r >= start) & (r < stop)
            r, c, v, n = r[keep] - start, c[keep], v[keep], stop - start
        m = Y.n_items
        weight = inverse = None
        vt = v
        if group:
            inv, size = taker_groups(r, c, v, n)
            if len(size) < n:
                # the members of a group answered the same items, so the t-th entry of every member is item
                # c[start of its first member + t]: sum the responses onto the first member's entries
                crow = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(np.bincount(r, minlength=n), out=crow[1:])
                first = np.full(len(size), n, dtype=np.int64)
                np.minimum.at(first, inv, np.arange(n))
                lead = first[inv]  # the first member of every taker's group
                pos = crow[lead[r]] + np.arange(len(r)) - crow[r]
                right = np.bincount(pos, weights=v, minlength=len(r))
                keep = lead[r] == r
                r, c, right, n = inv[r[keep]], c[keep], right[keep], len(size)
                v, vt = right / size[r], right
                weight, inverse = torch.as_tensor(size, dtype=DTYPE), torch.from_numpy(inv)
        ones = np.ones(len(r))
        wt = ones if weight is None else weight.numpy()[r]
        counts = torch.as_tensor(np.bincount(r, minlength=n), dtype=DTYPE)
        if len(r) >= DENSE_MIN_DENSITY * n * m and n * m <= DENSE_MAX_ENTRIES:
            return cls(
                _dense(r, c, ones, (n, m)), _dense(r, c, v, (n, m)),
                _dense(c, r, wt, (m, n)), _dense(c, r, vt, (m, n)), n, m, counts, weight, inverse,
            )  # fmt: skip
        order = np.lexsort((r, c))
        return cls(
            _csr(r, c, ones, (n, m)), _csr(r, c, v, (n, m)),
            _csr(c[order], r[order], wt[order], (m, n)), _csr(c[order], r[order], vt[order], (m, n)), n, m,
            counts, weight, inverse,
        )  # fmt: skip

    @property
    def n_takers(self) -> int:
        """The number of takers the design stands for."""
        return self.n_rows if self.inverse is None else len(self.inverse)

    def loglik_grid(self, logp: torch.Tensor, log1mp: torch.Tensor) -> torch.Tensor:
        """ll[i, q] = Σ_j O_ij [y_ij log p_jq + (1 − y_ij) log(1 − p_jq)] = (O∘Y)(log p − log(1 − p)) + O log(1 − p)
        (of a row: its takers' mean)."""
        return self.OY @ (logp - log1mp) + self.O @ log1mp

    def item_stats(self, post: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Expected counts n[j, q] = Σ_i O_ij π_iq and correct counts r[j, q] = Σ_i O_ij y_ij π_iq, summed over
        takers (a row's posterior counted once per taker)."""
        return self.Ot @ post, self.OYt @ post

    def total(self, per_row: torch.Tensor) -> torch.Tensor:
        """Σ over takers of a per-row quantity [n_rows, ...] (each row counted once per taker it stands for)."""
        if self.weight is None:
            return per_row.sum(0)
        return torch.tensordot(self.weight, per_row, dims=1)

    def per_taker(self, per_row: torch.Tensor) -> torch.Tensor:
        """A per-row quantity expanded to one entry per taker."""
        return per_row if self.inverse is None else per_row[self.inverse]


def e_step(design: SparseDesign, logp: torch.Tensor, log1mp: torch.Tensor, log_w: torch.Tensor):
    """Bock–Aitkin E-step: posterior weights π[i, q] of every row of the design on the nodes, and log m_i (the
    marginal log-likelihood of the row's taker; of a grouped row its takers' mean, so ``design.total(log m)`` is the
    marginal log-likelihood of all takers)."""
    ll = design.loglik_grid(logp, log1mp) + log_w[None, :]
    log_m = torch.logsumexp(ll, dim=1)
    return torch.exp(ll - log_m[:, None]), log_m


def rasch_objective(b: torch.Tensor, n: torch.Tensor, r: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-item expected complete-data log-likelihood Q_j(b_j) = Σ_q r log σ(x_q − b_j) + (n − r) log σ(b_j − x_q)."""
    z = x[None, :] - b[:, None]
    return (r * logsigmoid(z) + (n - r) * logsigmoid(-z)).sum(1)


def _halving(q_fn, params: torch.Tensor, step: torch.Tensor, q0: torch.Tensor, tries: int = 20) -> torch.Tensor:
    """params + t·step per row with t = 1, 1/2, 1/4, … until the row's objective does not decrease (rows that never
    improve, or whose step is below 1e-10, keep their value): a generalised-EM M-step, so the marginal likelihood
    never decreases. ``q_fn(params_rows, idx)`` evaluates the objective of the rows ``idx``."""
    new = params.clone()
    flat = step.reshape(step.shape[0], -1).abs().amax(1)
    pending = torch.nonzero(flat > 1e-10).squeeze(1)
    t = 1.0
    for _ in range(tries):
        if pending.numel() == 0:
            break
        cand = params[pending] + t * step[pending]
        q0p = q0[pending]
        # an improvement below rounding noise counts as none lost: accepting it keeps runs whose statistics differ
        # only in summation order (sharded vs single process) on the same path
        ok = q_fn(cand, pending) >= q0p - 1e-13 * (1.0 + q0p.abs())
        new[pending[ok]] = cand[ok]
        pending = pending[~ok]
        t *= 0.5
    return new


def rasch_m_step(
    b: torch.Tensor,
    n: torch.Tensor,
    r: torch.Tensor,
    x: torch.Tensor,
    steps: int = 3,
    prior: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Item-parallel Newton steps on b (the M-step): g_j = Σ_q (r − n p), h_j = Σ_q n p(1 − p),
    b_j ← b_j − g_j / h_j (∂Q/∂b_j = −g_j), each with step halving. ``prior=(μ, s²)`` adds a Gaussian prior
    N(μ_j, s_j²) on each b_j (MAP-EM; used by the amortized GP/MLP predictors)."""

    def objective(bb: torch.Tensor, i: torch.Tensor | None) -> torch.Tensor:
        nn_, rr = (n, r) if i is None else (n[i], r[i])
        q = rasch_objective(bb, nn_, rr, x)
        if prior is not None:
            mu, var = prior if i is None else (prior[0][i], prior[1][i])
            q = q - 0.5 * (bb - mu) ** 2 / var
        return q

    for _ in range(steps):
        p = torch.sigmoid(x[None, :] - b[:, None])
        g = (r - n * p).sum(1)
        h = (n * p * (1.0 - p)).sum(1)
        if prior is not None:
            g, h = g + (b - prior[0]) / prior[1], h + 1.0 / prior[1]
        b = _halving(objective, b, -g / h.clamp_min(1e-300), objective(b, None))
    return b


def item_objective(
    P: torch.Tensor,
    n: torch.Tensor,
    r: torch.Tensor,
    x: torch.Tensor,
    log_a_prior_sd: float | None,
    c_prior: tuple[float, float] | None,
) -> torch.Tensor:
    """Per-item Q_j + log prior for 2PL (P = [log a, b]) or 3PL (P = [log a, b, logit c]), shape [M]."""
    a, b = torch.exp(P[:, 0]), P[:, 1]
    c = torch.sigmoid(P[:, 2]) if P.shape[1] == 3 else None
    logp, log1mp = log_probs(x, a, b, c)
    q = (r * logp + (n - r) * log1mp).sum(1)
    if log_a_prior_sd is not None:
        q = q - 0.5 * (P[:, 0] / log_a_prior_sd) ** 2
    if c is not None and c_prior is not None:
        al, be = c_prior
        q = q + (al - 1.0) * logsigmoid(P[:, 2]) + (be - 1.0) * logsigmoid(-P[:, 2])
    return q


def _grad_hess(fn, P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row gradient [M, k] and Hessian [M, k, k] of a row-separable objective by autograd."""
    with torch.enable_grad():
        P = P.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(P).sum(), P, create_graph=True)
        rows = [torch.autograd.grad(g[:, k].sum(), P, retain_graph=True)[0] for k in range(P.shape[1])]
    return g.detach(), torch.stack(rows, dim=1).detach()


def newton_m_step(P: torch.Tensor, objective, steps: int = 3) -> torch.Tensor:
    """Item-parallel damped Newton ascent on a row-separable objective ``objective(P_rows, idx)`` (``idx=None``:
    all rows; the 2PL/3PL M-step): solve (−H + μI) δ = g with μ just large enough to make −H positive definite,
    then step halving."""
    k = P.shape[1]
    eye = torch.eye(k, dtype=DTYPE)
    for _ in range(steps):
        g, H = _grad_hess(lambda Q: objective(Q, None), P)
        lam_min = torch.linalg.eigvalsh(-H)[:, 0]
        mu = torch.clamp(1e-8 - lam_min, min=0.0)
        step = torch.linalg.solve(-H + mu[:, None, None] * eye, g.unsqueeze(-1)).squeeze(-1)
        step = torch.nan_to_num(step, nan=0.0, posinf=0.0, neginf=0.0)
        with torch.no_grad():
            P = _halving(objective, P, step, objective(P, None))
    return P


# ---------------------------------------------------------------------------------------------------- ability
def eap(
    design: SparseDesign,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor | None,
    prior_mean: float = 0.0,
    prior_sd: float = 1.0,
    grid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected a-posteriori ability and posterior SD of every taker of ``design`` on a fixed grid (default 201
    points over [−6, 6]) with an N(prior_mean, prior_sd²) prior; the prior mean when a taker has no response (a
    grouped design: computed once per group)."""
    if grid is None:
        grid = torch.linspace(-6.0, 6.0, 201, dtype=DTYPE)
    logp, log1mp = log_probs(grid, a, b, c)
    lp = design.loglik_grid(logp, log1mp) - 0.5 * ((grid[None, :] - prior_mean) / prior_sd) ** 2
    post = torch.softmax(lp, dim=1)
    mean = post @ grid
    sd = (post * (grid[None, :] - mean[:, None]) ** 2).sum(1).clamp_min(0.0).sqrt()
    empty = design.row_counts == 0  # no response: exactly the prior, not its grid approximation
    mean = torch.where(empty, torch.full_like(mean, prior_mean), mean)
    sd = torch.where(empty, torch.full_like(sd, prior_sd), sd)
    return design.per_taker(mean), design.per_taker(sd)


def _entry_terms(theta, rows, cols, y, a, b, c):
    """Per-entry log-likelihood, score and Fisher information at θ[rows]."""
    aj, bj = a[cols], b[cols]
    z = aj * (theta[rows] - bj)
    ps = torch.sigmoid(z)
    if c is None:
        ll = y * logsigmoid(z) + (1 - y) * logsigmoid(-z)
        return ll, aj * (y - ps), aj * aj * ps * (1 - ps)
    cj = c[cols]
    p = cj + (1 - cj) * ps
    dp = (1 - cj) * aj * ps * (1 - ps)
    ll = y * torch.log(p) + (1 - y) * torch.log1p(-p)
    return ll, (y - p) / (p * (1 - p)) * dp, dp * dp / (p * (1 - p))


def theta_newton(
    Y: ResponseMatrix,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor | None,
    prior: tuple[float, float] | None,
    theta0: torch.Tensor | None = None,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLE (``prior=None``) or MAP (``prior=(mean, sd)``) ability of every taker by Fisher scoring with step
    halving; returns (θ̂, SE = 1/√(I(θ̂) [+ 1/σ²]), flag).

    MLE of an all-correct (all-wrong) pattern does not exist: θ̂ = +inf (−inf), flag ``FLAG_INFINITE``; a taker
    with no response gets NaN (MLE) or the prior mean (MAP) and ``FLAG_NO_ITEMS``.
    """
    n = Y.n_takers
    rows, cols = torch.from_numpy(Y.rows), torch.from_numpy(Y.cols)
    y = torch.as_tensor(Y.values, dtype=DTYPE)
    count = torch.bincount(rows, minlength=n).to(DTYPE)
    right = torch.zeros(n, dtype=DTYPE).index_add_(0, rows, y)
    flag = torch.full((n,), FLAG_OK, dtype=torch.int64)
    theta = torch.zeros(n, dtype=DTYPE) if theta0 is None else theta0.clone().to(DTYPE)
    if prior is not None:
        mu, sd = prior
        theta = torch.where(torch.isfinite(theta), theta, torch.full_like(theta, mu))
    else:
        theta = torch.where(torch.isfinite(theta), theta, torch.zeros_like(theta))

    def objective(th: torch.Tensor) -> torch.Tensor:
        ll, _, _ = _entry_terms(th, rows, cols, y, a, b, c)
        out = torch.zeros(n, dtype=DTYPE).index_add_(0, rows, ll)
        return out if prior is None else out - 0.5 * ((th - prior[0]) / prior[1]) ** 2

    def objective_rows(th_rows: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        full = theta.clone()
        full[idx] = th_rows
        return objective(full)[idx]

    perfect = (right == count) | (right == 0)
    active = ~perfect if prior is None else torch.ones(n, dtype=torch.bool)
    converged = torch.zeros(n, dtype=torch.bool)
    for _ in range(max_iter):
        _, score, info = _entry_terms(theta, rows, cols, y, a, b, c)
        g = torch.zeros(n, dtype=DTYPE).index_add_(0, rows, score)
        h = torch.zeros(n, dtype=DTYPE).index_add_(0, rows, info)
        if prior is not None:
            g, h = g - (theta - prior[0]) / prior[1] ** 2, h + 1.0 / prior[1] ** 2
        step = torch.where(active & (h > 0), g / h.clamp_min(1e-300), torch.zeros_like(g)).clamp(-2.0, 2.0)
        theta = _halving(lambda th, i: objective_rows(th, i), theta, step, objective(theta))
        converged = step.abs() < tol
        if bool(converged[active].all()):
            break
    _, _, info = _entry_terms(theta, rows, cols, y, a, b, c)
    h = torch.zeros(n, dtype=DTYPE).index_add_(0, rows, info)
    if prior is not None:
        h = h + 1.0 / prior[1] ** 2
    se = 1.0 / h.sqrt()
    flag[active & ~converged] = FLAG_NOT_CONVERGED
    if prior is None:
        theta = torch.where(perfect & (right > 0), torch.tensor(math.inf, dtype=DTYPE), theta)
        theta = torch.where(perfect & (right == 0), torch.tensor(-math.inf, dtype=DTYPE), theta)
        se = torch.where(perfect, torch.tensor(math.inf, dtype=DTYPE), se)
        flag[perfect] = FLAG_INFINITE
        theta[count == 0] = math.nan
    flag[count == 0] = FLAG_NO_ITEMS
    return theta, se, flag
