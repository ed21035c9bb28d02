import math

import pytest
import torch

from eagles.metrics import TRAIN_FACTOR, CommMeter, FlopsMeter, gnn_macs, payload_bytes, sparsifier_macs


def test_payload_bytes_on_hand_built_masks():
    state = {
        "gnn.w": torch.zeros(4, 10),
        "gnn.b": torch.zeros(4),
        "gnn.t": torch.zeros(4),
        "sparsifier.e": torch.zeros(3, 3),
        "n": torch.zeros(2, dtype=torch.long),
    }
    mask = torch.zeros(4, 10, dtype=torch.bool)
    mask[0, :7] = True
    mask[3, :] = True  # nnz 17, numel 40
    b = payload_bytes(state, {"gnn.w": mask})
    assert b["gnn"] == 4 * 17 + math.ceil(40 / 8) + 4 * 4 + 4 * 4 + 2 * 8
    assert b["sparsifier"] == 4 * 9
    known = payload_bytes(state, {"gnn.w": mask}, mask_known=True)
    assert known["gnn"] == b["gnn"] - 5
    assert payload_bytes(state)["gnn"] == 4 * (40 + 8) + 16


def test_comm_meter_totals():
    m = CommMeter()
    m.add_payload(1, 0, "up", {"gnn": 10, "sparsifier": 5})
    m.add_payload(1, 1, "up", {"gnn": 10, "sparsifier": 5})
    m.add_payload(2, 0, "down", {"gnn": 7, "sparsifier": 0})
    assert m.total(direction="up") == 30 and m.total(part="gnn") == 27 and m.total(server_round=2) == 7
    assert m.per_round("up", "gnn") == 10.0


def test_macs_closed_forms():
    assert gnn_macs([(10, 4), (4, 3)], [(1.0, 0.5), (1.0, 1.0)], n=5, kept=7) == round(
        1.5 * 5 * 10 * 4 + 7 * 4 + 2 * 5 * 4 * 3 + 7 * 3
    )
    assert sparsifier_macs(5, 7, 10, 2, 3, training=False) == 3 * (2 * 5 * 10 * 2 + 2 * 7 * 2) + 5 * 10 * 3
    f = FlopsMeter()
    f.add(1, "gnn", 100, steps=5)
    assert f.total("gnn") == TRAIN_FACTOR * 500


def test_comm_meter_add_payloads_equals_add_payload_per_client_and_refuses_bad_rows():
    rows = [{"gnn": 10, "sparsifier": 3}, {"gnn": 0, "sparsifier": 7}]
    one, many = CommMeter(), CommMeter()
    for pid, parts in zip([4, 2], rows, strict=True):
        one.add_payload(1, pid, "up", parts)
    many.add_payloads(1, [4, 2], "up", rows)
    assert dict(one.records) == dict(many.records)
    with pytest.raises(ValueError):
        many.add_payloads(1, [4], "up", rows)
    with pytest.raises(ValueError):
        many.add_payloads(1, [4, 2], "sideways", rows)
    with pytest.raises(ValueError):
        many.add_payloads(1, [4], "up", [{"gnn": -1}])
