from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from _llm_support import needs_hf
from forewarn.guard.llmcheck import ExploreSettings, SourceError, check_llm, open_source
from forewarn.guard.llmcheck.sources.openai import OpenAISource, _join

PROPERTY = 'P=? [F "gender_bias>0"]'


@needs_hf
def test_the_endpoint_gives_the_models_distribution(openai_url: str, hf_source: Any) -> None:
    with OpenAISource(openai_url, "tiny", eos_tokens={"[EOS]"}) as source:
        remote = source.next_tokens([source.encode("the player"), source.encode("the agent will")], 4)
    local = hf_source.next_tokens([hf_source.encode("the player"), hf_source.encode("the agent will")], 4)
    for r, loc in zip(remote, local):
        assert [c.piece.strip() for c in r.candidates] == [c.piece for c in loc.candidates]
        for a, b in zip(r.candidates, loc.candidates):
            assert math.isclose(a.prob, b.prob, rel_tol=1e-9)


@needs_hf
def test_checking_through_the_endpoint_equals_checking_the_local_model(openai_url: str, hf_source: Any) -> None:
    settings = ExploreSettings(alpha=0.8, k=4, depth=3)
    local = check_llm(hf_source, "the player", PROPERTY, settings=settings)
    with open_source(f"openai:{openai_url}#tiny", eos_tokens={"[EOS]"}, max_batch=8) as source:
        remote = check_llm(source, "the player", PROPERTY, settings=settings)
    assert remote.model.size == local.model.size
    assert math.isclose(remote.value, local.value, abs_tol=1e-6)
    assert math.isclose(remote.unexplored_mass, local.unexplored_mass, abs_tol=1e-6)
    assert sorted(s.text for s in remote.model.states) == sorted(s.text for s in local.model.states)
    stats = remote.model.stats
    assert stats.model_calls == stats.expanded and stats.batches < stats.model_calls  # list prompts, batched


def test_a_server_that_refuses_prompt_lists_is_asked_one_prompt_at_a_time() -> None:
    seen: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        body = json.loads(request.content)
        seen.append(body["prompt"])
        if isinstance(body["prompt"], list):
            return httpx.Response(400, json={"error": "prompt must be a string"})
        top = {" a": math.log(0.6), " b": math.log(0.3)}
        return httpx.Response(200, json={"choices": [{"index": 0, "logprobs": {"top_logprobs": [top]}}]})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    source = OpenAISource("http://test/v1", "m", client=client)
    dists = source.next_tokens([("x",), ("y",)], 2)
    assert [len(d.candidates) for d in dists] == [2, 2]
    assert seen == [["x", "y"], "x", "y"]
    assert math.isclose(dists[0].candidates[0].prob, 0.6)
    source.next_tokens([("x",), ("y",)], 2)
    assert seen[3:] == ["x", "y"]  # remembered: no more lists


def test_errors_name_the_endpoint() -> None:
    with pytest.raises(SourceError, match="openai:URL#MODEL"):
        open_source("openai:http://127.0.0.1:9/v1")
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500, text="boom")))
    with pytest.raises(SourceError, match="HTTP 500: boom"):
        OpenAISource("http://test/v1", "m", client=client).next_tokens([("x",)], 2)
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"choices": [{}]})))
    with pytest.raises(SourceError, match="top log-probabilities"):
        OpenAISource("http://test/v1", "m", client=client).next_tokens([("x",)], 2)


def test_byte_tokens_join_into_characters() -> None:
    assert _join(["caf", "bytes:\\xc3", "bytes:\\xa9", "!"]) == "café!"
    assert _join(["caf", "bytes:\\xc3"]) == "caf\ufffd"
