"""Proof proposal sources: a JSONL file, a transformers model, an OpenAI-compatible server (vLLM), or any callable
``proposer(prompt, n) -> list[str]``; prompt templates per language (informal text as comments).

Sampling follows the paper's Isabelle runs (Sec. 4.1): temperature 0.6, top-p 0.95, up to 2048 new tokens, stop
at the start of a new theorem or of a new informal statement.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from icml25_shared.validate import check_choice, check_float, check_int
from proofaug.config import Problem

__all__ = [
    "FileProposals",
    "OpenAIProposer",
    "TransformersProposer",
    "ProposerError",
    "prompt_for",
    "erp_prompt",
    "check_proposals",
    "STOP",
]

#: Stop strings per language (paper, Sec. 4.1 for Isabelle; the analogous commands for Coq and Lean).
STOP: dict[str, tuple[str, ...]] = {
    "coq": ("```", "\nTheorem", "\nLemma", "\n(* Informal statement"),
    "lean": ("```", "\ntheorem", "\nlemma", "\n/- Informal statement"),
    "isabelle": ("```", "\ntheorem", "\nend", "\nlemma", "\n(* Informal statement"),
}
_COMMENT = {"coq": ("(*", "*)"), "lean": ("/-", "-/"), "isabelle": ("(*", "*)")}


class ProposerError(RuntimeError):
    """A proposal source failed (HTTP status after retries, exhausted file, malformed line)."""


def check_proposals(value: Any, n: int, who: str = "proposer") -> list[str]:
    """The proposer contract: ``proposer(prompt, n)`` returns a list (or tuple) of at most ``n`` strings.

    Raises ``TypeError`` naming ``who``, the value and the expectation (a bare ``str`` is not a list of proposals:
    indexing it would give its first character)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(
            f"{who} must return a list of proof strings for n={n}, got {type(value).__name__} {str(value)[:60]!r}"
        )
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise TypeError(
                f"{who} must return a list of proof strings for n={n}, got {type(v).__name__} {v!r} at index {i}"
            )
    if len(value) > n:
        raise ValueError(f"{who} must return at most n={n} proposals, got {len(value)}")
    return list(value)


def prompt_for(problem: Problem, few_shot: str = "") -> str:
    """Whole-proof prompt: informal statement and proof as comments, then the formal statement (paper, Sec. 4.1)."""
    o, c = _COMMENT[problem.language]
    parts = [few_shot.rstrip() + "\n\n" if few_shot.strip() else ""]
    if problem.informal_statement:
        parts.append(f"{o} Informal statement: {problem.informal_statement} {c}\n")
    if problem.informal_proof:
        parts.append(f"{o} Informal proof: {problem.informal_proof} {c}\n")
    parts.append(f"{problem.header}\n\n{problem.statement}\n")
    return "".join(parts)


def erp_prompt(problem: Problem, prefix: str, goal: str) -> str:
    """ERP prompt (Sec. 3.3): the proof up to the hole plus a comment holding the current goal."""
    o, c = _COMMENT[problem.language]
    goal = " ".join(goal.split()) if problem.language == "coq" else goal
    return f"{prompt_for(problem)}{prefix}\n  {o} current goal: {goal} {c}\n"


class FileProposals:
    """Proposals read from JSONL lines ``{"problem": name, "proposal": text}``, served per problem in file order.

    Calling ``proposer(prompt, n, problem=p)`` returns the next ``n`` unserved proposals of ``p``; fewer than
    ``n`` (possibly none) once the problem's proposals are exhausted, which ``exhausted(name)`` reports.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._items: dict[str, list[str]] = defaultdict(list)
        self._next: dict[str, int] = defaultdict(int)
        with self.path.open() as fh:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{self.path}:{no}: not JSON ({err.msg})") from err
                for key in ("problem", "proposal"):
                    if not isinstance(row.get(key), str):
                        raise ValueError(f"{self.path}:{no}: missing string field {key!r}")
                self._items[row["problem"]].append(row["proposal"])

    def __call__(self, prompt: str, n: int = 1, *, problem: Problem | str | None = None) -> list[str]:
        check_int("n", n, min=1)
        if problem is None:
            raise ValueError("problem must name the problem whose proposals are wanted, got None")
        name = problem.name if isinstance(problem, Problem) else str(problem)
        start = self._next[name]
        out = self._items.get(name, [])[start : start + n]
        self._next[name] = start + len(out)
        return out

    def exhausted(self, name: str) -> bool:
        """Whether every proposal of ``name`` has been served."""
        return self._next[name] >= len(self._items.get(name, []))

    def count(self, name: str) -> int:
        """Number of proposals of ``name`` in the file."""
        return len(self._items.get(name, []))


class OpenAIProposer:
    """Any OpenAI-compatible server (vLLM, …) through the standard library's HTTP client.

    ``mode="completions"`` posts the prompt to ``/v1/completions`` (the paper's setting, a base model);
    ``mode="chat"`` sends it as one user message to ``/v1/chat/completions``. Non-2xx answers are retried
    ``max_retries`` times with exponential backoff, then raise :class:`ProposerError` with the status and URL.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        mode: Literal["completions", "chat"] = "completions",
        timeout: float = 60.0,
        max_retries: int = 3,
        *,
        temperature: float = 0.6,
        top_p: float = 0.95,
        max_tokens: int = 2048,
        stop: tuple[str, ...] = STOP["coq"],
        backoff: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.mode = check_choice("mode", mode, ("completions", "chat"))
        self.timeout = check_float("timeout", timeout, min=0.0, min_open=True)
        self.max_retries = check_int("max_retries", max_retries, min=0)
        self.temperature = check_float("temperature", temperature, min=0.0)
        self.top_p = check_float("top_p", top_p, min=0.0, max=1.0, min_open=True)
        self.max_tokens = check_int("max_tokens", max_tokens, min=1)
        self.stop = tuple(stop)
        self.backoff = check_float("backoff", backoff, min=0.0)

    def __call__(self, prompt: str, n: int = 1, **_: Any) -> list[str]:
        check_int("n", n, min=1)
        body: dict[str, Any] = {
            "model": self.model,
            "n": n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "stop": list(self.stop)[:4],
        }
        if self.mode == "completions":
            url, body["prompt"] = f"{self.base_url}/v1/completions", prompt
        else:
            url, body["messages"] = f"{self.base_url}/v1/chat/completions", [{"role": "user", "content": prompt}]
        data = self._post(url, body)
        choices = sorted(data.get("choices", []), key=lambda c: c.get("index", 0))
        if self.mode == "completions":
            return [c.get("text", "") for c in choices]
        return [c.get("message", {}).get("content", "") for c in choices]

    def _post(self, url: str, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.max_retries + 1):
            req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as err:
                last = f"HTTP {err.code}"
                err.close()
            except (urllib.error.URLError, TimeoutError) as err:
                last = f"{type(err).__name__}: {err}"
            if attempt < self.max_retries:
                time.sleep(self.backoff * 2**attempt)
        raise ProposerError(f"{url} answered {last} after {self.max_retries + 1} attempts")


class TransformersProposer:
    """Sampling from a transformers causal LM with ``generate`` (``stop_strings``), cut at the stop strings.

    Args:
        model: a ``PreTrainedModel`` with a language-model head.
        tokenizer: its tokenizer (a ``PreTrainedTokenizerBase``).
        temperature: sampling temperature (paper: 0.6).
        top_p: nucleus sampling mass (paper: 0.95).
        max_new_tokens: tokens generated per proposal at most (paper: 2048).
        stop: stop strings; the returned texts end before the first one.
        seed: seeds ``torch`` before each call, for reproducible samples.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        temperature: float = 0.6,
        top_p: float = 0.95,
        max_new_tokens: int = 2048,
        stop: tuple[str, ...] = STOP["coq"],
        *,
        seed: int | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = check_float("temperature", temperature, min=0.0, min_open=True)
        self.top_p = check_float("top_p", top_p, min=0.0, max=1.0, min_open=True)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, min=1)
        self.stop = tuple(stop)
        self.seed = seed

    def __call__(self, prompt: str, n: int = 1, **_: Any) -> list[str]:
        import torch

        from icml25_shared.device import torch_threads

        check_int("n", n, min=1)
        enc = self.tokenizer(prompt, return_tensors="pt")
        with torch_threads(1), torch.inference_mode():
            if self.seed is not None:
                torch.manual_seed(self.seed)
            out = self.model.generate(
                **enc,
                do_sample=True,
                temperature=self.temperature,
                top_p=self.top_p,
                max_new_tokens=self.max_new_tokens,
                num_return_sequences=n,
                stop_strings=list(self.stop) or None,
                tokenizer=self.tokenizer,
                pad_token_id=self.tokenizer.pad_token_id
                if self.tokenizer.pad_token_id is not None
                else self.tokenizer.eos_token_id,
            )
        texts = self.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        return [cut_at_stop(t, self.stop) for t in texts]


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """``text`` up to (excluding) the earliest stop string."""
    cut = min((text.find(s) for s in stop if s and s in text), default=len(text))
    return text[:cut]
