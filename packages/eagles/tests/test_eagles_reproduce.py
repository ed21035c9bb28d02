import pytest
from eagles_testing import small_setup

from eagles.reproduce import reproduce
from icml25_shared.data import DataNotFoundError


@pytest.mark.parametrize("extras", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_reproduce_small_setup_returns_claims_and_plot(tmp_path, extras):
    setup = small_setup(
        local_epochs=5,
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
    for v in ("a", "b"):  # one verdict per statement: accuracy, whole-method upload, whole-method MACs
        judged = [c for c in res.claims if c.label.startswith(f"({v})")]
        assert [c.label for c in judged] == [
            f"({v}) acc − FedAvg",
            f"({v}) total upload / FedAvg",
            f"({v}) total MACs / FedAvg",
        ]
        assert all(c.verdict in ("holds", "does not hold") and c.details["seeds"]["n"] == 1 for c in judged)
    assert {c.label for c in res.claims if c.verdict == "shown"} >= {"GNN side only", "sparsifier trade-off"}
    # the whole method's upload charges the pre-training rounds: above the re-train's own total
    b = next(c for c in res.claims if c.label == "(b) total upload / FedAvg")
    gnn = next(c for c in res.claims if c.label == "GNN side only").details["b"]
    assert b.details["seeds"]["mean"] > gnn["up_total_ratio"] > gnn["up_gnn_ratio"]
    # the trade-off's cost model (parameter counts of real states) equals the sparsifier's metered upload
    t = next(c for c in res.claims if c.label == "sparsifier trade-off").details
    model = dict(zip(t["width"]["h"], t["width"]["data_sparsifier_over_gnn"], strict=True))[setup.expert_hidden]
    assert model == pytest.approx(t["width"]["measured"], rel=1e-9)
    assert len(res.artifacts) == 2
    # the --full extras: a second keep-ratio set and the three aggregation ablations
    for name in ("b2 vs FedAvg", "d_mask_only vs FedAvg", "d_ctx_only vs FedAvg", "uniform_a vs FedAvg"):
        assert (name in labels) == extras
    assert all(p.endswith(".png") for p in res.artifacts)


def test_full_run_resumes_from_stored_parts_and_equals_one_uninterrupted_run(tmp_path, monkeypatch):
    import eagles.experiments as ex

    setup = small_setup(extra_keep_ratios=((0.9, 0.7, 0.5),))
    try:
        whole = reproduce(False, tmp_path / "whole", setup=setup)  # one uninterrupted run, no parts stored
    except DataNotFoundError as err:
        pytest.skip(f"Cora is not installed (extra data): {err}")
    plan = [ex.part_key(*p) for p in ex.part_plan(setup)]
    assert plan == ["s0-louvain-fedavg", "s0-louvain-pretrain", "s0-louvain-a", "s0-louvain-b", "s0-louvain-b2"]
    run_part, calls = ex._run_part, []

    def stopping(*args, **kw):  # the run is stopped during its fourth part: (b) needs the stored mask
        calls.append(args[2])
        if len(calls) == 4:
            raise KeyboardInterrupt
        return run_part(*args, **kw)

    out = tmp_path / "parts_run"
    monkeypatch.setattr(ex, "_run_part", stopping)
    with pytest.raises(KeyboardInterrupt):
        reproduce(True, out, setup=setup)
    monkeypatch.setattr(ex, "_run_part", run_part)
    assert sorted(p.stem for p in (out / "parts").glob("*.json")) == sorted(plan[:3])
    stored = reproduce(True, out, setup=setup, run_missing=False)  # summarise the finished parts only
    assert stored.settings["missing_parts"] == plan[3:]
    assert stored.claims[0].label == "all parts finished" and stored.claims[0].holds is False
    assert stored.claims[0].measured == "3 of 5 parts"
    resumed = reproduce(True, out, setup=setup, resume=True)
    assert [k for k, v in resumed.settings["parts"].items() if v["reused"]] == plan[:3]
    assert resumed.settings["missing_parts"] == []
    assert [c.__dict__ for c in resumed.claims] == [c.__dict__ for c in whole.claims]
    assert resumed.settings["curves"] == whole.settings["curves"]
    assert resumed.settings["band"] == whole.settings["band"]
    again = reproduce(True, out, setup=setup, resume=True)  # everything stored: nothing runs
    assert all(v["reused"] for v in again.settings["parts"].values())
    assert [c.__dict__ for c in again.claims] == [c.__dict__ for c in whole.claims]


def test_resume_refuses_a_part_made_with_another_setup(tmp_path):
    from dataclasses import replace

    import torch

    from eagles.experiments import PartStore

    setup = small_setup()
    mask = {"gnn.convs.0.lin_l.weight": torch.rand(5, 11) < 0.3}
    PartStore(tmp_path, setup).put("s0-louvain-pretrain", {"band": None}, 1.0, 1.0, mask)
    same = PartStore(tmp_path, replace(setup, seeds=(0, 1, 2)), resume=True)  # the seed list is not part of it
    assert same.get("s0-louvain-pretrain")["result"] == {"band": None}
    assert torch.equal(same.mask("s0-louvain-pretrain")["gnn.convs.0.lin_l.weight"], mask["gnn.convs.0.lin_l.weight"])
    assert PartStore(tmp_path, setup, resume=False).get("s0-louvain-pretrain") is None  # a fresh run recomputes
    other = PartStore(tmp_path, replace(setup, rounds=3, hidden_channels=8), resume=True)
    with pytest.raises(ValueError, match=r"another configuration.*\['hidden_channels', 'rounds'\]"):
        other.get("s0-louvain-pretrain")


def test_command_line_resume_needs_full():
    from eagles.reproduce import main

    with pytest.raises(SystemExit):
        main(["--out", "unused", "--resume"])


def test_method_cost_charges_the_pretraining_rounds_and_the_sparsifier():
    from eagles.experiments import method_cost

    fed = {"rounds": 10, "up_gnn": 100.0, "up_sparsifier": 0.0, "macs_gnn": 1000.0, "macs_sparsifier": 0.0}
    pre = {"rounds": 4, "up_gnn": 50.0, "up_sparsifier": 0.0, "macs_gnn": 600.0, "macs_sparsifier": 0.0}
    b = {"rounds": 10, "up_gnn": 30.0, "up_sparsifier": 70.0, "macs_gnn": 300.0, "macs_sparsifier": 900.0}
    assert method_cost(b, pre, fed, "up") == (4 * 50 + 10 * 100) / (10 * 100)
    assert method_cost(b, pre, fed, "macs") == (4 * 600 + 10 * 1200) / (10 * 1000)
    a = {**b, "up_sparsifier": 0.0}
    assert method_cost(a, pre, fed, "up") == 0.5  # the GNN side alone would read 0.3, the band's density


@pytest.mark.parametrize(
    ("uploads", "verdict"),
    [((0.30, 0.31, 0.32), "holds"), ((0.31, 0.35, 0.39), "inconclusive"), ((2.0, 2.05, 2.1), "does not hold")],
)
def test_a_variants_verdicts_come_from_the_interval_over_seeds(uploads, verdict):
    from eagles.reproduce import TARGET, _variant_claims

    v = {
        "per_seed": {"acc_gap": [0.4, 1.3, 0.0], "up_method": list(uploads), "macs_method": [0.3, 0.31, 0.32]},
        "seed_ids": [0, 1, 2],
        "pretrain_rounds": [9, 9, 9],
    }
    acc, up, macs = _variant_claims("b", "(b)", v)
    assert up.verdict == verdict and up.details["seeds"]["n"] == 3
    assert up.details["rule_threshold"] == TARGET["up"] and up.details["rule_op"] == "<="
    lo, hi = up.details["seeds"]["interval"]
    assert (hi <= TARGET["up"]) == (verdict == "holds") and (lo > TARGET["up"]) == (verdict == "does not hold")
    assert acc.verdict == "holds" and macs.verdict == "holds"  # intervals [-0.9, 2.0] ≥ −2, [0.28, 0.34] ≤ 0.40
