"""Closed-form least-squares fits of the linear forecasters.

Both TimeBase (without the regulariser) and DLinear are affine in the window, so their best fit on the training
split under MSE has a closed form:

- :func:`sliding_moments` -- the Gram matrix of all stride-1 windows of a series in O((T + H) * L) time, from
  lagged products and prefix sums, instead of O(n * (T + H)^2) for the stacked window matrix.
- :func:`fit_timebase_least_squares` -- ordinary (R >= M) or reduced-rank (R < M) regression of the centred
  same-phase targets on the centred same-phase inputs, loaded into a :class:`~timebase.TimeBase`.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import Tensor, nn

from icml25_shared.validate import check_float, check_int
from timebase.data import WindowDataset
from timebase.model import TimeBase

__all__ = ["sliding_moments", "window_moments", "solve_affine", "fit_timebase_least_squares"]


def sliding_moments(series: Tensor | np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Moments of all stride-1 windows z_w = s[w : w + width] of a (L, C) series, pooled over channels.

    Returns (G, m, n): G[i, j] = sum_{c, w} s_c[w+i] s_c[w+j] (width x width), m[i] = sum_{c, w} s_c[w+i] and
    n = number of (window, channel) rows. Uses G[i, i+d] = P_d[i+n_w] - P_d[i] with P_d the prefix sum over u of
    sum_c s_c[u] s_c[u+d], so the cost is O(width * L * C), independent of the number of windows.
    """
    s = np.asarray(series, dtype=np.float64)
    if s.ndim == 1:
        s = s[:, None]
    length = s.shape[0]
    n_w = length - width + 1
    if n_w < 1:
        raise ValueError(f"series of {length} steps is shorter than the window width {width}")
    # prefix[d, k] = sum_{u < k} sum_c s[u] s[u + d], for k <= L - d (zero-padded beyond)
    prefix = np.zeros((width, length + 1))
    for d in range(width):
        q = np.einsum("uc,uc->u", s[: length - d], s[d:])
        np.cumsum(q, out=prefix[d, 1 : length - d + 1])
    i, j = np.triu_indices(width)
    d = j - i
    g = np.empty((width, width))
    g[i, j] = prefix[d, i + n_w] - prefix[d, i]
    g[j, i] = g[i, j]
    csum = np.concatenate([[0.0], np.cumsum(s.sum(axis=1))])
    m = csum[np.arange(width) + n_w] - csum[np.arange(width)]
    return g, m, n_w * s.shape[1]


def window_moments(dataset: WindowDataset, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray, int]:
    """The same moments as :func:`sliding_moments` (width T + H), by stacking the windows (reference, slow)."""
    width = dataset.seq_len + dataset.pred_len
    g = np.zeros((width, width))
    m = np.zeros(width)
    n = 0
    for start in range(0, len(dataset), chunk):
        x, y = dataset.take(torch.arange(start, min(start + chunk, len(dataset))))
        z = torch.cat([x, y], dim=1).transpose(1, 2).reshape(-1, width).double().numpy()
        g += z.T @ z
        m += z.sum(axis=0)
        n += z.shape[0]
    return g, m, n


def solve_affine(g: np.ndarray, m: np.ndarray, n: int, n_in: int, ridge: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Least squares y ~ x @ B + c from the moments of rows z = [x (n_in), y] (G = sum z z^T, m = sum z).

    Centres the moments (so the intercept is free), then solves (S_xx + ridge * I) B = S_xy. Returns (B, c).
    """
    ridge = check_float("ridge", ridge, min=0.0)  # NaN would give a NaN model without a word
    if n < 2:
        raise ValueError(f"need at least 2 rows for a least-squares fit, got {n}")
    mean = m / n
    cov = g - n * np.outer(mean, mean)
    sxx, sxy = cov[:n_in, :n_in], cov[:n_in, n_in:]
    a = sxx + ridge * np.eye(n_in)
    try:
        coef = np.linalg.solve(a, sxy)
    except np.linalg.LinAlgError:  # singular (e.g. a constant series): minimum-norm solution
        coef = np.linalg.lstsq(a, sxy, rcond=None)[0]
    return coef, mean[n_in:] - mean[:n_in] @ coef


@torch.no_grad()
def fit_timebase_least_squares(
    model: TimeBase, dataset: WindowDataset, ridge: float = 0.0, chunk: int = 512
) -> TimeBase:
    """Load into ``model`` the least-squares optimum of its function class on ``dataset`` (no regulariser).

    Rows are (window, channel, phase): inputs the N centred same-phase values, targets the M same-phase future
    values minus the same per-phase mean. With R >= M the rank bound is inactive: W1 = [B^T; 0], b1 = 0,
    W2 = [I_M, 0], b2 = intercept. With R < M the reduced-rank solution (top-R principal directions of
    the fitted values) is loaded. Needs ``pred_len`` to be a multiple of ``period_len``. Returns ``model``.
    """
    if not isinstance(model, TimeBase):
        raise ValueError(f"model must be a TimeBase, got {type(model).__name__} (DLinear has fit_least_squares)")
    if not isinstance(dataset, WindowDataset):
        raise ValueError(
            f"dataset must be a timebase.data.WindowDataset (e.g. splits.train), got {type(dataset).__name__}"
        )
    ridge = check_float("ridge", ridge, min=0.0)
    chunk = check_int("chunk", chunk, min=1)
    cfg = model.config
    if cfg.pred_len % cfg.period_len:
        raise ValueError(
            f"least-squares fit needs pred_len to be a multiple of period_len, got {cfg.pred_len} and {cfg.period_len}"
        )
    if (dataset.seq_len, dataset.pred_len) != (cfg.seq_len, cfg.pred_len):
        raise ValueError(
            f"dataset windows are (seq_len={dataset.seq_len}, pred_len={dataset.pred_len}), the model expects "
            f"({cfg.seq_len}, {cfg.pred_len})"
        )
    n_seg, m_seg, r = cfg.seg_num_x, cfg.seg_num_y, cfg.basis_num
    groups = cfg.n_channels if cfg.individual else 1
    assert groups is not None
    width = n_seg + m_seg
    g = torch.zeros(groups, width, width, dtype=torch.float64)
    mom = torch.zeros(groups, width, dtype=torch.float64)
    count = 0
    for start in range(0, len(dataset), chunk):
        x, y = dataset.take(torch.arange(start, min(start + chunk, len(dataset))))
        x, y = x.double(), y.double()
        b, _, c = x.shape
        z, mu = model.segments(x)  # (b, N, P, C), (b, 1, P, C); parameter-free
        t = y.reshape(b, m_seg, cfg.period_len, c) - mu  # (b, M, P, C): same-phase targets, same centring
        rows = torch.cat([z, t], dim=1).permute(3, 0, 2, 1)  # (C, b, P, N + M)
        rows = rows.reshape(c, -1, width) if cfg.individual else rows.reshape(1, -1, width)
        g += rows.transpose(1, 2) @ rows
        mom += rows.sum(dim=1)
        count += rows.shape[1]
    w1 = np.zeros((groups, r, n_seg))
    w2 = np.zeros((groups, m_seg, r))
    b2 = np.zeros((groups, m_seg))
    for k in range(groups):
        coef, icpt = solve_affine(g[k].numpy(), mom[k].numpy(), count, n_seg, ridge)  # coef (N, M)
        if r >= m_seg:
            w1[k, :m_seg] = coef.T
            w2[k, :, :m_seg] = np.eye(m_seg)
            b2[k] = icpt
        else:  # reduced rank: project the OLS fit on the top-R directions of its fitted-value covariance
            mean = mom[k].numpy() / count
            sxx = g[k].numpy()[:n_seg, :n_seg] - count * np.outer(mean[:n_seg], mean[:n_seg])
            _, vecs = np.linalg.eigh(coef.T @ sxx @ coef)
            v = vecs[:, ::-1][:, :r]  # (M, R)
            w1[k] = (coef @ v).T
            w2[k] = v
            b2[k] = mean[n_seg:] - mean[:n_seg] @ coef @ v @ v.T
    p = next(model.parameters())
    as_t = lambda a: torch.as_tensor(a, dtype=p.dtype, device=p.device)  # noqa: E731
    (w1_param, b1_param), (w2_param, b2_param) = _weight_bias(model.basis_extract), _weight_bias(model.segment_forecast)
    if cfg.individual:
        w1_param.copy_(as_t(w1))
        b1_param.zero_()
        w2_param.copy_(as_t(w2))
        b2_param.copy_(as_t(b2))
    else:
        w1_param.copy_(as_t(w1[0]))
        b1_param.zero_()
        w2_param.copy_(as_t(w2[0]))
        b2_param.copy_(as_t(b2[0]))
    return model


def _weight_bias(layer: nn.Module) -> tuple[Tensor, Tensor]:
    """The ``weight`` and ``bias`` of an ``nn.Linear`` or a per-channel linear layer."""
    return cast(Tensor, layer.weight), cast(Tensor, layer.bias)
