from __future__ import annotations

from pathlib import Path

import pytest

from _support import TOY_SPEC
from forewarn.errors import SpecError
from forewarn.guard.monitoring import build_monitors
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import Action, Spec, load_spec, parse_spec


def spec_error(text: str) -> SpecError:
    """The error a spec raises, whether at parsing or when its predicates are compiled."""
    with pytest.raises(SpecError) as info:
        PredicateSet(parse_spec(text, source="s.yaml"))
    assert info.value.source == "s.yaml"
    assert str(info.value).startswith(f"s.yaml:{info.value.line}: ")
    return info.value


def test_the_toy_spec_parses(toy_spec: Spec, toy_spec_path: Path) -> None:
    assert toy_spec.name == "toy"
    assert toy_spec.predicate_names == ["a", "b"]
    assert toy_spec.predicates["a"].cel == "state.a"
    assert toy_spec.predicates["b"].description == "b is high"
    assert toy_spec.unsafe == "a && b"
    assert toy_spec.learning.alpha == 0.1
    assert toy_spec.guard.thresholds.items() == [(Action.STOP, 0.2), (Action.ASK_HUMAN, 0.5),
                                                 (Action.REFLECT, 0.9)]
    assert toy_spec.guard.unseen_state is Action.ASK_HUMAN
    assert toy_spec.source == str(toy_spec_path)
    assert toy_spec.text == TOY_SPEC
    assert toy_spec.line_of("predicates", "b") == 4
    assert toy_spec.line_of("unsafe") == 7


def test_defaults() -> None:
    spec = parse_spec("predicates:\n  p: state.p\nunsafe: p\n")
    assert spec.name == "spec"
    assert spec.guard.horizon is None
    assert spec.guard.thresholds.items() == [(Action.STOP, 0.2), (Action.ASK_HUMAN, 0.5),
                                             (Action.REFLECT, 0.9)]
    assert spec.learning.alpha == 0.1
    assert spec.valid_transitions.max_changed_predicates is None


def test_action_severity_orders_the_actions() -> None:
    assert [a.severity for a in (Action.ALLOW, Action.REFLECT, Action.ASK_HUMAN, Action.STOP)] == [0, 1, 2, 3]


def test_yaml_that_does_not_parse() -> None:
    error = spec_error("name: x\npredicates:\n  a: [state.a\nunsafe: a\n")
    assert error.line == 4
    assert "YAML does not parse" in str(error)


def test_a_spec_that_is_not_a_mapping() -> None:
    error = spec_error("- a\n- b\n")
    assert error.line == 1
    assert "must be a YAML mapping" in str(error)


def test_unknown_top_level_key() -> None:
    error = spec_error("name: x\npredicates:\n  a: state.a\nunsafe: a\nthreshold: 0.5\n")
    assert error.line == 5
    assert "threshold" in str(error) and "Extra inputs are not permitted" in str(error)


def test_predicate_cel_that_does_not_parse_names_its_line() -> None:
    error = spec_error("name: x\npredicates:\n  a: state.a\n  b: 'state.b &&& 1'\nunsafe: a\n")
    assert error.line == 4
    assert "predicate 'b' does not parse as CEL" in str(error)


def test_unsafe_naming_an_unknown_predicate_names_the_unsafe_line() -> None:
    error = spec_error("name: x\npredicates:\n  a: state.a\n\nunsafe: a && zz\n")
    assert error.line == 5
    assert "'unsafe' names unknown predicate(s) ['zz']" in str(error)
    assert "known: ['a']" in str(error)


def test_unsafe_that_does_not_parse() -> None:
    error = spec_error("predicates:\n  a: state.a\nunsafe: 'a &&'\n")
    assert error.line == 3
    assert "'unsafe' does not parse as CEL" in str(error)


def test_unsafe_that_is_not_boolean() -> None:
    predicates = PredicateSet(parse_spec("predicates:\n  a: state.a\nunsafe: '1 + 2'\n", source="s.yaml"))
    with pytest.raises(SpecError, match="'unsafe' evaluates to int 3, expected a bool") as info:
        predicates.is_unsafe(0)
    assert info.value.line == 3


@pytest.mark.parametrize("name", ["1bad", "has-dash", "end", "unsafe", "class", "state"])
def test_bad_predicate_names_name_their_line(name: str) -> None:
    error = spec_error(f"name: x\npredicates:\n  a: state.a\n  {name}: state.b\nunsafe: a\n")
    assert error.line == 4
    assert f"predicate name {name!r} must be an identifier" in str(error)


def test_irreversible_naming_an_unknown_predicate() -> None:
    error = spec_error("predicates:\n  a: state.a\nunsafe: a\nvalid_transitions:\n  irreversible:\n"
                       "    - a\n    - broken\n")
    assert error.line == 7
    assert "unknown predicate(s) ['broken']" in str(error)
    assert "valid_transitions.irreversible" in str(error)


def monitor_error(text: str) -> SpecError:
    """The error a spec with monitors raises when its monitors are built."""
    with pytest.raises(SpecError) as info:
        build_monitors(parse_spec(text, source="s.yaml"))
    assert str(info.value).startswith(f"s.yaml:{info.value.line}: ")
    return info.value


MONITOR_SPEC = "predicates:\n  a: state.a\n  b: state.b\nmonitors:\n  - name: m\n"


def test_a_monitor_condition_naming_an_unknown_predicate_names_its_line() -> None:
    error = monitor_error(MONITOR_SPEC + "    kind: bounded_response\n    trigger: a\n    response: c\n"
                                        "    within: 3\n")
    assert error.line == 8
    assert "unknown predicate" in str(error) and "'c'" in str(error) and "response" in str(error)


def test_an_unbounded_existence_over_the_whole_run_is_rejected_with_the_reason() -> None:
    error = monitor_error(MONITOR_SPEC + "    kind: existence\n    p: a\n")
    assert error.line == 5
    assert "cannot be monitored on finite runs" in str(error) and "within" in str(error)


def test_monitor_fields_must_fit_the_kind() -> None:
    error = spec_error(MONITOR_SPEC + "    kind: bounded_response\n    trigger: a\n    response: b\n")
    assert "bounded_response needs ['within']" in str(error)
    error = spec_error(MONITOR_SPEC + "    kind: precedence\n    p: a\n    trigger: b\n")
    assert "takes p (and s)" in str(error)


def test_monitor_names_are_unique() -> None:
    error = spec_error(MONITOR_SPEC + "    kind: absence\n    p: a\n  - name: m\n    kind: absence\n    p: b\n")
    assert error.line == 8 and "used twice" in str(error)


def test_unsafe_may_be_left_out_when_monitors_define_the_violations() -> None:
    spec = parse_spec(MONITOR_SPEC + "    kind: absence\n    p: a\n")
    assert spec.unsafe is None and PredicateSet(spec).is_unsafe(0b11) is False


def test_a_property_naming_an_unknown_label_names_its_line() -> None:
    from forewarn.guard.pipeline import check_property_labels

    spec = parse_spec("predicates:\n  a: state.a\nunsafe: a\nguard:\n  properties:\n"
                      "    - name: p\n      formula: 'F \"nope\"'\n", source="s.yaml")
    with pytest.raises(SpecError) as info:
        check_property_labels(spec, ["unsafe", "end", "a"])
    assert info.value.line == 7 and "'nope'" in str(info.value)


def test_a_property_must_be_a_path_formula() -> None:
    error = spec_error("predicates:\n  a: state.a\nunsafe: a\nguard:\n  property: 'P=? [F \"unsafe\"]'\n")
    assert "path formula only" in str(error)


def test_unsafe_is_required() -> None:
    error = spec_error("predicates:\n  a: state.a\n")
    assert "'unsafe' is required" in str(error)


def test_a_spec_needs_a_predicate() -> None:
    error = spec_error("predicates: {}\nunsafe: 'true'\n")
    assert error.line == 1
    assert "at least one predicate" in str(error)


@pytest.mark.parametrize(("body", "line", "match"), [
    ("predicates:\n  a: {cel: state.a, python: 'm:f'}\nunsafe: a\n", 2, "exactly one of 'cel'"),
    ("predicates:\n  a: {python: 'no such name'}\nunsafe: a\n", 2, "is not a registered name"),
    ("predicates:\n  a: {python: 'no_such_module_xyz:f'}\nunsafe: a\n", 2, "is an import path"),
    ("predicates:\n  a: {python: no_such_name}\nunsafe: a\n", 2, "'no_such_name' is not registered"),
    ("predicates:\n  a: state.a\nunsafe: a\nguard:\n  thresholds: {reflect: 1.5}\n", 5,
     "guard.thresholds.reflect"),
    ("predicates:\n  a: state.a\nunsafe: a\nguard:\n  unseen_state: panic\n", 5, "guard.unseen_state"),
    ("predicates:\n  a: state.a\nunsafe: a\nguard:\n  horizon: -1\n", 5, "guard.horizon"),
    ("predicates:\n  a: state.a\nunsafe: a\nlearning:\n  epsilon: 0\n", 5, "learning.epsilon"),
    ("predicates:\n  a: state.a\nunsafe: a\nvalid_transitions:\n  max_changed_predicates: 0\n", 5,
     "valid_transitions.max_changed_predicates"),
])
def test_other_errors_name_their_line(body: str, line: int, match: str) -> None:
    error = spec_error(body)
    assert error.line == line
    assert match in str(error)


def test_a_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read spec") as info:
        load_spec(tmp_path / "absent.yaml")
    assert info.value.source == str(tmp_path / "absent.yaml")


def test_errors_found_after_parsing_name_the_file(toy_spec_path: Path) -> None:
    toy_spec_path.write_text(TOY_SPEC.replace("'a && b'", "'a && c'"), encoding="utf-8")
    with pytest.raises(SpecError) as info:
        PredicateSet(load_spec(toy_spec_path))
    assert str(info.value).startswith(f"{toy_spec_path}:7: ")


def test_to_document_parses_back(toy_spec: Spec) -> None:
    import yaml

    again = parse_spec(yaml.safe_dump(toy_spec.to_document()))
    assert again.to_document() == toy_spec.to_document()


def test_a_duplicate_key_and_thresholds_out_of_order_are_one_line_each() -> None:
    from forewarn.errors import SpecError
    from forewarn.guard.spec import parse_spec

    base = "name: t\npredicates:\n  a: state.a\n  b: state.b\nunsafe: a\n"
    with pytest.raises(SpecError) as duplicate:
        parse_spec(base.replace("  b: state.b\n", "  a: state.b\n"), source="s.yaml")
    assert str(duplicate.value) == "s.yaml:4: YAML does not parse: duplicate key 'a' (first on line 3)"
    with pytest.raises(SpecError) as order:
        parse_spec(base + "guard:\n  thresholds: {reflect: 0.1, stop: 0.3}\n", source="s.yaml")
    assert "guard.thresholds: reflect 0.1 is below stop 0.3" in str(order.value)
    assert "\n" not in str(order.value)
    assert parse_spec(base + "guard:\n  thresholds: {reflect: 0.5, ask_human: 0.5, stop: 0.3}\n").name == "t"


def test_a_bad_pctl_property_is_one_clean_line() -> None:
    from forewarn.errors import CheckError
    from forewarn.guard.storm import validate_formula

    with pytest.raises(CheckError) as error:
        validate_formula('P=? [F<=x "unsafe"]')
    assert str(error.value) == ("Storm cannot parse property 'P=? [F<=x \"unsafe\"]': Parsing error at 1:2: "
                                "expecting <basic path formula>")
