"""Proposal sources: JSONL file, OpenAI-compatible stub server on 127.0.0.1, a tiny random GPT-2 with an offline
tokenizer."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from proofaug.proposers import FileProposals, OpenAIProposer, ProposerError, cut_at_stop, prompt_for
from proofaug.suite import load_problems


def test_file_proposals_order_exhaustion_and_errors(tmp_path):
    f = tmp_path / "p.jsonl"
    rows = [{"problem": "a", "proposal": "p1"}, {"problem": "b", "proposal": "q1"}, {"problem": "a", "proposal": "p2"}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    src = FileProposals(f)
    assert src("", 1, problem="a") == ["p1"] and not src.exhausted("a")
    assert src("", 5, problem="a") == ["p2"] and src.exhausted("a")
    assert src("", 1, problem="a") == []
    assert src("", 2, problem="b") == ["q1"]
    f.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"problem": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"p.jsonl:2: missing string field 'proposal'"):
        FileProposals(f)


class _Stub(BaseHTTPRequestHandler):
    fail_first = 0
    always = 0
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body))
        if type(self).always or type(self).fail_first > 0:
            type(self).fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        n = body["n"]
        if self.path == "/v1/completions":
            choices = [{"index": i, "text": f"{body['prompt'][-5:]}#{i}"} for i in range(n)]
        else:
            choices = [
                {"index": i, "message": {"content": body["messages"][0]["content"][:3] + str(i)}} for i in range(n)
            ]
        data = json.dumps({"choices": choices[::-1]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = HTTPServer(("127.0.0.1", 0), _Stub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    _Stub.seen, _Stub.fail_first, _Stub.always = [], 0, 0
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_openai_completions_and_chat(server):
    p = OpenAIProposer(server, "m", mode="completions", backoff=0.0)
    assert p("abcdefgh", 3) == ["defgh#0", "defgh#1", "defgh#2"]  # sorted by index
    path, body = _Stub.seen[-1]
    assert path == "/v1/completions" and body["temperature"] == 0.6 and body["top_p"] == 0.95 and body["n"] == 3
    c = OpenAIProposer(server, "m", mode="chat", api_key="k", backoff=0.0)
    assert c("xyz!", 2) == ["xyz0", "xyz1"] and _Stub.seen[-1][0] == "/v1/chat/completions"


def test_openai_retries_then_fails_with_status_and_url(server):
    _Stub.fail_first = 2
    p = OpenAIProposer(server, "m", max_retries=3, backoff=0.0)
    assert p("hello", 1) == ["hello#0"] and len(_Stub.seen) == 3
    _Stub.always = 1
    with pytest.raises(ProposerError, match=r"503.*|.*completions.*503"):
        OpenAIProposer(server, "m", max_retries=1, backoff=0.0)("x", 1)
    with pytest.raises(ValueError, match="mode"):
        OpenAIProposer(server, "m", mode="edit")


def test_prompt_and_stop():
    prob = load_problems()["sum_n_closed"]
    text = prompt_for(prob)
    assert text.endswith(prob.statement + "\n") and prob.header in text
    assert cut_at_stop("intros.\nQed.\nTheorem x", ("\nTheorem", "```")) == "intros.\nQed."


@pytest.mark.slow
def test_transformers_proposer_tiny_gpt2():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from proofaug.proposers import TransformersProposer

    vocab = {ch: i for i, ch in enumerate(["[UNK]", "[EOS]", *"abcdefghijklmnopqrstuvwxyz .\n()"])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=1))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = tokenizers.decoders.Fuse()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(vocab), n_positions=64, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    prop = TransformersProposer(model, fast, max_new_tokens=12, stop=("e",), seed=3)
    outs = prop("intros n.", 3)
    assert len(outs) == 3 and all(isinstance(o, str) and "e" not in o for o in outs)
    assert prop("intros n.", 3) == outs  # seeded
