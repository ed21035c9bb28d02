import numpy as np
import pytest
import torch

from eagles.fl import (
    DensityBandSelector,
    consensus_mask,
    context_distance,
    mask_density,
    mask_distance,
    minmax_normalize,
    personalized_aggregate,
    personalized_weights,
    weighted_average,
)


def _masks(c=4, seed=0, p=0.5):
    g = torch.Generator().manual_seed(seed)
    return [
        {"a.weight": torch.rand(3, 5, generator=g) < p, "b.weight": torch.rand(7, generator=g) < p} for _ in range(c)
    ]


def test_consensus_contains_every_client_mask_and_is_their_or():
    ms = _masks()
    cons = consensus_mask(ms)
    for m in ms:
        for k in m:
            assert bool((cons[k] | ~m[k]).all())  # cons ⊇ m
    for k in cons:
        assert torch.equal(cons[k], torch.stack([m[k] for m in ms]).any(0))
    assert mask_density(cons) >= max(mask_density(m) for m in ms)


def test_mask_distance_equals_loop_definition_symmetric_zero_diagonal():
    ms = _masks(5, 1)
    d = mask_distance(ms)
    for i in range(5):
        for j in range(5):
            ref = sum(float((ms[i][k] != ms[j][k]).double().mean()) for k in ms[i])
            assert float(d[i, j]) == pytest.approx(ref, abs=1e-12)
    assert torch.equal(d, d.t()) and bool((d.diagonal() == 0).all())


def test_context_distance_closed_form_equals_pot_emd2():
    ot = pytest.importorskip("ot", reason="POT (test extra) is not installed")
    g = torch.Generator().manual_seed(2)
    gates = [torch.randn(6, 4, generator=g, dtype=torch.float64) * (i + 1) for i in range(4)]
    d = context_distance(gates)
    for i in range(4):
        for j in range(4):
            a, b = gates[i].reshape(-1).numpy(), gates[j].reshape(-1).numpy()
            w = np.full(a.size, 1.0 / a.size)
            ref = ot.emd2(w, w, ot.dist(a[:, None], b[:, None], metric="sqeuclidean"))
            assert float(d[i, j]) == pytest.approx(ref, rel=1e-9, abs=1e-12)
    assert torch.equal(d, d.t()) and bool((d.diagonal() == 0).all())


def test_personalized_weights_rows_sum_to_one_and_identical_clients_are_uniform():
    ms = _masks(4, 3)
    gates = [torch.randn(5, 3) for _ in range(4)]
    a = personalized_weights(mask_distance(ms), context_distance(gates))
    torch.testing.assert_close(a.sum(1), torch.ones(4, dtype=torch.float64))
    assert bool((a >= 0).all())
    same = personalized_weights(mask_distance([ms[0]] * 4), context_distance([gates[0]] * 4))
    assert torch.equal(same, torch.full((4, 4), 0.25, dtype=torch.float64))
    # the closer client gets the larger weight
    d = torch.tensor([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [4.0, 3.0, 0.0]], dtype=torch.float64)
    a = personalized_weights(d, None)
    assert float(a[0, 1]) > float(a[0, 2])
    s = (1 - minmax_normalize(d)).clamp(0, 1)
    torch.testing.assert_close(a, s / s.sum(1, keepdim=True))


def test_identical_clients_aggregate_to_unweighted_fedavg_and_flower_fedavg():
    from flwr.app import ArrayRecord, MetricRecord, RecordDict
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

    g = torch.Generator().manual_seed(4)
    states = [{"w": torch.randn(3, 4, generator=g), "steps": torch.tensor(i)} for i in range(4)]
    out = personalized_aggregate(states, torch.full((4, 4), 0.25, dtype=torch.float64))
    mean = torch.stack([s["w"] for s in states]).mean(0)
    for i in range(4):
        torch.testing.assert_close(out[i]["w"], mean, rtol=0, atol=1e-6)
        assert int(out[i]["steps"]) == i  # integer buffers keep the client's own value
    recs = [
        RecordDict({"arrays": ArrayRecord({"w": s["w"]}), "metrics": MetricRecord({"num-examples": 10})})
        for s in states
    ]
    peer = aggregate_arrayrecords(recs, "num-examples").to_torch_state_dict()["w"]
    torch.testing.assert_close(out[0]["w"], peer, rtol=0, atol=1e-6)
    sizes = [1, 2, 3, 4]
    recs = [
        RecordDict({"arrays": ArrayRecord({"w": s["w"]}), "metrics": MetricRecord({"num-examples": n})})
        for s, n in zip(states, sizes, strict=True)
    ]
    peer = aggregate_arrayrecords(recs, "num-examples").to_torch_state_dict()["w"]
    torch.testing.assert_close(weighted_average(states, sizes)["w"], peer, rtol=0, atol=1e-6)


def test_equal_parameters_are_a_fixed_point():
    g = torch.Generator().manual_seed(5)
    st = {"w": torch.randn(5, generator=g), "d": torch.randn(4, generator=g, dtype=torch.float64)}
    a = personalized_weights(torch.rand(3, 3, dtype=torch.float64, generator=g), None)
    for o in personalized_aggregate([st] * 3, a):  # float32 products: within an ulp
        torch.testing.assert_close(o["w"], st["w"], rtol=2.5e-7, atol=0)
        torch.testing.assert_close(o["d"], st["d"], rtol=1e-15, atol=0)


def _mask_of_density(d, n=1000):
    m = torch.zeros(n, dtype=torch.bool)
    m[: round(d * n)] = True
    return {"w": m}


def test_bands_visited_in_decreasing_order_best_val_kept_and_reused_bit_exactly():
    sel = DensityBandSelector((0.9, 0.6, 0.3), tolerance=0.03)
    seq = [(1.0, 0.1), (0.91, 0.5), (0.89, 0.7), (0.88, 0.6), (0.7, 0.9), (0.61, 0.4), (0.59, 0.8), (0.4, 0.9)]
    stored_rounds = []
    for r, (d, score) in enumerate(seq, 1):
        stored_rounds += [(r, b) for b in sel.update(r, _mask_of_density(d), score)]
    assert [b for _, b in stored_rounds] == [0.9, 0.6]
    assert sel.get(0.9).round == 3 and sel.get(0.9).score == 0.7  # best validation score inside the band
    assert sel.get(0.6).round == 7
    assert [b for _, b in sel.visits] == sorted([b for _, b in sel.visits], reverse=True)
    mask = _mask_of_density(0.89)
    assert torch.equal(sel.get(0.9).mask["w"], mask["w"])
    sel.update(9, _mask_of_density(0.1), 0.2)  # jumps over 0.3: first mask below, flagged
    assert sel.get(0.3).in_band is False and sel.done
    with pytest.raises(KeyError, match="no stored mask"):
        DensityBandSelector((0.5,)).get(0.5)
    with pytest.raises(ValueError, match="decreasing"):
        DensityBandSelector((0.3, 0.5))


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="masks\\[1\\]"):
        mask_distance([{"w": torch.ones(3, dtype=torch.bool)}, {"w": torch.ones(4, dtype=torch.bool)}])
    with pytest.raises(ValueError, match="gates must all have"):
        context_distance([torch.ones(3), torch.ones(4)])
    with pytest.raises(ValueError, match="neither"):
        personalized_weights(None, None)
    with pytest.raises(ValueError, match="weights"):
        personalized_aggregate([{"w": torch.ones(2)}] * 2, torch.ones(3, 3))
