"""Predicates that cannot tell states apart: never, or always, true on the learning runs.

Such a predicate adds nothing to the model but a bit that never changes, and it is
usually a mistake the model cannot show: a misspelt field read through ``has()``, a value
compared with the wrong type, an action compared with a string before ``action`` read as
its text (``action == "find Bowl"``, :mod:`guard.actions`). ``learn``, ``discover`` and
``evaluate`` warn about each one, once.

Nothing is evaluated again for this: learning has already evaluated every predicate on
every step, and the distinct abstract states it reached hold the answer — a predicate
holds on some step exactly when its bit is set in the union of those states, and on every
step exactly when it is set in their intersection. The states come from the transition
counts (:func:`constant_in_counts`: the first state of each run and the target of each counted
transition, so the steps read up to each run's first violation, as learning reads them) or
from runs traced for evaluation and discovery (:func:`constant_in_traced`, the same steps).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._cel_fields import selected_paths
from .chain import END

if TYPE_CHECKING:  # learning time only: loading a model imports no scipy
    from .learning import TransitionCounts
    from .predicates import PredicateSet

__all__ = ["ConstantPredicate", "constant_in_counts", "constant_in_states", "constant_in_traced"]

_HINT = ' (a text action compares as its text: action == "find Bowl")'


@dataclass(frozen=True)
class ConstantPredicate:
    """A predicate with the same value on every step the learning runs showed.

    Attributes:
        name: the predicate's name in the spec.
        holds: ``never`` (false on every step) or ``always`` (true on every step).
        runs: the learning runs.
        steps: the steps read (up to each run's first violation).
        reads_action: whether its CEL reads ``action`` (the message then recalls how it compares).
    """

    name: str
    holds: Literal["never", "always"]
    runs: int
    steps: int
    reads_action: bool = False

    def message(self) -> str:
        """The warning, one line: ``predicate 'went_bowl' never holds on the 1,081 learning runs (0 of
        23,456 steps): it cannot tell states apart; check it``."""
        held = 0 if self.holds == "never" else self.steps
        runs = f"the {self.runs:,} learning runs" if self.runs != 1 else "the one learning run"
        steps = f"{held:,} of {self.steps:,} step{'s' if self.steps != 1 else ''}"
        return (f"predicate {self.name!r} {self.holds} holds on {runs} ({steps}): it cannot tell states apart; "
                f"check it{_HINT if self.reads_action else ''}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "holds": self.holds, "runs": self.runs, "steps": self.steps,
                "reads_action": self.reads_action}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConstantPredicate:
        return cls(str(data["name"]), "always" if data["holds"] == "always" else "never", int(data["runs"]),
                   int(data["steps"]), bool(data.get("reads_action", False)))


def constant_in_states(states: Iterable[int], predicates: PredicateSet, *, runs: int, steps: int) -> list[ConstantPredicate]:
    """The predicates constant over the distinct abstract ``states`` (bit masks) of ``steps`` steps, in spec order.

    States may carry more than the predicates' bits above them (a memory's label): those are ignored.
    """
    if steps <= 0:
        return []
    full = (1 << predicates.width) - 1
    some, every = 0, full
    for bits in states:
        some |= bits
        every &= bits
    found = []
    for i, name in enumerate(predicates.names):
        holds: Literal["never", "always"] | None = \
            "never" if not some >> i & 1 else "always" if every >> i & 1 else None
        if holds is not None:
            found.append(ConstantPredicate(name, holds, runs, steps, _reads_action(predicates, name)))
    return found


def constant_in_counts(counts: TransitionCounts, predicates: PredicateSet) -> list[ConstantPredicate]:
    """The predicates constant over the steps learning counted (see the module docstring)."""
    states = set(counts.initial)
    steps = sum(counts.initial.values())
    for (_, target), n in counts.counts.items():
        if target != END:
            states.add(target)
            steps += n
    return constant_in_states(states, predicates, runs=counts.runs, steps=steps)


def constant_in_traced(traced: Sequence[Any], predicates: PredicateSet) -> list[ConstantPredicate]:
    """The predicates constant over traced runs (each with ``abstract``: its states up to its first violation,
    as :func:`guard.evaluation.baselines.trace_run` gives them)."""
    states = {bits for t in traced for bits in t.abstract}
    return constant_in_states(states, predicates, runs=len(traced), steps=sum(len(t.abstract) for t in traced))


def _reads_action(predicates: PredicateSet, name: str) -> bool:
    expression = predicates.spec.predicates[name].cel
    return expression is not None and any(path[0] == "action" for path in selected_paths(expression))
