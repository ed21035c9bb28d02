"""Pure-Python structure: Coq sentences and blocks, Lean 4 blocks, Isar proof/qed matching."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proofaug.structure import (
    LeanBlock,
    LeanSnippet,
    build_blocks,
    innermost,
    isar_blocks,
    lean_script,
    match_isar,
    normalize_isar,
    parse_lean,
    parse_proof,
    split_inline,
    split_isar,
    split_lean_inline,
    split_sentences,
)


def codes(text):
    return [s.code for s in split_sentences(text) if s.kind != "blank"]


def test_sentences_comments_strings_names():
    text = (
        "intros n. (* a comment. with (* nested. *) dots. *) rewrite Nat.add_comm.\n"
        '  idtac "a. b". simpl..   exact (fun x => x).'
    )
    assert codes(text) == ["intros n.", "rewrite Nat.add_comm.", 'idtac "a. b".', "simpl.. exact (fun x => x)."]
    # the comment travels with the sentence that follows it, as leading text
    assert split_sentences(text)[1].lead.strip().startswith("(* a comment.")


def test_bullets_braces_and_selectors():
    text = "split.\n- lia.\n- { auto. }\n  2: { easy. }\n  ++ simpl.\n  ** reflexivity.\n}"
    sents = [s for s in split_sentences(text) if s.kind != "blank"]
    assert [(s.kind, s.code) for s in sents] == [
        ("tactic", "split."),
        ("bullet", "-"),
        ("tactic", "lia."),
        ("bullet", "-"),
        ("open", "{"),
        ("tactic", "auto."),
        ("close", "}"),
        ("open", "2: {"),
        ("tactic", "easy."),
        ("close", "}"),
        ("bullet", "++"),
        ("tactic", "simpl."),
        ("bullet", "**"),
        ("tactic", "reflexivity."),
        ("close", "}"),
    ]


def test_unterminated_tail_and_trailing_blank():
    sents = split_sentences("intros. lia")
    assert [(s.code, s.terminated) for s in sents] == [("intros.", True), ("lia", False)]
    sents = split_sentences("intros.  (* done *)\n")
    assert [s.kind for s in sents] == ["tactic", "blank"]


_atoms = st.sampled_from(
    [
        "intros n.",
        "lia.",
        "rewrite Nat.add_comm.",
        "- ",
        "+ ",
        "{ ",
        "} ",
        "2: { ",
        "(* c. (* d. *) *) ",
        '"s. t" ',
        "assert (h : 1 = 1) by reflexivity.",
        "simpl..",
        "\n  ",
        " ",
        "exact (fun x => x).",
        "*",
        "..",
        ".",
        "x",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_atoms, max_size=25))
def test_round_trip_property(parts):
    text = "".join(parts)
    assert "".join(s.text for s in split_sentences(text)) == text


def test_blocks_tree():
    body = split_sentences("intros.\nsplit.\n- lia.\n- split.\n  + auto.\n  + { easy. }\ntac.")
    root, blocks = build_blocks(body)
    kinds = [(b.kind, b.start, b.end, b.depth) for b in blocks]
    # sentences: 0 intros 1 split 2 - 3 lia 4 - 5 split 6 + 7 auto 8 + 9 { 10 easy 11 } 12 tac
    assert kinds == [
        ("root", 0, 13, 0),
        ("bullet", 3, 4, 1),
        ("bullet", 5, 13, 1),
        ("bullet", 7, 8, 2),
        ("bullet", 9, 13, 2),
        ("brace", 10, 11, 3),
    ]
    assert innermost(blocks, 10).kind == "brace"
    assert root.direct() == [0, 1, 2, 4]
    assert blocks[2].element_of(10) == 8


def test_parse_proof_cuts_second_theorem_and_admitted():
    s = parse_proof("Proof.\n  lia.\nQed.\n\nTheorem other : True.\nProof. auto. Qed.")
    assert [x.code for x in s.body] == ["lia."] and s.ended and "Theorem other" in s.dropped
    s = parse_proof("Proof. intros. Admitted.")
    assert [x.code for x in s.body] == ["intros."] and not s.ended
    s = parse_proof("intros. lia.")
    assert s.render() == "Proof.\nintros. lia.\nQed."  # `Proof.intros` would be one word to Coq
    full = "Proof.\n  intros.\n  lia.\nQed."
    assert parse_proof(full).render() == full


def test_split_inline():
    assert split_inline("assert (h : x = 1) by lia.") == ("assert (h : x = 1)", "lia")
    assert split_inline("rewrite H by (simpl; lia).") == ("rewrite H", "(simpl; lia)")
    assert split_inline("assert (h : forall x, P x) .") is None
    assert split_inline("exact (ltac:(assert True by auto; auto)).") is None  # `by` nested in parentheses
    assert split_inline("apply baby.") is None


LEAN = """theorem foo (a b : ℕ) (h₀ : a = 2) : a + b ≥ 2 := by
  -- a comment that must vanish
  have h₁ : a ≥ 2 := by
    rw [h₀]
  have h₂ : b ≥ 0 := by
    exact Nat.zero_le b
  /- block
     comment -/
  have h₃ := h₁
  cases b with
  | zero => simp
  | succ n =>
    omega
  nlinarith [h₁,
    h₂]
  norm_num <;>
    linarith
"""


def test_lean_block_tree():
    root = parse_lean(LEAN)
    (thm,) = root.parts
    assert isinstance(thm, LeanBlock) and thm.level == 0 and thm.analysable
    kinds = [(type(p).__name__, p.level, p.line) for p in thm.parts]
    assert kinds == [
        ("LeanBlock", 1, 3),
        ("LeanBlock", 1, 5),
        ("LeanBlock", 1, 9),
        ("LeanSnippet", 1, 10),
        ("LeanSnippet", 1, 14),
        ("LeanSnippet", 1, 16),
    ]
    h1, h2, h3, cases, nl, nn = thm.parts
    assert [p.text.strip() for p in h1.parts] == ["rw [h₀]"] and h1.parts[0].level == 2
    assert h3.term and h3.parts == []
    assert [ln.strip() for ln in cases.text.splitlines()] == ["cases b with", "| zero => simp", "| succ n =>", "omega"]
    assert nl.text.count("\n") == 1 and nn.text.strip().endswith("linarith")
    assert isinstance(nn, LeanSnippet)


def test_lean_split_statement_flagged():
    root = parse_lean("theorem t : True := by\n  have h : 1 = 1 :=\n    by rfl\n  trivial\n")
    have = root.parts[0].parts[0]
    assert isinstance(have, LeanBlock) and not have.analysable
    root = parse_lean("theorem t\n    (x : Nat) : x = x := by\n  rfl\n")
    assert root.parts[0].analysable and root.parts[0].statement.endswith(":= by")


def test_isar_matcher():
    steps = ["proof -", "have a: x by simp", "proof (cases)", "show ?thesis sledgehammer", "qed", "qed"]
    assert [(b.proof, b.qed) for b in match_isar(steps)] == [(2, 4), (0, 5)]
    assert normalize_isar("by sledgehammer oops \\<proof>") == "by sorry sorry sorry"
    with pytest.raises(ValueError, match="never closed"):
        match_isar(["proof -", "show x by simp"])
    with pytest.raises(ValueError, match="no matching"):
        match_isar(["qed"])


def test_lean_script_steps():
    script = lean_script(LEAN + "\ntheorem other : True := trivial\n")
    assert script.head == ":= by" and script.dropped.startswith(LEAN.split("\n")[0])  # repeated statement dropped
    assert "theorem other" in script.dropped  # a second declaration ends the proof
    kinds = [(s.kind, s.code.split("\n")[0]) for s in script.body]
    assert kinds == [
        ("open", "have h₁ : a ≥ 2"),  # executed as Mathlib's `have h : P` (goal P first)
        ("tactic", "rw [h₀]"),
        ("close", ""),
        ("open", "have h₂ : b ≥ 0"),
        ("tactic", "exact Nat.zero_le b"),
        ("close", ""),
        ("tactic", "have h₃ := h₁"),
        ("tactic", "cases b with"),
        ("tactic", "nlinarith [h₁,"),
        ("tactic", "norm_num <;>"),
    ]
    cases = script.body[7].code
    assert cases == "cases b with\n| zero => simp\n| succ n =>\n  omega"  # line breaks kept, dedented
    rendered = script.render()
    assert rendered.startswith(":= by\n  have h₁ : a ≥ 2 := by\n    rw [h₀]\n") and "comment" not in rendered
    assert lean_script(rendered).render() == rendered  # a rendered proof parses back to itself
    assert split_lean_inline("have h : x = 1 := by omega") == ("have h : x = 1", "omega")
    assert split_lean_inline("have h := foo") is None


def test_isar_steps_quotes_cartouches_comments():
    text = (
        "proof (induct n)\n  case 0 show ?case by simp\nnext\n  case (Suc k)\n"
        '  have "x = y by z" (* a by comment proof *) using \\<open>a by b\\<close> \u2039c by d\u203a by auto\n'
        "  then show ?case ..\nqed"
    )
    steps = split_isar(text)
    assert "".join(s.text for s in steps) == text
    assert [s.code for s in steps] == [
        "proof (induct n)",
        "case 0",
        "show ?case",
        "by simp",
        "next",
        "case (Suc k)",
        'have "x = y by z" (* a by comment proof *)',
        "using \\<open>a by b\\<close> \u2039c by d\u203a",
        "by auto",
        "then",
        "show ?case",
        "..",
        "qed",
    ]
    assert [s.kind for s in steps][:4] == ["open", "command", "command", "tactic"] and steps[-1].kind == "close"
    _, blocks = isar_blocks(steps)
    assert [(b.kind, b.start, b.end) for b in blocks] == [("root", 0, 13), ("proof", 0, 13)]


ISAR_ATOMS = ["proof", "qed", "have", "show", "by", "apply", "done", "sorry", " ", "\n", "(", ")", '"', "x", ".", ".."]
ISAR_ATOMS += ["\\<open>", "\\<close>", "(*", "*)", "\u2039", "\u203a", "?thesis", "using", "simp"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(ISAR_ATOMS), max_size=40))
def test_isar_split_round_trip(atoms):
    text = "".join(atoms)
    steps = split_isar(text)
    assert "".join(s.text for s in steps) == text
    assert all(s.kind == "blank" or s.text.strip() for s in steps)
