from __future__ import annotations

import math
from pathlib import Path

import pytest

from forewarn.guard.llmcheck import NgramSource, SourceError, open_source
from forewarn.guard.llmcheck.sources.ngram import EOS, tokenize_words


def test_training_counts_give_maximum_likelihood_with_back_off() -> None:
    source = NgramSource.from_text("a b c\na b d\na x\n", order=3)
    after_ab = {c.token: c.prob for c in source.distribution([str(t) for t in source.encode("a b")])}
    assert after_ab == {" c": 0.5, " d": 0.5}
    after_a = {c.token: c.prob for c in source.distribution(["a"])}
    assert after_a == pytest.approx({" b": 2 / 3, " x": 1 / 3})
    # an unseen context backs off to the longest seen suffix, down to unigrams
    unseen = {c.token: c.prob for c in source.distribution(["zzz", " q"])}
    assert math.isclose(sum(unseen.values()), 1.0) and EOS in unseen


def test_distributions_sum_to_one_and_are_sorted(corpus_path: Path) -> None:
    source = NgramSource.from_file(corpus_path, order=2, smoothing=0.1)
    for context in (["the"], ["the", " player"], [" rm"], []):
        full = source.distribution(context)
        assert math.isclose(sum(c.prob for c in full), 1.0)
        assert [c.prob for c in full] == sorted((c.prob for c in full), reverse=True)
        assert len(full) == len(source.vocabulary)  # smoothing: the whole vocabulary
    top = source.next_tokens([source.encode("the player")], 3)[0]
    probs = [c.prob for c in top.candidates]
    # the 3rd token is tied with the 4th and 5th: the answer runs to the end of the tie, plus one lower
    assert len(probs) == 6 and probs[2] == probs[3] == probs[4] > probs[5] and not top.complete
    assert len(source.next_tokens([source.encode("the player")], 2)[0].candidates) == 2  # no tie at the 2nd


def test_decode_joins_words_and_punctuation() -> None:
    source = NgramSource.from_text("Hello, world.\n")
    assert source.decode(["Hello", ",", " world", ".", EOS]) == "Hello, world."
    assert tokenize_words("  Don't   stop, now.") == ("Don't", " stop", ",", " now", ".")
    assert source.decode(source.encode("sudo rm -rf /tmp")) == "sudo rm -rf /tmp"


def test_open_source_and_errors(corpus_path: Path, tmp_path: Path) -> None:
    source = open_source(f"ngram:{corpus_path}", order=2)
    assert isinstance(source, NgramSource) and source.order == 2
    with pytest.raises(SourceError, match="cannot read"):
        open_source(f"ngram:{tmp_path / 'missing.txt'}")
    with pytest.raises(SourceError, match="no words"):
        NgramSource.from_text("\n\n")
    with pytest.raises(SourceError, match="order"):
        NgramSource.from_text("a", order=0)
