"""icml25_shared.flower.LocalGrid: every node runs the ClientApp once per message, with its own context."""

import pytest

flwr = pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from icml25_shared.flower import LocalGrid  # noqa: E402


def _app() -> ClientApp:
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        seen = context.state.config_records.get("seen", ConfigRecord({"n": 0}))
        seen["n"] = int(seen["n"]) + 1
        context.state.config_records["seen"] = seen
        reply = ConfigRecord(
            {
                "partition": int(context.node_config["partition-id"]),
                "n": int(seen["n"]),
                "tag": str(context.run_config["tag"]),
            }
        )
        return Message(RecordDict({"r": reply}), reply_to=msg)

    return app


def test_local_grid_routes_messages_and_keeps_node_state():
    grid = LocalGrid(_app(), 4, run_config={"tag": "x"}, seed=3)
    nodes = list(grid.get_node_ids())
    assert len(nodes) == 4 and len(set(nodes)) == 4
    for round_ in (1, 2):
        msgs = [grid.create_message(RecordDict(), "query", n, group_id=str(round_)) for n in nodes]
        replies = list(grid.send_and_receive(msgs))
        got = sorted((int(r.content["r"]["partition"]), int(r.content["r"]["n"])) for r in replies)
        assert got == [(i, round_) for i in range(4)]  # each node once, its own state counting rounds
        assert {str(r.content["r"]["tag"]) for r in replies} == {"x"}
    with pytest.raises(ValueError, match="unknown destination node"):
        grid.push_messages([grid.create_message(RecordDict(), "query", 12345, group_id="z")])
    with pytest.raises(ValueError, match="num_nodes"):
        LocalGrid(_app(), 0)


def _flaky_app() -> ClientApp:
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        context.state.config_records["touched"] = ConfigRecord({"yes": 1})
        if int(context.node_config["partition-id"]) == 1:
            raise RuntimeError("boom in client 1")
        return Message(RecordDict({"r": ConfigRecord({"ok": 1})}), reply_to=msg)

    return app


def test_a_raising_client_app_becomes_an_error_reply_and_keeps_its_state():
    grid = LocalGrid(_flaky_app(), 3, seed=0)
    nodes = list(grid.get_node_ids())
    replies = list(grid.send_and_receive([grid.create_message(RecordDict(), "query", n, "1") for n in nodes]))
    errors = [r for r in replies if r.has_error()]
    assert len(replies) == 3 and len(errors) == 1
    assert "boom in client 1" in errors[0].error.reason and "RuntimeError" in errors[0].error.reason
    failed = next(n for n in nodes if grid.contexts[n].node_config["partition-id"] == 1)
    assert "touched" not in grid.contexts[failed].state.config_records  # a failed node's state is not updated
    ok = next(n for n in nodes if grid.contexts[n].node_config["partition-id"] == 0)
    assert "touched" in grid.contexts[ok].state.config_records
    strict = LocalGrid(_flaky_app(), 3, raise_errors=True)
    with pytest.raises(RuntimeError, match="boom"):
        strict.send_and_receive([strict.create_message(RecordDict(), "query", n, "1") for n in strict.get_node_ids()])
