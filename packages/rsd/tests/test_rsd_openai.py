"""OpenAIBackend against loopback stub servers (vLLM's completions conventions) serving the fixture models:
RSD through the servers returns exactly what it returns through HFBackend."""

from __future__ import annotations

import pytest
from rsd_testing import TOK, StubCompletionsServer

from rsd import HFBackend, OpenAIBackend, RewardGuidedDecoder
from rsd.experiments import QUICK, config
from rsd.tasks.arithmetic import ExactArithmeticPRM, load_fixture_models, make_problems

pytest.importorskip("openai", reason="OpenAIBackend needs the openai client (extra [serve])")


def test_rsd_through_openai_servers_equals_hf():
    draft_m, target_m = load_fixture_models()
    prompts = [p.prompt for p in make_problems(20, seed=21)]
    cfg = config(QUICK)
    want = RewardGuidedDecoder(HFBackend(draft_m, TOK), HFBackend(target_m, TOK), ExactArithmeticPRM(), cfg)
    want = want.generate(prompts)
    servers = [StubCompletionsServer(draft_m), StubCompletionsServer(target_m)]
    try:
        draft, target = (OpenAIBackend(s.base_url, name, TOK) for s, name in zip(servers, ("draft", "target")))
        got = RewardGuidedDecoder(draft, target, ExactArithmeticPRM(), cfg).generate(prompts)
    finally:
        for s in servers:
            s.close()
    assert [(o.token_ids, [s.source for s in o.steps], o.finish_reason) for o in got] == [
        (o.token_ids, [s.source for s in o.steps], o.finish_reason) for o in want
    ]
    assert {s.source for o in got for s in o.steps} == {"draft", "target"}
    assert 0 < servers[0].requests <= 40 and servers[1].requests > 0  # one request per round and budget


def test_openai_backend_needs_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        OpenAIBackend("http://127.0.0.1:9/v1", "m", None)


def test_openai_backend_names_a_response_without_one_choice_per_prompt():
    from types import SimpleNamespace

    class OneChoiceClient:  # a server that answers two prompts with a single choice
        completions = SimpleNamespace(
            create=lambda **kw: SimpleNamespace(
                choices=[SimpleNamespace(index=0, text="1+1=2\n", finish_reason="stop", stop_reason=None)]
            )
        )

    backend = OpenAIBackend("http://127.0.0.1:9/v1", "m", TOK, client=OneChoiceClient())
    with pytest.raises(ValueError, match=r"answered 2 prompts with choices of indices \[0\]"):  # was a KeyError
        backend.generate_steps([[1, 2], [1, 3]], max_new_tokens=[4, 4], stop_ids=[TOK.eos_token_id])
