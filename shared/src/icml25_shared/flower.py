"""A Flower ``Grid`` that runs the ClientApps in this process, without Ray or a SuperLink (needs ``flwr``).

It drives the *same* ``Strategy.start`` loop and ``ClientApp`` handlers as the simulation and deployment engines
(real ``Message``/``Context`` objects, per-node ``context.state``, random 64-bit node ids, replies in shuffled
order, and Flower's failure semantics: a ``ClientApp`` that raises becomes an error reply
``ErrorCode.CLIENT_APP_RAISED_EXCEPTION`` and its node's ``context.state`` stays as it was, as on Ray and on
SuperNodes), so it is a fast way to debug an app and to test strategies exactly on a small machine. Used by the
federated packages (fsl_sage, eagles) for their in-process runs and tests; written against flwr 1.42's Message
API (``flwr.supercore.task_identity`` is an internal of that version, which those packages pin).
"""

from __future__ import annotations

import copy
import random
import uuid
from collections.abc import Iterable
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from icml25_shared.validate import check_bool, check_int

__all__ = ["LocalGrid"]


class LocalGrid(Grid):
    """``num_nodes`` virtual SuperNodes with ``node_config = {"partition-id": i, "num-partitions": num_nodes}``.

    Args:
        client_app: the ``ClientApp`` every node runs.
        num_nodes: number of nodes.
        run_config: the ``context.run_config`` the ClientApps see.
        seed: seeds the node ids and the (shuffled) reply order.
        raise_errors: let a ClientApp's exception through instead of replying with an error message (debugging).
    """

    def __init__(
        self,
        client_app: ClientApp,
        num_nodes: int,
        run_config: dict[str, Any] | None = None,
        seed: int = 0,
        *,
        raise_errors: bool = False,
    ) -> None:
        num_nodes = check_int("num_nodes", num_nodes, min=1)
        self.raise_errors = check_bool("raise_errors", raise_errors)
        self._app = client_app
        self._rng = random.Random(seed)
        self.contexts: dict[int, Context] = {}
        for i in range(num_nodes):
            nid = self._rng.getrandbits(63) + 1
            self.contexts[nid] = Context(
                run_id=1,
                node_id=nid,
                node_config={"partition-id": i, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config or {}),
            )
        self._run: Any = None
        self._inbox: dict[str, Message] = {}
        # Message() reads the process's task identity, which a SuperLink/ServerApp process sets; set a local one
        # only where none exists.
        for attr, value in (("_run_id", 1), ("_task_id", 1), ("_node_id", 0)):
            if getattr(TaskIdentity, attr) is None:
                setattr(TaskIdentity, attr, value)

    def set_run(self, run: Any) -> None:
        self._run = run

    @property
    def run(self) -> Any:
        return self._run

    def create_message(
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return Message(content=content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if node not in self.contexts:
                raise ValueError(f"unknown destination node {node}; this grid's nodes are {sorted(self.contexts)}")
            context = self.contexts[node]
            before = copy.deepcopy(context.state)
            try:
                reply = self._app(msg, context)
            except Exception as ex:
                if self.raise_errors:
                    raise
                context.state = before  # Flower's engines keep a failed node's state as it was
                reason = f"{type(ex)}:<'{ex}'>"
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)
            mid = uuid.uuid4().hex
            self._inbox[mid] = reply
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._inbox.pop(m) for m in message_ids if m in self._inbox]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Deliver every message, run the ClientApps in turn, return the replies in shuffled order."""
        replies = list(self.pull_messages(self.push_messages(messages)))
        self._rng.shuffle(replies)
        return replies
