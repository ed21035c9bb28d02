"""The real data set (the ``[data]`` extra): Cora restricted to its largest connected component, as in the official
protocol. Skipped with a reason when Cora is not installed and downloads are off."""

import pytest
import torch

from icml25_shared.data import DataNotFoundError
from unifews.experiments import load_planetoid_lcc, stratified_split


@pytest.fixture(scope="module")
def cora():
    try:
        return load_planetoid_lcc("Cora")
    except DataNotFoundError as err:
        pytest.skip(f"Cora is not installed (pip install 'icml25-unifews[data]') and downloads are off: {err}")


def test_cora_lcc_has_the_official_sizes(cora):
    # 2,485 nodes and 10,138 directed edges; the dense SGC count (m + n) · f · L = 0.36 GMACs at L = 20 (Table III)
    assert cora.num_nodes == 2485 and cora.edge_index.size(1) == 10138
    assert cora.x.size(1) == 1433 and int(cora.y.max()) + 1 == 7
    assert abs((10138 + 2485) * 1433 * 20 / 1e9 - 0.36) / 0.36 < 0.01


def test_stratified_split_partitions_every_class_in_halves_and_quarters(cora):
    split = stratified_split(cora.y, seed=0)
    every = torch.cat([split.train, split.val, split.test])
    assert every.numel() == cora.num_nodes and torch.unique(every).numel() == cora.num_nodes
    for c in range(7):
        n_c = int((cora.y == c).sum())
        assert abs(int((cora.y[split.train] == c).sum()) - 0.5 * n_c) <= 1
        assert abs(int((cora.y[split.val] == c).sum()) - 0.25 * n_c) <= 1


def test_missing_data_raises_the_clear_error(monkeypatch):
    from icml25_shared import data as shared_data

    def missing(name, dest, path=None, *, download=False):
        raise DataNotFoundError(f"{name} not found (test)")

    monkeypatch.setattr(shared_data, "copy_to", missing)
    with pytest.raises(DataNotFoundError, match="Cora not found"):
        load_planetoid_lcc("Cora")
