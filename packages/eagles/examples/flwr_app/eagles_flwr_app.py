"""The app's components, re-exported so that the FAB holds a module of its own (the code is in ``eagles.app``)."""

from eagles.app import clientapp, serverapp

__all__ = ["clientapp", "serverapp"]
