from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support import TOY_SPEC, toy_state
from guard.errors import PredicateError, SpecError
from guard.predicates import PredicateSet, _selected_paths
from guard.spec import Spec, parse_spec

# Predicates that read the state in every way projection must get right: nested fields,
# presence tests, whole maps behind method calls and macros, lists, the whole state.
RICH_PREDICATES = {
    "flag": 'has(state.a) && type(state.a) == bool && state.a',
    "c_is_one": 'has(state.b) && type(state.b) == map && has(state.b.c) && state.b.c == 1',
    "c_is_double": 'has(state.b) && type(state.b) == map && has(state.b.c) && type(state.b.c) == double',
    "c_is_int": 'has(state.b) && type(state.b) == map && has(state.b.c) && type(state.b.c) == int',
    "many_objects": 'has(state.objects) && type(state.objects) == map && state.objects.size() > 1',
    "some_x": 'has(state.objects) && type(state.objects) == map && state.objects.exists(k, k.startsWith("x"))',
    "no_a_in_b": 'has(state.b) && type(state.b) == map && state.b.all(k, k != "a")',
    "x_listed": 'has(state.objects) && type(state.objects) == list && "x" in state.objects',
    "first_true": 'has(state.x) && type(state.x) == list && size(state.x) > 0 && state.x[0] == true',
    "big_state": 'size(state) >= 3',
    "quoted": '"state.a" != "" && has(state.c)',
    "negative_zero": 'has(state.a) && type(state.a) == double && 1.0 / state.a < 0.0',
}
# The same without guards: these fail on many states, so each is also checked on its own.
PARTIAL_PREDICATES = {
    "n_objects": 'state.objects.size() > 1',
    "any_x": 'state.objects.exists(k, k.startsWith("x"))',
    "b_all": 'state.b.all(k, k != "a")',
    "deep": 'state.b.c.x == 1',
    "either": 'state.b.c == 1 || state.objects.size() == 0',
    "listed": '"x" in state.objects',
}


def spec_text(predicates: dict[str, str], unsafe: str) -> str:
    body = "".join(f"  {name}: '{expr.replace(chr(39), chr(39) * 2)}'\n" for name, expr in predicates.items())
    return f"predicates:\n{body}unsafe: {unsafe}\n"


RICH_SPEC = spec_text(RICH_PREDICATES, "flag && big_state")
_PROGRAMS = {name: cel.compile(expr) for name, expr in RICH_PREDICATES.items()}
# Sets shared by all examples, so their memos carry over between examples (that is what is tested).
_SHARED = PredicateSet(parse_spec(RICH_SPEC))
_SINGLES = {name: (cel.compile(expr), PredicateSet(parse_spec(spec_text({name: expr}, name))))
            for name, expr in {**RICH_PREDICATES, **PARTIAL_PREDICATES}.items()}

KEYS = st.sampled_from(["a", "b", "c", "x", "objects", "xa", "xb", "ya"])
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, -0.0, 1.0, 2.5, -1.0]),
    st.text(alphabet="xya", max_size=2),
)
VALUES = st.recursive(LEAVES, lambda children: st.one_of(
    st.lists(children, max_size=3), st.dictionaries(KEYS, children, max_size=4)), max_leaves=12)
STATES = st.dictionaries(KEYS, VALUES, max_size=5)


def reference_bits(state: Mapping[str, Any]) -> int | None:
    """Each predicate's CEL program on the full state; None if any of them fails."""
    bits = 0
    for index, program in enumerate(_PROGRAMS.values()):
        try:
            value = program.execute({"state": state})
        except Exception:
            return None
        if value.__class__ is not bool:
            return None
        bits |= int(value) << index
    return bits


@settings(max_examples=150, deadline=None)
@given(STATES)
def test_projection_and_memo_agree_with_the_full_state(state: dict[str, Any]) -> None:
    expected = reference_bits(state)
    for _ in range(2):  # the second call is answered from the memo
        if expected is None:
            with pytest.raises(PredicateError):
                _SHARED.evaluate(state)
        else:
            assert _SHARED.evaluate(state) == expected


def check_each_predicate(state: dict[str, Any]) -> None:
    for name, (program, predicates) in _SINGLES.items():
        try:
            expected: bool | None = program.execute({"state": state})
        except Exception:
            expected = None
        for _ in range(2):
            if expected.__class__ is not bool:
                with pytest.raises(PredicateError):
                    predicates.evaluate(state)
            else:
                assert predicates.evaluate(state) == int(bool(expected)), name


@settings(max_examples=100, deadline=None)
@given(STATES)
def test_each_predicate_alone_agrees_with_the_full_state(state: dict[str, Any]) -> None:
    check_each_predicate(state)


STATES_WITH_OBJECTS = st.fixed_dictionaries({"objects": st.dictionaries(KEYS, VALUES, max_size=4),
                                             "b": st.dictionaries(KEYS, VALUES, max_size=3)})


@settings(max_examples=100, deadline=None)
@given(STATES_WITH_OBJECTS)
def test_maps_behind_method_calls_agree_with_the_full_state(state: dict[str, Any]) -> None:
    check_each_predicate(state)


def test_method_calls_need_the_whole_map() -> None:
    # `objects.size()` must see every key of objects, not a projection onto a field "size"
    predicates = PredicateSet(parse_spec(RICH_SPEC))
    assert _selected_paths('state.objects.size() > 1') == [("objects",)]
    assert _selected_paths('state.objects .exists(k, k == "x")') == [("objects",)]
    assert _selected_paths('state.b.c == 1 && "state.q" == ""') == [("b", "c")]
    bits = predicates.evaluate({"objects": {"xa": 1, "b": 2}})
    named = predicates.as_context(bits)
    assert named["many_objects"] and named["some_x"]


def test_true_one_and_one_point_zero_are_not_conflated() -> None:
    predicates = PredicateSet(parse_spec(RICH_SPEC))
    names = predicates.names

    def holding(value: Any) -> set[str]:
        bits = predicates.evaluate({"b": {"c": value}})
        return {names[i] for i in range(len(names)) if bits >> i & 1}

    for _ in range(2):  # again, from the memo
        assert holding(True) == {"no_a_in_b"}
        assert holding(1) == {"no_a_in_b", "c_is_one", "c_is_int"}
        assert holding(1.0) == {"no_a_in_b", "c_is_one", "c_is_double"}


def test_zero_and_negative_zero_are_not_conflated() -> None:
    predicates = PredicateSet(parse_spec("predicates:\n  neg: '1.0 / state.x < 0.0'\nunsafe: neg\n"))
    assert [predicates.evaluate({"x": v}) for v in (0.0, -0.0, 0.0, -0.0)] == [0, 1, 0, 1]


def test_the_toy_predicates(toy_predicates: PredicateSet) -> None:
    assert [toy_predicates.evaluate(toy_state(bits)) for bits in range(4)] == [0, 1, 2, 3]
    assert [toy_predicates.is_unsafe(bits) for bits in range(4)] == [False, False, False, True]
    assert toy_predicates.as_context(1) == {"a": True, "b": False}
    assert toy_predicates.valuation(2) == (False, True)
    assert PredicateSet.bits_of((True, True)) == 3
    assert toy_predicates.describe(1) == "holds: a; does not hold: b (b is high)"


def test_a_missing_field_names_the_predicate_and_the_field(toy_predicates: PredicateSet) -> None:
    with pytest.raises(PredicateError, match=r"predicate 'b' \(state.b > 2\) reads field 'b'") as info:
        toy_predicates.evaluate({"a": True})
    assert info.value.predicate == "b"


def test_a_predicate_of_the_wrong_type(toy_predicates: PredicateSet) -> None:
    with pytest.raises(PredicateError, match="predicate 'b'.*cannot be evaluated"):
        toy_predicates.evaluate({"a": True, "b": "high"})


def test_a_cel_predicate_that_is_not_boolean() -> None:
    predicates = PredicateSet(parse_spec("predicates:\n  n: state.n\nunsafe: n\n"))
    with pytest.raises(PredicateError, match="predicate 'n' evaluates to int 3, expected a bool"):
        predicates.evaluate({"n": 3})


@pytest.fixture
def predicate_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "toy_predicates_mod.py").write_text(
        "def heavy(state):\n    return state['weight'] > 10\n"
        "def broken(state):\n    raise RuntimeError('sensor offline')\n"
        "def vague(state):\n    return 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "toy_predicates_mod"


def test_python_predicates_from_the_spec(predicate_module: str) -> None:
    spec = parse_spec(f"predicates:\n  hot: state.t > 50\n  heavy: {{python: '{predicate_module}:heavy'}}\n"
                      "unsafe: hot && heavy\n")
    predicates = PredicateSet(spec)
    assert predicates.evaluate({"t": 60, "weight": 11}) == 0b11
    assert predicates.evaluate({"t": 60, "weight": 3}) == 0b01
    assert predicates.evaluate({"t": 10, "weight": 30}) == 0b10


@pytest.mark.parametrize(("function", "match"), [
    ("broken", "predicate 'p' raised RuntimeError: sensor offline"),
    ("vague", "predicate 'p' returned int 1, expected a bool"),
])
def test_python_predicates_that_misbehave(predicate_module: str, function: str, match: str) -> None:
    predicates = PredicateSet(parse_spec(f"predicates:\n  p: {{python: '{predicate_module}:{function}'}}\n"
                                         "unsafe: p\n"))
    with pytest.raises(PredicateError, match=match) as info:
        predicates.evaluate({})
    assert info.value.predicate == "p"


def test_python_predicates_given_in_code() -> None:
    # the spec's reference need not be importable when the function is handed over in code
    spec = parse_spec("predicates:\n  a: state.a\n  near: {python: 'my_app.not_installed:near'}\n"
                      "unsafe: a && near\n")
    with pytest.raises(SpecError, match="cannot import"):
        PredicateSet(spec)
    predicates = PredicateSet(spec, python_predicates={"near": lambda s: s["distance"] < 1.0})
    assert predicates.evaluate({"a": True, "distance": 0.5}) == 0b11
    assert predicates.evaluate({"a": False, "distance": 3.0}) == 0b00
    assert predicates.is_unsafe(0b11)


def test_code_overrides_a_cel_predicate(toy_spec: Spec) -> None:
    predicates = PredicateSet(toy_spec, python_predicates={"b": lambda s: s["b"] == "on"})
    assert predicates.evaluate({"a": False, "b": "on"}) == 0b10
    assert predicates.evaluate({"a": True, "b": "off"}) == 0b01


def test_unhashable_values_skip_the_memo() -> None:
    predicates = PredicateSet(parse_spec("predicates:\n  some: size(state.tags) > 0\nunsafe: some\n"))
    assert predicates.evaluate({"tags": ["x"]}) == 1
    assert predicates.evaluate({"tags": []}) == 0
    assert predicates.evaluate({"tags": ("x",)}) == 1  # a tuple from Python code


def test_spec_text_of_the_toy_is_unchanged() -> None:
    # test_spec relies on these line numbers
    assert TOY_SPEC.splitlines()[3] == "  b:" and TOY_SPEC.splitlines()[6].startswith("unsafe:")
