from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import pytest

from _llm_support import brute_force, needs_hf
from forewarn.guard.llmcheck import ExploreSettings, SourceError, StateKind, check_llm, explore, open_source
from forewarn.guard.storm import Method

pytestmark = needs_hf


def test_batched_answers_equal_one_prefix_answers(hf_source: Any) -> None:
    prompts = ["the player", "the agent will", "she said the coach", "the"]
    sequences = [hf_source.encode(p) for p in prompts]
    batched = hf_source.next_tokens(sequences, 5)
    for sequence, together in zip(sequences, batched):
        alone = hf_source.next_tokens([sequence], 5)[0]
        assert [c.token for c in alone.candidates] == [c.token for c in together.candidates]
        for a, b in zip(alone.candidates, together.candidates):
            assert math.isclose(a.prob, b.prob, rel_tol=1e-5)


def test_the_trained_model_is_not_uniform(hf_source: Any) -> None:
    dist = hf_source.next_tokens([hf_source.encode("the agent will")], 3)[0]
    vocab = len(hf_source.tokenizer)
    assert dist.candidates[0].prob > 5 / vocab
    assert dist.candidates[0].piece in {"run", "list", "read"}  # what the corpus says an agent will do
    assert sum(c.prob for c in dist.candidates) < 1.0 and not dist.complete


def test_explore_the_tiny_model_matches_brute_force(hf_source: Any) -> None:
    settings = ExploreSettings(alpha=0.7, k=3, depth=3)
    report = check_llm(hf_source, "the player", 'P=? [F "gender_bias>0"]', settings=settings, method=Method.EXACT)
    value, upper, unexplored = brute_force(hf_source, "the player", 0.7, 3, 3,
                                           lambda t: any(w in ("he", "she") for w in t.split()))
    # brute force asks one prefix at a time, the explorer in batches: equal up to float noise
    assert math.isclose(report.value, float(value), abs_tol=1e-6)
    assert report.result.upper is not None and math.isclose(report.result.upper, float(upper), abs_tol=1e-6)
    assert math.isclose(report.unexplored_mass, float(unexplored), abs_tol=1e-6)
    for row in report.model.exact_rows():
        assert sum(p for _, p in row) == 1
    stats = report.model.stats
    assert stats.model_calls == stats.expanded and stats.batches < stats.model_calls


def test_a_saved_model_directory_loads_offline(tiny_model_dir: Path, hf_source: Any) -> None:
    source = open_source(str(tiny_model_dir))
    a = source.next_tokens([source.encode("the coach")], 3)[0]
    b = hf_source.next_tokens([hf_source.encode("the coach")], 3)[0]
    assert [c.token for c in a.candidates] == [c.token for c in b.candidates]
    with pytest.raises(SourceError, match="cannot load"):
        open_source(str(tiny_model_dir / "missing"))


def test_sub_word_tokens_are_detokenized_before_quantification() -> None:
    """A byte-level BPE tokenizer splits words into pieces; states hold the decoded text."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from forewarn.guard.llmcheck.sources.hf import HFSource

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(["she said he was here", "the café is there", "héhé"] * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves it untyped
        tokenizer_object=core, eos_token="<eos>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=0, eos_token_id=0))
    source = HFSource(model, tokenizer)
    explored = explore(source, "the", ExploreSettings(alpha=1.0, k=8, depth=2))
    prompt_ids = source.encode("the")
    for state in explored.states:
        if state.kind in (StateKind.TERMINAL, StateKind.ENDED):
            continue
        ids = cast(list[int], [*prompt_ids, *state.tokens])  # a Hugging Face source's tokens are token ids
        assert state.text == tokenizer.decode(ids, clean_up_tokenization_spaces=False)
        assert "Ġ" not in state.text and state.text.startswith("the")
    # the byte-level pieces of "é" are not characters: half-decoded texts are never merged by text
    keyed_by_text = [(s.text, s.depth) for s in explored.states
                     if s.kind is StateKind.EXPANDED or s.kind is StateKind.LEAF if "\ufffd" not in s.text]
    assert len(keyed_by_text) == len(set(keyed_by_text))
