"""``LocalGrid``: the in-process Flower ``Grid`` of :mod:`icml25_shared.flower`, re-exported.

It has Flower's failure semantics: a ``ClientApp`` exception becomes an error ``Message``
(``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``, reason ``"<class ...>:<'...'>"``) and the node keeps its
``context.state`` as it was before the message, so strategies' failure handling (``accept_failures``) runs in
process as on Ray and on SuperNodes; ``raise_errors=True`` lets exceptions through (debugging).
"""

from __future__ import annotations

from icml25_shared.flower import LocalGrid

__all__ = ["LocalGrid"]
