import pytest

from eagles.experiments import Setup
from eagles.reproduce import reproduce
from icml25_shared.data import DataNotFoundError


@pytest.mark.parametrize("extras", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_reproduce_small_setup_returns_claims_and_plot(tmp_path, extras):
    setup = Setup(
        num_clients=3,
        rounds=2,
        max_pretrain_rounds=10,
        hidden_channels=16,
        expert_hidden=2,
        local_epochs=5,
        threshold_lr=5e-3,
        target_band=0.8,
        extra_keep_ratios=((0.9, 0.7, 0.5),) if extras else (),
        ablations=extras,
    )
    try:
        res = reproduce(False, tmp_path, setup=setup)
    except DataNotFoundError as err:
        pytest.skip(f"Cora is not installed (extra data): {err}")
    assert res.package == "eagles"
    labels = [c.label for c in res.claims]
    assert all(len(x) <= 32 for x in labels)
    assert res.settings["band"][0] is not None  # the target band was reached and its mask re-trained
    assert "(a) acc/comm/MACs vs FedAvg" in labels and "(b) acc/comm/MACs vs FedAvg" in labels
    assert all(isinstance(c.holds, bool) for c in res.claims if c.label.startswith("(a)"))
    # the --full extras: a second keep-ratio set and the three aggregation ablations
    for name in ("b2 vs FedAvg", "d_mask_only vs FedAvg", "d_ctx_only vs FedAvg", "uniform_a vs FedAvg"):
        assert (name in labels) == extras
    assert all(p.endswith(".png") for p in res.artifacts)
