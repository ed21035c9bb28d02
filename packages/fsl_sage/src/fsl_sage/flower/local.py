"""``LocalGrid``: the in-process Flower ``Grid`` of :mod:`icml25_shared.flower`, with Flower's failure semantics.

Flower's simulation and deployment engines never let a ``ClientApp`` exception reach the ServerApp: the node
replies with an error ``Message`` (``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``, reason ``"<class ...>:<'...'>"``) and
keeps its ``context.state`` as it was before the message. This subclass does the same, so strategies' failure
handling (``accept_failures``) can be tested in process; ``raise_errors=True`` lets exceptions through (debugging).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable
from typing import Any

from flwr.app import Error, Message
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from icml25_shared.flower import LocalGrid as _SharedLocalGrid
from icml25_shared.validate import check_bool

__all__ = ["LocalGrid"]


class LocalGrid(_SharedLocalGrid):
    """``num_nodes`` virtual SuperNodes (``node_config = {"partition-id": i, "num-partitions": num_nodes}``; edit
    ``grid.contexts[node_id].node_config`` to give a node another partition). See :mod:`icml25_shared.flower`.

    Args:
        client_app, num_nodes, run_config, seed: as :class:`icml25_shared.flower.LocalGrid`.
        raise_errors: re-raise a ClientApp's exception instead of replying with an error message.
    """

    def __init__(
        self,
        client_app: ClientApp,
        num_nodes: int,
        run_config: dict[str, Any] | None = None,
        seed: int = 0,
        raise_errors: bool = False,
    ) -> None:
        super().__init__(client_app, num_nodes, run_config, seed)
        self.raise_errors = check_bool("raise_errors", raise_errors)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if node not in self.contexts:
                raise ValueError(f"unknown destination node {node}")
            ctx = self.contexts[node]
            saved = copy.deepcopy(ctx.state)
            try:
                reply = self._app(msg, ctx)
            except Exception as ex:
                if self.raise_errors:
                    raise
                ctx.state = saved  # Flower's engines do not update a failed node's state
                reason = str(type(ex)) + ":<'" + str(ex) + "'>"
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)
            mid = uuid.uuid4().hex
            self._inbox[mid] = reply
            ids.append(mid)
        return ids
