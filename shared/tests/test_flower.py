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
