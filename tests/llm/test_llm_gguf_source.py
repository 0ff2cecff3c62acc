"""The GGUF source on the real model (the llm extra): the scorer, the next-token distributions and an
llmcheck question, each against the model's own numbers computed another way."""
from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from typing import Any

import pytest

from _support import CLI
from forewarn.guard.llmcheck.chain import ExploreSettings, StateKind
from forewarn.guard.llmcheck.explore import explore
from forewarn.guard.llmcheck.sources import open_source
from forewarn.guard.llmcheck.sources.gguf import log_softmax_at

pytest.importorskip("llama_cpp")

PROMPTS = ["Task: Put the fork in the microwave.\nStep 1:", "A robot must turn on the stove. Step 1: find StoveKnob\nStep 2:"]
CONTINUATIONS = [" find Fork\n", " pick Fork\n", " turn_on StoveKnob\n", " done\n", " put Microwave\n"]
# the scorer evaluates the prompt, then every continuation in a sequence of its own in one batch; the
# direct computation evaluates prompt and continuation in one pass: llama.cpp may round differently
TOLERANCE = 2e-3
# one token's log-probability from an incremental evaluation (a token at a time) against one pass over
# the whole text: llama.cpp's 4-bit kernels take other paths for one token and for a batch, and round
# differently (seen: up to 0.1 in log-probability on this 270M model). The same split gives the same floats.
LOG_TOLERANCE = 0.15


def ids(tokens: Sequence[Hashable]) -> list[int]:
    """A GGUF source's tokens are ids."""
    assert all(isinstance(t, int) for t in tokens)
    return [t for t in tokens if isinstance(t, int)]


def direct_log_likelihood(gguf: Any, prompt: str, continuation: str) -> float:
    """The sum of log-softmax(logits)[token] over the continuation, from one pass over the whole text."""
    base = gguf.tokens_of(prompt, bos=True)
    return float(math.fsum(gguf.sequence_log_probs(base + gguf.tokens_of(continuation), len(base))))


def test_the_scorer_is_the_models_log_likelihood_computed_directly(gguf: Any) -> None:
    for prompt in PROMPTS:
        scored = gguf.score(prompt, CONTINUATIONS)
        for continuation, value in zip(CONTINUATIONS, scored):
            expected = direct_log_likelihood(gguf, prompt, continuation)
            assert value < 0 and math.isfinite(value)
            assert value == pytest.approx(expected, abs=TOLERANCE), (prompt, continuation)
        # one at a time, after other prompts: the same numbers
        assert gguf.score(prompt, CONTINUATIONS[::-1]) == pytest.approx(scored[::-1], abs=TOLERANCE)
    # the worked plan makes its first step likelier than a step of another task
    find, stove = gguf.score(PROMPTS[0], [" find Fork\n", " turn_on StoveKnob\n"])
    assert find > stove


def test_next_tokens_are_the_models_log_probabilities(gguf: Any) -> None:
    prompt = PROMPTS[1]
    base = gguf.tokens_of(prompt, bos=True)
    (dist,) = gguf.next_tokens([gguf.encode(prompt)], top_k=5)
    probs = [c.prob for c in dist.candidates]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-9
    for candidate in dist.candidates:
        (logprob,) = gguf.sequence_log_probs([*base, int(candidate.token)], len(base))
        assert math.log(candidate.prob) == pytest.approx(logprob, abs=LOG_TOLERANCE)
        assert candidate.piece == gguf.decode([candidate.token])


def test_the_llmcheck_chain_carries_the_models_probabilities(gguf: Any) -> None:
    source = open_source(f"gguf:{gguf.path}")  # the same file by path, as `--model gguf:PATH` opens it
    try:
        model = explore(source, PROMPTS[0], ExploreSettings(alpha=0.9, k=3, depth=2))
    finally:
        source.close()
    prompt = gguf.tokens_of(model.prompt, bos=True)
    expanded = [s for s in model.states if s.kind == StateKind.EXPANDED]
    assert len(expanded) >= 2
    compared = 0
    for state in expanded:
        # the model's distribution after this state's text, from a fresh context, in the explorer's split
        # (the prompt in one pass, then a token at a time): the same floats
        gguf.reset()
        path = ids(state.tokens)
        for depth in range(len(path) + 1):
            logits = gguf.next_logits([*prompt, *path[:depth]])
        for target, prob in state.children:
            child = model.states[target]
            if tuple(child.tokens[:-1]) != tuple(state.tokens):
                continue  # merged with another path to the same text: its token is another path's
            token = ids(child.tokens)[-1]
            assert prob == pytest.approx(math.exp(log_softmax_at(logits, token)), rel=1e-9)
            (logprob,) = gguf.sequence_log_probs([*prompt, *path, token], len(prompt) + len(path))
            assert math.log(prob) == pytest.approx(logprob, abs=LOG_TOLERANCE)
            compared += 1
        # each row sums to one: the kept probabilities and the unexplored rest
        assert math.fsum([p for _, p in state.children] + [state.unexplored]) == pytest.approx(1.0, abs=1e-12)
    assert compared >= 3


def test_llmcheck_answers_a_pctl_question_about_the_real_model(gguf: Any, forewarn_here: CLI) -> None:
    done = forewarn_here("llmcheck", "--model", "gguf:package", "--prompt", PROMPTS[0], "--depth", "2", "--k", "3",
                         "--quantify", "fork=keywords:Fork", "--property", 'P=? [F "fork>0"]', "--format", "json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["source"] == "gguf:package"
    assert 0 <= answer["lower"] <= answer["value"] <= answer["upper"] <= 1
