"""Data: a HELM-like synthetic LM × question matrix (no real LM response matrix is available offline), template
text items whose difficulty grows with their content, and the Swedish SAT human response data shipped in the
``irtorch`` wheel (optional extra ``[real]``; read from the installed package, never downloaded)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amortized_irt.data import ResponseMatrix
from icml25_shared.seed import numpy_rng
from icml25_shared.validate import check_choice, check_float, check_int

__all__ = ["HelmLike", "simulate_helm_like", "template_items", "TEMPLATE_KINDS", "swedish_sat", "draw_responses"]


@dataclass
class HelmLike:
    """A simulated evaluation: responses ``Y`` (with one scenario label per item), true abilities ``theta`` [N]
    and per-scenario abilities ``theta_scenario`` [N, S], difficulties ``b`` [M], item embeddings
    ``embeddings`` [M, d] with b = wᵀe + μ_s + ε, and ``w``."""

    Y: ResponseMatrix
    theta: np.ndarray
    theta_scenario: np.ndarray
    b: np.ndarray
    scenario: np.ndarray
    embeddings: np.ndarray
    w: np.ndarray


def draw_responses(theta: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """0/1 responses y ~ Bernoulli(σ(θ − b)), broadcast over ``theta`` and ``b``."""
    p = 1.0 / (1.0 + np.exp(-(theta - b)))
    return (rng.random(p.shape) < p).astype(np.float64)


def simulate_helm_like(
    n_models: int = 183,
    n_scenarios: int = 22,
    n_items: int = 10_000,
    *,
    takers_per_scenario: tuple[int, int] = (40, 90),
    b_sd: float = 1.5,
    scenario_sd: float = 0.5,
    offset_sd: float = 0.2,
    embed_dim: int = 64,
    r2: float = 0.8,
    seed: int | None = 0,
) -> HelmLike:
    """A HELM-shaped Rasch matrix (the paper's is 183 LMs × 78,712 items over 22 scenarios, each answered by
    40–91 LMs): θ_i ~ N(0, 1) plus an N(0, ``offset_sd``²) offset per scenario, b_j ~ N(μ_s, ``b_sd``²) with
    μ_s ~ N(0, ``scenario_sd``²), scenario-block missingness, and embeddings e_j ~ N(0, I) that explain a fraction
    ``r2`` of the within-scenario variance of b."""
    n_models = check_int("n_models", n_models, min=2)
    n_scenarios = check_int("n_scenarios", n_scenarios, min=1)
    n_items = check_int("n_items", n_items, min=n_scenarios)
    r2 = check_float("r2", r2, min=0.0, max=1.0)
    lo, hi = (check_int("takers_per_scenario[0]", takers_per_scenario[0], min=1), takers_per_scenario[1])
    hi = check_int("takers_per_scenario[1]", hi, min=lo, max=n_models)
    rng = numpy_rng(seed)
    theta = rng.standard_normal(n_models)
    theta_s = theta[:, None] + offset_sd * rng.standard_normal((n_models, n_scenarios))
    scenario = np.sort(np.arange(n_items) % n_scenarios)
    mu = scenario_sd * rng.standard_normal(n_scenarios)
    emb = rng.standard_normal((n_items, embed_dim))
    w = rng.standard_normal(embed_dim)
    w *= b_sd * np.sqrt(r2) / np.linalg.norm(w)
    b = mu[scenario] + emb @ w + b_sd * np.sqrt(1.0 - r2) * rng.standard_normal(n_items)
    rows, cols, vals = [], [], []
    for s in range(n_scenarios):
        takers = np.sort(rng.choice(n_models, size=int(rng.integers(lo, hi + 1)), replace=False))
        items = np.flatnonzero(scenario == s)
        y = draw_responses(theta_s[takers, s][:, None], b[items][None, :], rng)
        rr, cc = np.meshgrid(takers, items, indexing="ij")
        rows.append(rr.ravel()), cols.append(cc.ravel()), vals.append(y.ravel())
    Y = ResponseMatrix(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), (n_models, n_items))
    labels = np.array([f"s{k:02d}" for k in scenario])
    Y.scenario = labels
    # a model that answers no scenario would be an empty row: give it the first scenario's responses
    per_taker, _ = Y.counts()
    if (per_taker == 0).any():
        extra_r, extra_c, extra_v = [], [], []
        items = np.flatnonzero(scenario == 0)
        for i in np.flatnonzero(per_taker == 0):
            extra_r.append(np.full(len(items), i)), extra_c.append(items)
            extra_v.append(draw_responses(theta_s[i, 0], b[items], rng))
        Y = ResponseMatrix(
            np.concatenate([Y.rows, *extra_r]), np.concatenate([Y.cols, *extra_c]),
            np.concatenate([Y.values, *extra_v]), Y.shape, scenario=labels,
        )  # fmt: skip
    return HelmLike(Y, theta, theta_s, b, labels, emb, w)


TEMPLATE_KINDS = ("add", "sub", "mul", "sort", "count", "mod")
_BASE = {"add": -2.0, "sub": -1.5, "mul": 0.0, "sort": -1.0, "count": -0.5, "mod": 0.5}
_SLOPE = {"add": 0.5, "sub": 0.55, "mul": 0.6, "sort": 0.22, "count": 0.18, "mod": 0.5}
_WORDS = ("strawberry", "banana", "mississippi", "bookkeeper", "committee", "parallelogram", "abracadabra", "tennessee")


def _template(kind: str, size: int, rng: np.random.Generator) -> str:
    def num(k: int) -> int:
        return int(rng.integers(10 ** (k - 1), 10**k))

    if kind == "add":
        return f"What is {num(size)} + {num(size)}?"
    if kind == "sub":
        return f"What is {num(size)} - {num(max(1, size - 1))}?"
    if kind == "mul":
        return f"What is {num(size)} × {num(max(1, size - 1))}?"
    if kind == "mod":
        return f"What is the remainder of {num(size)} divided by {int(rng.integers(3, 10))}?"
    if kind == "sort":
        items = ", ".join(str(v) for v in rng.integers(0, 100, size=size))
        return f"Sort the list [{items}] in ascending order."
    word = "".join(rng.choice(list(_WORDS), size=max(1, size // 3)))
    letter = word[int(rng.integers(0, len(word)))]
    return f"How many times does the letter '{letter}' appear in '{word}'?"


def template_items(
    n: int, seed: int | None = 0, *, noise_sd: float = 0.3, kinds: tuple[str, ...] = TEMPLATE_KINDS
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``n`` template questions ("What is 347 × 28?", "Sort the list […]", …) with a true difficulty that grows
    with the number of digits, list length or word length: b = base(kind) + slope(kind) · size + N(0, noise_sd²).
    Returns (texts, b, kind per item)."""
    n = check_int("n", n, min=1)
    noise_sd = check_float("noise_sd", noise_sd, min=0.0)
    for k in kinds:
        check_choice("kinds", k, TEMPLATE_KINDS)
    rng = numpy_rng(seed)
    kind = np.array(kinds)[rng.integers(0, len(kinds), size=n)]
    texts, b = [], np.empty(n)
    for j, k in enumerate(kind):
        size = int(rng.integers(1, 7)) if k in ("add", "sub", "mul", "mod") else int(rng.integers(2, 16))
        texts.append(_template(str(k), size, rng))
        b[j] = _BASE[str(k)] + _SLOPE[str(k)] * size + noise_sd * rng.standard_normal()
    return texts, b, kind


def template_difficulty(kind: str, size: int) -> float:
    """The noiseless difficulty of a template of ``kind`` and ``size`` (used by the template generator)."""
    return _BASE[kind] + _SLOPE[kind] * size


def swedish_sat(omitted: str = "missing") -> tuple[ResponseMatrix, np.ndarray]:
    """The Swedish SAT sample shipped in the ``irtorch`` wheel (5,000 test takers × 160 multiple-choice items: 80
    quantitative, 80 verbal), scored against the answer key: returns (responses, answer key).

    ``omitted="missing"`` (default, the IRT-correct choice) leaves omitted responses unobserved; ``"wrong"`` scores
    them as incorrect (irtorch's ``swedish_sat_binary``). Raises ``ModuleNotFoundError`` without ``irtorch``
    (``pip install icml25-amortized-irt[real]``); nothing is downloaded.
    """
    check_choice("omitted", omitted, ("missing", "wrong"))
    try:
        from irtorch.load_dataset import swedish_sat as _load
    except ModuleNotFoundError as err:  # pragma: no cover - depends on the environment
        raise ModuleNotFoundError(
            "swedish_sat needs the optional irtorch package: pip install icml25-amortized-irt[real]"
        ) from err
    data, key = _load()
    raw = data.numpy().astype(np.float64)
    key = np.asarray(key, dtype=np.float64)
    scored = (raw == key[None, :]).astype(np.float64)
    if omitted == "missing":
        scored[np.isnan(raw)] = np.nan
    labels = np.array(["quantitative"] * 80 + ["verbal"] * 80)
    item_ids = np.array([f"{'q' if k < 80 else 'v'}{k % 80 + 1:02d}" for k in range(160)])
    return ResponseMatrix.from_dense(scored, item_ids=item_ids, scenario=labels, drop_empty=True), key
