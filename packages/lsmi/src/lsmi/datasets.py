"""Synthetic data with exact references: the noisy logic gates of the paper's synthetic experiment (y = gate(b1,
b2), x_m = onehot(b_m) + noise) and the official code's Gaussian generator (``gaussian_data.py``) with its exact
plug-in terms ((x1, x2) | y is Gaussian, so p(y | x) and h(x) have closed forms)."""

from __future__ import annotations

import math

import numpy as np

from icml25_shared.validate import check_array, check_choice, check_float, check_int

__all__ = [
    "GATES",
    "gate_joint",
    "logic_gate",
    "gaussian_modalities",
    "gaussian_exact_terms",
    "noisy_discrete",
    "noisy_discrete_exact_terms",
]

GATES = {
    "xor": lambda a, b: a ^ b,
    "or": lambda a, b: a | b,
    "and": lambda a, b: a & b,
    "sum": lambda a, b: a + b,
}


def gate_joint(gate: str) -> np.ndarray:
    """Exact joint pmf P[b1, b2, y] of y = gate(b1, b2) with independent fair bits."""
    check_choice("gate", gate, sorted(GATES))
    fn = GATES[gate]
    c = 3 if gate == "sum" else 2
    p = np.zeros((2, 2, c))
    for a in (0, 1):
        for b in (0, 1):
            p[a, b, fn(a, b)] = 0.25
    return p


def logic_gate(gate: str, n: int, noise: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """b1, b2 ~ Bern(1/2); x_m = onehot(b_m) + noise * N(0, I_2); y = gate(b1, b2)."""
    check_choice("gate", gate, sorted(GATES))
    n = check_int("n", n, min=0)
    noise = check_float("noise", noise, min=0.0)
    rng = np.random.default_rng(seed)
    b1, b2 = rng.integers(0, 2, n), rng.integers(0, 2, n)
    x1 = np.eye(2)[b1] + noise * rng.standard_normal((n, 2))
    x2 = np.eye(2)[b2] + noise * rng.standard_normal((n, 2))
    return x1.astype(np.float32), x2.astype(np.float32), GATES[gate](b1, b2)


def logsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    """log sum exp along ``axis`` (numpy only: scipy is not a dependency)."""
    m = a.max(axis=axis, keepdims=True)
    return np.squeeze(m, axis) + np.log(np.exp(a - m).sum(axis=axis))


def gaussian_modalities(n: int, n_classes: int = 2, sigma: float = 0.5, rho: float = 0.5, seed: int = 0):
    """The official generator: y ~ U{0..C-1}; x1 = onehot(y) + u; x2 = onehot(y) + rho u + sqrt(1 - rho^2) v."""
    n, n_classes = check_int("n", n, min=0), check_int("n_classes", n_classes, min=2)
    sigma, rho = check_float("sigma", sigma, min=0.0, min_open=True), check_float("rho", rho, min=-1.0, max=1.0)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    u = sigma * rng.standard_normal((n, n_classes))
    v = sigma * rng.standard_normal((n, n_classes))
    e = np.eye(n_classes)[y]
    return (e + u).astype(np.float32), (e + rho * u + math.sqrt(1 - rho**2) * v).astype(np.float32), y


def gaussian_exact_terms(x1, x2, y, n_classes: int = 2, sigma: float = 0.5, rho: float = 0.5) -> dict:
    """Exact i1, i2, i12, h1, h2 (nats) of :func:`gaussian_modalities` for the given samples (uniform prior)."""
    n_classes = check_int("n_classes", n_classes, min=2)
    sigma = check_float("sigma", sigma, min=0.0, min_open=True)
    rho = check_float("rho", rho, min=-1.0, max=1.0, min_open=True, max_open=True)  # |rho| = 1: no joint density
    x1, x2, y = np.asarray(x1, np.float64), np.asarray(x2, np.float64), np.asarray(y)
    c, s2 = n_classes, sigma**2
    means = np.eye(c)  # (C, C): class k's mean vector
    log_prior = -math.log(c)

    def loglik_single(x):  # (N, C): log N(x; e_k, s2 I)
        d = x[:, None, :] - means[None]
        return -0.5 * (d**2).sum(-1) / s2 - 0.5 * c * math.log(2 * math.pi * s2)

    def loglik_pair(a, b):  # coordinates independent, each pair bivariate with cov s2 [[1, rho], [rho, 1]]
        da, db = a[:, None, :] - means[None], b[:, None, :] - means[None]
        q = (da**2 - 2 * rho * da * db + db**2) / (s2 * (1 - rho**2))
        return -0.5 * q.sum(-1) - c * math.log(2 * math.pi * s2 * math.sqrt(1 - rho**2))

    rows = np.arange(len(y))
    out = {}
    for name, ll in (("1", loglik_single(x1)), ("2", loglik_single(x2)), ("12", loglik_pair(x1, x2))):
        log_px = logsumexp(ll + log_prior, axis=1)
        out["i" + name] = ll[rows, y] + log_prior - log_px - log_prior  # log p(y|x) - log p(y)
        if name != "12":
            out["h" + name] = -log_px
    return out


def noisy_discrete(P, n: int, sigma: float = 0.1, seed: int = 0):
    """(a, b, y) ~ P[a, b, y] (a joint pmf of shape (n1, n2, C)); x1 = onehot(a) + sigma N(0, I_{n1}),
    x2 = onehot(b) + sigma N(0, I_{n2}). With well-separated codes (sigma << 1/sqrt(2)) the noise is independent of
    everything given the code, so BROJA's (R, U1, U2, S) are those of P (``baselines.broja_discrete(P)``), and the
    exact LSMI plug-in terms come from :func:`noisy_discrete_exact_terms`."""
    p = check_array("P", P, ndim=3, dtype="numeric").astype(np.float64)
    if not np.isfinite(p).all() or (p < 0).any() or not p.sum() > 0:
        raise ValueError("P must be finite and non-negative with a positive total")
    n, sigma = check_int("n", n, min=0), check_float("sigma", sigma, min=0.0)
    p = p / p.sum()
    rng = np.random.default_rng(seed)
    a, b, y = np.unravel_index(rng.choice(p.size, size=n, p=p.ravel()), p.shape)
    x1 = np.eye(p.shape[0])[a] + sigma * rng.standard_normal((n, p.shape[0]))
    x2 = np.eye(p.shape[1])[b] + sigma * rng.standard_normal((n, p.shape[1]))
    return x1.astype(np.float32), x2.astype(np.float32), y


def noisy_discrete_exact_terms(P, x1, x2, y, sigma: float = 0.1) -> dict:
    """Exact i1, i2, i12, h1, h2 (nats) of :func:`noisy_discrete` for the given samples: x | code is N(onehot,
    sigma^2 I), so p(y | x) and p(x) are finite mixtures."""
    p = np.asarray(P, dtype=np.float64)
    p = p / p.sum()
    x1, x2, y = np.asarray(x1, np.float64), np.asarray(x2, np.float64), np.asarray(y)
    tiny = np.finfo(np.float64).tiny

    def loglik(x):  # (N, n): log N(x; e_a, sigma^2 I)
        d = x[:, None, :] - np.eye(x.shape[1])[None]
        return -0.5 * (d**2).sum(-1) / sigma**2 - 0.5 * x.shape[1] * math.log(2 * math.pi * sigma**2)

    l1, l2 = loglik(x1), loglik(x2)
    log_p = np.log(np.maximum(p, tiny))
    log_py = np.log(p.sum((0, 1)))
    rows = np.arange(len(y))
    out = {}
    # log p(x1, y) = logsumexp_a [log P(a, y) + l1(a)]; likewise x2 and (x1, x2)
    j1 = logsumexp(l1[:, :, None] + np.log(np.maximum(p.sum(1), tiny))[None], axis=1)  # (N, C)
    j2 = logsumexp(l2[:, :, None] + np.log(np.maximum(p.sum(0), tiny))[None], axis=1)
    j12 = logsumexp((l1[:, :, None, None] + l2[:, None, :, None] + log_p[None]).reshape(len(y), -1, p.shape[2]), 1)
    for name, j in (("1", j1), ("2", j2), ("12", j12)):
        log_px = logsumexp(j, axis=1)
        out["i" + name] = j[rows, y] - log_px - log_py[y]
        if name != "12":
            out["h" + name] = -log_px
    return out
