"""icml25-shared: the thin utilities that two or more icml25 packages really use.

Modules (import them directly; nothing heavy happens at import time):

- :mod:`icml25_shared.device`   -- pick cuda/mps/cpu (``ICML25_DEVICE`` override), dtype helpers.
- :mod:`icml25_shared.seed`     -- one call to seed python, numpy and torch.
- :mod:`icml25_shared.data`     -- registry of real data sets with sha256 verification.
- :mod:`icml25_shared.text`     -- character-level corpora (Tiny Shakespeare) with seeded batches.
- :mod:`icml25_shared.training` -- LR schedules, parameter and optimizer-state accounting.
- :mod:`icml25_shared.metrics`  -- accuracy, MSE/MAE, AUROC, expected calibration error.
- :mod:`icml25_shared.bench`    -- timing and peak memory of callables, interleaved comparisons.
- :mod:`icml25_shared.report`   -- ``Claim``/``ReproResult`` records, rich tables, JSON, plots.
- :mod:`icml25_shared.distributed` -- run a function on local gloo ranks on loopback (DDP and sharding tests).
- :mod:`icml25_shared.progress` -- progress bars that stay quiet in CI and in non-interactive runs.
- :mod:`icml25_shared.validate` -- argument checks naming argument, value and expectation.
- :mod:`icml25_shared.runner`   -- run reproductions in subprocesses (one torch thread each), several at once.
- :mod:`icml25_shared.html_report` -- the self-contained ``index.html`` and ``claims.json`` of a results folder.
- :mod:`icml25_shared.cli`      -- the ``icml25`` command (``list``, ``reproduce``, ``report``).
"""

from importlib.metadata import version as _version

__version__ = _version("icml25-shared")
