"""Isabelle: the server backend and ProofAug on Isar (MCSP, block cuts, repair, idempotence) against a fake
server client replaying recorded step outcomes; a live test only where ``isabelle`` is installed."""

from __future__ import annotations

import pytest
from isabelle_fake import FakeIsabelleClient

from proofaug import Problem, ProofAug, ProofAugConfig
from proofaug.augment import Cut
from proofaug.backends.isabelle import IsabelleBackend, isabelle_available
from proofaug.structure import split_isar

HEADER = "Complex_Main"
STMT = 'theorem t: "x * x = 4 \\<and> x + x = 4" if "x = (2::nat)"'
P = Problem("t", HEADER, STMT, language="isabelle")
GOAL = "x * x = 4 \\<and> x + x = 4"
PROVABLE = {
    ("x * x = 4", "auto"),
    ("x + x = 4", "simp"),
    ("x + x = 4", "auto"),
    (GOAL, "blast"),
}
LADDER = ProofAugConfig(hammers=("simp", "auto"), hammer_timeout=5.0)

GOOD = """proof -
  have h1: "x * x = 4"
    using that by auto
  have h2: "x + x = 4"
    using that by simp
  show ?thesis
    using h1 h2 by blast
qed"""
WRONG_LEAF = GOOD.replace("using that by auto", "using that by bogus")
FALSE_CLAIM = """proof -
  have h1: "x * x = 4"
  proof -
    have h3: "x = 3"
      using that by simp
    show ?thesis
      using h3 by simp
  qed
  have h2: "x + x = 4"
    using that by simp
  show ?thesis
    using h1 h2 by blast
qed"""
BAD_METHOD = FALSE_CLAIM.replace("  proof -\n", "  proof (rule bogus)\n", 1)
REPAIRED_BLOCK = """proof -
  have h1: "x * x = 4" by auto
  have h2: "x + x = 4"
    using that by simp
  show ?thesis
    using h1 h2 by blast
qed"""


def fake():
    client = FakeIsabelleClient(PROVABLE)
    return IsabelleBackend(client=client), client


def test_isabelle_backend_protocol():
    isa, client = fake()
    st = isa.start(P)
    assert st.ok and st.state == (P, ())
    r = isa.run(st.state, "proof -", 5)
    assert r.ok and client.theories[-1].rstrip().endswith("proof -\noops\nend")
    bad = isa.run(r.state, "by simp", 5)
    assert not bad.ok and "state" in bad.message and bad.state == r.state
    done = isa.run_hammer(st.state, "blast", 5)
    assert done.ok and isa.run(done.state, "end", 5).ok
    assert not isa.run(r.state, "end", 5).ok  # the proof is unfinished
    assert "imports Complex_Main begin" in client.theories[0] and client.options == ["quick_and_dirty"]
    assert isa.check(P, GOOD).ok
    assert not isa.check(P, GOOD.replace("by auto", "sorry")).ok  # rejected before the server sees it
    assert not isa.check(P, WRONG_LEAF).ok
    assert isa.calls == 9 and len(client.theories) == 8  # the sorry proof never reached the server
    isa.close()


def test_isar_steps_round_trip():
    steps = split_isar(FALSE_CLAIM)
    assert "".join(s.text for s in steps) == FALSE_CLAIM
    assert [s.kind for s in steps][:6] == ["open", "command", "open", "command", "command", "tactic"]


def test_isar_mcsp_one_wrong_leaf_one_sorry_and_block_hole():
    isa, _ = fake()
    pa = ProofAug(isa, LADDER)
    semi = pa.mcsp(P, WRONG_LEAF)
    assert semi.text == WRONG_LEAF.replace("by bogus", "sorry") and len(semi.holes) == 1
    assert pa.mcsp(P, GOOD).holes == []
    # a failing `proof m` makes its whole proof ... qed one sorry (the statement before it is kept)
    semi = pa.mcsp(P, BAD_METHOD)
    assert len(semi.holes) == 1 and "proof (rule bogus)" not in semi.text and "h3" not in semi.text
    assert semi.text.startswith('proof -\n  have h1: "x * x = 4"\n  sorry\n  have h2')


def test_isar_augment_repairs_coarsens_and_is_idempotent():
    isa, client = fake()
    pa = ProofAug(isa, LADDER)
    assert pa.augment(P, GOOD).stage == "init_proof"
    res = pa.augment(P, WRONG_LEAF)
    assert res.success and res.stage == "init_atp" and res.proof == GOOD
    assert pa.augment(P, res.proof).proof == res.proof
    semi = pa.mcsp(P, FALSE_CLAIM)
    # 0 proof 1 have h1 2 proof 3 have h3 4 using 5 sorry 6 show 7 using 8 sorry 9 qed 10 have h2 ...
    assert semi.holes == [5, 8]
    n = len(semi.body)
    for mode in ("partial_first", "entry", "entry_then_partial"):  # Isar has block entries only
        cuts = ProofAug(isa, ProofAugConfig(hammers=("simp",), cuts=mode)).cuts(semi, 5)
        assert cuts == [Cut(5, 6), Cut(2, 10), Cut(0, n)]
    res = pa.augment(P, FALSE_CLAIM)
    assert res.success and res.stage == "coarse_atp"
    assert res.proof == REPAIRED_BLOCK.replace('"x * x = 4" by auto', '"x * x = 4"\n  by auto')
    assert res.checker_calls > 0 and not pa.run_method(P, FALSE_CLAIM, "plain").success
    assert not pa.run_method(P, GOOD, "theorem_ladder").success  # neither simp nor auto proves the theorem
    res = ProofAug(isa, ProofAugConfig(hammers=("simp", "blast"))).run_method(P, GOOD, "theorem_ladder")
    assert res.success and res.proof.strip() == "by blast"


def test_isar_truncated_proposal_is_closed():
    isa, _ = fake()
    truncated = GOOD.split("\n  show ?thesis")[0]  # the model stopped before the last `show` and `qed`
    pa = ProofAug(isa, ProofAugConfig(hammers=("simp", "blast")))
    semi = pa.mcsp(P, truncated)  # R4 at `end`: show the block's thesis with a hole, then close the block
    assert semi.text == truncated + "\n  show ?thesis\n  sorry\n  qed" and len(semi.holes) == 1
    res = pa.augment(P, truncated)
    assert res.success and res.stage == "init_atp" and res.proof == truncated + "\n  show ?thesis\n  by blast\n  qed"


@pytest.mark.skipif(not isabelle_available(), reason="isabelle not installed (live Isabelle server test)")
def test_isabelle_live():
    prob = Problem("t", "Main", 'theorem t: "(2::nat) + 2 = 4"', language="isabelle")
    with IsabelleBackend() as isa:
        res = ProofAug(isa, ProofAugConfig(hammers=("simp",), hammer_timeout=30.0)).augment(prob, "by bogus")
        assert res.success and res.proof.strip() == "by simp"


def test_isabelle_final_check_rejects_cheats_before_the_server():
    isa, client = fake()
    before = len(client.theories)
    cheats = [
        "proof -\n  show ?thesis sorry\nqed",
        "by (tactic {* all_tac *}) oops",
        "proof -\n  ML \\<open>Thm.assume\\<close>\n  show ?thesis by simp\nqed",
        "by (rule cheat_oracle) (* oracle *)",
        "using axiomatization_thm by simp\naxiomatization where ax: False",
        "by simp\nlemma other: False sorry",
        "by simp\ndeclare [[quick_and_dirty]]",
        "by simp\nsetup \\<open>I\\<close>",
        "\\<proof>",
    ]
    for text in cheats:
        res = isa.check(P, text)
        assert not res.ok and "the proof uses" in res.message, text
    assert len(client.theories) == before  # none reached the server
    isa.close()
