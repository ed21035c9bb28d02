"""Test helpers: scripted backends that replay or sample fixed steps, and tiny random GPT-2s."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rsd.backends import cut_at_stop
from rsd.tasks.arithmetic import ArithmeticTokenizer, make_model

TOK = ArithmeticTokenizer()


def ids(text: str) -> list[int]:
    return TOK.encode(text, add_special_tokens=False)


class ScriptedBackend:
    """Answers each context with ``script(context)`` (token ids), cut at the first stop and the budget; records
    every call's batch."""

    def __init__(self, script: Callable[[list[int]], list[int]], tokenizer=TOK, vocab_size: int | None = 20):
        self.script, self.tokenizer, self.vocab_size = script, tokenizer, vocab_size
        self.batches: list[int] = []

    def generate_steps(
        self, contexts, *, max_new_tokens, stop_ids, stop_strings=(), temperature=0.0, top_p=1.0, generator=None
    ):
        self.batches.append(len(contexts))
        return [
            cut_at_stop(self.script(list(c)), stop_ids, k, stop_strings, self.tokenizer)
            for c, k in zip(contexts, max_new_tokens)
        ]


class ReplayBackend(ScriptedBackend):
    """Replays, for each prompt (the context's first ``prompt_len`` tokens), its list of steps in order."""

    def __init__(self, steps_by_prompt: dict[str, Sequence[str | list[int]]], prompt_of: Callable[[list[int]], str]):
        self.calls_per_prompt: dict[str, int] = {}

        def script(ctx: list[int]) -> list[int]:
            p = prompt_of(ctx)
            k = self.calls_per_prompt.get(p, 0)
            self.calls_per_prompt[p] = k + 1
            s = steps_by_prompt[p][min(k, len(steps_by_prompt[p]) - 1)]
            return ids(s) if isinstance(s, str) else list(s)

        super().__init__(script)


class SamplingBackend(ScriptedBackend):
    """Each step is one outcome token drawn from ``probs`` (over ``outcomes``) then EOS: an enumerable step space."""

    def __init__(self, probs: Sequence[float], outcomes: Sequence[int]):
        self.probs = torch.tensor(probs, dtype=torch.float64)
        self.outcomes = list(outcomes)
        super().__init__(lambda c: [])

    def generate_steps(
        self, contexts, *, max_new_tokens, stop_ids, stop_strings=(), temperature=0.0, top_p=1.0, generator=None
    ):
        self.batches.append(len(contexts))
        draws = torch.multinomial(self.probs, len(contexts), replacement=True, generator=generator)
        return [[self.outcomes[int(k)], TOK.eos_token_id] for k in draws]


def random_gpt2(n_layer: int = 1, n_embd: int = 32, n_head: int = 2, seed: int = 0, scale: float = 6.0):
    """A random GPT-2 over the arithmetic vocabulary whose greedy outputs depend on position and content (weights
    scaled up so that it does not repeat one token); pad and bos have zero embeddings so they are never emitted."""
    m = make_model(n_layer, n_embd, n_head, seed=seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.mul_(scale)
        m.transformer.wte.weight[[TOK.pad_token_id, TOK.bos_token_id]] = 0.0  # never emitted: logit 0 vs large ones
    return m


class StubCompletionsServer:
    """A loopback (127.0.0.1) OpenAI-compatible ``/v1/completions`` server in a thread, serving one HF model
    greedily with vLLM's conventions (token-id prompts, ``stop_token_ids``, ``stop_reason``, special tokens
    skipped in the text). It answers at most ``max_requests`` requests and stops on ``close()``."""

    def __init__(self, model, tokenizer=TOK, max_requests: int = 2000):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, HTTPServer

        stub = self
        self.model, self.tokenizer, self.requests, self.max_requests = model, tokenizer, 0, max_requests

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                payload = json.dumps(stub.complete(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 0.2
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _serve(self):
        while not self._stop.is_set() and self.requests < self.max_requests:
            self.server.handle_request()

    def close(self):
        self._stop.set()
        self.thread.join(timeout=5)
        self.server.server_close()

    @torch.no_grad()
    def complete(self, body):
        self.requests += 1
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        stops = set(body.get("stop_token_ids") or [])
        eos = self.tokenizer.eos_token_id
        choices = []
        for i, ctx in enumerate(prompts):
            out, reason, stop_reason = [], "length", None
            for _ in range(body["max_tokens"]):
                t = int(self.model(input_ids=torch.tensor([ctx + out])).logits[0, -1].argmax())
                out.append(t)
                if t == eos:
                    reason = "stop"
                    break
                if t in stops:
                    reason, stop_reason = "stop", t
                    break
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            choices.append(
                {"index": i, "text": text, "finish_reason": reason, "stop_reason": stop_reason, "logprobs": None}
            )
        return {
            "id": "cmpl-stub",
            "object": "text_completion",
            "created": 0,
            "model": body["model"],
            "choices": choices,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
