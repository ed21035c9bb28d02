"""``LocalGrid``: the in-process Flower ``Grid`` of :mod:`icml25_shared.flower` (re-exported here)."""

from icml25_shared.flower import LocalGrid

__all__ = ["LocalGrid"]
