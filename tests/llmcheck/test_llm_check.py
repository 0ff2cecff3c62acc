from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import stormpy

from _llm_support import TABLE, TableSource
from forewarn.guard.llmcheck import (
    ExploreSettings,
    QueryError,
    check_explored,
    check_llm,
    explore,
    parse_query,
    prism_text,
)
from forewarn.guard.llmcheck.dtmc.build import Scope, label_states
from forewarn.guard.llmcheck.quantify import parse_quantifications
from forewarn.guard.storm import Method

SETTINGS = ExploreSettings(alpha=0.6, k=2, depth=3)


def test_labels_come_from_quantification_values_of_each_state() -> None:
    model = explore(TableSource(TABLE), "", ExploreSettings(alpha=1.0, k=4, depth=3))
    query = parse_query('P=? [F "gender_bias>0" & !"words>=3"]')
    labeling = label_states(model, query, parse_quantifications(["gender_bias", "words"]))
    he = [s.index for s in model.states if s.text == "there he"]
    assert labeling.labels["gender_bias_gt_0"] == sorted(
        s.index for s in model.states if s.text in ("there he", "there she"))
    assert labeling.values["gender_bias"][he[0]] == 1 and labeling.values["words"][he[0]] == 2
    assert labeling.values["gender_bias"][model.terminal] is None
    assert model.terminal not in labeling.labels["gender_bias_gt_0"]
    assert labeling.labels["terminal"] == [model.terminal] and labeling.labels["init"] == [0]


def test_the_interval_brackets_the_value_for_reachability_and_invariance() -> None:
    source = TableSource(TABLE)
    reach = check_llm(source, "", 'P=? [F "gender_bias>0"]', settings=SETTINGS, method=Method.EXACT)
    safe = check_llm(source, "", 'P=? [G !"gender_bias>0"]', settings=SETTINGS, method=Method.EXACT)
    m = reach.unexplored_mass
    assert m > 0
    assert reach.result.lower is not None and reach.result.upper is not None
    assert safe.result.lower is not None and safe.result.upper is not None
    # F: the paper's value counts the unexplored mass as not satisfying; upper counts all of it
    assert reach.result.lower == reach.value and math.isclose(reach.result.upper, reach.value + m)
    # G !: the same mass, the other way round; and the two are complements
    assert safe.result.upper == safe.value and math.isclose(safe.result.lower, safe.value - m)
    assert math.isclose(reach.result.lower + safe.result.upper, 1.0)
    assert math.isclose(reach.result.upper + safe.result.lower, 1.0)


def test_bounded_until_with_steps_counts_tokens() -> None:
    source = TableSource(TABLE)
    r1 = check_llm(source, "", 'P=? [F<=1 "length>=3"]', settings=ExploreSettings(1.0, 4, 3), method=Method.EXACT)
    assert r1.value == 0.3  # only "the" has three characters after one token
    assert r1.result.lower == r1.result.upper == 0.3


def test_verdict_for_a_probability_bound() -> None:
    source = TableSource(TABLE)
    low = check_llm(source, "", 'P<0.95 [F "gender_bias>0"]', settings=SETTINGS)
    assert low.result.verdict is True
    undecided = check_llm(source, "", f'P>={low.value + 0.01} [F "gender_bias>0"]', settings=SETTINGS)
    assert undecided.result.upper is not None
    assert undecided.result.upper > low.value + 0.01 and undecided.result.verdict is None


def test_outcomes_are_split_into_satisfying_and_violating_texts() -> None:
    report = check_llm(TableSource(TABLE), "", 'P=? [F "gender_bias>0"]', settings=ExploreSettings(1.0, 4, 3))
    assert [o.continuation for o in report.satisfying()] == ["there he", "there she"]
    assert all(o.satisfies is False for o in report.violating())
    assert report.satisfying()[0].probability == pytest.approx((0.4 * 0.5 + 0.3 * 0.6 + 0.2 * 0.9) * 0.5)
    probs = [o.probability for o in report.outcomes]
    assert probs == sorted(probs, reverse=True)
    data: dict[str, Any] = report.to_dict()
    assert data["satisfying"][0]["values"] == {"gender_bias": 1}


def test_scope_full_reads_the_start_text_too() -> None:
    table: dict[str, list[tuple[str | None, float]]] = {"he": [(" ran", 1.0)]}
    generated = check_llm(TableSource(table), "he", 'P=? [F "gender_bias>0"]', settings=ExploreSettings(1, 1, 1))
    full = check_llm(TableSource(table), "he", 'P=? [F "gender_bias>0"]', settings=ExploreSettings(1, 1, 1),
                     scope=Scope.FULL)
    assert generated.value == 0.0 and full.value == 1.0


def test_prism_export_parses_and_gives_the_same_value(tmp_path: Path) -> None:
    model = explore(TableSource(TABLE), "", SETTINGS)
    query = parse_query('P=? [F "gender_bias>0"]')
    result = check_explored(model, query, parse_quantifications(["gender_bias"]), method=Method.EXACT)
    path = tmp_path / "model.prism"
    path.write_text(prism_text(model, result.labeling), encoding="utf-8")
    program = stormpy.parse_prism_program(str(path))
    props = stormpy.parse_properties(query.formula(), program)
    built = stormpy.build_model(program, props)
    values = stormpy.model_checking(built, props[0]).get_value_vector()
    assert built.nr_states == model.size
    assert math.isclose(values[int(built.initial_states[0])], result.value, abs_tol=1e-12)


@pytest.mark.parametrize(("text", "storm"), [
    ('P=? [F "gender_bias>0"]', 'P=? [F "gender_bias_gt_0"]'),
    ('P=? [F gender_bias>0]', 'P=? [F "gender_bias_gt_0"]'),  # the paper writes it bare
    ('P=? [!"sentiment<0" U<=3 "similarity>=80"]', 'P=? [!"sentiment_lt_0" U<=3 "similarity_ge_80"]'),
    ('P>=0.5 [G !"sentiment_score<=-20"]', 'P=? [G !"sentiment_score_le_m20"]'),
    ('P=? [F "leaf" & "words=2"]', 'P=? [F "leaf" & "words_eq_2"]'),
])
def test_queries_are_rewritten_for_storm(text: str, storm: str) -> None:
    assert parse_query(text, ["gender_bias"]).formula() == storm


@pytest.mark.parametrize(("text", "message"), [
    ('F "a>0"', "expected a probability query"),
    ('P=? [F "gender_bias"]', 'did you mean "gender_bias>0"'),
    ('P=? [F "x > y"]', "neither a comparison"),
    ('P>=2 [F "x>0"]', "must lie in [0, 1]"),
    ('P=? [F P>0.5 [X "x>0"]]', "nested"),
])
def test_bad_queries_say_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(QueryError, match=message.replace("[", r"\[")):
        parse_query(text)


def test_a_quantification_the_query_needs_must_be_given() -> None:
    with pytest.raises(QueryError, match="add --quantify"):
        check_llm(TableSource(TABLE), "", 'P=? [F "mine>0"]', settings=SETTINGS)
