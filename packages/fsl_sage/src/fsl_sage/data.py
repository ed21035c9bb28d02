"""Offline data and client partitions: sklearn's bundled digits (the CPU stand-in for the paper's CIFAR-10), IID
and Dirichlet(α) equal-size splits (the paper's heterogeneity setting, after Hsu et al. 2019)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

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
    "ClientData",
    "as_client_data",
    "batch_key",
    "check_client_data",
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

    d: Any = load_digits()  # a sklearn Bunch
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
    if y.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"{name}: labels must be integers, got dtype {y.dtype}")
    if y.ndim != 1:
        raise ValueError(f"{name}: labels must be 1-d (one class index per sample), got shape {tuple(y.shape)}")
    if n_classes is not None and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise ValueError(f"{name}: labels must lie in [0, {n_classes - 1}], got range [{int(y.min())}, {int(y.max())}]")
    if x.is_floating_point() and not torch.isfinite(x).all():
        raise ValueError(f"{name}: x contains NaN or inf")


# ---------------------------------------------------------------------------------------------------------------
# a client's data: tensors or any torch Dataset, with an optional per-sample transform

Transform = Callable[[torch.Tensor], torch.Tensor]
_INT_LABELS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def batch_key(seed: int, client: int, round: int, epoch: int, k: int) -> int:
    """The seed of the transform's randomness for local batch ``k`` (a pure function of its arguments, so the
    in-process loop, a Flower ClientApp and a resumed run draw the same crops and flips)."""
    return ((((seed * 1_000_003 + client) * 10_007 + round) * 101 + epoch) * 100_003 + k + 1) % (2**63 - 1)


def _labels_int64(y: torch.Tensor, name: str) -> torch.Tensor:
    if y.dtype not in _INT_LABELS:
        raise ValueError(f"{name}: labels must be integers (class indices), got dtype {y.dtype}")
    return y if y.dtype == torch.int64 else y.to(torch.int64)  # nll_loss needs int64: promote


class ClientData:
    """One client's training (or evaluation) data, fetched in batches by index.

    Args:
        data: a pair of tensors (x, y), or any map-style ``torch.utils.data.Dataset`` whose items are
            (input, label) pairs (``TensorDataset``, a torchvision data set with ``transform=ToTensor()``, ...).
        transform: applied to each input of a training batch (the paper's RandomCrop(32, 4) + horizontal flip
            on CIFAR-10, Sec. 5); its randomness is seeded per batch by :func:`batch_key`, so runs repeat exactly.
        name: used in error messages (e.g. ``"client_datasets[2]"``).

    Labels of any integer dtype are promoted to int64; other dtypes raise ``ValueError`` naming ``name``.
    """

    def __init__(self, data: Any, transform: Transform | None = None, name: str = "dataset") -> None:
        self.name = name
        self.transform = transform
        self.x: torch.Tensor | None = None
        self.y: torch.Tensor | None = None
        self.dataset: torch.utils.data.Dataset | None = None
        if isinstance(data, ClientData):
            self.x, self.y, self.dataset = data.x, data.y, data.dataset
            self.transform = transform if transform is not None else data.transform
            self._labels = data._labels
            return
        if isinstance(data, torch.utils.data.TensorDataset) and len(data.tensors) == 2:
            data = tuple(data.tensors)
        if isinstance(data, (tuple, list)):
            if len(data) != 2:
                raise ValueError(f"{name} must be a pair (x, y) of tensors or a torch Dataset, got {len(data)} items")
            x, y = data
            check_dataset(x, y, None, name)
            self.x, self.y = x, _labels_int64(y, name)
            self._labels: torch.Tensor | None = self.y
        elif isinstance(data, torch.utils.data.Dataset):
            if not hasattr(data, "__len__") or len(data) == 0:  # type: ignore[arg-type]
                raise ValueError(f"{name} must be a non-empty map-style Dataset with __len__")
            self.dataset = data
            self._labels = None
        else:
            raise ValueError(
                f"{name} must be a pair (x, y) of tensors or a torch.utils.data.Dataset, got {type(data).__name__}"
            )

    def __len__(self) -> int:
        return len(self.y) if self.y is not None else len(self.dataset)  # type: ignore[arg-type]

    @property
    def labels(self) -> torch.Tensor:
        """Every label as int64, as ``__getitem__`` returns it (read once, then cached).

        A Dataset's ``targets`` is a shortcut only when it cannot differ from the items: the Dataset has no
        ``target_transform`` (torchvision applies that in ``__getitem__``, after ``targets``) and up to 16 items
        spread over the Dataset carry the same labels as ``targets``. Otherwise every item is read once."""
        if self._labels is None:
            ds = self.dataset
            n = len(self)
            targets = getattr(ds, "targets", None)
            y = None
            if targets is not None and getattr(ds, "target_transform", None) is None and len(targets) == n:
                fast = torch.as_tensor(targets)
                probe = sorted({int(i) for i in np.linspace(0, n - 1, min(n, 16))})
                if fast.ndim == 1 and all(_as_label(ds[i][1], self.name) == int(fast[i]) for i in probe):  # type: ignore[index]
                    y = fast
            if y is None:
                y = torch.as_tensor([_as_label(ds[i][1], self.name) for i in range(n)], dtype=torch.int64)  # type: ignore[index]
            self._labels = _labels_int64(y, self.name)
        return self._labels

    def _item(self, i: int) -> torch.Tensor:
        if self.x is not None:
            return self.x[i]
        item = self.dataset[i]  # type: ignore[index]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise ValueError(f"{self.name}[{i}] must be an (input, label) pair, got {type(item).__name__}")
        x = item[0]
        if not isinstance(x, torch.Tensor):
            raise ValueError(
                f"{self.name}[{i}]: the input must be a tensor (e.g. torchvision's ToTensor()), got {type(x).__name__}"
            )
        return x

    def batch(
        self, idx: torch.Tensor, key: int | None = None, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, int64 labels) of the samples ``idx``; the transform (if any) is applied to each input with
        the torch RNG seeded by ``key`` (the caller's RNG state is restored afterwards)."""
        if self.x is not None and self.transform is None:
            xb, yb = self.x[idx], self.labels[idx]
        else:
            rows = idx.tolist()
            with torch.random.fork_rng(devices=[]):
                if key is not None:
                    torch.manual_seed(key)
                items = [self._item(i) for i in rows]
                if self.transform is not None:
                    items = [self.transform(v) for v in items]
            xb = torch.stack(items)
            yb = self.labels[idx]
        if device is not None:
            xb, yb = xb.to(device), yb.to(device)
        return xb, yb

    def sample_input(self, n: int = 2) -> torch.Tensor:
        """The first ``n`` inputs (transformed with key 0): what the split's shape probe sees."""
        return self.batch(torch.arange(min(n, len(self))), key=0)[0]


def _as_label(v: Any, name: str) -> int:
    if isinstance(v, torch.Tensor):
        if v.numel() != 1 or v.dtype not in _INT_LABELS:
            raise ValueError(
                f"{name}: labels must be integer scalars, got a {v.dtype} tensor of shape {tuple(v.shape)}"
            )
        return int(v)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name}: labels must be integers, got {type(v).__name__}")
    return int(v)


def as_client_data(data: Any, transform: Transform | None = None, name: str = "dataset") -> ClientData:
    """``data`` as a :class:`ClientData` ((x, y) tensors, a Dataset, or a ClientData)."""
    return ClientData(data, transform, name)


def check_client_data(
    data: ClientData,
    client: torch.nn.Module,
    server: torch.nn.Module,
    aux: torch.nn.Module | None,
    who: str,
    smashed_shape: torch.Size | None = None,
    n_classes: int | None = None,
) -> tuple[torch.Size, int]:
    """Probe the split with this client's own first inputs (after its transform) and check its labels: every
    client is checked, and errors name it (``who``). Returns (smashed shape, n_classes)."""
    from fsl_sage.models import check_split_shapes

    sample = data.sample_input()
    if sample.is_floating_point() and not torch.isfinite(sample).all():
        raise ValueError(f"{who}: inputs contain NaN or inf")
    dev = next((p.device for p in client.parameters()), torch.device("cpu"))
    try:
        shape, classes = check_split_shapes(client, server, aux, sample.to(dev), n_classes)
    except (ValueError, RuntimeError) as e:
        raise ValueError(f"{who}: inputs of shape {tuple(sample.shape[1:])} do not fit the split: {e}") from e
    if smashed_shape is not None and shape != smashed_shape:
        raise ValueError(f"{who}: smashed activations of shape {tuple(shape)}, other clients {tuple(smashed_shape)}")
    y = data.labels
    if int(y.min()) < 0 or int(y.max()) >= classes:
        raise ValueError(f"{who}: labels must lie in [0, {classes - 1}], got range [{int(y.min())}, {int(y.max())}]")
    return shape, classes
