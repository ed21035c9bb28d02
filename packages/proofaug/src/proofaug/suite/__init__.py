"""The proposal suite shipped with the package, and a reader for a local miniF2F-rocq checkout.

The suite: 24 Coq problems (miniF2F-style statements written by the developers, plus induction and list lemmas)
× 4 flawed or correct proposals of documented kinds, with the expected outcome of every method written before the
first run. Kinds and proportions of the first 96 proposals (fixed in advance):

======  ===  =====================================================================================
kind    n    what
======  ===  =====================================================================================
K0      16   correct proof
K1      14   hallucinated lemma or tactic inside a sub-proof
K2      14   wrong tactic choice for a step whose goal the ladder proves
K3      14   false intermediate claim (only a coarser cut can succeed, or nothing)
K4      14   bullet / brace structure errors and truncated proofs
K5      12   wrong strategy for a theorem no cut can rescue (needs induction)
K6      12   DSP-style sketch with ``admit`` holes
======  ===  =====================================================================================

A second batch of 13 (written, with its predictions, after the first runs showed that no K0–K6 proposal of the
old fixed quick subset needed a step of ProofAug that truncation at the first error lacks): K7 (6) a flaw in an
early case of an induction or case split whose later cases are correct and beyond the ladder; K8 (4) a wrong step
that succeeds and leaves an unprovable goal inside an otherwise correct structure; 3 more K5 proposals with a
scripted ERP completion (the induction the proposal lacks).

The quick reproduction draws, per seed, a stratified sample of 24 (:data:`QUICK_QUOTA`, :func:`sample_quick`).

15 of the 24 theorems are beyond the quick ladder at the theorem level (induction, rewriting, ``mod``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from proofaug.config import Problem
from proofaug.structure import split_sentences

__all__ = [
    "SuiteItem",
    "load_suite",
    "load_problems",
    "load_minif2f_rocq",
    "sample_quick",
    "KINDS",
    "METHODS",
    "QUICK_QUOTA",
]

KINDS = {
    "K0": "correct",
    "K1": "hallucinated lemma/tactic in a sub-proof",
    "K2": "wrong tactic, ladder-provable step",
    "K3": "false intermediate claim",
    "K4": "bullet/brace errors, truncation",
    "K5": "wrong strategy, unrescuable",
    "K6": "DSP sketch with admit holes",
    "K7": "flaw in an early case, later cases correct",
    "K8": "wrong step leaves an unprovable goal",
}
#: Per seed, how many proposals of each stratum the quick reproduction draws (24 in all); ``K5+erp`` are the K5
#: proposals that carry a scripted ERP completion.
QUICK_QUOTA = {"K0": 3, "K1": 3, "K2": 3, "K3": 3, "K4": 2, "K5": 1, "K5+erp": 2, "K6": 2, "K7": 3, "K8": 2}
METHODS = ("plain", "theorem_ladder", "dsp_holes", "first_error", "proofaug", "proofaug+erp")


@dataclass(frozen=True)
class SuiteItem:
    """One proposal of the suite and the outcome expected from each method (quick ladder)."""

    id: str
    problem: Problem
    kind: str
    proposal: str
    expected: dict
    erp: str | None = None
    quick: bool = False


def load_problems() -> dict[str, Problem]:
    """The suite's problems by name."""
    data = json.loads(resources.files("proofaug.suite").joinpath("problems.json").read_text())
    return {p["name"]: Problem(p["name"], data["header"], p["statement"]) for p in data["problems"]}


def load_suite(quick: bool = False) -> list[SuiteItem]:
    """Every proposal of the suite (``quick=True``: the original fixed subset of 24 of the first 96, which the
    benchmark times; the quick reproduction draws :func:`sample_quick` instead)."""
    problems = load_problems()
    items = []
    text = resources.files("proofaug.suite").joinpath("proposals.jsonl").read_text()
    for line in text.splitlines():
        r = json.loads(line)
        item = SuiteItem(
            r["id"],
            problems[r["problem"]],
            r["kind"],
            r["proposal"],
            r["expected"],
            r.get("erp"),
            r.get("quick", False),
        )
        if item.quick or not quick:
            items.append(item)
    return items


def sample_quick(seed: int, items: list[SuiteItem] | None = None) -> list[SuiteItem]:
    """The quick reproduction's proposals for ``seed``: per stratum of :data:`QUICK_QUOTA`, that many proposals
    drawn without replacement by ``random.Random(1234 + seed)``, in suite order."""
    import random

    items = load_suite() if items is None else items
    rng = random.Random(1234 + int(seed))
    chosen: set[str] = set()
    for stratum, k in QUICK_QUOTA.items():
        pool = [it.id for it in items if _stratum(it) == stratum]
        if len(pool) < k:
            raise ValueError(f"stratum {stratum!r} has {len(pool)} proposals, the quota asks for {k}")
        chosen.update(rng.sample(pool, k))
    return [it for it in items if it.id in chosen]


def _stratum(item: SuiteItem) -> str:
    return item.kind + ("+erp" if item.kind == "K5" and item.erp else "")


_THEOREM = re.compile(r"(Theorem|Lemma|Example)\s+([A-Za-z_][\w']*)")


def load_minif2f_rocq(path: str | Path, split: str = "test") -> list[Problem]:
    """Problems of a local miniF2F-rocq checkout (``<path>/<split>/*.v``, each ``Theorem … Proof. Admitted.``).

    The data set is not shipped (no licence file); clone it yourself. Everything before the theorem is the header.
    """
    folder = Path(path) / split
    if not folder.is_dir():
        raise FileNotFoundError(f"path: no folder {folder} (expected a miniF2F-rocq checkout with {split}/*.v)")
    out = []
    for f in sorted(folder.glob("*.v")):
        text = f.read_text()
        pos = 0
        for s in split_sentences(text):
            m = _THEOREM.match(s.code)
            if m:
                out.append(Problem(m.group(2), text[:pos].strip(), s.code))
                break
            pos += len(s.text)
    return out
