"""Offline data and client partitions: sklearn's bundled digits (the CPU stand-in for the paper's CIFAR-10), IID
and Dirichlet(α) equal-size splits (the paper's heterogeneity setting, after Hsu et al. 2019)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from icml25_shared.seed import numpy_rng
from icml25_shared.validate import check_float, check_int

__all__ = [
    "iid_partition",
    "dirichlet_partition",
    "load_digits_split",
    "client_datasets",
    "batch_order",
    "check_dataset",
]


def _check_clients(n: int, n_clients: int) -> None:
    n_clients = check_int("n_clients", n_clients, min=1)
    if n_clients > n:
        raise ValueError(f"n_clients={n_clients} is more than the number of samples ({n})")


def iid_partition(n_samples: int, n_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Shuffle 0..n_samples-1 and deal it into ``n_clients`` equal parts of ⌊n/N⌋ (the remainder is dropped)."""
    _check_clients(n_samples, n_clients)
    perm = numpy_rng(seed).permutation(n_samples)
    size = n_samples // n_clients
    return [np.sort(perm[i * size : (i + 1) * size]) for i in range(n_clients)]


def dirichlet_partition(
    labels: Sequence[int] | np.ndarray, n_clients: int, alpha: float, seed: int = 0
) -> list[np.ndarray]:
    """Equal-size label-skewed split (Hsu et al. 2019): client i draws class proportions p_i ~ Dir(α·1) and
    fills its ⌊n/N⌋ slots by sampling a class from p_i (renormalised over the classes with samples left) and
    taking an unused index of that class. Every index is used at most once; α → ∞ gives IID label histograms,
    small α one or two classes per client."""
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"labels must be a non-empty 1-d array, got shape {y.shape}")
    alpha = check_float("alpha", alpha, min=0.0, min_open=True)
    _check_clients(len(y), n_clients)
    rng = numpy_rng(seed)
    classes = np.unique(y)
    pools = {c: list(rng.permutation(np.flatnonzero(y == c))) for c in classes}
    size = len(y) // n_clients
    props = rng.dirichlet(np.full(len(classes), float(alpha)), size=n_clients)
    parts: list[list[int]] = [[] for _ in range(n_clients)]
    # fill clients in round-robin so that no client is starved by those before it
    for _ in range(size):
        for i in range(n_clients):
            left = np.array([len(pools[c]) for c in classes], dtype=np.float64)
            p = props[i] * (left > 0)
            if p.sum() <= 0:
                p = left
            c = classes[rng.choice(len(classes), p=p / p.sum())]
            parts[i].append(int(pools[c].pop()))
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def load_digits_split(
    seed: int = 0, test_size: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled digits as float32 (N, 1, 8, 8) in [0, 1] and int64 labels: a stratified 80/20
    split (seed 0 → 1,437 train / 360 test). Returns (x_train, y_train, x_test, y_test)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_size, stratify=y, random_state=seed)
    return torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte), torch.from_numpy(yte)


def client_datasets(
    x: torch.Tensor, y: torch.Tensor, n_clients: int = 3, alpha: float | None = None, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Split (x, y) into ``n_clients`` equal parts: IID (``alpha=None``) or Dirichlet(α)."""
    if alpha is None:
        parts = iid_partition(len(y), n_clients, seed)
    else:
        parts = dirichlet_partition(y.numpy(), n_clients, alpha, seed)
    return [(x[torch.from_numpy(p)], y[torch.from_numpy(p)]) for p in parts]


def batch_order(n: int, seed: int, client: int, round: int, epoch: int) -> torch.Tensor:
    """The shuffle of client ``client``'s ``n`` samples in (round, epoch): a pure function of its arguments, so
    that the in-process loop and a Flower ClientApp see the same batches."""
    g = torch.Generator().manual_seed(((seed * 1_000_003 + client) * 10_007 + round) * 101 + epoch)
    return torch.randperm(n, generator=g)


def check_dataset(x: torch.Tensor, y: torch.Tensor, n_classes: int | None, name: str = "dataset") -> None:
    """Raise ``ValueError`` on an empty dataset, mismatched lengths, non-integer or out-of-range labels, NaN."""
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise ValueError(f"{name} must be a pair of tensors (x, y), got {type(x).__name__}, {type(y).__name__}")
    if len(x) == 0:
        raise ValueError(f"{name} is empty")
    if len(x) != len(y):
        raise ValueError(f"{name}: x has {len(x)} samples but y has {len(y)}")
    if y.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"{name}: labels must be integers, got dtype {y.dtype}")
    if n_classes is not None and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise ValueError(f"{name}: labels must lie in [0, {n_classes - 1}], got range [{int(y.min())}, {int(y.max())}]")
    if x.is_floating_point() and not torch.isfinite(x).all():
        raise ValueError(f"{name}: x contains NaN or inf")
