"""Character-level text corpora with seeded batches (the nanoGPT protocol).

Used by swan, frugal, mohd and downscaling, which all train small language models on Tiny Shakespeare at
character level: vocabulary = sorted set of the file's characters (65 symbols), first 90% train, last 10%
validation, random training windows drawn from a seeded ``torch.Generator``, fixed validation windows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from icml25_shared import data

if TYPE_CHECKING:
    import torch

__all__ = ["CharCorpus"]


@dataclass
class CharCorpus:
    """A text encoded at character level, split into train and validation parts.

    Build with :meth:`from_text` or :meth:`tinyshakespeare`. ``train`` and ``val`` are int64 numpy arrays of
    token ids.
    """

    text: str
    train_fraction: float = 0.9
    chars: list[str] = field(init=False)
    stoi: dict[str, int] = field(init=False)
    train: np.ndarray = field(init=False, repr=False)
    val: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or len(self.text) < 2:
            raise ValueError("text must be a str of at least 2 characters")
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train_fraction must be in (0, 1), got {self.train_fraction}")
        self.chars = sorted(set(self.text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        ids = self.encode(self.text)
        n = int(self.train_fraction * len(ids))
        self.train, self.val = ids[:n], ids[n:]

    @classmethod
    def from_text(cls, text: str, train_fraction: float = 0.9) -> CharCorpus:
        """Encode ``text``; the vocabulary is the sorted set of its characters."""
        return cls(text, train_fraction)

    @classmethod
    def tinyshakespeare(
        cls, path: str | os.PathLike[str] | None = None, *, download: bool = False, train_fraction: float = 0.9
    ) -> CharCorpus:
        """Tiny Shakespeare from the shared data registry (sha256 verified); 65 symbols."""
        p = data.file_path("tinyshakespeare", path=path, download=download)
        return cls(p.read_text(encoding="utf-8"), train_fraction)

    @property
    def vocab_size(self) -> int:
        """Number of distinct characters."""
        return len(self.chars)

    def encode(self, s: str) -> np.ndarray:
        """Token ids of ``s`` (every character must be in the vocabulary)."""
        try:
            return np.fromiter((self.stoi[c] for c in s), dtype=np.int64, count=len(s))
        except KeyError as err:
            raise ValueError(f"character {err.args[0]!r} is not in the corpus vocabulary") from None

    def decode(self, ids: object) -> str:
        """The string of token ids ``ids`` (list, numpy array or tensor)."""
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))

    def _split(self, split: str) -> np.ndarray:
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return self.train if split == "train" else self.val

    def get_batch(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows ``(x, y)`` of shape ``(batch_size, seq_len)``; ``y`` is ``x`` shifted by one."""
        import torch

        ids = self._split(split)
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size}, {seq_len}")
        if len(ids) <= seq_len:
            raise ValueError(f"split {split!r} has {len(ids)} tokens, needs more than seq_len={seq_len}")
        starts = torch.randint(len(ids) - seq_len, (batch_size,), generator=generator)
        return self._windows(ids, starts.numpy(), seq_len, device)

    def fixed_batches(
        self, split: str, n_batches: int, batch_size: int, seq_len: int, device: torch.device | str | None = None
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``n_batches`` evenly spaced, deterministic windows (for validation curves that compare runs)."""
        ids = self._split(split)
        total = n_batches * batch_size
        if len(ids) <= seq_len:
            raise ValueError(f"split {split!r} has {len(ids)} tokens, needs more than seq_len={seq_len}")
        starts = np.linspace(0, len(ids) - seq_len - 1, total).astype(np.int64)
        return [
            self._windows(ids, starts[i * batch_size : (i + 1) * batch_size], seq_len, device) for i in range(n_batches)
        ]

    @staticmethod
    def _windows(
        ids: np.ndarray, starts: np.ndarray, seq_len: int, device: torch.device | str | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
        block = torch.from_numpy(ids[idx])
        x, y = block[:, :-1].contiguous(), block[:, 1:].contiguous()
        if device is not None:
            x, y = x.to(device), y.to(device)
        return x, y
