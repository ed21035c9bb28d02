"""The reproduction machinery, reduced: the full-mode code path on a small synthetic graph (slow)."""

import pytest
import torch
from torch_geometric.data import Data

from unifews import reproduce as repro
from unifews.prop import PropGraph

from .helpers import random_graph


@pytest.mark.slow
def test_full_mode_code_path_runs_on_a_small_graph(tmp_path, monkeypatch):
    x, ei = random_graph(n=120, m=600, f=16, seed=40, dtype=torch.float32)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    data = Data(x=x.abs(), edge_index=ei, y=y)
    monkeypatch.setitem(repro.QUICK, "hops", 3)
    monkeypatch.setitem(repro.QUICK, "seeds", (0, 1))
    monkeypatch.setitem(repro.QUICK, "mlp_epochs", 5)
    small = {
        "gcn_seeds": (0,),
        "gcn_hidden": 16,
        "gcn_epochs": 4,
        "sweep_hidden": 8,
        "sweep_epochs": 3,
        "depths": (2, 3),
    }
    monkeypatch.setattr(repro, "FULL", {**repro.FULL, **small})
    claims, artifacts, settings = [], [], {}
    repro._full(data, PropGraph(ei, 120, 0.5, x.dtype), tmp_path, claims, artifacts, settings)
    assert len(claims) == 6 and all(a.endswith(".png") for a in artifacts)
    assert settings["full"]["gcn_hidden"] == 16


@pytest.mark.parametrize(
    ("acc_u", "mac_ok", "verdict"),
    [
        ([80.0, 81.0, 80.5], True, "holds"),  # gaps 0, +0.5, 0: interval above -1
        ([80.0, 81.0, 80.5], False, "does not hold"),  # the MAC part fails
        ([82.5, 78.0, 80.5], True, "inconclusive"),  # gaps +2.5, -2.5, +0.5: interval straddles -1
        ([77.0, 77.5, 77.2], True, "does not hold"),  # gaps about -3: interval below -1
    ],
)
def test_accuracy_part_is_judged_on_the_interval_over_split_seeds(acc_u, mac_ok, verdict):
    acc_d = [80.0, 80.5, 80.5]
    c = repro._gap_and_mac_claim("t", None, acc_d, acc_u, [0, 1, 2], mac_ok, "mac rule", "0.45x MACs", "s", {})
    assert c.verdict == verdict
    gaps = {str(i): u - d for i, (u, d) in enumerate(zip(acc_u, acc_d))}
    assert c.details["seeds"]["per_seed"] == pytest.approx(gaps)
    assert "mac rule" in c.rule and "0.45x MACs" in c.measured
