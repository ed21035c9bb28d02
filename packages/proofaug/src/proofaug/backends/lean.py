"""Lean 4 through the Lean REPL's JSON protocol (``lake exe repl`` in a project with Mathlib).

Commands are JSON objects separated by a blank line: ``{"cmd": text, "env": n}`` elaborates commands and returns
``env``, ``messages`` and ``sorries`` (each with a ``proofState``); ``{"tactic": t, "proofState": n}`` runs one
tactic and returns the new ``proofState`` and its ``goals``. The paper's Lean code drives a fork of this REPL; the
protocol below is the upstream one. ``ProofAug`` drives it through the Lean dialect (:mod:`proofaug.dialects`):
statements and tactics run by proof state, and whole proofs are re-checked in command mode (the paper's guard
against tactic-mode bugs).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from proofaug.backends.base import BackendError, CheckResult, StepResult
from proofaug.config import Problem

__all__ = ["LeanReplBackend", "LEAN_LADDER", "LEAN_STANDARD_AXIOMS", "lean_screen"]

#: The axioms Lean's own library and Mathlib build on (what ``#print axioms`` of an ordinary proof lists).
LEAN_STANDARD_AXIOMS: tuple[str, ...] = ("propext", "Classical.choice", "Quot.sound")

# tokens that bypass or weaken the kernel check, or that add axioms, code or unchecked declarations
_LEAN_CHEATS = re.compile(
    r"\b(sorry|admit|sorryAx|axiom|unsafe|implemented_by|extern|debug\.skipKernelTC|native_decide|ofReduceBool|"
    r"run_cmd|run_tac|run_elab|set_option|opaque|partial)\b|#exit|#eval|@\["
)
# commands that would start a second declaration or change the environment after the proof
_LEAN_COMMAND = re.compile(
    r"^\s*(theorem|lemma|def|abbrev|instance|example|structure|class|inductive|namespace|section|end|open|variable|"
    r"universe|attribute|macro|macro_rules|syntax|elab|notation|infix|infixl|infixr|prefix|postfix|local|scoped|"
    r"private|protected|noncomputable|import|mutual|deriving|initialize|builtin_initialize)\b",
    re.M,
)


def lean_screen(proof: str) -> str | None:
    """Why a Lean proof text cannot be accepted before running it (a cheat token, a second command), or None."""
    m = _LEAN_CHEATS.search(proof)
    if m:
        return f"the proof uses {m.group(0)!r}"
    m = _LEAN_COMMAND.search(proof)
    if m:
        return f"a command inside the proof: {m.group(0).strip()!r}"
    return None


#: The paper's Lean 4 hammers (Sec. 2.4 of the official code): aesop, "my_hint", omega.
LEAN_LADDER: tuple[str, ...] = (
    "aesop",
    "(try norm_num [*]); (try field_simp [*] at *); (try ring_nf at *); nlinarith",
    "omega",
)


def _decl_name(statement: str) -> str | None:
    m = re.match(r"\s*(?:theorem|lemma)\s+([^\s(:{\[]+)", statement)
    return m.group(1) if m else None


def _bare(statement: str) -> str:
    """The statement without a trailing ``:= by`` / ``:=`` (proposals start with ``:= by``)."""
    stmt = statement.rstrip()
    stmt = stmt[: -len(":= by")] if stmt.endswith(":= by") else stmt.removesuffix(":=")
    return stmt.rstrip()


class LeanReplBackend:
    """A persistent Lean REPL. ``repl_cmd`` is the command line (e.g. ``["lake", "exe", "repl"]``) run in
    ``project_dir``; ``transport`` replaces the process by any callable ``dict -> dict`` (recorded transcripts)."""

    def __init__(
        self,
        repl_cmd: list[str] | None = None,
        project_dir: str | Path = ".",
        *,
        transport: Any = None,
        watchdog: float = 120.0,
        allowed_axioms: tuple[str, ...] = LEAN_STANDARD_AXIOMS,
    ) -> None:
        if isinstance(allowed_axioms, str) or not all(isinstance(a, str) for a in allowed_axioms):
            raise TypeError(f"allowed_axioms must be a tuple of axiom names, got {allowed_axioms!r}")
        self.allowed_axioms = tuple(allowed_axioms)
        self.repl_cmd = list(repl_cmd or ["lake", "exe", "repl"])
        self.project_dir = Path(project_dir)
        self.watchdog = watchdog
        self.calls = 0
        self.log: list[tuple[str, str, float]] = []
        self._transport = transport
        self._proc: subprocess.Popen | None = None
        self._envs: dict[str, int] = {}

    # ------------------------------------------------------------------ transport
    def _ask(self, req: dict, timeout: float) -> dict:
        if self._transport is not None:
            return self._transport(req)
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                self.repl_cmd,
                cwd=self.project_dir,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self._envs.clear()
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write((json.dumps(req) + "\n\n").encode())
        self._proc.stdin.flush()
        buf, deadline, fd = b"", time.monotonic() + timeout + self.watchdog, self._proc.stdout.fileno()
        while not buf.strip() or not buf.endswith(b"\n\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                raise BackendError("Lean REPL did not answer before the watchdog; it was stopped")
            chunk = os.read(fd, 65536)
            if not chunk:
                self.close()
                raise BackendError("Lean REPL exited")
            buf += chunk
        return json.loads(buf)

    @staticmethod
    def _errors(resp: dict) -> list[str]:
        errs = [m.get("data", "") for m in resp.get("messages", []) if m.get("severity") == "error"]
        if "message" in resp:
            errs.append(resp["message"])
        return errs

    # ------------------------------------------------------------------ protocol
    def _env(self, header: str) -> int:
        if header not in self._envs:
            resp = self._ask({"cmd": header}, 600.0)
            if self._errors(resp):
                raise BackendError(f"header fails: {self._errors(resp)[0]}")
            self._envs[header] = resp["env"]
        return self._envs[header]

    def start(self, problem: Problem) -> StepResult:
        """Elaborate ``statement := by sorry`` in the header's environment; the sorry's proof state."""
        self.calls += 1
        resp = self._ask({"cmd": f"{_bare(problem.statement)} := by sorry", "env": self._env(problem.header)}, 60.0)
        errs = self._errors(resp)
        sorries = resp.get("sorries", [])
        if errs or not sorries:
            return StepResult(False, None, "", errs[0] if errs else "no proof state")
        return StepResult(True, sorries[0]["proofState"], sorries[0].get("goal", ""))

    def run(self, state: Any, sentence: str, timeout: float) -> StepResult:
        """One tactic from a proof state."""
        self.calls += 1
        t0 = time.perf_counter()
        resp = self._ask({"tactic": sentence, "proofState": state}, timeout)
        self.log.append(("run", sentence, time.perf_counter() - t0))
        errs = self._errors(resp)
        if errs:
            return StepResult(False, state, "", errs[0], timed_out="timeout" in errs[0].lower())
        return StepResult(True, resp["proofState"], "\n\n".join(resp.get("goals", [])) or "no goals")

    def run_hammer(self, state: Any, tactic: str, timeout: float) -> StepResult:
        """A hammer must close the first goal: it runs as ``focus`` + tactic + ``done``."""
        return self.run(state, f"focus\n  {tactic}\n  done", timeout)

    def check(self, problem: Problem, proof: str, timeout: float = 300.0) -> CheckResult:
        """Command-mode re-check of the problem's statement + proof in the header's environment, then
        ``#print axioms``: no ``sorry``, no cheat token or second command (:func:`lean_screen`), and no axiom
        outside ``allowed_axioms`` (default :data:`LEAN_STANDARD_AXIOMS`). The statement is the problem's text,
        elaborated in the clean header environment before the proof; the screen keeps the proof from ending the
        declaration and adding others. The Lean kernel checks the term when the REPL adds the declaration."""
        self.calls += 1
        why = lean_screen(proof)
        if why is not None:
            return CheckResult(False, why)
        sep = "" if proof[:1].isspace() else " "
        text = f"{_bare(problem.statement)}{sep}{proof}"
        resp = self._ask({"cmd": text, "env": self._env(problem.header)}, timeout)
        errs = self._errors(resp)
        if errs:
            return CheckResult(False, errs[0])
        if resp.get("sorries") or any("sorry" in m.get("data", "") for m in resp.get("messages", [])):
            return CheckResult(False, "the proof uses sorry")
        name = _decl_name(problem.statement)
        if name is None or "env" not in resp:
            return CheckResult(False, f"cannot name the declaration of {problem.statement[:60]!r}")
        out = self._ask({"cmd": f"#print axioms {name}", "env": resp["env"]}, 60.0)
        text = " ".join(m.get("data", "") for m in out.get("messages", []))
        if "does not depend on any axioms" in text:
            return CheckResult(True)
        m = re.search(r"depends on axioms: \[(.*?)\]", text, re.S)
        if m is None:
            return CheckResult(False, f"unexpected #print axioms output: {text[:200]!r}")
        axioms = tuple(a.strip() for a in m.group(1).split(",") if a.strip())
        extra = [a for a in axioms if a not in self.allowed_axioms]
        if extra:
            return CheckResult(False, f"axioms outside the allow-list: {', '.join(extra)}", axioms)
        return CheckResult(True, "", axioms)

    def close(self) -> None:
        """Stop our REPL process (only it and its process group)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=5)
        if self._proc is not None:
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
        self._proc = None

    def __enter__(self) -> LeanReplBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
