"""The reproduction entry point on a shrunken setup (the claims are computed, verdicts can go either way)."""

from __future__ import annotations

import pytest

from rsd.experiments import Setup
from rsd.reproduce import reproduce


@pytest.mark.slow
def test_reproduce_small(tmp_path):
    res = reproduce(False, tmp_path, setup=Setup(n_problems=12))
    assert res.package == "rsd" and len(res.claims) == 3
    assert all(c.short and len(c.short) <= 32 for c in res.claims)
    assert isinstance(res.claims[0].holds, bool) and res.claims[1].holds is None
    methods = res.settings["methods"]
    assert methods["draft_only"]["counts"]["target_tokens"] == 0
    assert methods["target_only"]["counts"]["accepted_draft_tokens"] == 0
    assert (tmp_path / "accuracy_vs_flops.png").exists()
