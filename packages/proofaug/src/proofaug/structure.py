"""Proof structure, pure Python: Coq sentences and blocks, Lean 4 blocks and snippets, Isar ``proof … qed`` pairs.

ProofAug analyses the structure of a proposal before running any automation (paper, Sec. 3 and Alg. 1): which
steps form the proof of which conjecture, so that a failing step can be replaced by ``sorry`` and, when the
automation cannot fill it, the proof of the enclosing conjecture (then its parent's, …) can be replaced as a whole.

Coq has no Isar proof modes; we read a Coq proof as a list of *sentences* (each ends at a ``.`` followed by
whitespace, outside comments and strings; bullets and braces are sentences of their own) and group them into
*blocks*: the root (the proof), every ``{ … }`` and every bullet's body. A block proves the single goal that is
focused when it opens, which is what makes it a conjecture in the paper's sense.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Sentence",
    "Block",
    "ProofScript",
    "split_sentences",
    "build_blocks",
    "parse_proof",
    "split_inline",
    "strip_comments",
    "LeanBlock",
    "LeanSnippet",
    "parse_lean",
    "IsarBlock",
    "match_isar",
    "normalize_isar",
    "lean_script",
    "split_lean_inline",
    "split_isar",
    "isar_script",
    "isar_blocks",
]

SentenceKind = Literal["bullet", "open", "close", "tactic", "proof", "end", "command", "blank"]

_BULLET_CHARS = "-+*"
_SELECTOR_OPEN = re.compile(r"(\d+|\[\s*[A-Za-z_][\w']*\s*\])\s*:\s*\{")
_PROOF_START = re.compile(r"Proof\b")
_END = re.compile(r"(Qed|Defined|Admitted|Abort|Save)\b")
# top-level commands that end a proof proposal (a second theorem, a definition, a module command, …)
_COMMANDS = re.compile(
    r"(Theorem|Lemma|Example|Corollary|Proposition|Fact|Remark|Definition|Fixpoint|CoFixpoint|Inductive|"
    r"CoInductive|Record|Structure|Class|Instance|Axiom|Axioms|Parameter|Parameters|Conjecture|Hypothesis|"
    r"Hypotheses|Variable|Variables|Require|Import|Export|From|Section|End|Module|Ltac|Notation|Infix|"
    r"Arguments|Hint|Goal|Check|Print|Compute|Eval|Search|Set|Unset|Local|Global|Program|Obligation|Next)\b"
)


@dataclass(frozen=True)
class Sentence:
    """One Coq sentence: ``text`` is the exact source (leading whitespace and comments included)."""

    text: str
    kind: SentenceKind
    terminated: bool = True
    exec: str | None = None
    """What is sent to the prover when it differs from the rendered text (Lean steps keep their line breaks)."""

    @property
    def code(self) -> str:
        """The sentence without its leading whitespace and comments, on one line (what is sent to coqtop)."""
        if self.exec is not None:
            return self.exec
        return " ".join(_skip_leading(self.text).split())

    @property
    def lead(self) -> str:
        """The leading whitespace and comments."""
        return self.text[: len(self.text) - len(_skip_leading(self.text))]

    def replaced(self, code: str, kind: SentenceKind | None = None) -> Sentence:
        """The same position (leading text kept) holding other code."""
        return Sentence(self.lead + code, kind or classify(code), True)


def _skip_comment(text: str, i: int) -> int:
    """Index after the (nested) comment starting at ``text[i:i+2] == '(*'``; strings inside comments count."""
    depth, n = 0, len(text)
    while i < n:
        if text.startswith("(*", i):
            depth += 1
            i += 2
        elif text.startswith("*)", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        elif text[i] == '"':
            i = _skip_string(text, i)
        else:
            i += 1
    return n


def _skip_string(text: str, i: int) -> int:
    """Index after the Coq string starting at ``text[i] == '"'`` (``""`` escapes a quote)."""
    i += 1
    n = len(text)
    while i < n:
        if text[i] == '"':
            if i + 1 < n and text[i + 1] == '"':
                i += 2
                continue
            return i + 1
        i += 1
    return n


def _skip_ws_comments(text: str, i: int) -> int:
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("(*", i):
            i = _skip_comment(text, i)
        else:
            break
    return i


def _skip_leading(text: str) -> str:
    return text[_skip_ws_comments(text, 0) :]


def strip_comments(text: str) -> str:
    """``text`` with every Coq comment replaced by one space (strings kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("(*", i):
            i = _skip_comment(text, i)
            out.append(" ")
        elif text[i] == '"':
            j = _skip_string(text, i)
            out.append(text[i:j])
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def classify(code: str) -> SentenceKind:
    """Kind of a sentence from its code (no leading whitespace)."""
    if not code:
        return "blank"
    if code[0] in _BULLET_CHARS and code.strip(code[0]) == "":
        return "bullet"
    if code == "{" or _SELECTOR_OPEN.fullmatch(code):
        return "open"
    if code == "}":
        return "close"
    if _PROOF_START.match(code):
        return "proof"
    if _END.match(code):
        return "end"
    if _COMMANDS.match(code):
        return "command"
    return "tactic"


def split_sentences(text: str) -> list[Sentence]:
    """Split Coq text into sentences; ``"".join(s.text for s in result) == text`` exactly.

    A sentence ends at a ``.`` followed by whitespace or the end of the text, outside nested comments and strings;
    a ``.`` right after another ``.`` (``..``) or inside a name (``Nat.add_comm``) does not end it, ``...`` does. At a
    sentence start a bullet (``-``, ``+``, ``*``, repeated), ``{``, ``}`` and ``N: {`` are sentences of their own.
    Trailing whitespace and comments form a final ``blank`` sentence; an unterminated tail is a sentence with
    ``terminated=False``.
    """
    out: list[Sentence] = []
    i, n = 0, len(text)
    while i < n:
        start = i
        j = _skip_ws_comments(text, i)
        if j >= n:
            out.append(Sentence(text[start:], "blank"))
            break
        c = text[j]
        if c in _BULLET_CHARS:
            k = j
            while k < n and text[k] == c:
                k += 1
            # a bullet is a run of one bullet character not glued to a terminator or an operator
            if k >= n or text[k].isspace() or text[k] in "({[" or text[k].isalpha():
                out.append(Sentence(text[start:k], "bullet"))
                i = k
                continue
        if c in "{}":
            out.append(Sentence(text[start : j + 1], "open" if c == "{" else "close"))
            i = j + 1
            continue
        m = _SELECTOR_OPEN.match(text, j)
        if m:
            out.append(Sentence(text[start : m.end()], "open"))
            i = m.end()
            continue
        k = j
        end = -1
        while k < n:
            ch = text[k]
            if text.startswith("(*", k):
                k = _skip_comment(text, k)
                continue
            if ch == '"':
                k = _skip_string(text, k)
                continue
            # `.` then a blank ends a sentence, except the second dot of `..`; `...` (Coq's `Proof with`
            # terminator) ends one too, as Coq reads it
            ellipsis = k >= j + 2 and text[k - 2 : k] == ".." and (k - 3 < j or text[k - 3] != ".")
            if ch == "." and (k + 1 >= n or text[k + 1].isspace()) and (not (k > j and text[k - 1] == ".") or ellipsis):
                end = k + 1
                break
            k += 1
        if end < 0:
            s = text[start:]
            out.append(Sentence(s, classify(" ".join(_skip_leading(s).split())), terminated=False))
            break
        s = text[start:end]
        out.append(Sentence(s, classify(" ".join(_skip_leading(s).split()))))
        i = end
    return out


@dataclass(eq=False)
class Block:
    """A block of a proof body: ``root``, ``brace`` (``{ … }`` or a Lean ``have … := by`` body), ``bullet`` (a
    bullet's body) or ``proof`` (an Isar ``proof … qed``, both included).

    ``start`` is the first body sentence, ``end`` the first sentence after the body (the ``}``, the next bullet
    of the same or an outer level, or the end of the proof); ``opener`` is the ``{`` or bullet sentence.
    """

    kind: Literal["root", "brace", "bullet", "proof"]
    start: int
    end: int
    depth: int
    opener: int | None = None
    marker: str = ""
    parent: Block | None = None
    children: list[Block] = field(default_factory=list)

    def contains(self, i: int) -> bool:
        """Whether body sentence ``i`` lies inside this block's body."""
        return self.start <= i < self.end

    def element_of(self, i: int) -> int:
        """The direct element of this block that holds sentence ``i``: ``i`` itself or a child's opener."""
        for child in self.children:
            if child.contains(i) or child.opener == i:
                return child.opener if child.opener is not None else i
        return i

    def direct(self) -> list[int]:
        """Sentence indices that are direct elements of this block (child blocks represented by their opener)."""
        inside = set()
        for child in self.children:
            inside.update(range(child.start, child.end))
            if child.kind == "brace" and child.end < self.end:
                inside.add(child.end)  # the closing brace belongs to the child's element
        return [k for k in range(self.start, self.end) if k not in inside]


def build_blocks(sentences: list[Sentence]) -> tuple[Block, list[Block]]:
    """Group body sentences into blocks; returns the root and every block (root first).

    Bullets follow Coq's rule: inside one focus level (the root or a brace), a bullet whose marker is already open
    closes that level and everything deeper, otherwise it opens a deeper level.
    """
    n = len(sentences)
    root = Block("root", 0, n, 0)
    blocks = [root]
    frames: list[tuple[Block, list[Block]]] = [(root, [])]  # (focus block, open bullet blocks)
    for i, s in enumerate(sentences):
        focus, bullets = frames[-1]
        if s.kind == "bullet":
            marker = s.code
            if any(b.marker == marker for b in bullets):
                while bullets:
                    b = bullets.pop()
                    b.end = i
                    if b.marker == marker:
                        break
            parent = bullets[-1] if bullets else focus
            b = Block("bullet", i + 1, n, parent.depth + 1, opener=i, marker=marker, parent=parent)
            parent.children.append(b)
            blocks.append(b)
            bullets.append(b)
        elif s.kind == "open":
            parent = bullets[-1] if bullets else focus
            b = Block("brace", i + 1, n, parent.depth + 1, opener=i, parent=parent)
            parent.children.append(b)
            blocks.append(b)
            frames.append((b, []))
        elif s.kind == "close" and len(frames) > 1:
            for b in bullets:
                b.end = i
            focus.end = i
            frames.pop()
    return root, blocks


def innermost(blocks: list[Block], i: int) -> Block:
    """The deepest block whose body holds sentence ``i``."""
    best = blocks[0]
    for b in blocks:
        if b.contains(i) and b.depth > best.depth:
            best = b
    return best


@dataclass
class ProofScript:
    """A parsed proposal: ``head`` (``Proof.`` and what precedes it), ``body`` sentences, ``tail`` (``Qed.``).

    ``dropped`` holds text after the first top-level command (a second theorem, a definition, …), which is cut
    off; ``ended`` says whether the proposal ended the proof itself (``Qed.``/``Defined.``); ``admitted`` whether it
    ended it with ``Admitted.``/``Abort.`` (the proof then needs its remaining goals filled).
    """

    head: str
    body: list[Sentence]
    tail: str
    dropped: str = ""
    ended: bool = False
    language: Literal["coq", "lean", "isabelle"] = "coq"

    def render(self, body: list[Sentence] | None = None) -> str:
        """The proof text with ``body`` (default: the parsed one) between head and tail."""
        sents = self.body if body is None else body
        text = "".join(s.text for s in sents)
        if self.language != "coq":
            return self.head + text + self.tail
        if not self.head and text[:1] and not text[0].isspace():
            text = "\n" + text  # a body-only proposal: `Proof.` and its first tactic must not fuse into one word
        return (self.head or "Proof.") + text + (self.tail or "\nQed.")


def parse_proof(text: str) -> ProofScript:
    """Parse a proposal (``Proof. … Qed.``, or just the tactics) into a :class:`ProofScript`.

    The proof ends at its first top-level command: ``Qed.``/``Defined.`` (kept as the tail), ``Admitted.`` /
    ``Abort.`` (dropped: the proof is then completed by the rules for unclosed blocks), or any declaration or
    vernacular command (a second theorem; cut off and reported in ``dropped``).
    """
    sents = split_sentences(text)
    head_parts: list[str] = []
    k = 0
    # a leading `Proof.` (or `Proof using …`) belongs to the head, with what precedes it only if that is blank
    while k < len(sents) and sents[k].kind == "blank":
        head_parts.append(sents[k].text)
        k += 1
    if k < len(sents) and sents[k].kind == "proof":
        head_parts.append(sents[k].text)
        k += 1
    body: list[Sentence] = []
    tail, dropped, ended = "", "", False
    for j in range(k, len(sents)):
        s = sents[j]
        if s.kind == "end":
            rest = "".join(x.text for x in sents[j + 1 :])
            if s.code.startswith(("Qed", "Defined")):
                tail, ended = s.text, True
                dropped = rest
            else:
                dropped = s.text + rest
            break
        if s.kind in ("command", "proof"):
            dropped = "".join(x.text for x in sents[j:])
            break
        body.append(s)
    while body and body[-1].kind == "blank" and not ended:
        dropped = body.pop().text + dropped
    if ended and dropped.strip() == "":
        tail, dropped = tail + dropped, ""
    return ProofScript("".join(head_parts), body, tail, dropped, ended)


def _top_level_by(code: str) -> int:
    """Start index of the last `` by `` at parenthesis depth 0 outside comments and strings, or -1."""
    depth, i, n, last = 0, 0, len(code), -1
    while i < n:
        if code.startswith("(*", i):
            i = _skip_comment(code, i)
            continue
        ch = code[i]
        if ch == '"':
            i = _skip_string(code, i)
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and code.startswith("by", i) and i > 0 and code[i - 1].isspace():
            after = code[i + 2 : i + 3]
            if after == "" or after.isspace() or after == "(":
                last = i
        i += 1
    return last


def split_inline(code: str) -> tuple[str, str] | None:
    """``("assert (h : P)", "lia")`` for ``assert (h : P) by lia.``: a sentence with an inline sub-proof, else None."""
    if not code.endswith("."):
        return None
    body = code[:-1]
    k = _top_level_by(body)
    if k < 0:
        return None
    stmt, tac = body[:k].rstrip(), body[k + 2 :].strip()
    if not stmt or not tac:
        return None
    return stmt, tac


# ----------------------------------------------------------------------------------------------------- Lean 4


@dataclass
class LeanSnippet:
    """Tactic lines of a Lean 4 proof that run as one step (continuations and deeper lines joined)."""

    text: str
    level: int
    line: int


@dataclass
class LeanBlock:
    """A ``have``/``theorem``/``lemma``/``example`` block: its statement (up to ``:= by``) and its parts.

    ``analysable`` is False when the statement's ``:=`` and ``by`` are split over lines (the Lean code of the
    paper requires them on one line; we report such blocks instead of guessing).
    """

    statement: str
    level: int
    line: int
    parts: list[LeanBlock | LeanSnippet] = field(default_factory=list)
    analysable: bool = True
    term: bool = False


_LEAN_OPENERS = ("have", "theorem", "lemma", "example")


def _strip_lean_comments(text: str) -> str:
    """Remove ``/- … -/`` (nested) and ``--`` comments, keeping line breaks."""
    out, i, n, depth = [], 0, len(text), 0
    while i < n:
        if text.startswith("/-", i):
            depth += 1
            i += 2
        elif depth and text.startswith("-/", i):
            depth -= 1
            i += 2
        elif depth:
            if text[i] == "\n":
                out.append("\n")
            i += 1
        elif text.startswith("--", i):
            while i < n and text[i] != "\n":
                i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_lean(text: str) -> LeanBlock:
    """Parse a Lean 4 proposal syntactically into a tree of blocks and snippets (works on uncompilable text).

    Indentation widths map to levels in order of first appearance; a line starting with ``have``/``theorem``/
    ``lemma``/``example`` opens a block whose statement absorbs continuation lines up to ``:= by``; other lines are
    snippets, and lines starting with ``|``, ``<;>``, ``)`` or following a line ending in ``|``, ``<;>``, ``(`` or
    ``,`` and deeper-indented lines inside a snippet join it. The returned root is a pseudo-block (level -1).
    """
    lines = _strip_lean_comments(text).split("\n")
    widths: dict[int, int] = {}
    root = LeanBlock("", -1, 0)
    stack: list[LeanBlock] = [root]
    open_stmt: LeanBlock | None = None
    last: LeanSnippet | None = None
    for no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        width = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        if open_stmt is not None:  # statement continuation
            open_stmt.statement += "\n" + raw.rstrip()
            if line.endswith(":= by") or line.endswith(":=by"):
                open_stmt = None
            elif line.startswith("by") or line == ":=":
                open_stmt.analysable = False
                open_stmt = None
            continue
        level = widths.setdefault(width, len(widths))
        joins = last is not None and (
            line.startswith(("|", "<;>", ")"))
            or last.text.rstrip().endswith(("|", "<;>", "(", ","))
            or level > last.level
        )
        if joins and last is not None and not line.startswith(_LEAN_OPENERS):
            last.text += "\n" + raw.rstrip()
            continue
        while len(stack) > 1 and stack[-1].level >= level:
            stack.pop()
        if line.split(" ", 1)[0] in _LEAN_OPENERS:
            block = LeanBlock(raw.rstrip(), level, no)
            stack[-1].parts.append(block)
            last = None
            if line.endswith(":= by") or line.endswith(":=by"):
                stack.append(block)
            elif ":=" in line and not line.endswith(":="):
                block.term = True  # `have h := term` is a one-line block
            else:
                stack.append(block)
                open_stmt = block
            continue
        last = LeanSnippet(raw.rstrip(), level, no)
        stack[-1].parts.append(last)
    return root


_LEAN_HEAD = re.compile(r"\s*(:=\s*by|by)\b[ \t]*")
_LEAN_TOP = re.compile(r"(theorem|lemma|example|def|abbrev|instance|namespace|section|end|open|#)\b|#")


def lean_script(text: str) -> ProofScript:
    """A Lean 4 proposal as ProofAug steps (what :func:`parse_lean`'s tree executes as, in order).

    The head is the leading ``:= by`` (added when the proposal is tactic lines only; a repeated ``theorem …
    := by`` line is dropped). A snippet is one ``tactic`` step; a one-line ``have h : P := by tac`` is a tactic
    with an inline proof; a ``have h : P := by`` block with lines below it is an ``open`` step executed as
    Mathlib's ``have h : P`` (which puts the goal ``P`` first), its body, and a ``close`` step without text (the
    block is closed once ``P`` is proved: the goal count is back to what it was before the ``have``). Blocks the
    parser flags as not analysable and other nested declarations run as one step. The text after the proof's
    first top-level command (column 0) is dropped. Comments and blank lines are not kept.
    """
    lines = text.split("\n")
    head, first = ":= by", 0
    m = _LEAN_HEAD.match(text)
    if m:
        head = m.group(0).rstrip(" \t")
        lines = text[m.end() :].split("\n")
    else:
        for k, ln in enumerate(lines):
            if ln.strip():
                if ln.lstrip().split(" ", 1)[0] in _LEAN_OPENERS[1:]:
                    j = next((j for j in range(k, len(lines)) if lines[j].rstrip().endswith(":= by")), None)
                    if j is not None:
                        first = j + 1
                break
    dropped = "\n".join(lines[:first]) + ("\n" if first else "")
    body_lines = lines[first:]
    for k, ln in enumerate(body_lines):
        if k > 0 and ln[:1] not in (" ", "\t", "") and _LEAN_TOP.match(ln):
            dropped += "\n".join(body_lines[k:])
            body_lines = body_lines[:k]
            break
    steps: list[Sentence] = []

    def render(part: LeanBlock | LeanSnippet) -> str:
        if isinstance(part, LeanSnippet):
            return part.text
        return "\n".join([part.statement] + [render(p) for p in part.parts])

    def walk(parts: list[LeanBlock | LeanSnippet]) -> None:
        for p in parts:
            if isinstance(p, LeanBlock) and p.analysable and not p.term and p.statement.lstrip().startswith("have"):
                stmt = p.statement.rstrip()
                stmt = stmt[: -len(":= by")] if stmt.endswith(":= by") else stmt[: -len(":=by")]
                steps.append(Sentence("\n" + p.statement, "open", exec=_dedent(stmt)))
                walk(p.parts)
                steps.append(Sentence("", "close", exec=""))
            else:
                code = render(p)
                steps.append(Sentence("\n" + code, "tactic", exec=_dedent(code)))

    walk(parse_lean("\n".join(body_lines)).parts)
    return ProofScript(head, steps, "", dropped.strip("\n") if dropped.strip() else "", True, "lean")


def _dedent(code: str) -> str:
    import textwrap

    lines = code.split("\n")
    return (lines[0].strip() + ("\n" + textwrap.dedent("\n".join(lines[1:])) if len(lines) > 1 else "")).rstrip()


def split_lean_inline(code: str) -> tuple[str, str] | None:
    """``("have h : P", "tac")`` for a one-line ``have h : P := by tac``, else None."""
    m = re.fullmatch(r"(have\b[^\n]*?)\s*:=\s*by\s+(\S[^\n]*)", code.strip())
    return (m.group(1), m.group(2)) if m else None


# ----------------------------------------------------------------------------------------------------- Isar

_ISAR_SORRY = re.compile(r"\bsledgehammer\b|\boops\b|\\<proof>")


def normalize_isar(text: str) -> str:
    """Replace ``sledgehammer``, ``oops`` and ``\\<proof>`` by ``sorry`` (the paper's Alg. 1 pre-processing)."""
    return _ISAR_SORRY.sub("sorry", text)


@dataclass(frozen=True)
class IsarBlock:
    """A ``proof … qed`` pair: step indices of the opening ``proof`` and the closing ``qed``."""

    proof: int
    qed: int


def match_isar(steps: list[str]) -> list[IsarBlock]:
    """Match ``proof``/``qed`` steps with a stack; inner blocks come before outer ones. Unbalanced → ValueError."""
    stack: list[int] = []
    out: list[IsarBlock] = []
    for i, step in enumerate(steps):
        word = step.strip().split(None, 1)[0] if step.strip() else ""
        if word == "proof":
            stack.append(i)
        elif word == "qed":
            if not stack:
                raise ValueError(f"steps: 'qed' at step {i} has no matching 'proof'")
            out.append(IsarBlock(stack.pop(), i))
    if stack:
        raise ValueError(f"steps: 'proof' at step {stack[-1]} is never closed by 'qed'")
    return out


# Isar commands that start a new step (paper, Alg. 1 splits a proof into such steps)
_ISAR_COMMANDS = frozenset(
    [
        "proof",
        "qed",
        "have",
        "show",
        "hence",
        "thus",
        "then",
        "from",
        "with",
        "using",
        "unfolding",
        "by",
        "apply",
        "apply_end",
        "done",
        "next",
        "case",
        "fix",
        "assume",
        "presume",
        "obtain",
        "moreover",
        "ultimately",
        "also",
        "finally",
        "note",
        "let",
        "define",
        "consider",
        "sorry",
        "oops",
    ]
)
_ISAR_TACTICS = frozenset(["by", "apply", "apply_end", "done", "sorry", "oops", ".", ".."])


def split_isar(text: str) -> list[Sentence]:
    """Split an Isar proof into steps; ``"".join(s.text for s in result) == text`` exactly.

    A step starts at a command keyword (``have``, ``show``, ``proof``, ``qed``, ``by``, ``apply``, …) or a
    standalone ``.``/``..`` outside quotes, cartouches, comments and parentheses; its text includes the whitespace
    before it. Kinds: ``open`` (``proof``), ``close`` (``qed``), ``tactic`` (terminal or ``apply`` steps and
    ``sorry``), ``command`` (statements and context steps).
    """
    starts, i, n, depth = [], 0, len(text), 0
    while i < n:
        if text.startswith("(*", i):
            i = _skip_comment(text, i)
            continue
        if text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        for o, c in (("\\<open>", "\\<close>"), ("\u2039", "\u203a")):
            if text.startswith(o, i):
                d, i = 1, i + len(o)
                while i < n and d:
                    if text.startswith(o, i):
                        d, i = d + 1, i + len(o)
                    elif text.startswith(c, i):
                        d, i = d - 1, i + len(c)
                    else:
                        i += 1
                break
        else:
            ch = text[i]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and (i == 0 or text[i - 1].isspace()):
                m = re.match(r"\.\.?(?=\s|$)|[A-Za-z_]\w*", text[i:])
                if m and (m.group(0) in _ISAR_COMMANDS or m.group(0) in (".", "..")):
                    starts.append(i)
                if m:
                    i += len(m.group(0))
                    continue
            i += 1
    out: list[Sentence] = []
    bounds = [0] + [len(text[:k].rstrip()) for k in starts[1:]] + [n]
    for a, b in zip(bounds, bounds[1:], strict=False):
        piece = text[a:b]
        word = piece.split(None, 1)[0] if piece.strip() else ""
        m = re.match(r"\w*", word)  # always matches (possibly empty)
        word = word if word in (".", "..") else m.group(0) if word and m else ""
        kind: SentenceKind = (
            "blank"
            if not word
            else "open"
            if word == "proof"
            else "close"
            if word == "qed"
            else "tactic"
            if word in _ISAR_TACTICS
            else "command"
        )
        out.append(Sentence(piece, kind))
    return out


def isar_script(text: str) -> ProofScript:
    """An Isar proposal (after :func:`normalize_isar`) as ProofAug steps; trailing whitespace is the tail."""
    sents = split_isar(normalize_isar(text).rstrip())
    body = [s for s in sents if s.kind != "blank" or s.text.strip()]
    return ProofScript("", body, "", "", True, "isabelle")


def isar_blocks(sentences: list[Sentence]) -> tuple[Block, list[Block]]:
    """Blocks of an Isar step list: the root and each ``proof … qed`` (both steps inside the block, so that a cut
    at its entry replaces the whole sub-proof of the statement before it by one ``sorry``). Unbalanced steps are
    left to the prover (an unmatched ``qed`` closes nothing here)."""
    n = len(sentences)
    root = Block("root", 0, n, 0)
    blocks, stack = [root], [root]
    for i, s in enumerate(sentences):
        if s.kind == "open":
            parent = stack[-1]
            b = Block("proof", i, n, parent.depth + 1, opener=i, parent=parent)
            parent.children.append(b)
            blocks.append(b)
            stack.append(b)
        elif s.kind == "close" and len(stack) > 1:
            stack.pop().end = i + 1
    return root, blocks
