import numpy as np
import pytest
import torch

from eagles.config import EaglesConfig
from eagles.nn import EaglesGCN


def test_defaults_and_numpy_scalars():
    c = EaglesConfig(top_s=np.int64(2), lr=np.float32(0.01))
    assert c.keep_ratios == (0.9, 0.7, 0.5, 0.3) and c.top_s == 2 and isinstance(c.lr, float)
    assert c.effective_threshold_lr == c.lr and EaglesConfig(threshold_lr=5e-4).effective_threshold_lr == 5e-4
    assert EaglesConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"keep_ratios": ()}, "keep_ratios must be a non-empty"),
        ({"keep_ratios": (0.5, 1.5)}, r"keep_ratios\[1\] must be"),
        ({"top_s": 0}, "top_s must be"),
        ({"top_s": 5}, "top_s must be"),
        ({"aggregation": "median"}, "aggregation must be one of"),
        ({"select_on": "train"}, "select_on must be one of"),
        ({"bands": (0.3, 0.5)}, "bands must be strictly decreasing"),
        ({"bands": ()}, "bands must be a non-empty"),
        ({"lr": 0.0}, "lr must be"),
        ({"graph_sparsifier": 1}, "graph_sparsifier must be a bool"),
        ({"distance": "cos"}, "distance must be one of"),
    ],
)
def test_bad_config_names_argument_value_and_expectation(kw, match):
    with pytest.raises(ValueError, match=match):
        EaglesConfig(**kw)


def test_unknown_field_and_dtype_mismatch_are_clear():
    with pytest.raises(ValueError, match="unknown EaglesConfig field"):
        EaglesConfig.from_dict({"keep_ratio": [0.5]})
    gnn = EaglesGCN(4, 3, 2, num_layers=2)
    with pytest.raises(ValueError, match="x must have the model's dtype"):
        gnn(torch.randn(5, 4, dtype=torch.float64), torch.zeros(2, 0, dtype=torch.long))
