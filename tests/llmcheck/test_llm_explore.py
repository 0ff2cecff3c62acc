from __future__ import annotations

import math
from fractions import Fraction

import pytest

from _llm_support import TABLE, TableSource, brute_force
from forewarn.guard.llmcheck import (
    Budget,
    DistributionCache,
    ExploreSettings,
    LLMCheckError,
    NgramSource,
    StateKind,
    check_llm,
    explore,
    top_alpha_k,
)
from forewarn.guard.llmcheck.sources.base import Candidate
from forewarn.guard.storm import Method


def cands(*probs: float) -> list[Candidate]:
    return [Candidate(i, p, str(i)) for i, p in enumerate(probs)]


@pytest.mark.parametrize(("alpha", "k", "expected"), [
    (0.5, 10, 3),  # 0.3 + 0.25 reaches 0.5; the other 0.25 is tied with the last kept: kept too
    (0.3, 10, 1),
    (0.55, 10, 3),  # 0.3 + 0.25 = 0.55 reaches α exactly (as rationals of the floats), the tie still counts
    (1.0, 2, 3),  # k caps, but not inside a tie
    (1.0, 1, 1),
    (1.0, 10, 4),  # everything with mass
])
def test_top_alpha_k_keeps_the_most_probable_until_alpha_or_k(alpha: float, k: int, expected: int) -> None:
    chosen = top_alpha_k(cands(0.25, 0.3, 0.2, 0.25, 0.0), alpha, k)
    assert len(chosen) == expected
    assert [c.prob for c in chosen] == sorted((c.prob for c in chosen), reverse=True)


def test_identical_texts_from_different_token_paths_are_one_state() -> None:
    source = TableSource(TABLE)
    model = explore(source, "", ExploreSettings(alpha=1.0, k=4, depth=3))
    texts = [(s.text, s.depth) for s in model.states if s.kind not in (StateKind.TERMINAL, StateKind.ENDED)]
    assert len(texts) == len(set(texts))  # no text twice at one depth
    assert [s.depth for s in model.states if s.text == "the" and s.kind is not StateKind.ENDED] == [1, 2]
    there = next(s for s in model.states if s.text == "there")
    assert there.depth == 2 and model.stats.merged >= 2
    parents = [s.index for s in model.states for j, _ in s.children if j == there.index]
    assert len(parents) == 3
    # each expanded prefix cost exactly one model call
    assert model.stats.model_calls == model.stats.expanded == sum(source.calls)


def test_rows_sum_to_one_exactly_with_the_terminal_mass() -> None:
    source = TableSource(TABLE)
    model = explore(source, "", ExploreSettings(alpha=0.6, k=2, depth=3))
    for state, row in zip(model.states, model.exact_rows()):
        assert sum(p for _, p in row) == 1, state
        assert [j for j, _ in row] == sorted({j for j, _ in row})
    for float_row in model.rows():
        assert math.isclose(sum(p for _, p in float_row), 1.0, abs_tol=1e-12)
    root = model.states[0]
    assert [p for _, p in root.children] == [0.4, 0.3] and math.isclose(root.unexplored, 0.3)
    assert model.states[model.terminal].kind is StateKind.TERMINAL


def test_leaves_at_depth_l_and_ended_texts_are_absorbing() -> None:
    model = explore(TableSource(TABLE), "", ExploreSettings(alpha=1.0, k=4, depth=2))
    leaves = [s for s in model.states if s.kind is StateKind.LEAF]
    assert leaves and all(s.depth == 2 for s in leaves)
    ended = [s for s in model.states if s.kind is StateKind.ENDED]
    assert [s.text for s in ended] == ["the"]
    rows = model.rows()
    for s in leaves + ended:
        assert rows[s.index] == [(s.index, 1.0)]


@pytest.mark.parametrize(("alpha", "k", "depth"), [(1.0, 4, 3), (0.6, 2, 3), (0.5, 1, 4), (0.9, 3, 2)])
def test_value_and_bounds_equal_brute_force_enumeration(alpha: float, k: int, depth: int) -> None:
    source = TableSource(TABLE)
    value, upper, unexplored = brute_force(source, "", alpha, k, depth, lambda t: " he" in t or " she" in t)
    report = check_llm(source, "", 'P=? [F "gender_bias>0"]', settings=ExploreSettings(alpha, k, depth),
                       method=Method.EXACT)
    assert report.value == float(value)
    assert report.result.lower == float(value) and report.result.upper == float(upper)
    assert math.isclose(report.unexplored_mass, float(unexplored), abs_tol=1e-15)


def test_ngram_value_equals_brute_force(corpus_path: object) -> None:
    source = NgramSource.from_file(str(corpus_path), order=2)
    for alpha, k, depth in [(0.8, 3, 4), (1.0, 2, 5)]:
        value, upper, _ = brute_force(source, "the player", alpha, k, depth, lambda t: "game" in t.split())
        report = check_llm(source, "the player", 'P=? [F "game>0"]', quantifications=["game=keywords:game"],
                           method=Method.EXACT, settings=ExploreSettings(alpha, k, depth))
        assert report.value == float(value) and report.result.upper == float(upper)
        assert 0 < report.value < 1
        # sound (default) agrees within its certified bounds
        sound = check_llm(source, "the player", 'P=? [F "game>0"]', quantifications=["game=keywords:game"],
                          settings=ExploreSettings(alpha, k, depth))
        # (Storm's bounds are doubles: allow for the rounding of the last bit)
        assert sound.result.value_lower is not None and sound.result.value_upper is not None
        assert sound.result.value_lower - 1e-15 <= float(value) <= sound.result.value_upper + 1e-15


def test_batches_fill_up_on_a_wide_frontier() -> None:
    source = TableSource({"": [(c, 1 / 26) for c in "abcdefghijklmnopqrstuvwxyz"]} | {
        c: [(c, 0.5), ("!", 0.5)] for c in "abcdefghijklmnopqrstuvwxyz"}, max_batch=8)
    model = explore(source, "", ExploreSettings(alpha=1.0, k=26, depth=2))
    assert source.calls == [1, 8, 8, 8, 2]
    assert model.stats.prefixes_per_batch == 27 / 5 and model.stats.calls_per_expanded == 1.0


@pytest.mark.parametrize("budget", [Budget(max_states=6), Budget(max_calls=3), Budget(max_seconds=0.0)])
def test_a_budget_stops_cleanly_and_accounts_for_the_unexplored_mass(budget: Budget) -> None:
    source = TableSource(TABLE, max_batch=1)
    model = explore(source, "", ExploreSettings(alpha=1.0, k=4, depth=4), budget=budget)
    assert model.stats.stopped_by in {"states", "calls", "seconds"}
    cut = [s for s in model.states if s.kind is StateKind.CUT]
    assert cut and all(s.unexplored == 1.0 and not s.children for s in cut)
    for row in model.exact_rows():
        assert sum(p for _, p in row) == 1
    visit = model.visit_probabilities()
    absorbed = sum(visit[s.index] for s in model.states if s.kind in (StateKind.LEAF, StateKind.ENDED))
    assert math.isclose(absorbed + visit[model.terminal], 1.0)  # no mass silently dropped
    assert visit[model.terminal] >= sum(visit[s.index] for s in cut) - 1e-12


def test_the_cache_answers_repeated_prefixes_without_calls() -> None:
    source = TableSource(TABLE)
    cache = DistributionCache()
    first = explore(source, "", ExploreSettings(alpha=1.0, k=4, depth=3), cache=cache)
    calls = len(source.calls)
    second = explore(source, "", ExploreSettings(alpha=0.5, k=2, depth=3), cache=cache)
    assert len(source.calls) == calls and second.stats.model_calls == 0
    assert second.stats.cache_hits == second.stats.expanded > 0
    assert first.size > second.size


def test_settings_are_validated() -> None:
    for bad in [dict(alpha=0.0), dict(alpha=1.5), dict(k=0), dict(depth=-1)]:
        with pytest.raises(LLMCheckError):
            ExploreSettings(**bad)  # type: ignore[arg-type]


def test_depth_zero_is_the_start_text_alone() -> None:
    model = explore(TableSource(TABLE), "", ExploreSettings(depth=0))
    assert [s.kind for s in model.states] == [StateKind.LEAF, StateKind.TERMINAL]
    assert model.unexplored_mass == 0.0


def test_exact_rows_are_fractions_of_the_sources_floats() -> None:
    model = explore(TableSource(TABLE), "", ExploreSettings(alpha=0.6, k=2, depth=1))
    row = dict(model.exact_rows()[0])
    assert row[1] == Fraction(0.4) and row[model.terminal] == 1 - Fraction(0.4) - Fraction(0.3)
