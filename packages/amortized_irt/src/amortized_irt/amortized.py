"""Amortized calibration (the paper's core): a predictor f_φ maps item content (an embedding e_j of
the question text) to its difficulty, b_j = f_φ(e_j), so a new item is calibrated by one forward pass instead of
~N LM responses.

- ``regressor="linear"`` (the official code's default): b_j = wᵀe_j + c with an L2 penalty λ‖w‖²/2.
- ``regressor="mlp"``: ELU hidden layers (``official_mlp=True``: no nonlinearity between the last two layers, as
  the official code).
- ``regressor="gp"`` (package extension): a gpytorch exact GP (sparse variational above 5,000 items) whose
  predictive variance feeds the adaptive test (``AdaptiveTest(item_uncertainty="marginalize")``).

``mode="joint"`` (default, the paper's framing) fits φ inside EM: the E-step is the posterior over θ given Y and
b = f_φ(e); for the linear predictor the M-step is a Newton step in (w, c) on the expected complete-data
log-likelihood Σ_{j,q} [r_jq log σ(x_q − b_j) + (n_jq − r_jq) log σ(b_j − x_q)]; for the MLP and the GP the M-step
alternates: fit f to the current b̂, then a MAP-EM step with the prior b_j ~ N(f(e_j), s_j²).
``mode="two_stage"`` calibrates b̂ by MML-EM and regresses it on e.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast, overload

import numpy as np
import torch

from amortized_irt import functional as irtF
from amortized_irt.data import ResponseMatrix
from amortized_irt.estimators import Rasch, as_response_matrix
from icml25_shared.device import torch_threads
from icml25_shared.validate import check_array, check_bool, check_choice, check_float, check_int

__all__ = ["AmortizedDifficulty", "HashingFeaturizer", "TransformersFeaturizer"]

DTYPE = irtF.DTYPE


class HashingFeaturizer:
    """Offline text featurizer: character 1–4-gram counts hashed (CRC-32) into 2^12 features, then a truncated
    SVD to ``n_components`` dimensions fitted on the first texts seen (the role of scikit-learn's
    ``HashingVectorizer`` + ``TruncatedSVD``, written with numpy/scipy so that it needs no scikit-learn)."""

    def __init__(
        self, n_components: int = 64, ngram_range: tuple[int, int] = (1, 4), n_features: int = 2**12, seed: int = 0
    ):
        self.n_components = check_int("n_components", n_components, min=1)
        lo = check_int("ngram_range[0]", ngram_range[0], min=1)
        self.ngram_range = (lo, check_int("ngram_range[1]", ngram_range[1], min=lo))
        self.n_features = check_int("n_features", n_features, min=2)
        self.seed = check_int("seed", seed)
        self.components_: np.ndarray | None = None

    def counts(self, texts: Sequence[str]):
        """Sparse [len(texts), n_features] matrix of hashed character n-gram counts."""
        import zlib

        import scipy.sparse as sp

        rows, cols = [], []
        lo, hi = self.ngram_range
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"texts must be strings, got {type(text).__name__} at position {i}")
            for n in range(lo, hi + 1):
                for k in range(len(text) - n + 1):
                    cols.append(zlib.crc32(text[k : k + n].encode("utf-8")) % self.n_features)
                    rows.append(i)
        data = np.ones(len(rows))
        return sp.csr_matrix((data, (rows, cols)), shape=(len(texts), self.n_features))

    def fit(self, texts: Sequence[str]) -> HashingFeaturizer:
        """Fit the SVD (right singular vectors of the count matrix) on ``texts``."""
        from scipy.sparse.linalg import svds

        X = self.counts(texts)
        n_rows, n_cols = cast(tuple[int, int], X.shape)
        k = min(self.n_components, min(n_rows, n_cols) - 1)
        v0 = np.random.default_rng(self.seed).standard_normal(min(n_rows, n_cols))
        _, s, vt = cast(Any, svds(X, k=k, v0=v0, solver="arpack"))  # (u, s, vt): the stubs allow None
        order = np.argsort(-s)
        vt = vt[order]
        vt *= np.sign(vt[np.arange(k), np.abs(vt).argmax(1)])[:, None]  # a deterministic sign
        self.components_ = vt
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Features [len(texts), n_components] (fits the SVD on the first call)."""
        if isinstance(texts, str):
            raise ValueError("texts must be a sequence of strings, got one string")
        texts = list(texts)
        if self.components_ is None:
            self.fit(texts)
        assert self.components_ is not None
        return np.asarray(self.counts(texts) @ self.components_.T)


class TransformersFeaturizer:
    """Item content -> a hidden state of a ``transformers`` model, pooled over the question's tokens: the paper's
    embeddings are the last hidden state of Llama-3.1-8B-Instruct or Mistral-7B-Instruct-v0.3 (Sec. 3); any local
    model works (``[hf]`` extra; nothing is downloaded).

    Args:
        model: a ``transformers.PreTrainedModel`` (any head: the hidden states are read with
            ``output_hidden_states=True``) or a local directory loaded with ``AutoModel.from_pretrained(...,
            local_files_only=True)``.
        tokenizer: a ``transformers`` tokenizer (anything called as ``tokenizer(text, truncation=True,
            max_length=...)`` returning ``input_ids``); default ``AutoTokenizer`` from the same local directory.
        layer: index into ``hidden_states`` (``-1``: the last layer, the paper's choice).
        pooling: ``"mean"`` over the question's tokens (default) or ``"last"`` (the final token's state).
        batch_size: texts per forward pass; texts are batched by length (right padding, attention mask), so the
            result does not depend on ``batch_size`` beyond float rounding.
        max_length: tokens kept per text (truncation).
        device: where the model runs (default: the model's own device).
        n_threads: torch threads while featurizing (default 1, restored after; ``None`` leaves torch's setting —
            raise it for a real 7–8B model on CPU).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        layer: int = -1,
        pooling: Literal["mean", "last"] = "mean",
        batch_size: int = 16,
        max_length: int = 512,
        device: str | torch.device | None = None,
        n_threads: int | None = 1,
    ) -> None:
        if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
            from transformers import AutoModel, AutoTokenizer

            path = model.decode() if isinstance(model, bytes) else model
            model = AutoModel.from_pretrained(path, local_files_only=True)
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model must be a transformers model or a local directory, got {type(model).__name__}")
        if tokenizer is None or not callable(tokenizer):
            raise ValueError(f"tokenizer must be a callable transformers tokenizer, got {tokenizer!r}")
        self.model, self.tokenizer = model, cast(Any, tokenizer)
        self.layer = check_int("layer", layer)
        self.pooling = check_choice("pooling", pooling, ("mean", "last"))
        self.batch_size = check_int("batch_size", batch_size, min=1)
        self.max_length = check_int("max_length", max_length, min=1)
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.n_threads = None if n_threads is None else check_int("n_threads", n_threads, min=1)

    def _ids(self, texts: list[str]) -> list[list[int]]:
        out = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"texts must be strings, got {type(text).__name__} at position {i}")
            ids = list(self.tokenizer(text, truncation=True, max_length=self.max_length)["input_ids"])
            if not ids:
                raise ValueError(f"texts[{i}] = {text!r} encodes to no tokens; its embedding is undefined")
            out.append(ids)
        return out

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings [len(texts), hidden] (float64), in the order of ``texts``."""
        if isinstance(texts, str):
            raise ValueError("texts must be a sequence of strings, got one string")
        texts = list(texts)
        if not texts:
            raise ValueError("texts must not be empty")
        ids = self._ids(texts)
        pad = getattr(self.tokenizer, "pad_token_id", None) or 0
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # length buckets: little padding
        out: list[np.ndarray | None] = [None] * len(ids)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch_threads(self.n_threads), torch.inference_mode():
                for start in range(0, len(order), self.batch_size):
                    rows = order[start : start + self.batch_size]
                    width = max(len(ids[i]) for i in rows)
                    x = torch.full((len(rows), width), pad, dtype=torch.long)
                    mask = torch.zeros((len(rows), width), dtype=torch.long)
                    for r, i in enumerate(rows):
                        x[r, : len(ids[i])] = torch.as_tensor(ids[i])
                        mask[r, : len(ids[i])] = 1
                    x, mask = x.to(self.device), mask.to(self.device)
                    h = self.model(input_ids=x, attention_mask=mask, output_hidden_states=True).hidden_states
                    h = h[self.layer].double()
                    if self.pooling == "mean":
                        m = mask.unsqueeze(-1).to(h.dtype)
                        pooled = (h * m).sum(1) / m.sum(1)
                    else:
                        pooled = h[torch.arange(len(rows), device=h.device), mask.sum(1) - 1]
                    for r, i in enumerate(rows):
                        out[i] = pooled[r].cpu().numpy()
        finally:
            self.model.train(was_training)
        assert all(o is not None for o in out)  # every text position was filled by its length bucket
        return np.stack(cast(list[np.ndarray], out))


def _gp_classes():
    with warnings.catch_warnings():  # linear_operator's import-time torch.jit.script deprecation
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        import gpytorch

    class _Exact(gpytorch.models.ExactGP):
        def __init__(self, x, y, likelihood):
            super().__init__(x, y, likelihood)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            mean: Any = self.mean_module(x)  # a tensor (gpytorch's stubs type module calls as a union)
            return gpytorch.distributions.MultivariateNormal(mean, self.covar_module(x))

    class _Sparse(gpytorch.models.ApproximateGP):
        def __init__(self, inducing):
            dist = gpytorch.variational.CholeskyVariationalDistribution(inducing.shape[0])
            strat = gpytorch.variational.VariationalStrategy(self, inducing, dist, learn_inducing_locations=True)
            super().__init__(strat)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            mean: Any = self.mean_module(x)  # a tensor (gpytorch's stubs type module calls as a union)
            return gpytorch.distributions.MultivariateNormal(mean, self.covar_module(x))

    return gpytorch, _Exact, _Sparse


def median_distance(X: torch.Tensor, max_rows: int = 1000, seed: int = 0) -> float:
    """Median Euclidean distance between distinct rows of ``X`` (on at most ``max_rows`` rows drawn with ``seed``):
    the RBF lengthscale at which kernel entries between typical items are exp(-1/2) rather than ≈ 0."""
    if X.shape[0] > max_rows:
        idx = np.random.default_rng(seed).choice(X.shape[0], max_rows, replace=False)
        X = X[torch.as_tensor(idx)]
    D = torch.cdist(X, X)
    iu = torch.triu_indices(X.shape[0], X.shape[0], offset=1)
    dist = D[iu[0], iu[1]]
    dist = dist[dist > 0]
    return float(dist.median()) if len(dist) else 1.0


def _init_gp_hypers(model: Any, Xt: torch.Tensor, bt: torch.Tensor, seed: int) -> None:
    """Start the GP where its gradients are informative: the RBF lengthscale at the median pairwise distance of
    the (standardised) inputs, the output scale at the variance of the targets, the constant mean at their mean.
    gpytorch's default lengthscale (ln 2 ≈ 0.69) is far below typical distances of standardised inputs in more
    than a few dimensions (≈ √(2d): 8 at d = 32, 39 at d = 768), where every off-diagonal kernel entry underflows
    to ≈ 0, the marginal likelihood is flat in the lengthscale and the GP predicts the prior mean everywhere."""
    model.covar_module.base_kernel.lengthscale = median_distance(Xt, seed=seed)
    model.covar_module.outputscale = max(float(bt.var()), 1e-4) if len(bt) > 1 else 1.0
    model.mean_module.constant.data.fill_(float(bt.mean()))


class AmortizedDifficulty:
    """Predict item difficulty from content (the paper's amortized calibration).

    Args:
        regressor: ``"linear"`` (default), ``"mlp"`` or ``"gp"``.
        mode: ``"joint"`` (default) or ``"two_stage"``.
        ridge: λ of the L2 penalty on w (linear) or weight decay (MLP).
        featurizer: callable texts -> array [M, d] used when ``fit``/``predict`` get texts (default
            :class:`HashingFeaturizer`).
        weights: two-stage only: ``"precision"`` weights each b̂ by 1/SE², ``"none"`` equally.
        hidden: MLP hidden sizes. official_mlp: no ELU between the MLP's last two layers (the official code).
        max_iter: EM iterations of the joint fit. tol: the joint fit stops (``converged_ = True``) when no b
            changed by ``tol`` or more in the last EM iteration (as :class:`IRTConfig`'s ``tol``).
        gp_steps: Adam steps of the GP hyper-parameters.
        sparse_above: number of items above which the GP is sparse variational (256 inducing points).
        seed: seed of the MLP/GP initialisation.
    """

    def __init__(
        self,
        regressor: Literal["linear", "mlp", "gp"] = "linear",
        mode: Literal["joint", "two_stage"] = "joint",
        ridge: float = 1e-2,
        featurizer: Callable[[Sequence[str]], Any] | None = None,
        *,
        weights: Literal["precision", "none"] = "precision",
        hidden: tuple[int, ...] = (64,),
        official_mlp: bool = False,
        max_iter: int = 200,
        tol: float = 1e-4,
        gp_steps: int = 100,
        sparse_above: int = 5000,
        alternations: int = 3,
        seed: int = 0,
    ) -> None:
        self.regressor = check_choice("regressor", regressor, ("linear", "mlp", "gp"))
        self.mode = check_choice("mode", mode, ("joint", "two_stage"))
        self.ridge = check_float("ridge", ridge, min=0.0)
        if featurizer is not None and not callable(featurizer):
            raise ValueError(f"featurizer must be a callable texts -> array, got {featurizer!r}")
        self.featurizer = featurizer
        self.weights = check_choice("weights", weights, ("precision", "none"))
        self.hidden = tuple(check_int("hidden", h, min=1) for h in hidden)
        self.official_mlp = check_bool("official_mlp", official_mlp)
        self.max_iter = check_int("max_iter", max_iter, min=1)
        self.tol = check_float("tol", tol, min=0.0, min_open=True)
        self.gp_steps = check_int("gp_steps", gp_steps, min=1)
        self.sparse_above = check_int("sparse_above", sparse_above, min=1)
        self.alternations = check_int("alternations", alternations, min=1)
        self.seed = check_int("seed", seed)

    # ------------------------------------------------------------------ features
    def _features(self, x: Any, n: int | None, name: str = "x") -> np.ndarray:
        if isinstance(x, (list, tuple)) and len(x) and isinstance(x[0], str):
            if self.featurizer is None:
                self.featurizer = HashingFeaturizer()
            x = self.featurizer(x)
        X = check_array(name, x, ndim=2, dtype="numeric", finite=True, nonempty=True).astype(np.float64)
        if n is not None and X.shape[0] != n:
            raise ValueError(f"{name} must have one row per item ({n}), got {X.shape[0]} rows")
        if hasattr(self, "n_features_in_") and X.shape[1] != self.n_features_in_:
            raise ValueError(f"{name} must have {self.n_features_in_} columns as in fit, got {X.shape[1]}")
        return X

    # ------------------------------------------------------------------ fit
    def fit(self, x: Any, Y: Any, model: Rasch | None = None, *, free: Any = None) -> AmortizedDifficulty:
        """Fit on the items of ``Y`` with content ``x`` (embeddings [M, d] or M texts).

        ``model``: the calibration model whose configuration is used (default ``Rasch()``; only the Rasch model
        is amortized, as in the paper); after fitting, ``model_`` is a fitted :class:`Rasch` whose difficulties
        are the amortized ones. ``free`` (bool [M]): items whose b is a free parameter (no content), as the
        joint M-step allows.
        """
        Y = as_response_matrix(Y)
        Y.check_nonempty()
        X = self._features(x, Y.n_items)
        if model is None:
            model = Rasch()
        if not isinstance(model, Rasch):
            raise ValueError(f"model must be a Rasch estimator (the paper amortizes the Rasch b), got {model!r}")
        free = (
            np.zeros(Y.n_items, dtype=bool)
            if free is None
            else check_array("free", free, shape=(Y.n_items,)).astype(bool)
        )
        self.n_features_in_ = X.shape[1]
        self.model_ = Rasch(model.config)
        with torch_threads(1):
            if self.mode == "two_stage":
                b, se = self._calibrate(Y)
                wts = 1.0 / se**2 if self.weights == "precision" else np.ones_like(se)
                keep = ~free
                self._fit_regressor(X[keep], b[keep], wts[keep], se[keep] ** 2)
                b_out = b.copy()
                b_out[keep] = self._predict(X[keep])[0]
            elif self.regressor == "linear":
                b_out = self._joint_linear(X, Y, free)
            else:
                b_out = self._joint_alternate(X, Y, free)
        self.difficulty_ = b_out
        self.model_.difficulty_ = b_out
        self.model_.discrimination_ = np.ones_like(b_out)
        self.model_.guessing_ = None
        self.model_.item_ids_, self.model_.n_items_ = Y.item_ids, Y.n_items
        self.model_.prior_sd_ = self.model_.config.prior_sd
        theta, se, _ = self.model_.ability(Y)
        self.model_.theta_, self.model_.theta_se_, self.model_.taker_ids_ = theta, se, Y.taker_ids
        self.theta_ = theta
        return self

    def _calibrate(self, Y: ResponseMatrix) -> tuple[np.ndarray, np.ndarray]:
        """Plain MML-EM b̂ and its SE 1/√h_j (observed information at the last posterior)."""
        m = Rasch(self.model_.config).fit(Y)
        cfg = m.config
        x, log_w = irtF.gauss_hermite(cfg.n_quad, cfg.prior_sd)
        b = torch.as_tensor(m.difficulty_, dtype=DTYPE)
        design = self.model_._design(Y)
        post, _ = irtF.e_step(design, *irtF.log_probs(x, torch.ones_like(b), b), log_w)
        n, _ = design.item_stats(post)
        p = torch.sigmoid(x[None] - b[:, None])
        h = (n * p * (1 - p)).sum(1)
        return m.difficulty_, (1.0 / h.clamp_min(1e-12).sqrt()).numpy()

    def _joint_linear(self, X: np.ndarray, Y: ResponseMatrix, free: np.ndarray) -> np.ndarray:
        """EM with b_C = X_C w + c for content items C and free b for the others; Newton in (w, c) in the
        M-step (every step with halving, so the penalised marginal likelihood never decreases)."""
        cfg = self.model_.config
        x, log_w = irtF.gauss_hermite(cfg.n_quad, cfg.prior_sd)
        design = self.model_._design(Y)
        b = torch.as_tensor(self.model_._init_params(Y, None), dtype=DTYPE)
        C = torch.from_numpy(np.flatnonzero(~free))
        Fr = torch.from_numpy(np.flatnonzero(free))
        Xc = torch.cat([torch.as_tensor(X, dtype=DTYPE)[C], torch.ones((len(C), 1), dtype=DTYPE)], dim=1)
        d = Xc.shape[1]
        pen = torch.full((d,), self.ridge, dtype=DTYPE)
        pen[-1] = 0.0
        if len(C):  # start from the ridge regression of the item-mean difficulties
            phi = torch.linalg.solve(Xc.T @ Xc + torch.diag(pen + 1e-8), Xc.T @ b[C])
            b[C] = Xc @ phi
        else:
            phi = torch.zeros(d, dtype=DTYPE)
        trace: list[float] = []
        self.converged_, change, b_prev = False, float("inf"), b.clone()
        for it in range(self.max_iter):
            post, log_m = irtF.e_step(design, *irtF.log_probs(x, torch.ones_like(b), b), log_w)
            ll = float(design.total(log_m)) - 0.5 * float((pen * phi * phi).sum())
            trace.append(ll)
            if it > 0:  # the plain fit's criterion: the largest change of any b in the last iteration
                change = float((b - b_prev).abs().max())
                if change < self.tol:
                    self.converged_ = True
                    break
            b_prev = b.clone()
            n, r = design.item_stats(post)
            if len(Fr):
                b[Fr] = irtF.rasch_m_step(b[Fr], n[Fr], r[Fr], x, cfg.m_steps)
            if len(C):
                nc, rc = n[C], r[C]

                def q_phi(ph: torch.Tensor, nc=nc, rc=rc) -> torch.Tensor:
                    return irtF.rasch_objective(Xc @ ph, nc, rc, x).sum() - 0.5 * (pen * ph * ph).sum()

                for _ in range(cfg.m_steps):
                    bc = Xc @ phi
                    p = torch.sigmoid(x[None] - bc[:, None])
                    g = -(rc - nc * p).sum(1)  # ∂Q/∂b_j
                    h = (nc * p * (1 - p)).sum(1)
                    grad = Xc.T @ g - pen * phi
                    hess = Xc.T @ (h[:, None] * Xc) + torch.diag(pen + 1e-12)
                    step = torch.linalg.solve(hess, grad)
                    q0, t = q_phi(phi), 1.0
                    for _ in range(30):
                        if q_phi(phi + t * step) >= q0:
                            phi = phi + t * step
                            break
                        t *= 0.5
                b[C] = Xc @ phi
        self.loglik_trace_ = np.asarray(trace)
        self.n_iter_ = len(trace)
        self.final_change_ = change
        self.coef_, self.intercept_ = phi[:-1].numpy().copy(), float(phi[-1])
        return b.numpy().copy()

    def _joint_alternate(self, X: np.ndarray, Y: ResponseMatrix, free: np.ndarray) -> np.ndarray:
        """MLP/GP joint fit: alternate (i) fit f to the responses' own evidence on each b_j, (ii) MAP-EM with the
        prior b_j ~ N(f(e_j), s_j²) (s_j² the predictive variance, or the residual variance for the MLP).

        The evidence in (i) is a Laplace summary of the item's likelihood alone at the current E-step: one
        unpenalised Newton step from the current b_j, b̃_j = b_j − g_j / h_j, with variance 1/h_j (at the plain MML
        fit b̃ = b̂). Fitting f to the MAP b̂ themselves would count the prior twice: they are already shrunk
        towards f, so the refitted residual noise collapses and the predictive intervals become far too narrow."""
        cfg = self.model_.config
        b, se = self._calibrate(Y)
        keep = ~free
        x, log_w = irtF.gauss_hermite(cfg.n_quad, cfg.prior_sd)
        design = self.model_._design(Y)
        b_obs, var_obs = b, se**2
        for _ in range(self.alternations):
            self._fit_regressor(X[keep], b_obs[keep], 1.0 / var_obs[keep], var_obs[keep])
            mu, var = self._predict(X, return_var=True)
            if self.regressor == "mlp":
                var = np.full_like(mu, max(float(np.mean((mu[keep] - b_obs[keep]) ** 2)), 1e-4))
            mu_t, var_t = torch.as_tensor(mu, dtype=DTYPE), torch.as_tensor(var, dtype=DTYPE)
            var_t[torch.from_numpy(free)] = 1e12  # free items: a flat prior
            bt = torch.as_tensor(b, dtype=DTYPE)
            self.converged_ = False
            for _ in range(self.max_iter):
                post, _ = irtF.e_step(design, *irtF.log_probs(x, torch.ones_like(bt), bt), log_w)
                n, r = design.item_stats(post)
                new = irtF.rasch_m_step(bt, n, r, x, cfg.m_steps, prior=(mu_t, var_t))
                self.final_change_ = float((new - bt).abs().max())
                bt = new
                if self.final_change_ < self.tol:
                    self.converged_ = True
                    break
            b = bt.numpy().copy()
            post, _ = irtF.e_step(design, *irtF.log_probs(x, torch.ones_like(bt), bt), log_w)
            n, r = design.item_stats(post)
            p = torch.sigmoid(x[None, :] - bt[:, None])
            h = (n * p * (1.0 - p)).sum(1).clamp_min(1e-12)
            b_obs = (bt - (r - n * p).sum(1) / h).numpy()
            var_obs = (1.0 / h).numpy()
        self._fit_regressor(X[keep], b_obs[keep], 1.0 / var_obs[keep], var_obs[keep])
        out = b.copy()
        out[keep] = self._predict(X[keep])[0]
        return out

    # ------------------------------------------------------------------ regressors
    def _fit_regressor(self, X: np.ndarray, b: np.ndarray, wts: np.ndarray, noise: np.ndarray) -> None:
        if self.regressor == "linear":
            Xa = np.hstack([X, np.ones((len(X), 1))])
            pen = np.full(Xa.shape[1], self.ridge)
            pen[-1] = 0.0
            W = wts / wts.mean()
            phi = np.linalg.solve(Xa.T @ (W[:, None] * Xa) + np.diag(pen + 1e-10), Xa.T @ (W * b))
            self.coef_, self.intercept_ = phi[:-1], float(phi[-1])
        elif self.regressor == "mlp":
            self._fit_mlp(X, b, wts)
        else:
            self._fit_gp(X, b, noise)

    def _fit_mlp(self, X: np.ndarray, b: np.ndarray, wts: np.ndarray, steps: int = 500) -> None:
        from torch import nn

        torch.manual_seed(self.seed)
        sizes = (X.shape[1], *self.hidden, 1)
        layers: list[nn.Module] = []
        for k in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[k], sizes[k + 1]))
            last_pair = k == len(sizes) - 3
            if k < len(sizes) - 2 and not (self.official_mlp and last_pair):
                layers.append(nn.ELU())
        net = nn.Sequential(*layers).double()
        opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=self.ridge)
        Xt, bt = torch.as_tensor(X), torch.as_tensor(b)
        W = torch.as_tensor(wts / wts.mean())
        for _ in range(steps):
            opt.zero_grad()
            loss = (W * (net(Xt).squeeze(1) - bt) ** 2).mean()
            loss.backward()
            opt.step()
        self.net_ = net.eval()

    def _fit_gp(self, X: np.ndarray, b: np.ndarray, noise: np.ndarray) -> None:
        gpytorch, Exact, Sparse = _gp_classes()
        torch.manual_seed(self.seed)
        self._x_mean, self._x_scale = X.mean(0), X.std(0) + 1e-12
        Xt = torch.as_tensor((X - self._x_mean) / self._x_scale)
        bt = torch.as_tensor(b)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=gpytorch.utils.warnings.NumericalWarning)
            if len(X) > self.sparse_above:
                rng = np.random.default_rng(self.seed)
                inducing = Xt[torch.as_tensor(rng.choice(len(X), min(256, len(X)), replace=False))].clone()
                lik = gpytorch.likelihoods.GaussianLikelihood().double()
                model = Sparse(inducing).double()
                mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=len(X))
                params = list(model.parameters()) + list(lik.parameters())
            else:
                lik = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(
                    noise=torch.as_tensor(noise), learn_additional_noise=True
                ).double()
                model = Exact(Xt, bt, lik).double()
                mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
                params = list(model.parameters())
            _init_gp_hypers(model, Xt, bt, self.seed)
            model.train(), lik.train()
            opt = torch.optim.Adam(params, lr=0.1)
            for _ in range(self.gp_steps):
                opt.zero_grad()
                loss = -mll(model(Xt), bt)
                loss.backward()
                opt.step()
        model.eval(), lik.eval()
        self.gp_, self.gp_likelihood_ = model, lik

    def _predict(self, X: np.ndarray, return_var: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        if self.regressor == "linear":
            mu = X @ self.coef_ + self.intercept_
            return mu, (np.zeros_like(mu) if return_var else None)
        if self.regressor == "mlp":
            with torch.no_grad():
                mu = self.net_(torch.as_tensor(X)).squeeze(1).numpy()
            return mu, (np.zeros_like(mu) if return_var else None)
        gpytorch, _, _ = _gp_classes()
        Xt = torch.as_tensor((X - self._x_mean) / self._x_scale)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", category=gpytorch.utils.warnings.NumericalWarning)
            # predicting at the training inputs (the joint fit's own items) is intended here
            warnings.simplefilter("ignore", category=gpytorch.utils.warnings.GPInputWarning)
            f: Any = self.gp_(Xt)  # a gpytorch MultivariateNormal (the stubs type the call as a union)
            lik = self.gp_likelihood_
            extra = lik.second_noise if hasattr(lik, "second_noise") else lik.noise
            var = f.variance + extra.reshape(-1)[0]  # latent variance + the residual (unexplained) variance
        return f.mean.numpy(), var.numpy()

    @overload
    def predict(self, x: Any, return_var: Literal[False] = False) -> np.ndarray: ...
    @overload
    def predict(self, x: Any, return_var: Literal[True]) -> tuple[np.ndarray, np.ndarray]: ...
    def predict(self, x: Any, return_var: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Predicted difficulty of new items from their content (embeddings [M, d] or texts); with
        ``return_var=True`` also the predictive variance (0 for the linear and MLP predictors)."""
        if not hasattr(self, "n_features_in_"):
            raise RuntimeError("AmortizedDifficulty is not fitted yet: call fit(x, Y) first")
        X = self._features(x, None)
        with torch_threads(1):
            mu, var = self._predict(X, return_var)
        if not return_var:
            return mu
        return mu, var if var is not None else np.zeros_like(mu)
