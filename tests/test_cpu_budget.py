"""The predicates' CPU budget: a step whose CEL predicates would cost more than it is decided as an unseen
state, with a one-line reason, and the CEL interpreter never runs on it (guard/_cel_cost.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import forewarn.guard.predicates as predicates_module
from forewarn.errors import PredicateBudgetExceeded, PredicateError
from forewarn.guard._cel_cost import DEFAULT_CPU_BUDGET, UNIT_SECONDS, comprehension_degree, work_units
from forewarn.guard._cel_fields import Leaves, compile_leaves
from forewarn.guard.model import GuardModel
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec


def issue_map(entries: int = 18_600) -> dict[str, str]:
    """The issue's finding: a map of 428 KB as JSON where a predicate reads a Boolean."""
    return {f"k{i}": "v" * 10 for i in range(entries)}


def egg_state(toggled: Any = False) -> dict[str, Any]:
    return {"objects": {"Egg": {"parentReceptacles": ["Fridge"], "isPickedUp": False},
                        "Microwave": {"isToggled": toggled, "isOpen": True}}}


@pytest.fixture(scope="module")
def builtin_guard(tmp_path_factory: pytest.TempPathFactory) -> Guard:
    from forewarn.domains.embodied.builtin import builtin_model_path

    return Guard(GuardModel.load(builtin_model_path(tmp_path_factory.mktemp("builtin"))))


@pytest.fixture
def executions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the CEL programs the predicates run on leaf variables (their fast path)."""
    ran: list[int] = []
    real = compile_leaves  # what predicates imported: the spy wraps it there

    class Counted:
        def __init__(self, program: Any) -> None:
            self.program = program

        def execute(self, context: Any) -> Any:
            ran.append(len(context))
            return self.program.execute(context)

    def spy(expressions: list[str], variables: set[str]) -> Leaves | None:
        leaves = real(expressions, variables)
        return None if leaves is None else leaves._replace(program=Counted(leaves.program))

    monkeypatch.setattr(predicates_module, "compile_leaves", spy)
    return ran


@pytest.mark.parametrize(("expression", "degree"), [
    ("state.a", 1),
    ("state.xs.exists(x, x > 1)", 1),  # the range is read once
    ("state.objects.exists(k, state.objects[k].isOpen)", 1),  # one entry per iteration
    ("state.a.exists(x, x.b.exists(y, y == 1))", 1),  # nested over disjoint parts: linear in all
    ("state.xs.map(x, x * 2).exists(y, y == 4)", 1),  # one after the other
    ('"state.xs.exists(x, state.ys)" == state.s', 1),  # inside a string literal
    ("state.xs.exists(x, x in state.ys)", 2),  # each iteration walks ys
    ("state.xs.all(a, state.xs.exists(b, a == b))", 2),
    ("state.xs.exists(a, state.xs[0].exists(b, b == a))", 2),  # indexed by a constant: the same list each time
    ("state.xs.all(a, state.xs.all(b, state.xs.all(c, a + b + c > 0)))", 3),
])
def test_the_degree_of_a_predicate_counts_reads_repeated_under_macros(expression: str, degree: int) -> None:
    assert comprehension_degree(expression) == degree


def test_work_units_count_every_value_and_stop_past_the_cap() -> None:
    assert work_units(True, 10) == 1 and work_units("x" * 1000, 10) == 4
    assert work_units([1, 2, 3], 100) == 4  # the list and its elements
    assert work_units({"a": 1, "b": [1, 2]}, 100) == 1 + 2 + 1 + 3  # the map, its keys, its values
    assert work_units(issue_map(), 1e9) == 1 + 2 * 18_600
    assert work_units(issue_map(), 50) > 50  # past the cap: the map's keys at once, none of its values walked
    assert 50 < work_units([[1, 2]] * 100_000, 50) <= 54  # counting stops soon after the cap, whatever the size


def test_the_issues_428_kb_map_is_decided_as_unseen_without_running_cel(builtin_guard: Guard,
                                                                          executions: list[int]) -> None:
    """The issue: a 428 KB map where a predicate reads a Boolean took 6.5 s of CPU and its error echoed
    488 KB. Now the step is refused by the estimate before any CEL program runs, and decided as unseen."""
    big = issue_map()
    assert len(str(big)) > 400_000
    session = builtin_guard.session()
    decision = session.preview(egg_state(big))
    assert executions == []  # the estimate refused it: the interpreter never saw the map
    assert decision.over_budget and not decision.known and decision.p_unsafe is None
    assert decision.action is builtin_guard.policy.unseen_state
    assert decision.abstract_state == {}
    assert "CPU budget of 50 ms per step" in decision.message and "\n" not in decision.message
    assert "vvvv" not in decision.message and "k1" not in decision.message and len(decision.message) < 400
    assert builtin_guard.decide(egg_state(big)).over_budget
    # a state of usual size still gets its decision, by the CEL program
    normal = session.preview(egg_state(True))
    assert not normal.over_budget and normal.abstract_state["microwave_toggled"] and executions


def test_an_observed_step_over_budget_leaves_the_session_where_it_was(builtin_guard: Guard) -> None:
    session = builtin_guard.session()
    first = session.observe(egg_state(True))
    before = (session.history[-1].abstract, session.monitor_states)
    unread = session.observe(egg_state(issue_map()), action="poke")
    assert unread.over_budget and len(session.history) == 2
    assert (session.history[-1].abstract, session.monitor_states) == before  # nothing learned of it
    assert session.history[-1].action == "poke"
    again = session.observe(egg_state(True))  # the run goes on from where it was
    assert again == first and not again.over_budget
    fresh = builtin_guard.session()
    assert fresh.observe(egg_state(issue_map())).over_budget and fresh.history[-1].abstract == 0


def test_without_a_budget_the_map_is_read_as_before(tmp_path: Path) -> None:
    from forewarn.domains.embodied.builtin import builtin_model_path

    guard = Guard(GuardModel.load(builtin_model_path(tmp_path)), cpu_budget=None)
    with pytest.raises(PredicateError, match="microwave_toggled") as caught:
        guard.session().preview(egg_state(issue_map(2_000)))
    assert not isinstance(caught.value, PredicateBudgetExceeded) and len(str(caught.value)) < 400


def test_a_quadratic_predicate_is_bounded_by_its_degree(executions: list[int]) -> None:
    """|xs|² pairs: 60 values cost about 900 units and run; 4,000 would cost about four million
    units (seconds of CPU) and are refused by the estimate."""
    spec = parse_spec("predicates:\n  dup: 'state.xs.exists(a, state.xs.exists(b, a == b + 1))'\n"
                      "  flag: state.flag\nunsafe: dup && flag\n")
    predicates = PredicateSet(spec)
    predicates.cpu_budget = DEFAULT_CPU_BUDGET
    assert predicates.evaluate({"xs": list(range(60)), "flag": True}) == 0b11
    ran = len(executions)
    with pytest.raises(PredicateBudgetExceeded, match="CPU budget"):
        predicates.evaluate({"xs": list(range(4_000)), "flag": True})
    assert len(executions) == ran
    # a linear predicate reads that list in budget
    linear = PredicateSet(parse_spec("predicates:\n  has7: '7 in state.xs'\nunsafe: has7\n"))
    linear.cpu_budget = DEFAULT_CPU_BUDGET
    assert linear.evaluate({"xs": list(range(4_000))}) == 0b1


def test_the_budget_is_per_step_across_programs(executions: list[int]) -> None:
    """A state whose predicates fail runs the original program and then each predicate alone to find the
    culprit, converting the state each time: each run is charged, and the step stops once the budget is spent."""
    spec = parse_spec("predicates:\n" + "".join(f"  p{i}: size(state.m.v{i}) > 0\n" for i in range(7))
                      + "  p7: size(state.m.v7) > 0 && state.m.gone\nunsafe: p0\n")  # p7 fails, alone
    predicates = PredicateSet(spec)
    state = {"m": {f"v{i}": {f"k{j}": j for j in range(250)} for i in range(8)}}  # ~4,000 units a program
    predicates.cpu_budget = 4_020 * 3.5 * UNIT_SECONDS  # room for three programs, not for the ten a failure runs
    with pytest.raises(PredicateBudgetExceeded) as caught:
        predicates.evaluate(state)
    assert caught.value.predicate == "p1"  # leaves, original, p0 alone: the culprit search cut short at p1
    assert "predicate 'p1'" in str(caught.value) and len(executions) == 1
    predicates.cpu_budget = None
    with pytest.raises(PredicateError, match=r"p7.*reads field 'gone'"):
        predicates.evaluate(state)


def test_a_bundle_and_a_guard_take_the_budget_they_are_given(builtin_guard: Guard) -> None:
    assert builtin_guard.predicates.cpu_budget == DEFAULT_CPU_BUDGET == 0.05
    small = Guard(builtin_guard.model, cpu_budget=1e-4)
    decision = small.session().preview(egg_state(list(range(200))))  # ~200 units: 0.6 ms estimated
    assert decision.over_budget and decision.action is small.policy.unseen_state
    with pytest.raises(PredicateError, match="expected a bool"):  # within a 1 s budget it is read, and is no bool
        Guard(builtin_guard.model, cpu_budget=1.0).session().preview(egg_state(list(range(200))))
