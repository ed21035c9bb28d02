import pytest

from eagles.experiments import Setup
from eagles.reproduce import reproduce
from icml25_shared.data import DataNotFoundError


def test_reproduce_small_setup_returns_claims_and_plot(tmp_path):
    setup = Setup(
        num_clients=3,
        rounds=2,
        max_pretrain_rounds=12,
        hidden_channels=8,
        expert_hidden=2,
        local_epochs=2,
        threshold_lr=0.05,
        target_band=0.5,
    )
    try:
        res = reproduce(False, tmp_path, setup=setup)
    except DataNotFoundError as err:
        pytest.skip(f"Cora is not installed (extra data): {err}")
    assert res.package == "eagles"
    labels = [c.label for c in res.claims]
    assert all(len(x) <= 32 for x in labels)
    if res.settings["band"][0] is not None:
        assert "(a) acc/comm/MACs vs FedAvg" in labels and "(b) acc/comm/MACs vs FedAvg" in labels
        assert all(isinstance(c.holds, bool) for c in res.claims if c.label.startswith("(a)"))
    assert all(p.endswith(".png") for p in res.artifacts)
