"""Equal probabilities: the explored chain and the answer never depend on how a source orders ties."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest

from _llm_support import CORPUS, TableSource
from forewarn.guard.llmcheck import Budget, ExploreSettings, NgramSource, StateKind, check_llm, explore, top_alpha_k
from forewarn.guard.llmcheck.sources.base import Candidate, Token, TokenDistribution
from forewarn.guard.storm import Method


class Incomplete(TableSource):
    """Distributions never marked complete (as from an OpenAI-style server), ``reverse``: tied
    tokens in the opposite order."""

    def __init__(self, table: Mapping[str, Sequence[tuple[str | None, float]]], *, reverse: bool = False,
                 max_batch: int = 4) -> None:
        super().__init__(table, max_batch=max_batch)
        self.reverse = reverse

    def next_tokens(self, sequences: Sequence[Sequence[Token]], top_k: int) -> list[TokenDistribution]:
        self.calls.append(len(sequences))
        out = []
        for sequence in sequences:
            rows = self.table.get(self.decode(sequence), [])
            rows = list(reversed(rows)) if self.reverse else list(rows)
            ranked = sorted(rows, key=lambda r: -r[1])  # stable: ties now in reverse table order
            out.append(TokenDistribution(tuple(Candidate(piece, p, piece or "", eos=piece is None)
                                               for piece, p in ranked[:top_k])))
        return out


@pytest.mark.parametrize(("alpha", "k"), [(0.3, 1), (0.5, 1), (1.0, 2), (0.5, 5)])
def test_the_issues_example_has_one_stated_answer(alpha: float, k: int) -> None:
    # after "the agent will" the trigram model has three tied words, 1/3 each: run, list, read.
    # Keeping one of them (as k = 1 used to, alphabetically " list") gave G !ran = 1.0; keeping
    # " run" gave 2/3. Every tied word is kept, so the answer is 2/3 whatever the order or cut-off.
    source = NgramSource.from_text(CORPUS, order=3)
    report = check_llm(source, "the agent will", 'P=? [G !"ran>0"]', quantifications=["ran=keywords:run"],
                       settings=ExploreSettings(alpha=alpha, k=k, depth=4), method=Method.EXACT)
    assert report.value == float(Fraction(2, 3))
    first = sorted(s.continuation for s in report.model.states if s.depth == 1 and s.kind is not StateKind.ENDED)
    assert first == [" list", " read", " run"]


def test_ties_are_ordered_by_token_and_all_tied_at_the_cut_off_are_kept() -> None:
    tied = [Candidate(7, 0.25, "g"), Candidate(3, 0.25, "c"), Candidate(5, 0.5, "e"), Candidate(9, 0.25, "i")]
    assert [c.token for c in top_alpha_k(tied, 0.6, 2)] == [5, 3, 7, 9]  # ids ascending within the tie
    assert [c.token for c in top_alpha_k(tied, 0.5, 5)] == [5]  # α met before the tie: no tie at the cut
    words = [Candidate(" run", 1 / 3, " run"), Candidate(" list", 1 / 3, " list"), Candidate(" read", 1 / 3, " read")]
    assert [c.token for c in top_alpha_k(words, 0.2, 1)] == [" list", " read", " run"]


TIES: Mapping[str, Sequence[tuple[str | None, float]]] = {
    "": [("b", 0.25), ("a", 0.25), ("d", 0.25), ("c", 0.25)],
    "a": [("x", 0.5), ("y", 0.5)], "b": [("x", 0.5), ("y", 0.5)],
    "c": [("x", 0.6), ("y", 0.2), ("z", 0.2)], "d": [(None, 1.0)],
}


def test_a_source_that_cuts_a_tie_short_is_asked_again_and_the_chain_is_the_same() -> None:
    settings = ExploreSettings(alpha=0.3, k=1, depth=2)
    plain = explore(Incomplete(TIES), "", settings)
    short = Incomplete(TIES, reverse=True)
    reversed_ = explore(short, "", settings)
    assert [s.text for s in plain.states] == [s.text for s in reversed_.states]
    assert plain.exact_rows() == reversed_.exact_rows()
    root = plain.states[0]
    assert [plain.states[j].text for j, _ in root.children] == ["a", "b", "c", "d"]  # all four tied kept
    # the start: asked for k + 1 = 2, both kept, 0.5 + 0.25 <= 1 left room for another 0.25:
    # asked again for 4, which settles it (1 + 0.25 > 1). "a" and "b": both kept, but 1 + 0.5 > 1.
    assert short.calls[:2] == [1, 1] and reversed_.stats.model_calls == reversed_.stats.expanded + 1
    assert explore(TableSource(TIES), "", settings).exact_rows() == plain.exact_rows()
    c = next(s for s in plain.states if s.text == "c")
    assert [plain.states[j].text for j, _ in c.children] == ["cx"]  # 0.6 alone reaches α; the 0.2 tie is below


# Two depth-2 texts whose reach probabilities are equal in floating point but not exactly:
# "abc" by two paths, 0.375·0.1 + 0.375·0.1 (rounds to 0.07500000000000001), and "zyy" by one,
# 0.25·0.30000000000000004 (exactly 0.07500000000000001). Exactly, "zyy" is the likelier.
NOISE: Mapping[str, Sequence[tuple[str | None, float]]] = {
    "": [("a", 0.375), ("ab", 0.375), ("z", 0.25)],
    "a": [("bc", 0.1), (None, 0.5)], "ab": [("c", 0.1), (None, 0.5)], "z": [("yy", 0.30000000000000004), (None, 0.5)],
    "abc": [("!", 0.5)], "zyy": [("!", 0.5)],
}


def test_the_frontier_is_ordered_by_exact_reach_probability_not_by_rounding() -> None:
    assert 0.375 * 0.1 + 0.375 * 0.1 == 0.25 * 0.30000000000000004  # a tie in floats ...
    assert 2 * Fraction(0.375) * Fraction(0.1) < Fraction(0.25) * Fraction(0.30000000000000004)  # ... not exactly
    for source in (Incomplete(NOISE, max_batch=1), Incomplete(NOISE, reverse=True, max_batch=1)):
        # one call for the start, three for depth 1, one left for depth 2: the budget keeps the likeliest
        model = explore(source, "", ExploreSettings(alpha=1.0, k=5, depth=3), budget=Budget(max_calls=5))
        expanded = [s.text for s in model.states if s.depth == 2 and s.kind is StateKind.EXPANDED]
        cut = [s.text for s in model.states if s.depth == 2 and s.kind is StateKind.CUT]
        assert (expanded, cut) == (["zyy"], ["abc"])


def test_the_mass_is_compared_with_alpha_exactly_as_the_docs_say() -> None:
    """docs/llmcheck.md: 0.25 + 0.5 reaches 0.75; 0.3 + 0.25 does not reach 0.55, nor 0.3 + 0.3 + 0.2 0.8
    (the floats as rationals), though floating-point sums say they do."""
    assert 0.3 + 0.25 >= 0.55 and 0.3 + 0.3 + 0.2 >= 0.8
    dyadic = [Candidate(1, 0.5, "a"), Candidate(2, 0.25, "b"), Candidate(3, 0.125, "c")]
    assert [c.token for c in top_alpha_k(dyadic, 0.75, 5)] == [1, 2]
    two = [Candidate(1, 0.3, "a"), Candidate(2, 0.25, "b"), Candidate(3, 0.2, "c")]
    assert [c.token for c in top_alpha_k(two, 0.55, 5)] == [1, 2, 3]
    three = [Candidate(1, 0.3, "a"), Candidate(2, 0.3, "b"), Candidate(3, 0.2, "c"), Candidate(4, 0.1, "d")]
    assert [c.token for c in top_alpha_k(three, 0.8, 5)] == [1, 2, 3, 4]
