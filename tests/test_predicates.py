from __future__ import annotations

import importlib
import sys
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import cel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support import TOY_SPEC, toy_state
from forewarn.errors import PredicateError, SpecError
from forewarn.guard._cel_fields import _freeze, _mask, _plan_leaves, selected_paths, walk_key
from forewarn.guard.predicates import PredicateSet, _key_bytes
from forewarn.guard.spec import Spec, parse_spec

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
    assert selected_paths('state.objects.size() > 1') == [("state", "objects")]
    assert selected_paths('state.objects .exists(k, k == "x")') == [("state", "objects")]
    assert selected_paths('state.b.c == 1 && "state.q" == ""') == [("state", "b", "c")]
    assert selected_paths('meta.task == "t1" && state.b') == [("meta", "task"), ("state", "b")]
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
    with pytest.raises(PredicateError, match=r"predicate 'b'.*cannot be evaluated"):
        toy_predicates.evaluate({"a": True, "b": "high"})


def test_a_cel_predicate_that_is_not_boolean() -> None:
    predicates = PredicateSet(parse_spec("predicates:\n  n: state.n\nunsafe: n\n"))
    with pytest.raises(PredicateError, match="predicate 'n' evaluates to int 3, expected a bool"):
        predicates.evaluate({"n": 3})


@pytest.fixture
def predicate_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Operator code that registers three predicates with the decorator, imported as an application would."""
    (tmp_path / "toy_predicates_mod.py").write_text(
        "import forewarn\n"
        "@forewarn.predicate('toy.heavy')\ndef heavy(state):\n    return state['weight'] > 10\n"
        "@forewarn.predicate('toy.broken')\ndef broken(state):\n    raise RuntimeError('sensor offline')\n"
        "@forewarn.predicate('toy.vague')\ndef vague(state):\n    return 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_predicates_mod", raising=False)  # another test's copy
    importlib.import_module("toy_predicates_mod")
    return "toy"


def test_python_predicates_from_the_spec(predicate_module: str) -> None:
    spec = parse_spec(f"predicates:\n  hot: state.t > 50\n  heavy: {{python: {predicate_module}.heavy}}\n"
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
    predicates = PredicateSet(parse_spec(f"predicates:\n  p: {{python: {predicate_module}.{function}}}\n"
                                         "unsafe: p\n"))
    with pytest.raises(PredicateError, match=match) as info:
        predicates.evaluate({})
    assert info.value.predicate == "p"


def test_python_predicates_given_in_code() -> None:
    # the spec's name need not be registered when the function is handed over in code
    spec = parse_spec("predicates:\n  a: state.a\n  near: {python: my_app.near}\nunsafe: a && near\n")
    with pytest.raises(SpecError, match=r"python predicate 'my_app.near' is not registered"):
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


def _bytes_by_the_rule(key: Any) -> int:
    """The memo's byte rule, walked plainly: 100 an entry, a tuple 56 and 8 a slot, a string or
    bytes its sys.getsizeof, anything else 32."""
    if key.__class__ is tuple:
        return 56 + 8 * len(key) + sum(_bytes_by_the_rule(item) - 100 for item in key) + 100
    return 100 + (sys.getsizeof(key) if key.__class__ in (str, bytes) else 32)


def test_memo_key_bytes_by_hand() -> None:
    e = sys.getsizeof("")
    key = (_freeze(["Sink", "Floor"]), True, None, _freeze(21.0), "Knife", _freeze(["é"]))
    assert _key_bytes(key) == (100 + 56 + 8 * 6
                               + (56 + 16 + 32 + 56 + 16 + 2 * e + 9)  # (list, ("Sink", "Floor"))
                               + 32 + 32 + (56 + 16 + 32 + 32)  # True, None, (float, 21.0)
                               + e + 5  # "Knife"
                               + (56 + 16 + 32 + 56 + 8 + sys.getsizeof("é")))  # a non-ASCII string: its own size
    assert _key_bytes("Knife") == 100 + e + 5 and _key_bytes(()) == 156


_JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                         st.text(max_size=12), st.sampled_from(["", "Floor", "é", "€uro", "😀", "x" * 300]),
                         st.binary(max_size=6))
_JSON = st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=5)
                     | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=20)


@given(st.lists(_JSON, max_size=12))
@settings(max_examples=300, deadline=None)
def test_memo_key_bytes_follow_the_rule(values: list[Any]) -> None:
    # keys and sub-keys are images of values (_freeze): counted exactly as the plain walk counts them
    key = tuple(_freeze(value) for value in values)
    for sub in (key, *key, key[:2], key[1:4]):
        assert _key_bytes(sub) == _bytes_by_the_rule(sub)


def test_spec_text_of_the_toy_is_unchanged() -> None:
    # test_spec relies on these line numbers
    assert TOY_SPEC.splitlines()[3] == "  b:" and TOY_SPEC.splitlines()[6].startswith("unsafe:")


# -- leaf variables: each `state.a.b` selection becomes a variable bound to its value -----

# Predicates that stress the rewriting: errors absorbed by || && ?: and macros, has() beside
# the same selection, macros and `in` on rewritten maps and lists, type distinctions,
# `state` shadowed by a macro variable, odd spacing, comments and literals that mention state.
LEAF_PREDICATES = {
    "absorbed_or": 'state.zz.q == 1 || has(state.a)',
    "absorbed_and": 'has(state.b) && state.b.c.x == 1',
    "ternary": 'has(state.x) ? state.x == [true] : state.a == 1.0',
    "in_list_or_map": '"xa" in state.objects',
    "value_in_list": 'has(state.b) && state.b.c in [1, 2.0, true, "x", null]',
    "int_not_float": 'state.b.c == 1 && type(state.b.c) == int',
    "bool_not_int": 'state.a == true || state.a == 0',
    "as_string": 'string(state.a) == "-0"',
    "spaced": 'state . b . c == 1 || state .a == false',
    "shadowed": '[1, 2].exists(state, state == 2) && has(state.a)',
    "shadowed_map": 'has(state.objects) && type(state.objects) == map && state.objects.all(state, state != "ya")',
    "exists_one": 'state.objects.exists_one(k, k == "xb")',
    "map_macro": 'size(state.x.map(v, v)) == 2',
    "filter_macro": 'state.objects.filter(k, k.startsWith("x")).size() == 1',
    "indexed": 'state.x[1] == state.b.c',
    "bare": 'size(state) == 2 && has(state.c)',
    "commented": 'state.c == "x" // it\'s "state.a"',
    "raw_string": 'r"\\" + "state.a" == state.c',
    "triple": '"""a"state.a""" != state.c',
    "deep_has": 'has(state.b.c.x) && state.b.c.x == state.b.c.y',
}
_LEAF_PROGRAMS = {name: cel.compile(expr) for name, expr in LEAF_PREDICATES.items()}
_LEAF_SET = PredicateSet(parse_spec(spec_text(LEAF_PREDICATES, "absorbed_or")))
_LEAF_SINGLES = {name: (cel.compile(expr), PredicateSet(parse_spec(spec_text({name: expr}, name))))
                 for name, expr in LEAF_PREDICATES.items()}

PYTHON_LEAVES = st.one_of(LEAVES, st.sampled_from([10 ** 20, 2 ** 63, b"x", ("x", 1), float("inf")]))
PYTHON_VALUES = st.recursive(PYTHON_LEAVES, lambda children: st.one_of(
    st.lists(children, max_size=3), st.tuples(children, children),
    st.dictionaries(KEYS, children, max_size=4)), max_leaves=12)
PYTHON_STATES = st.dictionaries(KEYS, PYTHON_VALUES, max_size=5)


def check_set_against_singles(state: dict[str, Any]) -> None:
    expected: int | None = 0
    for index, program in enumerate(_LEAF_PROGRAMS.values()):
        try:
            value = program.execute({"state": state})
        except Exception:
            expected = None
            break
        if value.__class__ is not bool:
            expected = None
            break
        assert expected is not None
        expected |= int(value) << index
    for _ in range(2):  # the second call is answered from the memo
        if expected is None:
            with pytest.raises(PredicateError):
                _LEAF_SET.evaluate(state)
        else:
            assert _LEAF_SET.evaluate(state) == expected
    for name, (program, predicates) in _LEAF_SINGLES.items():
        try:
            single: Any = program.execute({"state": state})
        except Exception:
            single = None
        for _ in range(2):
            if single.__class__ is not bool:
                with pytest.raises(PredicateError):
                    predicates.evaluate(state)
            else:
                assert predicates.evaluate(state) == int(single), name


@settings(max_examples=200, deadline=None)
@given(STATES)
def test_leaf_variables_agree_with_the_full_state(state: dict[str, Any]) -> None:
    check_set_against_singles(state)


@settings(max_examples=100, deadline=None)
@given(STATES_WITH_OBJECTS)
def test_leaf_variables_agree_on_states_with_maps(state: dict[str, Any]) -> None:
    check_set_against_singles(state)


@settings(max_examples=100, deadline=None)
@given(PYTHON_STATES)
def test_leaf_variables_agree_on_python_values(state: dict[str, Any]) -> None:
    # what code may hand to observe(): tuples, big ints, bytes, infinities
    check_set_against_singles(state)


@pytest.mark.parametrize("state", [
    {"a": True, "b": {"c": 1}, "c": "x"},
    {"a": 1, "b": {"c": 1.0, "x": 1, "y": 1}, "c": "\\state.a"},
    {"a": -0.0, "b": {"c": True}, "x": [True, 1], "objects": {"xa": 1, "xb": 2}},
    {"a": 0.0, "b": {"c": {"x": 1, "y": 1}}, "x": [1, 1.0], "objects": ["xa", "xb"]},
    {"a": False, "b": [1], "x": "xy", "objects": {"ya": 1}},
    {"b": None, "objects": None},
    {"a": True, "b": {"c": None}, "zz": {"q": 1}, "c": 'a"state.a'},
])
def test_leaf_variables_on_chosen_states(state: dict[str, Any]) -> None:
    check_set_against_singles(state)


@pytest.mark.parametrize("state", [
    OrderedDict(a=True, b={"c": 1}),
    {"a": True, "b": OrderedDict(c=1)},
    {"a": True, "b": MappingProxyType({"c": 1})},
])
def test_maps_that_are_not_dicts_are_evaluated_as_before(state: Any) -> None:
    check_set_against_singles(state)


def test_a_value_cel_cannot_convert_is_reported() -> None:
    predicates = PredicateSet(parse_spec("predicates:\n  some: size(state.tags) > 0\nunsafe: some\n"))
    for _ in range(2):
        with pytest.raises(PredicateError, match=r"predicate 'some'.*cannot be evaluated"):
            predicates.evaluate({"tags": {"x"}})


def test_a_miss_evaluates_only_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec("predicates:\n  in_mw: '\"Microwave\" in state.objects.Fork.parentReceptacles'\n"
                      "  switched: state.objects.Microwave.isToggled\n  hot: state.objects.Pan.temperature > 60.0\n"
                      "unsafe: in_mw && switched\n")
    predicates = PredicateSet(spec)

    def original(state: Any, *budget: Any) -> int:
        raise AssertionError("the original program ran")

    monkeypatch.setattr(predicates, "_evaluate_original", original)
    state: dict[str, Any] = {"objects": {"Fork": {"parentReceptacles": ["Microwave"], "isPickedUp": False},
                         "Microwave": {"isToggled": True}, "Pan": {"temperature": 95.0}}, "agent": {"x": 1}}
    assert predicates.evaluate(state) == 0b111
    state["objects"]["Pan"]["temperature"] = 21
    assert predicates.evaluate(state) == 0b011
    # a missing field still goes to the original expressions, which name it
    del state["objects"]["Microwave"]["isToggled"]
    with pytest.raises(AssertionError, match="original program ran"):
        predicates.evaluate(state)


def test_a_missing_field_is_reported_as_before() -> None:
    predicates = PredicateSet(parse_spec(
        "predicates:\n  switched: state.objects.Microwave.isToggled\n  hot: state.t > 1\nunsafe: switched\n"))
    with pytest.raises(PredicateError, match=r"predicate 'switched' \(state.objects.Microwave.isToggled\) "
                                             r"reads field 'isToggled'") as info:
        predicates.evaluate({"objects": {"Microwave": {}}, "t": 2})
    assert info.value.predicate == "switched"
    with pytest.raises(PredicateError, match=r"predicate 'hot' \(state.t > 1\) reads field 't'"):
        predicates.evaluate({"objects": {"Microwave": {"isToggled": True}}})
    with pytest.raises(PredicateError, match=r"predicate 'switched'.*cannot be evaluated"):
        predicates.evaluate({"objects": {"Microwave": 5}, "t": 2})


def test_what_the_rewriting_keeps_on_state() -> None:
    rewritten, leaves, kept, presence = _plan_leaves([
        'has(state.b.c) && state.b.c == 1 && "state.q" == state.q',
        '[1].exists(state, state == 1) && state.a',
        'size(state) > 0 && x. state.y',
    ])
    assert rewritten[0] == 'has(state.b.c) && _fw0 == 1 && "state.q" == _fw1'
    assert rewritten[1] == '[1].exists(state, state == 1) && state.a'  # shadowed: left alone
    assert rewritten[2] == 'size(state) > 0 && x. state.y'
    assert leaves == {("state", "b", "c"): "_fw0", ("state", "q"): "_fw1"}
    assert presence == [("state", "b", "c")]
    # the macro variable and its use, then state.a, size(state)
    assert kept == [("state",), ("state",), ("state", "a"), ("state",)]


def test_literals_and_comments_are_masked() -> None:
    assert _mask('"a\\"b" + state.x') == '"    " + state.x'
    assert _mask('r"\\" + state.x') == 'r" " + state.x'  # a raw string ends at the next quote
    assert _mask('"""x"y""" + state.x') == '"""   """ + state.x'
    assert _mask("'''it's''' + state.x") == "'''    ''' + state.x"
    assert _mask("state.x // it's") == "state.x        "
    assert selected_paths("state.x // state.y") == [("state", "x")]
    assert selected_paths('b"state.z" == state.b') == [("state", "b")]


def test_key_images_keep_types_apart() -> None:
    images = [_freeze(v) for v in (True, 1, 1.0, 0.0, -0.0, "1", None, [True], [1], [1.0], ["1"], (1,),
                                   {1: "a"}, {True: "a"}, {"1": "a"}, [[1]], [[True]])]
    assert len(set(images)) == len(images) - 1  # (1,) and [1] are the same CEL list
    assert _freeze((1,)) == _freeze([1])


def test_the_generated_key_matches_the_trie_walk() -> None:
    selective = {name: expr for name, expr in RICH_PREDICATES.items() if name != "big_state"}
    predicates = PredicateSet(parse_spec(spec_text(selective, "flag")))
    for state in ({"a": True, "b": {"c": 1}, "objects": {"x": 1}, "x": [1], "c": 2},
                  {"a": [1.0, "x"], "b": {"c": -0.0, "d": 5}, "objects": [], "x": [], "c": None}):
        parts: list[Any] = []
        root = {"state": state, "meta": {}}
        walk_key(root, predicates._trie, parts)
        assert predicates._fast_key is not None and predicates._fast_key(root) == tuple(parts)
    # missing fields: the caller walks the trie
    assert predicates._fast_key is not None and predicates._fast_key({"state": {"a": True}, "meta": {}}) is None


def test_unsafe_is_evaluated_per_valuation_of_the_bits_it_reads() -> None:
    spec = parse_spec("predicates:\n  p: state.p\n  q: state.q\n  r: state.r\n  s: state.s\n"
                      "unsafe: (p && !r) || s\n")
    predicates = PredicateSet(spec)
    assert predicates.unsafe_mask == 0b1101
    program = cel.compile(spec.unsafe or "")
    for bits in range(16):
        assert predicates.is_unsafe(bits) == program.execute(predicates.as_context(bits))
    assert len(predicates._unsafe_memo) == 8


# -- second-level memo: per predicate, keyed by the fields it reads ------------------------

SMALL = st.sampled_from([True, False, 0, 1, 1.0, 0.0, -0.0, "x", "", None])
STRUCTURED_STATES = st.fixed_dictionaries({
    "o": st.fixed_dictionaries({"a": SMALL, "b": SMALL}),
    "p": st.fixed_dictionaries({"c": SMALL, "l": st.lists(SMALL, max_size=2)}),
    "noise": st.integers(),
})
STRUCTURED_PREDICATES = {
    "a_true": "state.o.a == true",
    "a_one": "state.o.a == 1",
    "a_is_double": "type(state.o.a) == double",
    "negative": "type(state.o.a) == double && 1.0 / state.o.a < 0.0",
    "b_in_l": "state.o.b in state.p.l",
    "c_set": 'state.p.c == "x" || state.p.c == null',
    "l_long": "size(state.p.l) > 1",
    "same": "state.o.a == state.p.c",
    "fails_on_strings": "state.o.b > 0",
}
_STRUCTURED = [cel.compile(expr) for expr in STRUCTURED_PREDICATES.values()]
_STRUCTURED_SET = PredicateSet(parse_spec(spec_text(STRUCTURED_PREDICATES, "a_true")))


@settings(max_examples=300, deadline=None)
@given(STRUCTURED_STATES)
def test_per_predicate_memo_agrees_with_the_full_state(state: dict[str, Any]) -> None:
    expected: int | None = 0
    for index, program in enumerate(_STRUCTURED):
        try:
            value = program.execute({"state": state})
        except Exception:
            expected = None
            break
        if value.__class__ is not bool or expected is None:
            expected = None
            break
        expected |= int(value) << index
    for _ in range(2):
        if expected is None:
            with pytest.raises(PredicateError):
                _STRUCTURED_SET.evaluate(state)
        else:
            assert _STRUCTURED_SET.evaluate(state) == expected


def test_a_new_combination_of_known_values_needs_no_cel(monkeypatch: pytest.MonkeyPatch) -> None:
    predicates = PredicateSet(parse_spec(
        "predicates:\n  hot: state.pan.t > 60.0\n  lit: state.stove.on\n  held: state.agent.holding == 'Knife'\n"
        "unsafe: hot && lit\n"))
    calls: list[int] = []
    run_leaves = predicates._run_leaves

    def counted(items: int, state: Any, *budget: Any) -> Any:
        calls.append(items)
        return run_leaves(items, state, *budget)

    monkeypatch.setattr(predicates, "_run_leaves", counted)

    def state(t: float, on: bool, holding: str) -> dict[str, Any]:
        return {"pan": {"t": t}, "stove": {"on": on}, "agent": {"holding": holding, "x": len(calls)}}

    assert predicates.evaluate(state(95.0, True, "")) == 0b011
    assert predicates.evaluate(state(21.0, False, "Knife")) == 0b100
    assert calls == [0b111, 0b111]
    assert predicates.evaluate(state(95.0, False, "Knife")) == 0b101  # known values, new combination
    assert predicates.evaluate(state(21.0, True, "")) == 0b010
    assert calls == [0b111, 0b111]
    assert predicates.evaluate(state(60.5, True, "Knife")) == 0b111  # only `hot` reads a new value
    assert calls == [0b111, 0b111, 0b001]
    # a new value that fails is reported by the original expressions, naming the predicate
    with pytest.raises(PredicateError, match=r"predicate 'hot' \(state.pan.t > 60.0\) cannot be evaluated"):
        predicates.evaluate(state("hot", True, "Knife"))  # type: ignore[arg-type]
