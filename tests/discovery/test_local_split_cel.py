"""A local split's condition negates the spec's predicates: the text it writes must mean what it says."""
from __future__ import annotations

import itertools

import cel
import pytest

from forewarn.guard.discovery.search import _group, _negate

EXPRESSIONS = [
    "state.a",
    "!state.a",
    "!(state.x > 3)",
    "!(state.a || state.b)",
    "!(state.a) && (state.b)",  # starts with "!(" and ends with ")" but is no single group
    "!state.a && state.b",
    "!(!state.a)",
    '!(state.t == ")(")',  # parentheses in a string literal do not count
    "state.a || state.b",
    "size(state.s) > 0",
    "state.a // a spec's note",  # a comment would swallow whatever the split puts after it
    "!(state.x > 3) // hot",
    'state.t == "//" // a comment after a string holding //',
    "state.a // first line\n || state.b",
]
STATES = [{"a": a, "b": b, "x": x, "t": t, "s": s}
          for a, b, x, t, s in itertools.product((True, False), (True, False), (2, 5), (")(", "z"), ([], [1]))]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_negation_is_the_complement_in_a_conjunction(expression: str) -> None:
    negated, kept = _negate(expression), _group(expression)
    for state in STATES:
        value = bool(cel.evaluate(expression, {"state": state}))
        # as the split writes it: a part of a conjunction, beside another part whose || must not leak
        joined = f"{negated} && {_group('state.a || !state.a')}"
        assert bool(cel.evaluate(negated, {"state": state})) is (not value), (expression, negated, state)
        assert bool(cel.evaluate(joined, {"state": state})) is (not value), (expression, joined, state)
        # the predicate kept as it is, first in a conjunction whose next part is false
        assert bool(cel.evaluate(f"{kept} && state.x > 9", {"state": state})) is False, (expression, kept)
        assert bool(cel.evaluate(f"{kept} && true", {"state": state})) is value, (expression, kept)


def test_double_negations_are_written_plainly() -> None:
    assert _negate("!state.last_success") == "state.last_success"
    assert _negate("!(state.steps > 6)") == "state.steps > 6"
    assert _negate("!(state.a || state.b)") == "(state.a || state.b)"
    assert _negate("!(state.a) && (state.b)") == "!(!(state.a) && (state.b))"
