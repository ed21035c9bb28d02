"""ProofAug on a prover backend: the maximal compatible semi-proof (MCSP) and hole filling at every granularity.

Paper, Alg. 1: execute the proposal step by step; a failing proof step becomes ``sorry`` and a failing structure
step is dropped, which yields the *maximal compatible semi-proof*. Then, for each ``sorry`` in order, run the
automation ladder on its state; when it fails, replace the proof of the enclosing conjecture by one ``sorry`` and
try again (the parent's, …, up to the theorem). A success is decided only by an independent re-check of the whole
proof.

Coq transfer (our contract; the paper's Isar modes do not exist in Coq):

* R1 a failing ``S by T.`` is retried as ``S by admit.`` (the inline sub-proof is the hole);
* R2 any other failing tactic becomes ``admit.`` (it closes the focused goal at the partial state);
* R3 a sentence that fails because no goal is focused is dropped (an orphan ``{`` or bullet with its subtree);
* R4 a ``}``, bullet or ``Qed.`` that fails because goals remain gets an ``admit.`` inserted before it;
* R5 the statement fails (``StatementError``) or an error no rule covers: the proposal is abandoned.

Granularities (cuts) for a hole in blocks B0 ⊂ B1 ⊂ … ⊂ root: the hole itself, then for each block its last
single-goal partial state and its entry (``cuts="partial_first"``), only entries (``"entry"``, the paper's
Isabelle granularity) or entry then partial (``"entry_then_partial"``, the order of the paper's Lean code).

The same algorithm runs on Lean 4 and Isabelle: :mod:`proofaug.dialects` supplies each language's steps and
blocks (Lean ``have … := by`` bodies, Isar ``proof … qed``), its hole (``sorry``) and its messages; the problem's
``language`` picks the dialect. On Lean a ``have`` block is closed when its goal count is back to the count
before it (R4 inserts ``sorry`` until it is); on Isar a failing ``proof m`` makes its whole block one ``sorry``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from icml25_shared.validate import check_choice
from proofaug.backends.base import BackendError, ProverBackend, StatementError, normalize_goals
from proofaug.backends.kernel import screen_body
from proofaug.config import Problem, ProofAugConfig
from proofaug.dialects import Dialect, dialect_for, focused_goals
from proofaug.structure import ProofScript, Sentence, innermost, split_sentences

__all__ = ["ProofAug", "ProofAugResult", "SemiProof", "Cut", "focused_goals", "Stage", "Proposer"]

log = logging.getLogger(__name__)

Stage = Literal["init_proof", "init_atp", "coarse_atp", "erp", "failed", "backend_error"]
Proposer = Callable[..., list[str]]

_NEXT_BULLET = re.compile(r"bullet ([-+*]+)")


@dataclass
class SemiProof:
    """A proposal with holes, executed: ``states[k]``/``goals[k]`` are the prover state and goal display before
    body sentence ``k`` (``states[len(body)]`` after the last); ``holes`` are indices of ``admit`` sentences."""

    script: ProofScript
    body: list[Sentence]
    states: list[Any]
    goals: list[str]
    holes: list[int]
    modified: bool = False
    has_timeout: bool = False

    @property
    def text(self) -> str:
        """The semi-proof as a proof text (``Proof. … Qed.``)."""
        return self.script.render(self.body)


@dataclass(frozen=True)
class Cut:
    """Candidate: body sentences ``start:end`` replaced by one hole (``inline``: the hole is ``stmt by _``)."""

    start: int
    end: int
    inline: str | None = None


@dataclass
class ProofAugResult:
    """Outcome of :meth:`ProofAug.augment` on one proposal."""

    success: bool
    """Decided by the backend's independent final check only."""
    proof: str
    """The repaired proof (``Proof. … Qed.``), or the last semi-proof / the proposal on failure."""
    stage: Stage
    """``init_proof`` (correct as written), ``init_atp`` (repaired without coarsening), ``coarse_atp`` (at least
    one coarser cut), ``erp``, ``failed`` or ``backend_error`` (the prover crashed; never a success)."""
    semi_proofs: list[str] = field(default_factory=list)
    """Candidate semi-proofs tried, in order (each candidate text once)."""
    hammer_index: list[int] = field(default_factory=list)
    """Index into ``config.ladder`` of the tactic spliced into each filled hole."""
    checker_calls: int = 0
    """Prover calls made for this proposal (equals the backend's call log)."""
    proposer_calls: int = 0
    """Extra model queries (ERP)."""
    has_timeout: bool = False
    """A proposal step hit ``step_timeout`` and became a hole."""
    seconds: float = 0.0
    """Wall-clock seconds spent on this proposal."""
    message: str = ""
    """Why the final check failed, the budget ran out or the backend crashed."""


class _Budget(Exception):
    pass


class ProofAug:
    """ProofAug (paper, Alg. 1) with a prover backend.

    Args:
        backend: a :class:`~proofaug.backends.base.ProverBackend` (e.g. ``CoqBackend()``).
        config: the method's hyper-parameters.
        proposer: for ERP (``config.erp``): ``proposer(prompt, n) -> list[str]`` completions of a proof prefix.
    """

    def __init__(
        self, backend: ProverBackend, config: ProofAugConfig | None = None, proposer: Proposer | None = None
    ) -> None:
        self.backend = backend
        self.config = config or ProofAugConfig()
        if not isinstance(self.config, ProofAugConfig):
            raise TypeError(f"config must be a ProofAugConfig, got {type(self.config).__name__}")
        if self.config.erp and proposer is None:
            raise ValueError("proposer must be given when config.erp is True, got None")
        self.proposer = proposer
        self.memo: dict[tuple[str, str, str], bool] = {}
        """(header, goal display, tactic) -> whether the tactic closed the goal; shareable between instances."""
        self.memo_hits = 0
        self.memo_lookups = 0
        self._calls0 = 0
        self._proposer_calls = 0
        self._why = ""

    # ------------------------------------------------------------------------------------------------ public
    def augment(self, problem: Problem, proposal: str) -> ProofAugResult:
        """Repair ``proposal`` for ``problem`` (Alg. 1).

        Args:
            problem: the theorem to prove.
            proposal: a model-written proof (``Proof. … Qed.``, or its body alone).

        Returns:
            The result; its ``success`` comes from the final check only, ``stage`` says how it was reached.
        """
        return self.run_method(problem, proposal, "proofaug")

    def mcsp(self, problem: Problem, proposal: str) -> SemiProof | None:
        """The maximal compatible semi-proof of ``proposal`` (rules R1–R5), or None when it is abandoned."""
        _check_args(problem, proposal)
        return self._mcsp(problem, _parse(proposal, problem.language), "mcsp")

    def run_method(
        self,
        problem: Problem,
        proposal: str,
        method: Literal["proofaug", "plain", "theorem_ladder", "dsp_holes", "first_error"] = "proofaug",
    ) -> ProofAugResult:
        """``proofaug`` or one of the single-granularity baselines on the same backend and ladder.

        ``plain`` checks the proposal as written; ``theorem_ladder`` runs the ladder on the bare theorem;
        ``dsp_holes`` runs it only in the proposal's own ``admit`` holes; ``first_error`` truncates the proposal at
        its first error and runs it there (and at any goal the truncation leaves open), nothing coarser.
        """
        _check_args(problem, proposal)
        check_choice("method", method, ("proofaug", "plain", "theorem_ladder", "dsp_holes", "first_error"))
        if self.config.erp and problem.language != "coq":
            raise ValueError(f"erp is implemented for Coq problems only, got problem.language={problem.language!r}")
        t0 = time.perf_counter()
        self._calls0 = self.backend.calls
        self._proposer_calls = 0
        self._why = ""
        script = _parse(proposal, problem.language)
        tried: list[str] = []
        used: list[int] = []
        if problem.language == "coq":
            why = screen_body(script.body, final=False)
            if why is not None:  # never sent to the prover: it could edit the prover's environment
                return self._result(False, script.render(), "failed", tried, used, False, t0, f"rejected: {why}")
        try:
            if method == "plain" or (method == "proofaug" and not self.config.use_sorry):
                # plain checking: the REPL pass first (cheap), the final check decides
                text = script.render()
                semi = self._mcsp(problem, script, "plain")
                if semi is None or semi.holes or not script.ended:
                    why = self._why or ("the proof needs holes" if semi is not None else "")
                    return self._result(False, text, "failed", tried, used, False, t0, why)
                return self._final(problem, text, "init_proof", tried, used, False, t0)
            if method == "theorem_ladder":
                script = replace(script, body=[], dropped="")
                semi = self._mcsp(problem, script, "mcsp")
            else:
                mode = {"proofaug": "mcsp", "dsp_holes": "holes", "first_error": "truncate"}[method]
                semi = self._mcsp(problem, script, mode)
            if semi is None:
                why = f"abandoned: {self._why}" if self._why else "abandoned"
                return self._result(False, script.render(), "failed", tried, used, False, t0, why)
            coarse_ok = method in ("proofaug", "theorem_ladder")
            filled = self._fill(problem, semi, coarse_ok, tried, used, dialect_for(problem.language))
            if filled is None:
                return self._result(False, semi.text, "failed", tried, used, semi.has_timeout, t0, self._why)
            semi, stage = filled
            if stage == "init_atp" and not semi.modified and not used:
                stage = "init_proof"
            return self._final(problem, semi.text, stage, tried, used, semi.has_timeout, t0)
        except _Budget:
            return self._result(False, script.render(), "failed", tried, used, False, t0, "budget exhausted")
        except BackendError as err:
            return self._result(False, script.render(), "backend_error", tried, used, False, t0, str(err))

    # ------------------------------------------------------------------------------------------------ MCSP
    def _spend(self) -> None:
        cap = self.config.max_checker_calls
        if cap is not None and self.backend.calls - self._calls0 >= cap:
            raise _Budget

    def _run(self, state: Any, code: str, timeout: float | None = None):
        self._spend()
        return self.backend.run(state, code, timeout or self.config.step_timeout)

    def _mcsp(self, problem: Problem, script: ProofScript, mode: str) -> SemiProof | None:
        """Execute ``script`` under ``mode``: ``mcsp`` (R1–R5), ``holes`` (only the proposal's own admits are
        holes; any error abandons), ``truncate`` (drop everything from the first error), ``plain``."""
        start = self.backend.start(problem)
        if not start.ok:
            raise StatementError(f"statement of {problem.name!r} fails: {start.message}")
        d = dialect_for(problem.language)
        src = script.body
        _, blocks = d.blocks(src)
        expect: list[int] = []  # Lean: goal count before each open `have` block
        body: list[Sentence] = []
        states, goals, holes = [], [], []
        state, shown = start.state, start.goals
        modified = has_timeout = False

        def emit(sent: Sentence, res: Any, hole: bool) -> None:
            nonlocal state, shown
            states.append(state)
            goals.append(shown)
            if hole:
                holes.append(len(body))
            body.append(sent)
            state = res.state
            shown = res.goals or shown

        def close_one(indent: str) -> str:
            """R4: insert the hole before a closing step (Coq: or the bullet / ``}`` it asks for first; Isar in
            state mode: ``qed``, or ``show ?thesis`` and the hole); ``"orphan"`` when no goal is left at all (the
            closing step itself is then an orphan, R3)."""
            r = self._run(state, d.hole)
            if r.ok:
                emit(d.at(indent, d.hole), r, True)
                return "inserted"
            if d.name == "isabelle" and d.orphan(r.message):  # state mode: end the block, or show its thesis
                r = self._run(state, "qed")
                if r.ok:
                    emit(Sentence(indent + "qed", "close"), r, False)
                    return "inserted"
                r = self._run(state, "show ?thesis")
                if r.ok:
                    emit(Sentence(indent + "show ?thesis", "command"), r, False)
                    return close_one(indent)
                return "fail"
            if d.name != "coq":
                return "orphan" if d.orphan(r.message) else "fail"
            m = _NEXT_BULLET.search(r.message)
            code = m.group(1) if m else ("}" if "unfocusing" in r.message or "}" in r.message else None)
            if code is None:
                return "orphan" if d.orphan(r.message) else "fail"
            r = self._run(state, code)
            if not r.ok:
                return "fail"
            emit(Sentence(indent + code, "bullet" if code != "}" else "close"), r, False)
            return "inserted"

        def close_block(indent: str) -> bool:
            """Lean: close the innermost open ``have`` block (R4: ``sorry`` until its goals are proved)."""
            nonlocal modified
            g = expect.pop()
            while d.n_goals(shown) > g:
                if mode in ("plain", "holes") or close_one(indent) != "inserted":
                    return False
                modified = True
            emit(Sentence("", "close", exec=""), _Res(state, shown), False)
            return True

        i = 0
        while i < len(src):
            s = src[i]
            if s.kind == "blank":
                i += 1
                continue
            if s.kind == "close" and d.virtual_close:
                if not expect or not close_block(d.insert_indent(body, None)):
                    return None
                i += 1
                continue
            before = d.n_goals(shown)
            res = self._run(state, s.code) if s.terminated else None
            if res is not None and res.ok:
                emit(s, res, s.kind == "tactic" and d.is_hole(s.code))
                if s.kind == "open" and d.virtual_close:
                    expect.append(before)
                i += 1
                continue
            msg = res.message if res is not None else "unterminated sentence"
            has_timeout |= bool(res is not None and res.timed_out)
            if mode in ("plain", "holes"):
                self._why = f"{s.code[:60]!r}: {msg[:200]}"
                return None
            modified = True
            if mode == "truncate":
                break
            indent = d.insert_indent(body, s)
            if d.unclosed(msg) and s.kind in ("close", "bullet"):  # R4
                done = close_one(indent)
                if done == "fail":
                    return None
                if done == "orphan":  # R3: an unmatched `}` with nothing left to prove
                    i += 1
                continue
            if d.orphan(msg):  # R3
                i = _subtree_end(blocks, i, src) if s.kind in ("open", "bullet") else i + 1
                continue
            if s.kind == "open" and d.open_fail_hole:  # Isar: a failing `proof m` -> its block is one hole
                r = self._run(state, d.hole)
                if r.ok:
                    emit(d.replace(s, d.hole), r, True)
                    i = next((b.end for b in blocks if b.kind == "proof" and b.start == i), i + 1)
                    continue
            if s.kind == "tactic":
                inline = d.inline(s.code) if s.terminated else None
                if inline is not None:  # R1
                    code = d.inline_hole(inline[0])
                    r = self._run(state, code)
                    has_timeout |= r.timed_out
                    if r.ok:
                        emit(d.replace(s, code), r, True)
                        i += 1
                        continue
                r = self._run(state, d.hole)  # R2
                if r.ok:
                    emit(d.replace(s, d.hole), r, True)
                    i += 1
                    continue
                if d.orphan(r.message):  # R3 after all
                    i += 1
                    continue
            log.debug("R5: %r failed with %s", s.code, msg)
            self._why = f"{s.code[:60]!r}: {msg[:200]}"
            return None
        while expect:  # Lean: blocks left open by truncation
            if not close_block(d.insert_indent(body, None)):
                return None
        for _ in range(4 * len(src) + 20):  # Qed (Lean: no goal left), with R4 until the proof can be saved
            if d.end is None:
                if d.n_goals(shown) == 0:
                    break
                msg = "goals remain"
            else:
                r = self._run(state, d.end)
                if r.ok or "given up goals" in r.message:
                    break
                msg = r.message if d.unclosed(r.message) else ""
            indent = d.insert_indent(body, None)
            if mode in ("plain", "holes") or not msg or close_one(indent) != "inserted":
                self._why = f"the proof cannot be ended: {(r.message if d.end is not None else msg)[:200]}"
                return None
            modified = True
        else:
            return None
        states.append(state)
        goals.append(shown)
        return SemiProof(script, body, states, goals, holes, modified, has_timeout)

    # ------------------------------------------------------------------------------------------------ cuts
    def cuts(self, semi: SemiProof, hole: int) -> list[Cut]:
        """Candidate cuts for ``hole``, finest first, the theorem last, deduplicated (see the module docstring)."""
        d = dialect_for(semi.script.language)
        body = semi.body
        inline = d.inline(body[hole].code)
        out = [Cut(hole, hole + 1, inline[0] if inline else None)]
        _, blocks = d.blocks(body)
        b = innermost(blocks, hole)
        while b is not None:
            elem = b.element_of(hole)
            partial = [k for k in b.direct() if k <= elem and d.single_goal(semi.goals, b, k)]
            entry = Cut(b.start, b.end) if b.start < b.end else None
            part = Cut(max(partial), b.end) if partial else None
            order = {
                "partial_first": [part, entry],
                "entry": [entry],
                "entry_then_partial": [entry, part],
            }[self.config.cuts]
            for c in order:
                if c is not None and c not in out:
                    out.append(c)
            b = b.parent
        return out

    def _fill(
        self, problem: Problem, semi: SemiProof, coarse_ok: bool, tried: list[str], used: list[int], d: Dialect
    ) -> tuple[SemiProof, Stage] | None:
        seen: set[str] = set()
        coarsened = erp_used = False
        while semi.holes:
            hole = semi.holes[0]
            cands = self.cuts(semi, hole) if coarse_ok else self.cuts(semi, hole)[:1]
            for ci, cut in enumerate(cands):
                text = _render_cut(semi, cut, d)
                if text in seen:
                    continue
                seen.add(text)
                tried.append(text)
                if self.config.max_rounds is not None and len(tried) > self.config.max_rounds:
                    raise _Budget
                new = self._ladder(problem, semi, cut, used, d)
                if new is None and self.config.erp and ci == 0 and cut.inline is None and d.name == "coq":
                    new = self._erp(problem, semi, cut)
                    erp_used |= new is not None
                if new is not None:
                    semi = new
                    coarsened |= ci > 0
                    break
            else:
                self._why = f"no ladder tactic and no coarser cut fills the hole at {semi.body[hole].code[:60]!r}"
                return None
        return semi, ("coarse_atp" if coarsened else "erp" if erp_used else "init_atp")

    def _ladder(self, problem: Problem, semi: SemiProof, cut: Cut, used: list[int], d: Dialect) -> SemiProof | None:
        """Each ladder tactic from the cut's state; accepted when the goal list after it equals the goal list
        after ``admit`` from the same state, and the rest of the semi-proof replays."""
        state = semi.states[cut.start]
        hole_code = d.inline_hole(cut.inline) if cut.inline else d.hole
        ref = self._run(state, hole_code)
        if not ref.ok:
            return None
        want = normalize_goals(ref.goals)
        key_goal = normalize_goals(semi.goals[cut.start])
        for k, tac in enumerate(self.config.ladder):
            if cut.inline is not None and tac == "hammer":
                continue
            key = (problem.header, key_goal + "\0" + (cut.inline or ""), tac)
            self.memo_lookups += 1
            if key in self.memo:
                self.memo_hits += 1
                if not self.memo[key]:
                    continue
            self._spend()
            if cut.inline is None:
                r = self.backend.run_hammer(state, tac, self.config.hammer_timeout)
            else:
                r = self.backend.run(state, d.inline_hammer(cut.inline, tac), self.config.hammer_timeout)
            ok = r.ok and (not d.compare_goals or normalize_goals(r.goals) == want)
            self.memo[key] = ok
            if not ok:
                continue
            code = d.fill(tac) if cut.inline is None else d.inline_fill(cut.inline, tac)
            new = self._splice(semi, cut, code, r, d=d)
            if new is not None:
                used.append(k)
                return new
        return None

    def _splice(
        self, semi: SemiProof, cut: Cut, code: str, res: Any, extra_holes: int = 0, d: Dialect | None = None
    ) -> SemiProof | None:
        """Replace the cut by ``code`` (already executed: ``res``) and replay the rest of the semi-proof."""
        d = d or dialect_for(semi.script.language)
        first = semi.body[cut.start]
        filled = d.at(d.indent(first), code) if not cut.inline else d.replace(first, code)
        body = semi.body[: cut.start] + [filled]
        states = semi.states[: cut.start + 1]
        goals = semi.goals[: cut.start + 1]
        state, shown = res.state, res.goals or semi.goals[cut.start]
        shift = cut.start + 1 - cut.end
        holes = [h for h in semi.holes if h < cut.start] + [h + shift for h in semi.holes if h >= cut.end]
        for s in semi.body[cut.end :]:
            states.append(state)
            goals.append(shown)
            if s.kind == "close" and d.virtual_close:
                body.append(s)
                continue
            r = self._run(state, s.code)
            if not r.ok:
                return None
            body.append(s)
            state, shown = r.state, r.goals or shown
        states.append(state)
        goals.append(shown)
        return replace(semi, body=body, states=states, goals=goals, holes=holes)

    # ------------------------------------------------------------------------------------------------ ERP
    def _erp(self, problem: Problem, semi: SemiProof, cut: Cut) -> SemiProof | None:
        """Sec. 3.3: one model query for a hole the ladder cannot fill; accepted only if the completion closes
        the goal exactly as the hole did (goal list equal to the one after ``admit``)."""
        from proofaug.proposers import check_proposals, erp_prompt

        assert self.proposer is not None
        state = semi.states[cut.start]
        ref = self._run(state, "admit.")
        if not ref.ok:
            return None
        want = normalize_goals(ref.goals)
        prefix = "".join(s.text for s in semi.body[: cut.start])
        prompt = erp_prompt(problem, semi.script.head + prefix, semi.goals[cut.start])
        self._proposer_calls += 1
        completions = check_proposals(self.proposer(prompt, 1), 1, "proposer (ERP)")
        if not completions:
            return None

        sents = [s for s in split_sentences(completions[0]) if s.kind != "blank"]
        codes: list[str] = []
        cur, shown = state, semi.goals[cut.start]
        for s in sents:
            if s.kind in ("end", "command", "proof") or not s.terminated:
                break
            r = self._run(cur, s.code)
            if r.ok:
                codes.append(s.code)
            else:  # a failing proof step is patched by the ladder; a failing structure step aborts
                if s.kind != "tactic" or focused_goals(shown) == 0:
                    return None
                patched = self._patch(cur)
                if patched is None:
                    return None
                codes.append(patched[0])
                r = patched[1]
            cur, shown = r.state, r.goals or shown
            if normalize_goals(shown) == want:
                return self._splice(semi, cut, " ".join(codes), _Res(cur, shown))
        return None

    def _patch(self, state: Any) -> tuple[str, Any] | None:
        for tac in self.config.ladder:
            self._spend()
            r = self.backend.run_hammer(state, tac, self.config.hammer_timeout)
            if r.ok:
                return f"{tac}.", r
        return None

    # ------------------------------------------------------------------------------------------------ final
    def _final(self, problem, text, stage, tried, used, has_timeout, t0) -> ProofAugResult:
        self._spend()
        chk = self.backend.check(problem, text, max(60.0, self.config.step_timeout))
        msg = chk.message
        return self._result(chk.ok, text, stage if chk.ok else "failed", tried, used, has_timeout, t0, msg)

    def _result(self, ok, text, stage, tried, used, has_timeout, t0, message="") -> ProofAugResult:
        return ProofAugResult(
            success=bool(ok),
            proof=text,
            stage=stage,
            semi_proofs=list(tried),
            hammer_index=list(used),
            checker_calls=self.backend.calls - self._calls0,
            proposer_calls=self._proposer_calls,
            has_timeout=has_timeout,
            seconds=time.perf_counter() - t0,
            message=message,
        )


@dataclass(frozen=True)
class _Res:
    state: Any
    goals: str


def _subtree_end(blocks: list, i: int, src: list[Sentence]) -> int:
    for b in blocks:
        if b.opener == i:
            if b.kind == "brace" and b.end < len(src) and src[b.end].kind == "close":
                return b.end + 1
            return b.end
    return i + 1


def _render_cut(semi: SemiProof, cut: Cut, d: Dialect) -> str:
    hole = d.render_hole(semi.body[cut.start], d.inline_hole(cut.inline) if cut.inline else d.hole)
    return semi.script.render(semi.body[: cut.start] + [hole] + semi.body[cut.end :])


def _parse(proposal: str, language: str = "coq") -> ProofScript:
    script = dialect_for(language).parse(proposal)
    if script.dropped.strip():
        log.info("proposal cut at its first top-level command; dropped %r", script.dropped.strip()[:80])
    return script


def _check_args(problem: Problem, proposal: str) -> None:
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a Problem, got {type(problem).__name__}")
    if not isinstance(proposal, str):
        raise TypeError(f"proposal must be a str, got {type(proposal).__name__}")
    if not proposal.strip():
        raise ValueError("proposal must be a non-empty proof text, got ''")
