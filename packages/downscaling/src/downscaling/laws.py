"""Scaling and downscaling laws: fit-able families, each cited to its source (the paper cites them; it fits none).

- ``chinchilla`` (Hoffmann et al. 2022, approach 3, eq. 2): L(N, D) = E + A N^(−α) + B D^(−β); published fit
  :data:`CHINCHILLA` (E 1.69, A 406.4, B 410.7, α 0.34, β 0.28). With C ≈ 6 N D the compute-optimal split is
  (their eq. 4) G = (αA / (βB))^(1/(α+β)), N*(C) = G (C/6)^(β/(α+β)), D*(C) = (C/6) / N*.
- ``kaplan`` (Kaplan et al. 2020, eq. 1.1): L(N) = (N_c / N)^(α_N), published α_N ≈ 0.076, N_c ≈ 8.8e13.
- ``pruning`` (our parameterisation of the "P² law" family, Chen et al. 2024): L(ρ, D_rec) = L0 (1 + c ρ^γ)
  (1 + D_rec / D0)^(−δ) with ρ the pruning ratio and D_rec the recovery tokens.
- ``data_pruning`` (Sorscher et al. 2022, Sec. 2): L(P) = E + B P^(−β) in the number P of examples kept; the
  exponent β is what a selection rule changes.

Fits minimise the Huber loss (δ = 1e-3) between log predicted and log observed loss from the best points of a
grid of starts, with BFGS (Hoffmann et al. 2022, Sec. 3.3, use L-BFGS; with at most five parameters plain BFGS
is as good and avoids the Fortran L-BFGS-B's threaded BLAS calls), parameters in log space where positive.

Inference-aware accounting (lifetime compute = 6 N D + 2 N S for S served tokens): :func:`break_even` gives the
served tokens S* above which a small model that needed more training becomes cheaper over its life.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from icml25_shared.validate import check_choice, check_float

__all__ = ["CHINCHILLA", "FAMILIES", "KAPLAN", "BreakEven", "Law", "break_even", "fit", "lifetime_flops"]

CHINCHILLA: dict[str, float] = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
KAPLAN: dict[str, float] = {"N_c": 8.8e13, "alpha_N": 0.076}


def lifetime_flops(n: float, d_train: float, served: float) -> float:
    """Training 6 N D plus inference 2 N per served token (Kaplan et al. 2020, Sec. 2.1).

    Args:
        n: parameters N.
        d_train: training tokens D.
        served: tokens served in inference.

    Returns:
        Lifetime FLOPs.
    """
    return 6.0 * n * d_train + 2.0 * n * served


class BreakEven(float):
    """A served-token count S* (a ``float``) with the regime it stands for in ``regime``:

    - ``"crosses"``: the large model is cheaper below S* and the small one above it (S* > 0);
    - ``"small_cheaper_from_start"``: the small one costs no more to train, so it is cheaper at every S (S* = 0:
      no crossing);
    - ``"never"``: the small model cannot reach the large one's quality (S* = inf)."""

    regime: str

    def __new__(cls, value: float, regime: str) -> BreakEven:
        obj = super().__new__(cls, value)
        obj.regime = regime
        return obj

    def __repr__(self) -> str:
        return f"BreakEven({float(self)!r}, regime={self.regime!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (BreakEven, (float(self), self.regime))


def break_even(n_large: float, d_large: float, n_small: float, d_small: float) -> BreakEven:
    """Served tokens S* at which the lifetime compute of a large model (N_L, D_L) equals that of a small one
    (N_S, D_S) of equal quality: S* = (6 N_S D_S − 6 N_L D_L) / (2 (N_L − N_S)). Above S* the small one is cheaper;
    below it the large one is. Returned as a :class:`BreakEven`, whose ``regime`` says which case a value is: 0 is
    ``"small_cheaper_from_start"`` (no crossing), inf is ``"never"`` (``d_small`` infinite: the small model cannot
    reach that quality).

    Args:
        n_large: parameters of the large model.
        d_large: training tokens of the large model.
        n_small: parameters of the small model, below ``n_large``.
        d_small: training tokens the small model needs for the same quality (may be inf).

    Returns:
        S* with its regime.

    Raises:
        ValueError: a non-positive argument, or ``n_large <= n_small``.
    """
    for name, v in (("n_large", n_large), ("d_large", d_large), ("n_small", n_small), ("d_small", d_small)):
        check_float(name, v, min=0.0, min_open=True, allow_inf=name.startswith("d"))
    if not n_large > n_small:
        raise ValueError(f"n_large must exceed n_small, got {n_large} and {n_small}")
    extra_train = 6.0 * n_small * d_small - 6.0 * n_large * d_large
    if math.isinf(extra_train):
        return BreakEven(math.inf, "never")
    if extra_train <= 0:
        return BreakEven(0.0, "small_cheaper_from_start")
    return BreakEven(extra_train / (2.0 * (n_large - n_small)), "crosses")


# --------------------------------------------------------------------------------------------------- families


@dataclass(frozen=True)
class _Family:
    names: tuple[str, ...]
    inputs: tuple[str, ...]
    log_pred: Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor]
    grid: dict[str, Sequence[float]]
    to_public: Callable[[np.ndarray], dict[str, float]]


def _lse(*terms: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(torch.stack(torch.broadcast_tensors(*terms)), 0)


def _chin(th: torch.Tensor, x: dict[str, torch.Tensor]) -> torch.Tensor:
    a, b, e, al, be = th.unbind(-1)
    ln, ld = torch.log(x["N"]), torch.log(x["D"])
    return _lse(a[..., None] - al[..., None] * ln, b[..., None] - be[..., None] * ld, e[..., None])


def _kaplan(th: torch.Tensor, x: dict[str, torch.Tensor]) -> torch.Tensor:
    log_nc, al = th.unbind(-1)
    return al[..., None] * (log_nc[..., None] - torch.log(x["N"]))


def _pruning(th: torch.Tensor, x: dict[str, torch.Tensor]) -> torch.Tensor:
    log_l0, log_c, g, log_d0, dl = th.unbind(-1)
    rho = x["rho"].clamp_min(1e-300)
    bump = torch.log1p(torch.exp(log_c[..., None] + g[..., None] * torch.log(rho)) * (x["rho"] > 0))
    rec = -dl[..., None] * torch.log1p(x["D_rec"] / torch.exp(log_d0[..., None]))
    return log_l0[..., None] + bump + rec


def _data(th: torch.Tensor, x: dict[str, torch.Tensor]) -> torch.Tensor:
    e, b, be = th.unbind(-1)
    lp = torch.log(x["P"])
    return _lse(e[..., None], b[..., None] - be[..., None] * lp)


FAMILIES: dict[str, _Family] = {
    "chinchilla": _Family(
        ("log_A", "log_B", "log_E", "alpha", "beta"), ("N", "D"), _chin,
        {"log_A": (0, 5, 10, 15, 20), "log_B": (0, 5, 10, 15, 20), "log_E": (-1, -0.5, 0, 0.5, 1),
         "alpha": (0.1, 0.3, 0.6, 1.0, 1.5), "beta": (0.1, 0.3, 0.6, 1.0, 1.5)},
        lambda p: {"A": math.exp(p[0]), "B": math.exp(p[1]), "E": math.exp(p[2]), "alpha": p[3], "beta": p[4]},
    ),
    "kaplan": _Family(
        ("log_N_c", "alpha_N"), ("N",), _kaplan,
        {"log_N_c": (5, 15, 25, 35), "alpha_N": (0.02, 0.05, 0.1, 0.3, 0.6)},
        lambda p: {"N_c": math.exp(p[0]), "alpha_N": p[1]},
    ),
    "pruning": _Family(
        ("log_L0", "log_c", "gamma", "log_D0", "delta"), ("rho", "D_rec"), _pruning,
        {"log_L0": (0, 1), "log_c": (-2, 0, 2), "gamma": (0.5, 1, 2, 4), "log_D0": (5, 10, 15),
         "delta": (0.01, 0.1, 0.5)},
        lambda p: {"L0": math.exp(p[0]), "c": math.exp(p[1]), "gamma": p[2], "D0": math.exp(p[3]), "delta": p[4]},
    ),
    "data_pruning": _Family(
        ("log_E", "log_B", "beta"), ("P",), _data,
        {"log_E": (-2, -1, 0, 0.5, 1), "log_B": (0, 2, 5, 10), "beta": (0.1, 0.3, 0.6, 1.0, 2.0)},
        lambda p: {"E": math.exp(p[0]), "B": math.exp(p[1]), "beta": p[2]},
    ),
}  # fmt: skip


def _huber(r: torch.Tensor, delta: float) -> torch.Tensor:
    a = r.abs()
    return torch.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


@dataclass
class Law:
    """A fitted (or published) law of one family; ``params`` in natural units (``A``, ``E``, ``alpha``, ...)."""

    family: str
    params: dict[str, float]
    objective: float = 0.0
    n_runs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def chinchilla(cls) -> Law:
        """Hoffmann et al. (2022)'s published approach-3 fit."""
        return cls("chinchilla", dict(CHINCHILLA))

    def predict(self, **inputs: Any) -> np.ndarray:
        """Loss at the given inputs (``N=, D=`` for chinchilla, ``N=`` for kaplan, ``rho=, D_rec=`` for pruning,
        ``P=`` for data_pruning), broadcast as numpy arrays.

        Args:
            **inputs: the family's inputs, scalars or arrays.

        Returns:
            The predicted loss, broadcast over the inputs.

        Raises:
            ValueError: missing or unknown inputs for the family.
        """
        fam = FAMILIES[self.family]
        missing = [k for k in fam.inputs if k not in inputs]
        if missing or set(inputs) - set(fam.inputs):
            raise ValueError(f"{self.family} law takes inputs {fam.inputs}, got {sorted(inputs)}")
        p = self.params
        x = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
        if self.family == "chinchilla":
            return p["E"] + p["A"] * x["N"] ** -p["alpha"] + p["B"] * x["D"] ** -p["beta"]
        if self.family == "kaplan":
            return (p["N_c"] / x["N"]) ** p["alpha_N"]
        if self.family == "pruning":
            return p["L0"] * (1 + p["c"] * x["rho"] ** p["gamma"]) * (1 + x["D_rec"] / p["D0"]) ** -p["delta"]
        return p["E"] + p["B"] * x["P"] ** -p["beta"]

    def compute_optimal(self, flops: float) -> dict[str, float]:
        """Chinchilla's closed-form compute-optimal split at C = ``flops`` (Hoffmann et al. 2022, eq. 4):
        ``N``, ``D`` and the predicted ``loss``.

        Args:
            flops: compute budget C > 0.

        Returns:
            ``{"N": ..., "D": ..., "loss": ...}``.

        Raises:
            ValueError: the law is not a chinchilla one, or ``flops <= 0``.
        """
        if self.family != "chinchilla":
            raise ValueError(f"compute_optimal needs a chinchilla law, got family={self.family!r}")
        c = check_float("flops", flops, min=0.0, min_open=True)
        p = self.params
        a, b = p["alpha"], p["beta"]
        g = (a * p["A"] / (b * p["B"])) ** (1.0 / (a + b))
        n = g * (c / 6.0) ** (b / (a + b))
        d = c / 6.0 / n
        return {"N": n, "D": d, "loss": float(self.predict(N=n, D=d))}

    def tokens_to_reach(self, n: float, loss: float) -> float:
        """Training tokens a model of ``n`` parameters needs to reach ``loss`` (chinchilla law).

        Args:
            n: parameters.
            loss: the target loss.

        Returns:
            Tokens D, inf when the model never reaches ``loss``.

        Raises:
            ValueError: the law is not a chinchilla one.
        """
        if self.family != "chinchilla":
            raise ValueError(f"tokens_to_reach needs a chinchilla law, got family={self.family!r}")
        p = self.params
        gap = loss - p["E"] - p["A"] * n ** -p["alpha"]
        return math.inf if gap <= 0 else (p["B"] / gap) ** (1.0 / p["beta"])

    def break_even(self, n_large: float, d_large: float, n_small: float) -> BreakEven:
        """Served tokens S* from which a small model trained (by this law) to the large model's loss is cheaper
        over its lifetime (:func:`break_even`); inf when the small model cannot reach that loss.

        Args:
            n_large: parameters of the large model.
            d_large: training tokens of the large model.
            n_small: parameters of the small model.

        Returns:
            S* with its regime.
        """
        target = float(self.predict(N=n_large, D=d_large))
        return break_even(n_large, d_large, n_small, self.tokens_to_reach(n_small, target))


def _runs_table(runs: Any, inputs: tuple[str, ...]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    try:
        import pandas as pd

        df = runs if isinstance(runs, pd.DataFrame) else pd.DataFrame(list(runs))
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"runs must be a DataFrame or a list of dicts with {inputs + ('loss',)}, got {runs!r}"
        ) from err
    need = [*inputs, "loss"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"runs must have columns {need}, missing {missing}")
    arr = {c: df[c].to_numpy(dtype=np.float64) for c in need}
    if not all(np.all(np.isfinite(v)) for v in arr.values()) or np.any(arr["loss"] <= 0):
        raise ValueError("runs must hold finite values and positive losses")
    return {c: arr[c] for c in inputs}, arr["loss"]


def fit(runs: Any, family: str = "chinchilla", *, delta: float = 1e-3, top_starts: int = 4) -> Law:
    """Fit a law of ``family`` to ``runs`` (a DataFrame or list of dicts with the family's inputs and ``loss``),
    module docstring.

    Args:
        runs: a DataFrame or list of dicts with the family's inputs and ``loss``; at least as many runs as the
            family has parameters.
        family: a key of :data:`FAMILIES` (``chinchilla``, ``kaplan``, ``pruning``, ``data_pruning``).
        delta: the Huber loss's threshold on log-loss residuals.
        top_starts: BFGS starts, the best points of the initial grid.

    Returns:
        The fitted :class:`Law`.

    Raises:
        ValueError: an unknown family, malformed runs, or too few of them.
    """
    family = check_choice("family", family, tuple(FAMILIES))
    fam = FAMILIES[family]
    x_np, loss = _runs_table(runs, fam.inputs)
    if len(loss) < len(fam.names):
        raise ValueError(
            f"runs must have at least {len(fam.names)} rows to fit the {family} law's {len(fam.names)} parameters, "
            f"got {len(loss)}"
        )
    from scipy.optimize import minimize

    x = {k: torch.tensor(v, dtype=torch.float64) for k, v in x_np.items()}
    target = torch.log(torch.tensor(loss, dtype=torch.float64))
    grid = torch.tensor(list(itertools.product(*(fam.grid[n] for n in fam.names))), dtype=torch.float64)
    with torch.no_grad():
        obj = _huber(fam.log_pred(grid, x) - target, delta).sum(-1)
    obj = torch.nan_to_num(obj, nan=math.inf)
    starts = grid[torch.argsort(obj)[:top_starts]]

    def f(th: np.ndarray) -> tuple[float, np.ndarray]:
        t = torch.tensor(th, dtype=torch.float64, requires_grad=True)
        val = _huber(fam.log_pred(t, x) - target, delta).sum()
        (g,) = torch.autograd.grad(val, t)
        return val.item(), g.numpy()

    best = None
    for s in starts:
        res = minimize(f, s.numpy(), jac=True, method="BFGS", options={"maxiter": 2000, "gtol": 1e-13})
        if np.isfinite(res.fun) and (best is None or res.fun < best.fun):
            best = res
    assert best is not None
    return Law(family, fam.to_public(best.x), float(best.fun), len(loss), {"raw": best.x.tolist()})
