"""Rasch, 2PL and 3PL calibration of a sparse response matrix (the paper's model) with a scikit-learn-like
interface: ``fit(Y)``, fitted attributes ending in ``_``, ``ability``, ``predict_proba``, ``score``, ``get_params``,
``save``/``load``.

The default is marginal maximum likelihood by the Bock–Aitkin EM algorithm with θ ~ N(0, 1) on 41 Gauss–Hermite
nodes; the official code's objective (``method="expected_ll"``) and its Gauss–Hermite/Adam path
(``method="gh_adam"``) are options, as is joint maximum likelihood (``method="jml"``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import numpy as np
import torch

from amortized_irt import functional as irtF
from amortized_irt.config import IRTConfig
from amortized_irt.data import ResponseMatrix
from icml25_shared.device import torch_threads
from icml25_shared.validate import check_array, check_bool, check_choice, check_float

__all__ = ["Rasch", "TwoPL", "ThreePL", "to_mirt", "from_mirt", "as_response_matrix"]

DTYPE = irtF.DTYPE


def as_response_matrix(Y: Any, name: str = "Y") -> ResponseMatrix:
    """``Y`` itself when it is a :class:`ResponseMatrix`, else ``ResponseMatrix.from_dense(Y)`` (NaN = missing)."""
    if isinstance(Y, ResponseMatrix):
        return Y
    try:
        return ResponseMatrix.from_dense(Y)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from err


def _item_array(params: dict[str, Any], key: str, ref: np.ndarray | None = None) -> np.ndarray:
    if key not in params:
        raise ValueError(f"params must contain {key!r}, got keys {sorted(params)}")
    arr = check_array(f"params[{key!r}]", params[key], dtype="numeric", finite=True).astype(np.float64)
    arr = np.atleast_1d(arr)
    if ref is not None and arr.shape != ref.shape:
        raise ValueError(f"params[{key!r}] must have shape {ref.shape} like the other parameters, got {arr.shape}")
    return arr


def _check_params(params: dict[str, Any], loc: str, slope: str, guess: str):
    if not isinstance(params, dict):
        raise ValueError(f"params must be a dict of item parameter arrays, got {type(params).__name__}")
    x = _item_array(params, loc)
    a = _item_array(params, slope, x) if params.get(slope) is not None else np.ones_like(x)
    if (a <= 0).any():
        k = int(np.flatnonzero(a <= 0)[0])
        raise ValueError(f"params[{slope!r}] must be > 0 (a discrimination), got {a[k]:g} at item {k}")
    c = _item_array(params, guess, x) if params.get(guess) is not None else None
    if c is not None and ((c < 0) | (c >= 1)).any():
        k = int(np.flatnonzero((c < 0) | (c >= 1))[0])
        raise ValueError(f"params[{guess!r}] must lie in [0, 1) (a guessing probability), got {c[k]:g} at item {k}")
    return x, a, c


def to_mirt(params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Item parameters in mirt's slope–intercept (easiness) convention, logit = a1 θ + d with d = −a b, g = c; the
    official code's Rasch σ(θ + z) has z = d. ``params``: ``b`` (finite), optional ``a`` (> 0) and ``c`` ([0, 1))."""
    b, a, c = _check_params(params, "b", "a", "c")
    out = {"a1": a.copy(), "d": -a * b}
    if c is not None:
        out["g"] = c.copy()
    return out


def from_mirt(params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Inverse of :func:`to_mirt`: b = −d / a1. ``params``: ``d`` (finite), optional ``a1`` (> 0: with a1 = 0 the
    item carries no information and b is undefined) and ``g`` ([0, 1))."""
    d, a, c = _check_params(params, "d", "a1", "g")
    out = {"a": a.copy(), "b": -d / a}
    if c is not None:
        out["c"] = c.copy()
    return out


def _allreduce(t: torch.Tensor, distributed: bool) -> torch.Tensor:
    if distributed:
        import torch.distributed as dist

        dist.all_reduce(t)
    return t


class _IRTModel:
    """Shared implementation of :class:`Rasch`, :class:`TwoPL` and :class:`ThreePL`."""

    _model: ClassVar[Literal["rasch", "2pl", "3pl"]] = "rasch"
    # Rasch: E-step once per group of takers with the same answered items and raw score (a sufficient statistic);
    # False runs it once per taker (the same estimates up to rounding)
    _group_takers: ClassVar[bool] = True

    def __init__(self, config: IRTConfig | None = None, **overrides: Any) -> None:
        base = config.to_dict() if config is not None else {}
        base.update(overrides)
        if base.get("c_prior") is not None:
            base["c_prior"] = tuple(base["c_prior"])
        if "model" in base and base["model"] != self._model:
            raise ValueError(f"model must be {self._model!r} for {type(self).__name__}, got {base['model']!r}")
        base["model"] = self._model
        self.config = IRTConfig(**base)

    # ------------------------------------------------------------------ sklearn-style parameters
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The configuration fields (scikit-learn's ``get_params``)."""
        del deep
        return self.config.to_dict()

    def set_params(self, **params: Any) -> Self:
        """Replace configuration fields (validated again)."""
        self.__init__(self.config, **params)  # type: ignore[misc]
        return self

    def __repr__(self) -> str:
        default = IRTConfig(model=self._model).to_dict()
        changed = {k: v for k, v in self.config.to_dict().items() if k != "model" and v != default[k]}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    # ------------------------------------------------------------------ parameters as tensors
    def _pack(self, b: torch.Tensor, log_a: torch.Tensor | None = None, logit_c: torch.Tensor | None = None):
        if self._model == "rasch":
            return b.clone()
        cols = [log_a if log_a is not None else torch.zeros_like(b), b]
        if self._model == "3pl":
            cols.append(logit_c if logit_c is not None else torch.full_like(b, math.log(0.2 / 0.8)))
        return torch.stack(cols, dim=1)

    def _unpack(self, P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if self._model == "rasch":
            return torch.ones_like(P), P, None
        return torch.exp(P[:, 0]), P[:, 1], (torch.sigmoid(P[:, 2]) if self._model == "3pl" else None)

    def _log_prior(self, P: torch.Tensor) -> float:
        if self._model == "rasch":
            return 0.0
        zero = torch.zeros((P.shape[0], 1), dtype=DTYPE)
        return float(irtF.item_objective(P, zero, zero, torch.zeros(1, dtype=DTYPE), *self._priors()).sum())

    def _design(self, Y: ResponseMatrix, rows: slice | None = None) -> irtF.SparseDesign:
        """The E-step design: grouped by (answered items, raw score) for the Rasch model, one row per taker else."""
        return irtF.SparseDesign.build(Y, rows, group=self._model == "rasch" and self._group_takers)

    def _priors(self) -> tuple[float | None, tuple[float, float] | None]:
        cfg = self.config
        return cfg.log_a_prior_sd, (cfg.c_prior if self._model == "3pl" else None)

    # ------------------------------------------------------------------ fit
    def fit(self, Y: Any, *, distributed: bool = False, init: dict[str, Any] | None = None) -> Self:
        """Calibrate the items of ``Y`` (a :class:`ResponseMatrix` or a dense array with NaN for missing).

        ``distributed=True``: this process holds one contiguous shard of the takers of the same ``Y`` (its rank
        of the default ``torch.distributed`` group); the per-item statistics n[j, q], r[j, q] and the
        log-likelihood are all-reduced every EM iteration, so every rank ends with the same items. ``init``
        optionally gives starting ``b`` (and ``a``, ``c``).
        """
        Y = as_response_matrix(Y)
        distributed = check_bool("distributed", distributed)
        Y.check_nonempty()
        if distributed and self.config.method != "em":
            raise ValueError(f"distributed=True needs method='em', got method={self.config.method!r}")
        if distributed:
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized()):
                raise ValueError(
                    "distributed=True needs an initialised torch.distributed process group (call "
                    "torch.distributed.init_process_group first, one process per shard), got none"
                )
        with torch_threads(1):
            return self._fit(Y, distributed, init)

    def _shard(self, Y: ResponseMatrix, distributed: bool) -> slice | None:
        if not distributed:
            return None
        import torch.distributed as dist

        from icml25_shared.distributed import shard_bounds

        lo, hi = shard_bounds(Y.n_takers, dist.get_rank(), dist.get_world_size())
        return slice(lo, hi)

    def _init_params(self, Y: ResponseMatrix, init: dict[str, Any] | None) -> torch.Tensor:
        m = Y.n_items
        if init is not None and "b" in init:
            b = torch.as_tensor(
                check_array("init['b']", init["b"], shape=(m,), dtype="numeric", finite=True), dtype=DTYPE
            )
        else:  # b_j = −logit(item mean), clipped to [0.02, 0.98]
            cnt = np.bincount(Y.cols, minlength=m)
            right = np.bincount(Y.cols, weights=Y.values, minlength=m)
            mean = np.clip(right / np.maximum(cnt, 1), 0.02, 0.98)
            b = torch.as_tensor(-np.log(mean / (1 - mean)), dtype=DTYPE)
        log_a = logit_c = None
        if init is not None and init.get("a") is not None:
            log_a = torch.log(torch.as_tensor(np.asarray(init["a"], dtype=np.float64)))
        if init is not None and init.get("c") is not None:
            c0 = check_array("init['c']", init["c"], shape=(m,), dtype="numeric", finite=True).astype(np.float64)
            if ((c0 < 0) | (c0 >= 1)).any():
                raise ValueError(f"init['c'] must lie in [0, 1), got {c0[(c0 < 0) | (c0 >= 1)][0]:g}")
            cc = torch.as_tensor(c0)
            logit_c = torch.log(cc / (1 - cc))
        return self._pack(b, log_a, logit_c)

    def _fit(self, Y: ResponseMatrix, distributed: bool, init: dict[str, Any] | None) -> Self:
        cfg = self.config
        P = self._init_params(Y, init)
        self.prior_sd_ = cfg.prior_sd
        design = self._design(Y, self._shard(Y, distributed))  # this process's takers (all of them unless sharded)
        if cfg.method == "em":
            P = self._em(design, P, distributed)
        elif cfg.method == "jml":
            P = self._jml(Y, P)
        elif cfg.method == "expected_ll":
            P = self._expected_ll(Y, P)
        else:
            P = self._gh_adam(design, P)
        self._set_params(P)
        self.item_ids_ = Y.item_ids
        self.n_items_ = Y.n_items
        a, b, c = self._tensors()
        theta, se = irtF.eap(design, a, b, c, 0.0, self.prior_sd_)
        if distributed:
            from icml25_shared.distributed import all_gather_uneven

            theta = all_gather_uneven(theta, Y.n_takers, 0)
            se = all_gather_uneven(se, Y.n_takers, 0)
        self.theta_, self.theta_se_ = theta.numpy(), se.numpy()
        self.taker_ids_ = Y.taker_ids
        return self

    def _set_params(self, P: torch.Tensor) -> None:
        a, b, c = self._unpack(P)
        self.difficulty_ = b.detach().numpy().copy()
        self.at_bound_ = np.abs(self.difficulty_) >= self.config.b_bound  # no finite MML difficulty (see b_bound)
        self.discrimination_ = a.detach().numpy().copy()
        self.guessing_ = None if c is None else c.detach().numpy().copy()

    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        self._check_fitted()
        a = torch.as_tensor(self.discrimination_, dtype=DTYPE)
        b = torch.as_tensor(self.difficulty_, dtype=DTYPE)
        c = None if self.guessing_ is None else torch.as_tensor(self.guessing_, dtype=DTYPE)
        return a, b, c

    def _check_fitted(self) -> None:
        if not hasattr(self, "difficulty_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted yet: call fit(Y) first")

    def _em(self, design: irtF.SparseDesign, P: torch.Tensor, distributed: bool) -> torch.Tensor:
        """Bock–Aitkin EM: E-step posterior on the nodes, item statistics n, r, item-parallel M-step."""
        cfg = self.config
        if cfg.estimate_prior_sd:  # fixed rectangular grid; the prior's weights move with σ_θ (mirt's scheme)
            x = torch.linspace(-6.0, 6.0, max(cfg.n_quad, 61), dtype=DTYPE)
        else:
            x, log_w = irtF.gauss_hermite(cfg.n_quad, cfg.prior_sd)
        sd = cfg.prior_sd
        trace: list[float] = []
        self.converged_ = False
        change, P_prev, sd_prev = math.inf, P.clone(), sd
        for it in range(cfg.max_iter):
            if cfg.estimate_prior_sd:
                log_w = torch.log_softmax(-0.5 * (x / sd) ** 2, dim=0)
            a, b, c = self._unpack(P)
            logp, log1mp = irtF.log_probs(x, a, b, c)
            post, log_m = irtF.e_step(design, logp, log1mp, log_w)
            ll = float(_allreduce(design.total(log_m).reshape(1), distributed)[0]) + self._log_prior(P)
            trace.append(ll)
            if it > 0:  # the largest change of any parameter in the last EM iteration (identical on every rank)
                change = float((P - P_prev).abs().max())
                if cfg.estimate_prior_sd:
                    change = max(change, abs(sd - sd_prev))
                if change < cfg.tol:
                    self.converged_ = True
                    break
            P_prev, sd_prev = P.clone(), sd
            n, r = design.item_stats(post)
            stats = _allreduce(torch.stack([n, r]), distributed)
            n, r = stats[0], stats[1]
            if cfg.estimate_prior_sd:  # closed-form σ_θ² = E[θ²] under the posterior (mean fixed at 0)
                mom = _allreduce(
                    torch.stack([design.total(post) @ x**2, torch.tensor(float(design.n_takers), dtype=DTYPE)]),
                    distributed,
                )
                sd = float(torch.sqrt(mom[0] / mom[1]))
            if self._model == "rasch":
                P = irtF.rasch_m_step(P, n, r, x, cfg.m_steps).clamp(-cfg.b_bound, cfg.b_bound)
            else:
                priors = self._priors()
                P = irtF.newton_m_step(P, _rows_objective(n, r, x, priors), cfg.m_steps)
                P[:, 1] = P[:, 1].clamp(-cfg.b_bound, cfg.b_bound)
        self.loglik_trace_ = np.asarray(trace)
        self.n_iter_ = len(trace)
        self.final_change_ = change
        self.prior_sd_ = sd
        return P

    def _jml(self, Y: ResponseMatrix, P: torch.Tensor) -> torch.Tensor:
        """Joint ML: alternating 1-D Newton steps on θ (clipped to ±6 for perfect patterns) and on the items,
        with mean θ = 0 (inconsistent for a fixed number of items; a fast initialiser)."""
        if self._model != "rasch":
            raise ValueError(f"method='jml' supports model='rasch' only, got model={self._model!r}")
        cfg = self.config
        rows, cols = torch.from_numpy(Y.rows), torch.from_numpy(Y.cols)
        y = torch.as_tensor(Y.values, dtype=DTYPE)
        theta = torch.zeros(Y.n_takers, dtype=DTYPE)
        b = P.clone()
        trace = []
        self.converged_ = False
        for _ in range(cfg.max_iter):
            p = torch.sigmoid(theta[rows] - b[cols])
            g = torch.zeros_like(theta).index_add_(0, rows, y - p)
            h = torch.zeros_like(theta).index_add_(0, rows, p * (1 - p))
            theta = (theta + g / h.clamp_min(1e-12)).clamp(-6.0, 6.0)
            theta = theta - theta.mean()
            p = torch.sigmoid(theta[rows] - b[cols])
            g = torch.zeros_like(b).index_add_(0, cols, y - p)
            h = torch.zeros_like(b).index_add_(0, cols, p * (1 - p))
            step = -g / h.clamp_min(1e-12)
            b = (b + step).clamp(-8.0, 8.0)
            z = theta[rows] - b[cols]
            trace.append(
                float((y * torch.nn.functional.logsigmoid(z) + (1 - y) * torch.nn.functional.logsigmoid(-z)).sum())
            )
            self.final_change_ = float(step.abs().max())
            if self.final_change_ < cfg.tol:
                self.converged_ = True
                break
        self.loglik_trace_ = np.asarray(trace)
        self.n_iter_ = len(trace)
        return b

    def _expected_ll(self, Y: ResponseMatrix, P: torch.Tensor) -> torch.Tensor:
        """The official code's objective: the mean log-likelihood under S = 150 nuisance abilities drawn once from
        N(0, σ_θ²), minimised over the item parameters by L-BFGS (lr 0.1, 20 inner iterations, history 10,
        strong Wolfe). By Jensen's inequality it lower-bounds the marginal likelihood and shrinks |b| towards 0."""
        cfg = self.config
        gen = torch.Generator().manual_seed(0 if cfg.seed is None else cfg.seed)
        thetas = cfg.prior_sd * torch.randn(150, Y.n_takers, generator=gen, dtype=DTYPE)
        rows, cols = torch.from_numpy(Y.rows), torch.from_numpy(Y.cols)
        y = torch.as_tensor(Y.values, dtype=DTYPE)
        P = P.clone().requires_grad_(True)
        opt = torch.optim.LBFGS([P], lr=0.1, max_iter=20, history_size=10, line_search_fn="strong_wolfe")
        priors = self._priors()

        def closure() -> torch.Tensor:
            opt.zero_grad()
            a, b, c = self._unpack(P)
            total = torch.zeros((), dtype=DTYPE)
            for chunk in thetas.split(10):  # never materialise S × nnz at once
                z = a[cols] * (chunk[:, rows] - b[cols])
                if c is None:
                    ll = y * torch.nn.functional.logsigmoid(z) + (1 - y) * torch.nn.functional.logsigmoid(-z)
                else:
                    p = c[cols] + (1 - c[cols]) * torch.sigmoid(z)
                    ll = y * torch.log(p) + (1 - y) * torch.log1p(-p)
                part = -ll.sum() / (len(y) * thetas.shape[0])
                part.backward()
                total = total + part.detach()
            if self._model != "rasch":
                zero = torch.zeros((P.shape[0], 1), dtype=DTYPE)
                pr = -irtF.item_objective(P, zero, zero, torch.zeros(1, dtype=DTYPE), *priors).sum() / len(y)
                pr.backward()
                total = total + pr.detach()
            return total

        trace, prev = [], None
        self.converged_ = False
        for _ in range(min(cfg.max_iter, 100)):
            before = P.detach().clone()
            loss = float(opt.step(closure))
            trace.append(-loss)
            grad = P.grad.detach().abs().max() if P.grad is not None else torch.tensor(0.0)
            small = prev is not None and abs(prev - loss) < 1e-5
            self.final_change_ = float((P.detach() - before).abs().max())
            if small and self.final_change_ < 1e-5 and float(grad) < 1e-5:
                self.converged_ = True
                break
            prev = loss
        self.loglik_trace_ = np.asarray(trace)
        self.n_iter_ = len(trace)
        return P.detach()

    def _gh_adam(self, design: irtF.SparseDesign, P: torch.Tensor) -> torch.Tensor:
        """The official code's second path: the Gauss–Hermite marginal likelihood maximised by Adam (lr 5e-3). The
        gradient is the EM one (Fisher's identity: ∇ log m = ∇Q at the current posterior). The official code's
        nodes carry a √2 factor (an N(0, 2) prior); here the prior is N(0, prior_sd²)."""
        cfg = self.config
        x, log_w = irtF.gauss_hermite(cfg.n_quad, cfg.prior_sd)
        P = P.clone()
        opt = torch.optim.Adam([P], lr=5e-3, maximize=True)
        priors = self._priors()
        trace = []
        self.converged_ = False
        change, P_prev = math.inf, P.clone()
        for it in range(cfg.max_iter):
            a, b, c = self._unpack(P)
            logp, log1mp = irtF.log_probs(x, a, b, c)
            post, log_m = irtF.e_step(design, logp, log1mp, log_w)
            trace.append(float(design.total(log_m)) + self._log_prior(P))
            if it > 0:
                change = float((P - P_prev).abs().max())
                if change < cfg.tol:
                    self.converged_ = True
                    break
            P_prev = P.clone()
            n, r = design.item_stats(post)
            if self._model == "rasch":
                grad = -(r - n * torch.sigmoid(x[None, :] - P[:, None])).sum(1)
            else:
                fn = _rows_objective(n, r, x, priors)
                grad, _ = irtF._grad_hess(lambda Q, fn=fn: fn(Q, None), P)
            P.grad = grad
            opt.step()
        self.loglik_trace_ = np.asarray(trace)
        self.n_iter_ = len(trace)
        self.final_change_ = change
        return P.detach()

    # ------------------------------------------------------------------ after fitting
    def item_params(self) -> dict[str, np.ndarray | None]:
        """{"a": discrimination, "b": difficulty, "c": guessing or None}."""
        self._check_fitted()
        return {"a": self.discrimination_, "b": self.difficulty_, "c": self.guessing_}

    def _check_items(self, Y: ResponseMatrix) -> None:
        self._check_fitted()
        same = Y.n_items == self.n_items_ and np.array_equal(np.asarray(Y.item_ids), np.asarray(self.item_ids_))
        if not same:
            raise ValueError(
                f"Y has {Y.n_items} items that differ from the fitted bank of {self.n_items_} items "
                "(item_ids must match in order); use Y.subset_items to align"
            )

    def ability(
        self,
        Y: Any,
        method: Literal["eap", "map", "mle"] = "eap",
        by: Any = None,
        prior: tuple[float, float] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Score takers on the fitted items: (θ̂, SE, flag).

        ``"eap"``: posterior mean and SD on 201 points over [−6, 6] (finite for every pattern; the prior mean with no
        items). ``"map"``: posterior mode, SE = 1/√(I(θ̂) + 1/σ²). ``"mle"``: ±inf with ``flag = 1`` for
        all-correct/all-wrong patterns. ``prior`` defaults to (0, fitted σ_θ). ``by``: one label per item (or
        ``"scenario"`` for ``Y.scenario``): a separate θ per group (the paper's per-scenario Rasch), arrays of
        shape [N, G] with the groups in ``np.unique(by)`` order. Flags: 0 ok, 1 infinite MLE, 2 no items,
        3 not converged.
        """
        Y = as_response_matrix(Y)
        check_choice("method", method, ("eap", "map", "mle"))
        self._check_items(Y)
        if prior is None:
            prior = (0.0, float(self.prior_sd_))
        else:
            if isinstance(prior, (str, bytes)) or np.ndim(prior) != 1 or len(prior) != 2:
                raise ValueError(f"prior must be a pair (mean, sd) or None, got {prior!r}")
            prior = (check_float("prior[0]", prior[0]), check_float("prior[1]", prior[1], min=0.0, min_open=True))
        if by is not None:
            labels = Y.scenario if isinstance(by, str) and by == "scenario" else np.asarray(by)
            if labels is None or len(labels) != Y.n_items:
                raise ValueError(f"by must give one label per item ({Y.n_items}), got {by!r}")
            groups = np.unique(labels)
            outs = [self._ability_subset(Y, np.flatnonzero(labels == g), method, prior) for g in groups]
            return tuple(np.stack([o[k] for o in outs], axis=1) for k in range(3))  # type: ignore[return-value]
        return self._ability_subset(Y, None, method, prior)

    def _ability_subset(self, Y: ResponseMatrix, items: np.ndarray | None, method: str, prior):
        a, b, c = self._tensors()
        if items is not None:
            Y = Y.subset_items(items)
            idx = torch.from_numpy(items)
            a, b, c = a[idx], b[idx], (None if c is None else c[idx])
        with torch_threads(1):
            if method == "eap":
                theta, se = irtF.eap(self._design(Y), a, b, c, *prior)
                counts = np.bincount(Y.rows, minlength=Y.n_takers)
                flag = np.where(counts == 0, irtF.FLAG_NO_ITEMS, irtF.FLAG_OK)
                return theta.numpy(), se.numpy(), flag
            theta, se, flag = irtF.theta_newton(Y, a, b, c, prior if method == "map" else None)
            return theta.numpy(), se.numpy(), flag.numpy()

    def predict_proba(self, Y: Any, theta: Any = None) -> np.ndarray:
        """P(y = 1) at each observed entry of ``Y`` (in ``Y``'s entry order), with abilities ``theta`` (default:
        the EAP abilities of the fitted takers, ``theta_``)."""
        Y = as_response_matrix(Y)
        self._check_items(Y)
        if theta is None:
            if Y.n_takers != len(self.theta_):
                raise ValueError(f"theta is needed: Y has {Y.n_takers} takers, the fit had {len(self.theta_)}")
            theta = self.theta_
        theta = check_array("theta", theta, shape=(Y.n_takers,), dtype="numeric").astype(np.float64)
        at, bt, ct = self._tensors()
        a, b, c = at.numpy(), bt.numpy(), (None if ct is None else ct.numpy())
        z = a[Y.cols] * (theta[Y.rows] - b[Y.cols])
        p = 1.0 / (1.0 + np.exp(-z))
        return p if c is None else c[Y.cols] + (1 - c[Y.cols]) * p

    def score(self, Y: Any, metric: Literal["auc", "ctt_corr", "nll"] = "auc", theta: Any = None) -> float:
        """Held-out fit of ``Y``'s observed entries: ``"auc"``, ``"ctt_corr"`` (Pearson over takers of mean
        predicted vs observed score) or ``"nll"`` (mean negative log-likelihood)."""
        from amortized_irt import metrics

        check_choice("metric", metric, ("auc", "ctt_corr", "nll"))
        Y = as_response_matrix(Y)
        p = self.predict_proba(Y, theta)
        if metric == "auc":
            return metrics.auc(p, Y.values)
        if metric == "ctt_corr":
            return metrics.ctt_correlation(p, Y)
        pc = np.clip(p, 1e-15, 1 - 1e-15)
        return float(-np.mean(Y.values * np.log(pc) + (1 - Y.values) * np.log1p(-pc)))

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the fitted items, abilities and configuration to one safetensors file (JSON in its metadata)."""
        from safetensors.numpy import save_file

        self._check_fitted()
        tensors = {"difficulty": self.difficulty_, "discrimination": self.discrimination_, "theta": self.theta_}
        tensors["theta_se"] = self.theta_se_
        if self.guessing_ is not None:
            tensors["guessing"] = self.guessing_
        meta = {
            "class": type(self).__name__,
            "config": json.dumps(self.config.to_dict()),
            "prior_sd": repr(float(self.prior_sd_)),
            "item_ids": json.dumps(np.asarray(self.item_ids_).tolist()),
            "taker_ids": json.dumps(np.asarray(self.taker_ids_).tolist()),
        }
        path = Path(path)
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path), metadata=meta)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read a file written by :meth:`save` (the class must match)."""
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as fh:
            meta = fh.metadata()
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open is not a dict)
        if meta.get("class") != cls.__name__:
            raise ValueError(f"{path} holds a {meta.get('class')!r}, not a {cls.__name__!r}")
        obj = cls(**{k: v for k, v in json.loads(meta["config"]).items() if k != "model"})
        obj.difficulty_, obj.discrimination_ = tensors["difficulty"], tensors["discrimination"]
        obj.guessing_ = tensors.get("guessing")
        obj.theta_, obj.theta_se_ = tensors["theta"], tensors["theta_se"]
        obj.prior_sd_ = float(meta["prior_sd"])
        obj.item_ids_ = np.asarray(json.loads(meta["item_ids"]))
        obj.taker_ids_ = np.asarray(json.loads(meta["taker_ids"]))
        obj.n_items_ = len(obj.difficulty_)
        return obj

    def __exit__(self, *exc: object) -> None:
        return None


def _rows_objective(n: torch.Tensor, r: torch.Tensor, x: torch.Tensor, priors):
    def fn(Q: torch.Tensor, idx: torch.Tensor | None) -> torch.Tensor:
        if idx is None:
            return irtF.item_objective(Q, n, r, x, *priors)
        return irtF.item_objective(Q, n[idx], r[idx], x, *priors)

    return fn


class Rasch(_IRTModel):
    """Rasch / 1PL model P(y_ij = 1) = σ(θ_i − b_j) (the paper's model), θ ~ N(0, σ_θ²)."""

    _model = "rasch"


class TwoPL(_IRTModel):
    """2PL model σ(a_j (θ_i − b_j)), a_j > 0, with an N(0, 0.5²) prior on log a_j by default."""

    _model = "2pl"


class ThreePL(_IRTModel):
    """3PL model c_j + (1 − c_j) σ(a_j (θ_i − b_j)), c_j ∈ [0, 1), Beta(5, 17) prior on c_j by default."""

    _model = "3pl"
