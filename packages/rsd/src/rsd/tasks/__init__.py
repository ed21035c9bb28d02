"""Tasks with exactly checkable reasoning steps, for testing and reproducing RSD at CPU scale."""

from rsd.tasks import arithmetic

__all__ = ["arithmetic"]
