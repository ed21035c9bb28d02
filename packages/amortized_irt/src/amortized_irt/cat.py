"""Computerized adaptive testing, as in the paper: pick the unasked item of maximum Fisher information at the
current ability estimate, query, score, re-estimate.

:class:`AdaptiveTest` is a plain ask/tell object for one live taker (``next_item`` / ``update``), and
:meth:`AdaptiveTest.run_batch` / :meth:`AdaptiveTest.simulate` run B takers at once: one step is a [B, M]
information matrix with asked items masked to −inf, an argmax, and a grid update of B posteriors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from amortized_irt import functional as irtF
from amortized_irt.config import Stop
from icml25_shared.device import torch_threads
from icml25_shared.seed import numpy_rng
from icml25_shared.validate import check_array, check_choice, check_float, check_int

__all__ = ["ItemBank", "AdaptiveTest", "BatchRun", "SELECTORS", "ESTIMATORS"]

DTYPE = irtF.DTYPE
SELECTORS = ("max_info", "random", "randomesque", "kl")
ESTIMATORS = ("eap", "map", "mle")


@dataclass
class ItemBank:
    """Calibrated items: difficulty ``b``, discrimination ``a`` (default 1), guessing ``c`` (default none) and the
    predictive variance ``var`` of amortized difficulties (default none)."""

    b: np.ndarray
    a: np.ndarray | None = None
    c: np.ndarray | None = None
    var: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.b = check_array("bank.b", self.b, ndim=1, dtype="numeric", finite=True, nonempty=True).astype(np.float64)
        m = len(self.b)
        a = (
            np.ones(m)
            if self.a is None
            else check_array("bank.a", self.a, shape=(m,), dtype="numeric", finite=True).astype(np.float64)
        )
        if (a <= 0).any():
            raise ValueError(f"bank.a must be > 0, got min {a.min():g}")
        self.a = a
        if self.c is not None:
            c = check_array("bank.c", self.c, shape=(m,), dtype="numeric", finite=True).astype(np.float64)
            if ((c < 0) | (c >= 1)).any():
                bad = c[(c < 0) | (c >= 1)][0]
                raise ValueError(f"bank.c must lie in [0, 1), got {bad:g}")
            self.c = c
        if self.var is not None:
            var = check_array("bank.var", self.var, shape=(m,), dtype="numeric", finite=True).astype(np.float64)
            if (var < 0).any():
                raise ValueError("bank.var must be >= 0")
            self.var = var

    @classmethod
    def from_any(cls, bank: Any) -> ItemBank:
        """From an :class:`ItemBank`, a fitted estimator, a dict with "b" (and "a", "c", "var") or an array of b."""
        if isinstance(bank, ItemBank):
            return bank
        if hasattr(bank, "item_params"):
            return cls(**bank.item_params())
        if isinstance(bank, dict):
            return cls(bank["b"], bank.get("a"), bank.get("c"), bank.get("var"))
        return cls(np.asarray(bank))

    def __len__(self) -> int:
        return len(self.b)


@dataclass
class BatchRun:
    """Per-step results of :meth:`AdaptiveTest.run_batch`: ``items`` [B, T] asked, ``theta`` and ``se`` [B, T + 1]
    (column k: after k items; column 0 is the start)."""

    items: np.ndarray
    theta: np.ndarray
    se: np.ndarray


class AdaptiveTest:
    """An adaptive test on a calibrated item bank (the paper's adaptive testing).

    Args:
        bank: a fitted :class:`~amortized_irt.Rasch`/2PL/3PL, an :class:`ItemBank`, a dict or an array of b.
        selector: ``"max_info"`` (argmax_j I_j(θ̂), the paper; for Rasch the item with b closest to θ̂),
            ``"random"``, ``"randomesque"`` (random among the ``k`` most informative), ``"kl"`` (Kullback–Leibler
            information integrated over θ̂ ± 3/√n).
        estimator: ``"eap"`` (default; finite on all-correct prefixes), ``"map"`` or ``"mle"`` (Dodd's step
            rule until the first mixed pattern, as catsim; then Newton, kept in [−6, 6]).
        stop: a :class:`Stop` rule.
        item_uncertainty: ``"ignore"`` (the paper) uses μ_j; ``"marginalize"`` uses
            P(y = 1 | θ) = σ((θ − μ_j)/√(1 + π s_j²/8)) in selection and scoring (needs ``bank.var``).
        prior: (mean, sd) of the ability prior; the mean is also the start θ̂₀ (user-settable, as in HELM).
        k: the randomesque pool size.
        first_item: a fixed first item (the paper's protocol), else the selector picks it.
        seed: seed of the random selectors.
    """

    def __init__(
        self,
        bank: Any,
        selector: Literal["max_info", "random", "randomesque", "kl"] = "max_info",
        estimator: Literal["eap", "map", "mle"] = "eap",
        stop: Stop | None = None,
        item_uncertainty: Literal["ignore", "marginalize"] = "ignore",
        prior: tuple[float, float] = (0.0, 1.0),
        *,
        k: int = 5,
        first_item: int | None = None,
        seed: int | None = 0,
    ) -> None:
        self.bank = ItemBank.from_any(bank)
        self.selector = check_choice("selector", selector, SELECTORS)
        self.estimator = check_choice("estimator", estimator, ESTIMATORS)
        self.stop = Stop() if stop is None else stop
        if not isinstance(self.stop, Stop):
            raise ValueError(f"stop must be a Stop, got {stop!r}")
        self.item_uncertainty = check_choice("item_uncertainty", item_uncertainty, ("ignore", "marginalize"))
        if self.item_uncertainty == "marginalize" and self.bank.var is None:
            raise ValueError("item_uncertainty='marginalize' needs predictive variances (bank.var)")
        self.prior = (check_float("prior[0]", prior[0]), check_float("prior[1]", prior[1], min=0.0, min_open=True))
        self.k = check_int("k", k, min=1)
        m = len(self.bank)
        self.first_item = check_int("first_item", first_item, min=0, max=m - 1, allow_none=True)
        self.seed = seed
        self.grid = torch.linspace(-6.0, 6.0, 201, dtype=DTYPE)
        a = torch.as_tensor(self.bank.a, dtype=DTYPE)
        if self.item_uncertainty == "marginalize":  # probit approximation of E_b σ(a(θ − b)), b ~ N(μ, s²)
            a = a / torch.sqrt(1.0 + math.pi * torch.as_tensor(self.bank.var, dtype=DTYPE) * a * a / 8.0)
        self._a, self._b = a, torch.as_tensor(self.bank.b, dtype=DTYPE)
        self._c = None if self.bank.c is None else torch.as_tensor(self.bank.c, dtype=DTYPE)
        self._logp, self._log1mp = irtF.log_probs(self.grid, self._a, self._b, self._c)  # [M, G]
        self.reset()

    @classmethod
    def paper_protocol(cls, bank: Any, *, first_item: int | None = None, max_items: int = 400) -> AdaptiveTest:
        """The paper's experiment: maximum information, MLE, a fixed first item (default: the item closest to
        θ̂₀ = 0 in information), cap min(400, bank size)."""
        bank = ItemBank.from_any(bank)
        if first_item is None:
            c = None if bank.c is None else torch.as_tensor(bank.c)
            info = irtF.item_information(torch.zeros(()), torch.as_tensor(bank.a), torch.as_tensor(bank.b), c)
            first_item = int(torch.argmax(info))
        return cls(bank, "max_info", "mle", Stop(max_items=min(max_items, len(bank))), first_item=first_item)

    # ------------------------------------------------------------------ ask / tell, one taker
    def reset(self) -> None:
        """Start a new taker."""
        self._asked: list[int] = []
        self._responses: list[float] = []
        self._lp = -0.5 * ((self.grid - self.prior[0]) / self.prior[1]) ** 2
        self._theta, self._se = self.prior[0], self.prior[1]
        self._rng = numpy_rng(self.seed)

    @property
    def theta(self) -> float:
        """Current ability estimate θ̂."""
        return self._theta

    @property
    def se(self) -> float:
        """Current standard error of θ̂."""
        return self._se

    @property
    def asked(self) -> list[int]:
        """Items asked so far, in order."""
        return list(self._asked)

    @property
    def done(self) -> bool:
        """Whether the stop rule is met (or the bank is exhausted)."""
        n = len(self._asked)
        if n >= min(self.stop.max_items, len(self.bank)):
            return True
        if n and self.stop.se is not None and self._se <= self.stop.se:
            return True
        rel = 1.0 - self._se**2 / self.prior[1] ** 2
        return bool(n and self.stop.reliability is not None and rel >= self.stop.reliability)

    def next_item(self) -> int:
        """The next item to ask (``RuntimeError`` once every item of the bank was asked)."""
        if len(self._asked) >= len(self.bank):
            raise RuntimeError(f"the bank is exhausted: all {len(self.bank)} items were asked")
        asked = torch.zeros((1, len(self.bank)), dtype=torch.bool)
        asked[0, self._asked] = True
        theta = torch.tensor([self._theta], dtype=DTYPE)
        n = torch.tensor([len(self._asked)])
        return int(self._select(theta, asked, n, self._rng, first=len(self._asked) == 0)[0])

    def update(self, item: int, correct: Any) -> tuple[float, float]:
        """Record the response of the current taker to ``item``; returns the new (θ̂, SE)."""
        item = check_int("item", item, min=0, max=len(self.bank) - 1)
        if item in self._asked:
            raise ValueError(f"item {item} was already asked")
        if isinstance(correct, bool | np.bool_):
            y = float(correct)
        else:
            y = check_float("correct", correct)
            if y not in (0.0, 1.0):
                raise ValueError(f"correct must be 0/1 or a bool, got {correct!r}")
        self._asked.append(item)
        self._responses.append(y)
        self._lp = self._lp + (self._logp[item] if y else self._log1mp[item])
        asked = torch.zeros((1, len(self.bank)), dtype=torch.bool)
        asked[0, self._asked] = True
        resp = torch.zeros((1, len(self.bank)), dtype=DTYPE)
        resp[0, self._asked] = torch.tensor(self._responses, dtype=DTYPE)
        th, se = self._estimate(self._lp[None], torch.tensor([self._theta], dtype=DTYPE), asked, resp)
        self._theta, self._se = float(th[0]), float(se[0])
        return self._theta, self._se

    # ------------------------------------------------------------------ vectorised core
    def _info(self, theta: torch.Tensor) -> torch.Tensor:
        return irtF.item_information(
            theta[:, None], self._a[None], self._b[None], None if self._c is None else self._c[None]
        )

    def _select(self, theta, asked, n_asked, rng: np.random.Generator, first: bool = False) -> torch.Tensor:
        B, M = asked.shape
        if first and self.first_item is not None:
            return torch.full((B,), self.first_item, dtype=torch.int64)
        if self.selector == "random":
            score = torch.as_tensor(rng.random((B, M)))
        elif self.selector == "kl":
            score = self._kl(theta, n_asked)
        elif self._c is None and bool((self._a == self._a[0]).all()) and self.selector == "max_info":
            score = -((theta[:, None] - self._b[None]) ** 2)  # Rasch: argmax I_j(θ̂) = argmin |b_j − θ̂|
        else:
            score = self._info(theta)
        score = score.masked_fill(asked, -math.inf)
        if self.selector != "randomesque":
            return torch.argmax(score, dim=1)
        kk = min(self.k, M)
        top = torch.topk(score, kk, dim=1).indices
        valid = torch.gather(score, 1, top) > -math.inf
        pick = torch.as_tensor(rng.random((B, kk))).masked_fill(~valid, -1.0).argmax(dim=1)
        return top[torch.arange(B), pick]

    def _kl(self, theta: torch.Tensor, n_asked: torch.Tensor) -> torch.Tensor:
        """KL_j(θ̂) = ∫_{θ̂−δ}^{θ̂+δ} KL(P_j(θ̂) ‖ P_j(θ)) dθ, δ = 3/√max(n, 1) (Chang & Ying), 11-point rule."""
        delta = 3.0 / torch.sqrt(n_asked.clamp_min(1).to(DTYPE))
        pts = theta[:, None] + delta[:, None] * torch.linspace(-1.0, 1.0, 11, dtype=DTYPE)[None]  # [B, P]

        def prob(t: torch.Tensor) -> torch.Tensor:  # [B, P, M]
            p = torch.sigmoid(self._a * (t[..., None] - self._b))
            return p if self._c is None else self._c + (1 - self._c) * p

        p0 = prob(theta[:, None]).clamp(1e-12, 1 - 1e-12)
        p = prob(pts).clamp(1e-12, 1 - 1e-12)
        kl = p0 * torch.log(p0 / p) + (1 - p0) * torch.log((1 - p0) / (1 - p))
        return kl.mean(dim=1) * 2 * delta[:, None]

    def _estimate(self, lp, theta, asked, resp) -> tuple[torch.Tensor, torch.Tensor]:
        """θ̂ and SE of B takers from their grid log-posterior ``lp`` [B, G] (EAP) or by Newton (MAP/MLE)."""
        if self.estimator == "eap":
            post = torch.softmax(lp, dim=1)
            mean = post @ self.grid
            var = (post * (self.grid[None] - mean[:, None]) ** 2).sum(1)
            return mean, var.clamp_min(0).sqrt()
        prior = self.prior if self.estimator == "map" else None
        n = asked.sum(1)
        right = (resp * asked).sum(1)
        mixed = (right > 0) & (right < n)
        th = theta.clone()
        if prior is None:  # Dodd's rule until the first mixed pattern: halfway to the extreme difficulty
            bmax, bmin = float(self._b.max()), float(self._b.min())
            up = (~mixed) & (right == n)
            th = torch.where(up, th + (bmax - th) / 2, th)
            th = torch.where((~mixed) & (right == 0), th - (th - bmin) / 2, th)
            active = mixed
        else:
            active = torch.ones_like(mixed)
        if bool(active.any()):
            th_a = self._newton(th[active], asked[active], resp[active], prior)
            th = th.clone()
            th[active] = th_a
        info = (self._info(th) * asked).sum(1)
        if prior is not None:
            info = info + 1.0 / prior[1] ** 2
        return th, 1.0 / info.clamp_min(1e-300).sqrt()

    def _newton(self, th, asked, resp, prior, iters: int = 50) -> torch.Tensor:
        """Fisher scoring on B takers at once, kept in [−6, 6] (the grid range)."""
        mask = asked.to(DTYPE)
        # start from the best grid point, so the iteration begins in the concave region
        ll = resp @ self._logp + (mask - resp) @ self._log1mp
        if prior is not None:
            ll = ll - 0.5 * ((self.grid[None] - prior[0]) / prior[1]) ** 2
        th = self.grid[torch.argmax(ll, dim=1)]
        for _ in range(iters):
            z = self._a * (th[:, None] - self._b)
            ps = torch.sigmoid(z)
            if self._c is None:
                g = (mask * self._a * (resp - ps)).sum(1)
                h = (mask * self._a**2 * ps * (1 - ps)).sum(1)
            else:
                p = self._c + (1 - self._c) * ps
                dp = (1 - self._c) * self._a * ps * (1 - ps)
                g = (mask * (resp - p) / (p * (1 - p)) * dp).sum(1)
                h = (mask * dp * dp / (p * (1 - p))).sum(1)
            if prior is not None:
                g, h = g - (th - prior[0]) / prior[1] ** 2, h + 1.0 / prior[1] ** 2
            step = (g / h.clamp_min(1e-300)).clamp(-1.0, 1.0)
            th = (th + step).clamp(-6.0, 6.0)
            if float(step.abs().max()) < 1e-10:
                break
        return th

    def run_batch(self, responses: Any, n_items: int | None = None, *, seed: int | None = None) -> BatchRun:
        """Run the test on B takers at once whose answer to every bank item is given in ``responses`` [B, M]
        (0/1); returns the items asked and θ̂, SE after each step (no per-taker early stop: the curves run to
        ``n_items``, default min(stop.max_items, M))."""
        resp_all = check_array("responses", responses, ndim=2, dtype="numeric", finite=True)
        B, M = resp_all.shape
        if len(self.bank) != M:
            raise ValueError(f"responses must have one column per bank item ({len(self.bank)}), got {M}")
        if not np.all((resp_all == 0) | (resp_all == 1)):
            raise ValueError("responses must be 0 or 1")
        T = min(self.stop.max_items, M) if n_items is None else check_int("n_items", n_items, min=1, max=M)
        rng = numpy_rng(self.seed if seed is None else seed)
        resp_all = torch.as_tensor(resp_all, dtype=DTYPE)
        with torch_threads(1):
            asked = torch.zeros((B, M), dtype=torch.bool)
            resp = torch.zeros((B, M), dtype=DTYPE)
            lp = (-0.5 * ((self.grid - self.prior[0]) / self.prior[1]) ** 2).expand(B, -1).clone()
            theta = torch.full((B,), self.prior[0], dtype=DTYPE)
            se = torch.full((B,), self.prior[1], dtype=DTYPE)
            items = np.empty((B, T), dtype=np.int64)
            thetas, ses = [theta.numpy().copy()], [se.numpy().copy()]
            ar = torch.arange(B)
            for t in range(T):
                j = self._select(theta, asked, torch.full((B,), t), rng, first=t == 0)
                y = resp_all[ar, j]
                asked[ar, j] = True
                resp[ar, j] = y
                lp = lp + torch.where(y[:, None] > 0, self._logp[j], self._log1mp[j])
                theta, se = self._estimate(lp, theta, asked, resp)
                items[:, t] = j.numpy()
                thetas.append(theta.numpy().copy())
                ses.append(se.numpy().copy())
        return BatchRun(items, np.stack(thetas, 1), np.stack(ses, 1))

    def draw_responses(self, thetas: Any, seed: int | None = 0) -> np.ndarray:
        """Responses [B, M] of takers with true abilities ``thetas`` drawn from the bank's model (with μ_j)."""
        thetas = check_array("thetas", thetas, ndim=1, dtype="numeric", finite=True).astype(np.float64)
        bank = self.bank
        a = np.ones_like(bank.b) if bank.a is None else bank.a  # never None after ItemBank's __post_init__
        p = 1.0 / (1.0 + np.exp(-a * (thetas[:, None] - bank.b)))
        if bank.c is not None:
            p = bank.c + (1 - bank.c) * p
        return (numpy_rng(seed).random(p.shape) < p).astype(np.float64)

    def simulate(self, thetas: Any, n_splits: int = 5, seed: int | None = 0, *, part: int = 0, fraction: float = 0.5):
        """The paper's simulation: for each of ``n_splits`` Monte-Carlo splits, shuffle the takers, test the
        ``part``-th block of size ``fraction`` (``part=0`` for CAT and ``part=1`` for the random baseline give
        disjoint halves with the same seed), responses drawn from the bank's model. Returns a DataFrame with one
        row per (split, step): rmse, bias (mean θ̂ − θ), sem (mean SE), reliability (empirical ρ)."""
        import pandas as pd

        from amortized_irt.metrics import empirical_reliability

        thetas = check_array("thetas", thetas, ndim=1, dtype="numeric", finite=True, nonempty=True).astype(np.float64)
        n_splits = check_int("n_splits", n_splits, min=1)
        part = check_int("part", part, min=0)
        fraction = check_float("fraction", fraction, min=0.0, max=1.0, min_open=True)
        size = max(1, int(round(fraction * len(thetas))))
        if (part + 1) * size > len(thetas):
            raise ValueError(f"part={part} of size {size} does not fit in {len(thetas)} takers")
        base = 0 if seed is None else int(seed)
        rows = []
        for s in range(n_splits):
            rng = numpy_rng(base + 1000 * s)
            idx = rng.permutation(len(thetas))[part * size : (part + 1) * size]
            th = thetas[idx]
            run = self.run_batch(self.draw_responses(th, seed=base + 1000 * s + 1 + part), seed=base + 1000 * s + 2)
            for k in range(run.theta.shape[1]):
                est, se = run.theta[:, k], run.se[:, k]
                err = est - th
                rows.append(
                    {
                        "split": s,
                        "step": k,
                        "rmse": float(np.sqrt(np.mean(err**2))),
                        "bias": float(np.mean(err)),
                        "sem": float(np.mean(se)),
                        "reliability": empirical_reliability(est, se),
                    }
                )
        return pd.DataFrame(rows)
