"""The sound final check for Coq: a sentence-level screen, ``coqc`` on the whole file, the statement checked by
type in a second file, and Coq's independent kernel checker ``coqchk`` on both compiled files.

A proof written by a language model is untrusted text: anything the checker accepts will eventually be produced.
Checkers for untrusted proofs therefore re-check the *compiled* result with the kernel and compare the proved
constant with a separately elaborated target (Lean's ``lean4checker``; SafeVerify compiles the statement with
``sorry`` and the submission and compares the constants' types). The Coq version here:

1. **Screen** (pure Python, :func:`screen_proof`): the proof is parsed into sentences (comments and strings
   respected). Every body sentence must be a tactic, a bullet or a brace: a sentence whose first word starts with
   an upper-case letter (every Coq vernacular command does: ``Reset``, ``Back``, ``Undo``, ``Unset``, ``Axiom``,
   ``Notation``, ``Ltac``, ``Declare``, ``Redirect`` …) or that carries an attribute (``#[global]``,
   ``#[bypass_check(guard)]``) is rejected, and so are ``admit``, ``give_up``, ``Admitted``, ``Abort`` anywhere,
   unterminated sentences and any text after ``Qed.``/``Defined.``. Only ``Unshelve`` is allowed among the
   upper-case proof-mode commands (it edits nothing but the goal list).
2. **coqc** compiles the submission file ``header + statement + proof`` as library ``ProofAugSubmission``.
3. **Statement by type**: a second file, compiled after it, re-runs the header, elaborates the problem's statement
   as ``Definition pa_target := forall <binders>, <type>.`` *before* loading the submission, then
   ``Require ProofAugSubmission.`` and ``Definition pa_check : pa_target := ProofAugSubmission.<name>.``: the proved
   constant must have the problem's statement (up to conversion), whatever the proof did to its own environment.
   ``Print Assumptions pa_check`` (our file, our output) lists the axioms it depends on: each must be in the
   allow-list (empty by default) and no guard, positivity or universe check may have been assumed.
4. **coqchk** (``-o -norec``) re-checks every definition of both compiled files in the kernel checker, and its
   context summary must list no axiom of either file and no constant relying on type-in-type, unsafe (co)fixpoints
   or assumed positivity.

What it trusts: the problem's header, the installed Coq libraries (checked by Debian's build, not re-checked here:
``-norec``), ``coqc``'s elaboration of the statement in our second file, and ``coqchk``'s kernel. A header that
declares inductive types used in the statement makes step 3 fail (the second file's copy is a different type):
the check fails closed.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path

from proofaug.backends.base import CheckResult
from proofaug.structure import Sentence, parse_proof, split_sentences, strip_comments

__all__ = ["screen_proof", "screen_body", "statement_type", "kernel_check", "parse_coqchk", "SUBMISSION", "CHECK"]

SUBMISSION = "ProofAugSubmission"
CHECK = "ProofAugCheck"

_FORBIDDEN = re.compile(r"(?<![\w'.])(admit|give_up|Admitted|Abort)(?![\w'])")
_ATTRIBUTE = re.compile(r"#\[|@\[")
_SELECTOR = re.compile(r"^(\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*|all|par|!|\[\s*[A-Za-z_][\w']*\s*\])\s*:")
_UPPER_OK = {"Unshelve"}
_STATEMENT = re.compile(r"\s*(Theorem|Lemma|Example)\s+([A-Za-z_][\w']*)")
_DECLARED = re.compile(r"(?:^|\.\s)\s*(?:Axiom|Parameter|Conjecture|Hypothesis|Variable)s?\s+([A-Za-z_][\w']*)")


def _first_word(code: str) -> str:
    m = re.match(r"[^\s.(\[{]+", code)
    return m.group(0) if m else ""


def _odd_character(text: str) -> str | None:
    """A character on which our sentence splitter and Coq's lexer could disagree (control, format or non-ASCII
    space characters: a zero-width space after a period), or None."""
    for ch in text:
        if ch in "\t\n\r ":
            continue
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"):
            return f"character U+{ord(ch):04X} ({unicodedata.name(ch, cat)}) in the proof"
    return None


def screen_body(body: Iterable[Sentence], *, final: bool) -> str | None:
    """Why these proof-body sentences cannot be part of a proof, or None.

    Rejected always: control, format and non-ASCII space characters, vernacular (a first word starting with an
    upper-case letter or any non-tactic character) and attributes (``#[…]``). With ``final``: also unterminated
    sentences and ``admit``, ``give_up``, ``Admitted``, ``Abort`` anywhere in the sentence (comments excluded)."""
    body = list(body)
    odd = _odd_character("".join(s.text for s in body))
    if odd is not None:
        return odd
    for s in body:
        if s.kind in ("blank", "bullet", "open", "close"):
            continue
        code = strip_comments(s.code).strip()
        if not s.terminated:
            if final:
                return f"unterminated sentence {code[:60]!r} (a sentence ends with '.')"
            continue  # a truncated proposal: never sent to the prover
        if _ATTRIBUTE.search(code):
            return f"attribute in the proof (may bypass a kernel check or change scope): {code[:60]!r}"
        if s.kind in ("proof", "end", "command"):
            return f"vernacular command inside the proof: {code[:60]!r}"
        sel = _SELECTOR.match(code)
        rest = code[sel.end() :].lstrip() if sel else code
        word = _first_word(rest)
        tactic_start = bool(rest) and rest[0].isascii() and (rest[0].islower() or rest[0] in "([_")
        if not tactic_start and word not in _UPPER_OK:
            return f"vernacular command inside the proof (it may edit the environment): {code[:60]!r}"
        if final and _FORBIDDEN.search(code):
            return f"forbidden tactic or command in the proof: {code[:60]!r}"
    return None


def screen_proof(proof: str) -> str | None:
    """Why ``proof`` (``Proof. … Qed.``) cannot be a real proof before running anything, or None."""
    odd = _odd_character(proof)
    if odd is not None:
        return odd
    script = parse_proof(proof)
    if script.dropped.strip():
        return f"text after the proof or a command inside it: {script.dropped.strip()[:60]!r}"
    if not script.ended:
        return "the proof does not end with Qed./Defined."
    head = [s for s in split_sentences(script.head) if s.kind != "blank"]
    if len(head) > 1 or (head and strip_comments(head[0].code).strip() != "Proof."):
        return f"the proof must start with 'Proof.' alone, got {script.head.strip()[:60]!r}"
    return screen_body(script.body, final=True)


def statement_type(statement: str) -> tuple[str, str]:
    """``(name, type)`` of a ``Theorem name binders : type.`` sentence: ``type`` is ``forall binders, type`` when
    there are binders (the separating ``:`` is the first one outside brackets that does not start ``:=``)."""
    code = " ".join(strip_comments(statement).split())
    m = _STATEMENT.match(code)
    if m is None or not code.endswith("."):
        raise ValueError(f"statement must be one 'Theorem name … : type.' sentence, got {statement[:60]!r}")
    rest = code[m.end() : -1]
    depth, k = 0, -1
    for i, ch in enumerate(rest):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ":" and depth == 0 and rest[i + 1 : i + 2] != "=" and rest[i - 1 : i] != ":":
            k = i
            break
    if k < 0:
        raise ValueError(f"statement has no ': type', got {statement[:60]!r}")
    binders, typ = rest[:k].strip(), rest[k + 1 :].strip()
    return m.group(2), (f"forall {binders}, {typ}" if binders else typ)


def parse_coqchk(output: str) -> dict[str, list[str]]:
    """The sections of ``coqchk -o``'s context summary: ``{"Axioms": [...], "Constants/Inductives relying on
    type-in-type": [...], …}`` (names as printed)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        m = re.match(r"^\* ([^:]+):\s*(.*)$", line)
        if m:
            current = m.group(1).strip()
            sections[current] = []
            if m.group(2).strip() and m.group(2).strip() != "<none>":
                sections[current].append(m.group(2).strip())
            continue
        if current is not None and line.strip() and line.startswith(" "):
            sections[current].append(line.strip())
    return sections


def _assumptions(stdout: str) -> tuple[list[str], list[str]] | None:
    """(axioms, unsafe notes) of our file's ``Print Assumptions``; None when the output is not one we printed."""
    text = stdout.strip()
    if text == "Closed under the global context":
        return [], []
    axioms, unsafe, on = [], [], False
    for line in text.splitlines():
        if re.match(r"^(Axioms|Section Variables|Opaque constants|Transparent constants):$", line):
            on = line.startswith("Axioms")
            continue
        if re.search(r"is assumed to be (guarded|positive)|relies on an unsafe|type in type|Type hierarchy", line):
            unsafe.append(line.strip())
            continue
        if not line.strip() or line.startswith(" "):
            continue  # a type continued from the line above
        m = re.match(r"^([^\s:]\S*)(?: :.*)?$", line)
        if m is None:
            return None
        if on:
            axioms.append(m.group(1))
    return axioms, unsafe


def kernel_check(
    header: str,
    statement: str,
    proof: str,
    *,
    coqc: str = "coqc",
    coqchk: str = "coqchk",
    prelude: str = "",
    allowed_axioms: Iterable[str] = (),
    timeout: float = 60.0,
    preexec_fn: Callable[[], None] | None = None,
    log: Callable[[float], None] | None = None,
) -> CheckResult:
    """Steps 2–4 of the module docstring on ``header + statement + proof`` (the caller screens first)."""
    allowed = set(allowed_axioms)
    name, target = statement_type(statement)
    declared = set(_DECLARED.findall(strip_comments(header)))

    def own(axiom: str) -> str:
        """A header axiom's name without our library prefix (the proof cannot declare a name the header has)."""
        short = axiom.split(".", 1)[1] if axiom.startswith((f"{SUBMISSION}.", f"{CHECK}.")) else axiom
        return short if short in declared else axiom

    t0 = time.perf_counter()
    deadline = t0 + timeout

    def run(args: list[str], cwd: str) -> subprocess.CompletedProcess | None:
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        try:
            return subprocess.run(
                args,
                capture_output=True,
                text=True,
                timeout=left,
                cwd=cwd,
                preexec_fn=preexec_fn,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return None

    def done(res: CheckResult) -> CheckResult:
        if log is not None:
            log(time.perf_counter() - t0)
        return res

    pre = f"\n{prelude}" if prelude else ""
    with tempfile.TemporaryDirectory(prefix="proofaug_kernel_") as tmp:
        Path(tmp, f"{SUBMISSION}.v").write_text(f"{header}{pre}\n\n{statement}\n{proof}\n", encoding="utf-8")
        Path(tmp, f"{CHECK}.v").write_text(
            f"{header}{pre}\n\nDefinition pa_target := ({target}).\nRequire {SUBMISSION}.\n"
            f"Definition pa_check : pa_target := {SUBMISSION}.{name}.\nPrint Assumptions pa_check.\n",
            encoding="utf-8",
        )
        p = run([coqc, "-q", "-R", ".", "", f"{SUBMISSION}.v"], tmp)
        if p is None:
            return done(CheckResult(False, f"coqc timed out after {timeout} s"))
        if p.returncode != 0:
            return done(CheckResult(False, "coqc rejects the file: " + " ".join((p.stdout + p.stderr).split())[:400]))
        p = run([coqc, "-q", "-R", ".", "", f"{CHECK}.v"], tmp)
        if p is None:
            return done(CheckResult(False, f"coqc timed out after {timeout} s (statement check)"))
        if p.returncode != 0:
            why = " ".join((p.stdout + p.stderr).split())[:400]
            msg = f"the proved constant {name!r} does not have the problem's statement: {why}"
            return done(CheckResult(False, msg))
        parsed = _assumptions(p.stdout)
        if parsed is None:
            return done(CheckResult(False, f"unexpected output of Print Assumptions: {p.stdout.strip()[:200]!r}"))
        axioms, unsafe = parsed
        axioms = [own(a) for a in axioms]
        if unsafe:
            return done(CheckResult(False, "a kernel check was bypassed: " + "; ".join(unsafe)[:300], tuple(axioms)))
        extra = [a for a in axioms if a not in allowed]
        if extra:
            return done(CheckResult(False, f"axioms outside the allow-list: {', '.join(extra)}", tuple(axioms)))
        p = run([coqchk, "-silent", "-o", "-R", ".", "", "-norec", SUBMISSION, "-norec", CHECK], tmp)
        if p is None:
            return done(CheckResult(False, f"coqchk timed out after {timeout} s", tuple(axioms)))
        if p.returncode != 0:
            why = " ".join((p.stdout + p.stderr).split())[:400]
            return done(CheckResult(False, f"coqchk rejects the compiled proof: {why}", tuple(axioms)))
        summary = p.stdout + p.stderr  # coqchk prints its summary on stderr when its output is a pipe
        ours = (f"{SUBMISSION}.", f"{CHECK}.")
        for section, names in parse_coqchk(summary).items():
            if section.startswith("Theory"):
                continue
            if section == "Axioms":
                # declared by the proof (the header's own axioms are judged by use, in Print Assumptions)
                bad = [n for n in names if n.startswith(ours) and own(n) == n]
            else:
                bad = names
            if bad:
                return done(CheckResult(False, f"coqchk: {section}: {', '.join(bad)[:300]}", tuple(axioms)))
        if "CONTEXT SUMMARY" not in summary:
            return done(CheckResult(False, "coqchk printed no context summary", tuple(axioms)))
    return done(CheckResult(True, "coqc + coqchk", tuple(axioms)))
