"""The PID-CVX baseline of Liang et al. (NeurIPS 2023): K-means per modality, a k x k x C histogram, and the BROJA
decomposition solved as a convex program (cvxpy; Clarabel when installed). Dataset level only.

Two equivalent formulations of max H_q(Y | X1, X2) s.t. q(x1, y) = p(x1, y), q(x2, y) = p(x2, y):

- ``"aux"`` (default): an auxiliary variable t(x1, x2) = sum_y q(x1, x2, y), objective -sum rel_entr(q, t). Every
  exponential cone touches three scalars, so the KKT system stays sparse.
- ``"direct"``: t written as the expression sum_y q inside ``rel_entr`` (the textbook form of the program). Every cone
  then references all C entries of its row, the KKT system fills in, and Clarabel's cost per iteration explodes
  with C (same optimum; C = 30, k = 20 takes minutes instead of seconds).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np

from icml25_shared.validate import check_array, check_choice, check_float, check_int

__all__ = [
    "broja_discrete",
    "broja_cvx",
    "FORMULATIONS",
    "PIDBatch",
    "broja_sinkhorn",
    "sinkhorn_project",
    "pid_from_coupling",
]

FORMULATIONS = ("aux", "direct")


def _mi(p: np.ndarray, axes_x: tuple[int, ...]) -> float:
    """I(X; Y) of a joint array whose last axis is Y and whose other listed axes form X (others summed out)."""
    keep = tuple(sorted(set(axes_x) | {p.ndim - 1}))
    drop = tuple(a for a in range(p.ndim) if a not in keep)
    pj = p.sum(axis=drop) if drop else p
    pj = pj.reshape(-1, p.shape[-1])
    px, py = pj.sum(1, keepdims=True), pj.sum(0, keepdims=True)
    m = pj > 0
    return float((pj[m] * np.log(pj[m] / (px @ py)[m])).sum())


def broja_discrete(
    P: Any, solver: str | None = None, formulation: str = "aux", time_limit: float | None = None
) -> dict[str, Any]:
    """BROJA (R, U1, U2, S) in nats of a joint pmf P[x1, x2, y], by maximising H_q(Y | X1, X2) over the q with
    the same (x1, y) and (x2, y) marginals.

    Returns ``{"R", "U1", "U2", "S", "status", "solve_s"}``; ``solve_s`` is the wall time of the cvxpy solve. With
    ``time_limit`` (seconds, Clarabel only) a solve that runs out of time returns NaN values and
    ``status="time_limit"`` (its time is then a lower bound on the full solve).
    """
    import cvxpy as cp

    check_choice("formulation", formulation, FORMULATIONS)
    time_limit = check_float("time_limit", time_limit, min=0.0, min_open=True, allow_none=True)
    p = np.asarray(P, dtype=np.float64)
    if p.ndim != 3:
        raise ValueError(f"P must be a 3-D joint pmf P[x1, x2, y], got shape {p.shape}")
    if not np.isfinite(p).all() or (p < 0).any() or not p.sum() > 0:
        raise ValueError("P must be finite and non-negative with a positive total")
    p = p / p.sum()
    n1, n2, c = p.shape
    q = cp.Variable((n1 * n2, c), nonneg=True)
    rows1 = np.repeat(np.arange(n1), n2)  # row r = (a, b) with a = r // n2
    rows2 = np.tile(np.arange(n2), n1)
    s1 = np.zeros((n1, n1 * n2))
    s1[rows1, np.arange(n1 * n2)] = 1
    s2 = np.zeros((n2, n1 * n2))
    s2[rows2, np.arange(n1 * n2)] = 1
    cons = [s1 @ q == p.sum(1), s2 @ q == p.sum(0)]
    if formulation == "aux":
        t = cp.Variable((n1 * n2, 1), nonneg=True)
        cons.append(cp.sum(q, axis=1, keepdims=True) == t)
        q12 = t @ np.ones((1, c))
    else:
        q12 = cp.sum(q, axis=1, keepdims=True) @ np.ones((1, c))
    prob = cp.Problem(cp.Maximize(cp.sum(-cp.rel_entr(q, q12))), cons)
    if solver is None:
        solver = "CLARABEL" if "CLARABEL" in cp.installed_solvers() else None
    opts: dict[str, Any] = {}
    if time_limit is not None:
        if solver != "CLARABEL":
            raise ValueError(f"time_limit needs the CLARABEL solver, got solver={solver!r}")
        opts["time_limit"] = float(time_limit)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():  # reported through the returned "status" instead
            warnings.filterwarnings("ignore", "Solution may be inaccurate", UserWarning)
            prob.solve(solver=solver, **opts)
    except cp.error.SolverError:  # pyright: ignore[reportAttributeAccessIssue]  # cvxpy.error is a submodule the stub omits
        if time_limit is None:
            raise
    solve_s = time.perf_counter() - t0
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or q.value is None:
        if time_limit is not None and solve_s >= 0.9 * time_limit:
            nan = math.nan
            return {"R": nan, "U1": nan, "U2": nan, "S": nan, "status": "time_limit", "solve_s": solve_s}
        raise RuntimeError(f"BROJA solve failed with status {prob.status!r}")
    qs = np.clip(np.asarray(q.value), 0, None).reshape(n1, n2, c)
    qs /= qs.sum()
    i1, i2 = _mi(p, (0,)), _mi(p, (1,))
    i12_p, i12_q = _mi(p, (0, 1)), _mi(qs, (0, 1))
    u1 = i12_q - _mi(qs, (1,))  # I_q(X1; Y | X2) = I_q(X1, X2; Y) - I_q(X2; Y), and I_q(X2; Y) = I_p(X2; Y)
    r = i1 - u1
    return {"R": r, "U1": u1, "U2": i2 - r, "S": i12_p - i12_q, "status": str(prob.status), "solve_s": solve_s}


def broja_cvx(
    x1: Any,
    x2: Any,
    y: Any,
    k: int = 10,
    n_classes: int | None = None,
    seed: int = 0,
    solver: str | None = None,
    formulation: str = "aux",
    time_limit: float | None = None,
) -> dict[str, Any]:
    """PID-CVX on continuous features: K-means (k clusters) per modality, histogram, :func:`broja_discrete`
    (whose ``formulation`` and ``time_limit`` are passed on)."""
    from sklearn.cluster import KMeans

    x1, x2 = np.asarray(x1), np.asarray(x2)
    y = check_array("y", y, dtype="numeric").reshape(-1).astype(np.float64)
    if not (len(x1) == len(x2) == len(y)):
        raise ValueError(f"x1, x2 and y must have the same length, got {len(x1)}, {len(x2)} and {len(y)}")
    if len(y) == 0:
        raise ValueError("x1, x2 and y are empty")
    if not (np.isfinite(y).all() and (y == np.round(y)).all() and y.min() >= 0):
        bad = y[~(np.isfinite(y) & (y == np.round(y)) & (y >= 0))][0]
        raise ValueError(f"y must hold integer class labels >= 0, got {bad!r}")  # a float or negative label was cast
    y = y.astype(np.int64)
    k = check_int("k", k, min=1, max=len(x1))
    top = int(y.max()) + 1
    c = top if n_classes is None else check_int("n_classes", n_classes, min=top)
    # sklearn's stub types n_init as the string "auto" only; the int is documented and accepted
    a = KMeans(k, n_init=1, random_state=seed).fit_predict(x1.reshape(len(x1), -1))  # pyright: ignore[reportArgumentType]
    b = KMeans(k, n_init=1, random_state=seed).fit_predict(x2.reshape(len(x2), -1))  # pyright: ignore[reportArgumentType]
    hist = np.zeros((k, k, c))
    np.add.at(hist, (a, b, y), 1.0)
    return broja_discrete(hist, solver, formulation, time_limit)


# -- PID-Batch (Liang et al., NeurIPS 2023, Sec. 3.2 "Batch estimator") ------------------------------------------
#
# BROJA's q* = argmax_{q in Delta_p} H_q(Y | X1, X2), where Delta_p = {q : q(x1, y) = p(x1, y), q(x2, y) = p(x2, y)},
# estimated on batches of m samples: over the m x m x C grid of a batch's (x1_i, x2_j, y), an unnormalised joint
# q~(x1_i, x2_j, y) = exp(<g1(x1_i)_y, g2(x2_j)_y>) from two learned encoders is projected onto Delta_p by Sinkhorn
# iterations on each label slice, with the targets p(x_i, y) = p(y | x_i) / m from unimodal classifiers; the
# encoders minimise I_q(X1, X2; Y) (= maximise H_q(Y | X1, X2), since q(y) is fixed) through the projection.
# Then U1 = I_q(X1; Y | X2), R = I(X1; Y) - U1, U2 = I(X2; Y) - R, S = I_p(X1, X2; Y) - I_q(X1, X2; Y).


def sinkhorn_project(logits: Any, log_a: Any, log_b: Any, n_iter: int = 30) -> Any:
    """Project exp(logits) of shape (m1, m2, C) onto the couplings with q(i, ., y) = a[i, y] and q(., j, y) =
    b[j, y], label slice by label slice, in log space (``log_a`` (m1, C), ``log_b`` (m2, C); the two must carry the
    same mass per label). Alternating row and column normalisations (Sinkhorn-Knopp), ending on the columns; the
    result stays differentiable in ``logits``."""
    import torch

    for _ in range(n_iter):
        logits = logits - torch.logsumexp(logits, 1, keepdim=True) + log_a[:, None, :]
        logits = logits - torch.logsumexp(logits, 0, keepdim=True) + log_b[None, :, :]
    return logits


def _mi_from_joint(log_p: Any, dims_x: tuple[int, ...]) -> Any:
    """I(X; Y) in nats of a normalised joint given as log-probabilities whose last axis is Y; X = the axes in
    ``dims_x`` (the others are summed out)."""
    import torch

    drop = tuple(d for d in range(log_p.ndim - 1) if d not in dims_x)
    lp = torch.logsumexp(log_p, drop) if drop else log_p
    lp = lp.reshape(-1, lp.shape[-1])
    lx, ly = torch.logsumexp(lp, 1, keepdim=True), torch.logsumexp(lp, 0, keepdim=True)
    finite = torch.isfinite(lp)  # outcomes of probability 0 add nothing (and no NaN from 0 * -inf)
    return torch.where(finite, lp.exp() * (lp - lx - ly), torch.zeros_like(lp)).sum()


def pid_from_coupling(log_q: Any, i12_p: float) -> dict[str, float]:
    """BROJA's (R, U1, U2, S) from the (near-)optimal coupling q* in Delta_p (log-probabilities (m1, m2, C), summing
    to one) and I_p(X1, X2; Y): U1 = I_q(X1, X2; Y) - I_q(X2; Y), R = I_q(X1; Y) - U1, U2 = I_q(X2; Y) - R,
    S = I_p(X1, X2; Y) - I_q(X1, X2; Y) (the marginal MIs are those of p, as q matches its (x_m, y) marginals)."""
    i12_q = float(_mi_from_joint(log_q, (0, 1)))
    i1, i2 = float(_mi_from_joint(log_q, (0,))), float(_mi_from_joint(log_q, (1,)))
    u1 = i12_q - i2
    r = i1 - u1
    return {"R": r, "U1": u1, "U2": i2 - r, "S": float(i12_p) - i12_q, "I12_q": i12_q}


def _balanced_log_marginals(a: Any, b: Any) -> tuple[Any, Any]:
    """log a, log b rescaled so that both carry the same mass per label (their mean), as Sinkhorn needs."""
    import torch

    mass = 0.5 * (a.sum(0) + b.sum(0))
    tiny = torch.finfo(a.dtype).tiny
    return (
        torch.log((a * (mass / a.sum(0).clamp_min(tiny))).clamp_min(tiny)),
        torch.log((b * (mass / b.sum(0).clamp_min(tiny))).clamp_min(tiny)),
    )


def broja_sinkhorn(P: Any, steps: int = 2000, lr: float = 0.05, n_iter: int = 50, seed: int = 0) -> dict[str, Any]:
    """PID-Batch's optimisation with a free coupling instead of encoders: the BROJA (R, U1, U2, S) of a joint pmf
    ``P[x1, x2, y]`` by gradient descent on I_q(X1, X2; Y) over q = Sinkhorn(exp(theta)) in Delta_p (Adam on theta).
    The same optimum as :func:`broja_discrete`; the core of :class:`PIDBatch`, tested against it."""
    import torch

    steps = check_int("steps", steps, min=1)
    lr = check_float("lr", lr, min=0.0, min_open=True)
    n_iter = check_int("n_iter", n_iter, min=1)
    p = torch.as_tensor(np.asarray(P, dtype=np.float64))
    if p.ndim != 3 or (p < 0).any() or not p.sum() > 0:
        raise ValueError(f"P must be a non-negative 3-D joint pmf P[x1, x2, y] with a positive total, got {p.shape}")
    p = p / p.sum()
    log_a, log_b = _balanced_log_marginals(p.sum(1), p.sum(0))
    gen = torch.Generator().manual_seed(seed)
    theta = (0.01 * torch.randn(p.shape, generator=gen, dtype=torch.float64)).requires_grad_()
    opt = torch.optim.Adam([theta], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = _mi_from_joint(sinkhorn_project(theta, log_a, log_b, n_iter), (0, 1))
        loss.backward()
        opt.step()
    with torch.no_grad():
        log_q = sinkhorn_project(theta, log_a, log_b, n_iter)
        log_p = torch.log(p.clamp_min(torch.finfo(p.dtype).tiny))
        return pid_from_coupling(log_q, float(_mi_from_joint(log_p.where(p > 0, -torch.inf), (0, 1))))


class PIDBatch:
    """PID-Batch (Liang et al., NeurIPS 2023, Sec. 3.2): the BROJA decomposition of continuous features, optimised
    on batches with two encoders and a Sinkhorn projection onto Delta_p. Dataset level only.

    ``fit`` trains the three classifiers p(y | x1), p(y | x2), p(y | x1, x2) (those of :class:`lsmi.LSMIEstimator`,
    with its early stopping; ``classifier`` passes options to its config) and then the encoders g1, g2 (MLPs
    x -> R^{C x embed}): for every batch of ``batch_size`` samples, logits[i, j, y] = <g1(x1_i)_y, g2(x2_j)_y> /
    sqrt(embed) are projected by :func:`sinkhorn_project` onto the targets p(x1_i, y) = p(y | x1_i) / m and
    p(x2_j, y) = p(y | x2_j) / m, and Adam minimises I_q(X1, X2; Y) of the projected coupling, for ``epochs``
    epochs; the logits are bounded to (-``logit_bound``, ``logit_bound``) by a scaled tanh (see
    ``_log_coupling``). ``score`` averages :func:`pid_from_coupling` over batches, with I_p(X1, X2; Y) from the
    paired samples' posteriors p(y | x1_i, x2_i). Runs on ``n_threads`` torch threads (the caller's setting is
    restored).
    """

    def __init__(
        self,
        n_classes: int,
        *,
        embed: int = 32,
        hidden: int = 64,
        batch_size: int = 256,
        epochs: int = 10,
        lr: float = 1e-2,
        sinkhorn_iters: int = 30,
        logit_bound: float = 5.0,
        seed: int = 0,
        n_threads: int | None = 1,
        classifier: dict[str, Any] | None = None,
    ) -> None:
        self.n_classes = check_int("n_classes", n_classes, min=2)
        self.embed = check_int("embed", embed, min=1)
        self.hidden = check_int("hidden", hidden, min=1)
        self.batch_size = check_int("batch_size", batch_size, min=2)
        self.epochs = check_int("epochs", epochs, min=0)
        self.lr = check_float("lr", lr, min=0.0, min_open=True)
        self.sinkhorn_iters = check_int("sinkhorn_iters", sinkhorn_iters, min=1)
        self.logit_bound = check_float("logit_bound", logit_bound, min=0.0, min_open=True)
        self.seed = check_int("seed", seed, min=0)
        self.n_threads = check_int("n_threads", n_threads, min=1, allow_none=True)
        self.classifier = dict(classifier or {})
        self.fitted = False

    def _threads(self):
        from icml25_shared.device import torch_threads

        return torch_threads(self.n_threads)

    def _encoder(self, d: int):
        from torch import nn

        c, e, h = self.n_classes, self.embed, self.hidden
        return nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, c * e))

    def _log_coupling(self, z1: Any, z2: Any, p1: Any, p2: Any) -> Any:
        """log q* on the batch grid (m, m, C) from standardised features and the unimodal posteriors (m, C)."""
        import torch

        m, c = len(z1), self.n_classes
        h1 = self.g1(z1).view(m, c, self.embed)
        h2 = self.g2(z2).view(m, c, self.embed)
        logits = torch.einsum("ice,jce->ijc", h1, h2) / math.sqrt(self.embed)
        # bounded logits keep exp(logits) within a factor e^(2 bound) of each other, so that a fixed number of
        # Sinkhorn iterations stays close to Delta_p (unbounded, the encoders learn to exploit an unconverged
        # projection: I_q then falls below BROJA's minimum on couplings that miss the row marginals)
        logits = self.logit_bound * torch.tanh(logits / self.logit_bound)
        log_a, log_b = _balanced_log_marginals(p1 / m, p2 / m)
        return sinkhorn_project(logits, log_a, log_b, self.sinkhorn_iters)

    def fit(self, x1: Any, x2: Any, y: Any, callback: Any = None) -> PIDBatch:
        """Train the classifiers, then the encoders; ``callback(epoch, self)`` runs after every encoder epoch
        (``epoch`` = 0 before the first)."""
        with self._threads():
            import torch

            from lsmi.config import LSMIConfig
            from lsmi.estimator import LSMIEstimator

            opts = {"n_kernels": 1, "epochs_entropy": 0, "seed": self.seed, "n_threads": None, **self.classifier}
            self.clf = LSMIEstimator(LSMIConfig(n_classes=self.n_classes, **opts)).fit(x1, x2, y, verbose=False)
            z1, z2, logp = self.clf.log_posteriors(x1, x2)
            post1, post2 = logp[0].exp(), logp[1].exp()
            torch.manual_seed(self.seed)
            self.g1, self.g2 = self._encoder(z1.shape[1]), self._encoder(z2.shape[1])
            params = [*self.g1.parameters(), *self.g2.parameters()]
            opt = torch.optim.Adam(params, lr=self.lr)
            gen = torch.Generator().manual_seed(self.seed)
            self.fitted = True
            if callback is not None:
                callback(0, self)
            for epoch in range(self.epochs):
                for idx in torch.randperm(len(z1), generator=gen).split(self.batch_size):
                    if len(idx) < 2:
                        continue
                    log_q = self._log_coupling(z1[idx], z2[idx], post1[idx], post2[idx])
                    loss = _mi_from_joint(log_q, (0, 1))  # I_q(X1, X2; Y): q(y) is fixed, so = -H_q(Y|X1,X2) + c
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                if callback is not None:
                    callback(epoch + 1, self)
        return self

    def score(self, x1: Any, x2: Any) -> tuple[float, float, float, float]:
        """Dataset-level BROJA (R, U1, U2, S) in nats: the batch-size-weighted mean over consecutive batches."""
        if not self.fitted:
            raise RuntimeError("this PIDBatch is not fitted yet; call fit(x1, x2, y) first")
        with self._threads():
            import torch

            z1, z2, logp = self.clf.log_posteriors(x1, x2)
            total, weight = np.zeros(4), 0
            with torch.no_grad():
                for s in range(0, len(z1), self.batch_size):
                    sl = slice(s, s + self.batch_size)
                    m = len(z1[sl])
                    if m < 2:
                        continue
                    log_q = self._log_coupling(z1[sl], z2[sl], logp[0][sl].exp(), logp[1][sl].exp())
                    log_p12 = logp[2][sl] - math.log(m)  # the paired samples: p(x1_i, x2_i, y) = p(y|x_i) / m
                    out = pid_from_coupling(log_q, float(_mi_from_joint(log_p12, (0,))))
                    total += m * np.array([out[k] for k in ("R", "U1", "U2", "S")])
                    weight += m
            if weight == 0:
                raise ValueError(
                    f"score needs a batch of at least 2 samples (the coupling is over pairs), got {len(z1)} sample(s)"
                )
            return tuple(float(v) for v in total / weight)  # type: ignore[return-value]
