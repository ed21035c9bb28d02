"""Inputs that used to give silent wrong results or unclear errors: each now gives the right result or an error
naming the argument, the value and the expectation."""

import json
import math

import pytest
import torch
from eagles_testing import small_config, small_setup
from torch_geometric.data import Data

from eagles.config import EaglesConfig
from eagles.fl import DensityBandSelector, consensus_mask, mask_distance, personalized_aggregate, personalized_weights
from eagles.metrics import payload_bytes


@pytest.mark.parametrize(
    "bad", [torch.tensor([2, 0, 1, 0]), torch.tensor([0.6, 0.0, 1.0, 0.0]), torch.tensor([-1, 0, 1, 0])]
)
def test_masks_holding_values_other_than_0_and_1_are_refused(bad):
    good = torch.tensor([1, 0, 1, 1])
    for fn in (mask_distance, consensus_mask):
        with pytest.raises(ValueError, match=r"masks\[0\]\['w'\] must be a bool mask or hold only 0 and 1"):
            fn([{"w": bad}, {"w": good}])
    with pytest.raises(ValueError, match="only 0 and 1"):
        payload_bytes({"w": torch.zeros(4)}, {"w": bad})
    # 0/1 integers and floats are read as the bool mask they are
    d = mask_distance([{"w": torch.tensor([1, 0, 0, 0])}, {"w": torch.tensor([1.0, 1.0, 1.0, 0.0])}])
    assert float(d[0, 1]) == 0.5  # normalised Hamming: 2 of 4 entries differ


def test_negative_distances_and_non_stochastic_or_negative_weights_are_refused():
    with pytest.raises(ValueError, match="d_mask must hold distances ≥ 0, got a minimum of -1.0"):
        personalized_weights(-torch.eye(2, dtype=torch.float64), None)
    with pytest.raises(ValueError, match="d_ctx must hold distances ≥ 0"):
        personalized_weights(None, torch.tensor([[0.0, -0.5], [-0.5, 0.0]], dtype=torch.float64))
    states = [{"w": torch.ones(2)}, {"w": torch.ones(2)}]
    with pytest.raises(ValueError, match=r"row-stochastic.*\[2.0, 2.0\]"):
        personalized_aggregate(states, 2 * torch.eye(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="non-negative"):
        personalized_aggregate(states, torch.tensor([[1.5, -0.5], [0.5, 0.5]], dtype=torch.float64))
    out = personalized_aggregate(states, torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64))
    assert torch.equal(out[0]["w"], torch.ones(2))


def test_states_of_different_shapes_are_refused():
    states = [{"w": torch.ones(3, 4)}, {"w": torch.ones(4, 3)}]
    with pytest.raises(ValueError, match=r"states\[1\]\['w'\] must have the shape of states\[0\]\['w'\], \(3, 4\)"):
        personalized_aggregate(states, torch.full((2, 2), 0.5, dtype=torch.float64))


def test_payload_bytes_checks_mask_shapes_and_counts_each_dtypes_bytes():
    with pytest.raises(ValueError, match=r"masks\['w'\] must have the shape of state\['w'\], \(4, 4\), got \(100,\)"):
        payload_bytes({"w": torch.ones(4, 4)}, {"w": torch.ones(100, dtype=torch.bool)})
    with pytest.raises(ValueError, match="masks must name tensors of state"):
        payload_bytes({"w": torch.ones(4, 4)}, {"v": torch.ones(4, 4, dtype=torch.bool)})
    for dtype in (torch.float16, torch.float32, torch.float64):
        w = torch.ones(4, 4, dtype=dtype)
        assert payload_bytes({"w": w})["gnn"] == w.numpy().nbytes if dtype != torch.float16 else w.nbytes
        m = torch.eye(4, dtype=torch.bool)
        assert payload_bytes({"w": w}, {"w": m})["gnn"] == w.element_size() * 4 + math.ceil(16 / 8)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"keep_ratios": 0.5}, r"keep_ratios must be a sequence of floats in \[0, 1\].*got 0.5 \(float\)"),
        ({"keep_ratios": "0.5"}, r"keep_ratios must be a sequence.*got '0.5' \(str\)"),
        ({"bands": 0.3}, r"bands must be a sequence of strictly decreasing densities.*got 0.3 \(float\)"),
    ],
)
def test_config_scalars_where_sequences_belong_name_the_field(kw, match):
    with pytest.raises(TypeError, match=match):
        EaglesConfig(**kw)


def test_band_lookup_tolerates_float_rounding():
    sel = DensityBandSelector((0.5, 0.3), 0.03)
    sel.update(1, {"w": torch.arange(100) < 31}, 1.0)
    sel.update(2, {"w": torch.zeros(100, dtype=torch.bool)}, 1.0)
    assert sel.has(0.1 + 0.2) and sel.get(0.1 + 0.2) is sel.get(0.3)
    assert not sel.has(0.3 + 1e-6)
    with pytest.raises(KeyError, match="band 0.2 has no stored mask"):
        sel.get(0.2)


def test_non_finite_sparse_features_are_refused_by_the_model():
    from eagles.client import initial_model

    x = torch.zeros(6, 12)
    x[0, 1], x[3, 2] = 1.0, float("nan")
    ei = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    model = initial_model(12, 3, small_config())
    for xs in (x.to_sparse(), x.to_sparse().coalesce()):
        with pytest.raises(ValueError, match=r"x must be finite \(no NaN or inf\), got 1 non-finite entries"):
            model(xs, ei)


def test_unlabelled_nodes_lie_in_no_split_and_training_runs():
    from eagles.partition import random_clients
    from eagles.sim import run_federated

    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (30,), generator=g)
    y[::4] = -1  # unlabelled, as in ogbn
    ei = torch.randint(0, 30, (2, 80), generator=g)
    data = Data(x=torch.randn(30, 12, generator=g), edge_index=ei, y=y)
    clients = random_clients(data, 2, seed=0)
    for c in clients:
        split = c.train_mask | c.val_mask | c.test_mask
        assert torch.equal(split, c.y >= 0)  # every labelled node in one split, no unlabelled one
        assert int((c.train_mask & c.val_mask).sum()) == 0
    run = run_federated(clients, small_config(), 1)
    assert 0.0 <= run.history[0]["eval-test-acc"] <= 1.0
    bad = clients[0].clone()
    bad.train_mask = torch.ones_like(bad.train_mask)
    with pytest.raises(ValueError, match=r"data.train_mask must select labelled nodes only.*got \d+ nodes"):
        run_federated([bad, clients[1]], small_config(), 1)
    # a fully labelled graph's masks are as they were (the committed runs' splits)
    import numpy as np

    from eagles.partition import split_clients

    g = torch.Generator().manual_seed(1)
    data = Data(
        x=torch.randn(20, 3, generator=g), edge_index=torch.zeros(2, 0, dtype=torch.long), y=torch.arange(20) % 3
    )
    (c,) = split_clients(data, np.zeros(20, dtype=np.int64), seed=5)
    perm = torch.from_numpy(np.random.default_rng([5, 0]).permutation(20))
    assert torch.equal(torch.nonzero(c.train_mask).view(-1), perm[:12].sort().values)
    assert torch.equal(torch.nonzero(c.val_mask).view(-1), perm[12:16].sort().values)


def test_resume_names_a_truncated_part_and_a_missing_mask_with_the_remedy(tmp_path):
    from eagles.experiments import PartStore

    setup = small_setup()
    store = PartStore(tmp_path, setup)
    store.put("s0-louvain-pretrain", {"band": None}, 1.0, 1.0, {"w": torch.rand(3, 5) < 0.5})
    store.put("s0-louvain-a", {"acc": 1.0}, 1.0, 1.0)
    part = tmp_path / "s0-louvain-a.json"
    part.write_text(part.read_text()[:40])  # a copy cut short
    resume = PartStore(tmp_path, setup, resume=True)
    with pytest.raises(ValueError, match=rf"s0-louvain-a.*{part}.*not valid JSON.*delete {part}"):
        resume.get("s0-louvain-a")
    part.write_text(json.dumps({"key": "s0-louvain-a"}))
    with pytest.raises(ValueError, match="holds no 'result'"):
        resume.get("s0-louvain-a")
    (tmp_path / "s0-louvain-pretrain.mask.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"consensus mask .*s0-louvain-pretrain.mask.pt is missing.*delete"):
        resume.mask("s0-louvain-pretrain")
