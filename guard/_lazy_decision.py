"""A decision whose words are written when first read, built without the frozen dataclass's stores.

Why this is not a plain ``Decision(...)``: measured with ``bench/decision_latency.py``'s streams,
models and ``time_observe``, this module against a plain eager ``Decision`` (and against a lazy one
built by the dataclass's own ``__init__``), interleaved in one process, 6 rounds, default sizes,
medians (2026-12-07, 2 shared cores):

- a first-time decision alone (``decide_product`` on the 9,297 product states a fresh guard of the
  action-memory model meets, in order): p50 **4.3 µs** here, 7.5 µs lazy through ``__init__``,
  13.1 µs plain and eager (p99 9.6 / 15.1 / 26.0 µs);
- ``Session.observe``, action memory on, fresh guard (first-time decisions are frequent): p90
  17.3 / 19.6 / 26.5 µs, p99 28.8 / 34.8 / 43.8 µs, mean below the p99 11.8 / 12.0 / 13.4 µs;
- realistic and all-distinct rows (most steps are cache hits): p50 and mean within 2 %, p99
  20.5 / 22.6 / 29.3 µs and 40.1 / 38.6 / 50.2 µs.

Both parts save more than 5 % of a first-time decision: writing the message and one
:class:`PropertyValue` per property only when read (about 5.6 µs), and filling the slots through
:class:`_Draft` instead of a frozen dataclass's ``object.__setattr__`` per field (about 3.3 µs).
Every decision is the same either way (95,340 decisions, two models, five policies, observe and
preview: ``to_dict()`` and ``repr`` identical), and a test compares each with its eager twin.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from .decision import Decision, PropertyValue
from .spec import Action

PropertyRow = tuple[str, str, float, float, float | None, float | None, Action, float | None,
                    float | None, float | None, float | None, float | None]  # PropertyValue's fields, in order
_MESSAGE = Decision.__dict__["message"]  # the slots the dataclass keeps the two fields in
_PROPERTIES = Decision.__dict__["properties"]


class LazyDecision(Decision):
    """A decision the guard made, whose ``message`` and ``properties`` are written when first read.

    Most decisions are cached and acted on by their action and figures alone; writing the words and
    one object per property is most of what a first-time decision costs. Once read they are kept, and
    every field equals what the eager decision holds (``==`` compares it field for field with one).
    """

    __slots__ = ("_rows", "_write")
    _rows: tuple[PropertyRow, ...] | None  # None once ``properties`` is written
    _write: Callable[[tuple[PropertyValue, ...]], str] | None  # the message from the properties; None once written

    @classmethod
    def pending(cls, rows: tuple[PropertyRow, ...], write: Callable[[tuple[PropertyValue, ...]], str] | None, *,
                action: Action, p_unsafe: float | None, p_safe: float | None, property: str,
                abstract_state: dict[str, bool], monitors: dict[str, str], lower: float | None = None,
                upper: float | None = None, threshold: float | None = None, known: bool = True,
                unsafe_now: bool = False, ci_low: float | None = None, ci_high: float | None = None,
                visits: int | None = None, baseline_p_unsafe: float | None = None, increase: float | None = None,
                index: int | None = None, p_min: float | None = None,
                alternatives: tuple[Any, ...] = ()) -> LazyDecision:
        """The decision with these figures (Decision's fields; the rest default) whose properties are
        ``rows`` and whose message is ``write(properties)``, or "" without ``write``. Every field of
        Decision is set here (a new one must be too: reading an unset slot raises)."""
        d: Any = object.__new__(_Draft)  # filled by plain stores, then made a LazyDecision (see _Draft)
        d.action, d.p_unsafe, d.p_safe, d.property, d.abstract_state = action, p_unsafe, p_safe, property, abstract_state
        d.lower, d.upper, d.threshold, d.known, d.unsafe_now = lower, upper, threshold, known, unsafe_now
        d.monitors, d.ci_low, d.ci_high, d.visits, d.index = monitors, ci_low, ci_high, visits, index
        d.baseline_p_unsafe, d.increase = baseline_p_unsafe, increase
        d.p_min, d.alternatives, d.proposed = p_min, alternatives, None
        d.message, d.properties, d.member, d.group, d.fallback, d.over_budget = "", (), None, None, False, False
        d._rows, d._write = rows, write
        d.__class__ = LazyDecision
        written: LazyDecision = d
        return written

    @property
    def properties(self) -> tuple[PropertyValue, ...]:
        rows = getattr(self, "_rows", None)  # unset in a copy made by replace(): written then
        if rows is not None:
            _PROPERTIES.__set__(self, tuple(PropertyValue(*row) for row in rows))
            object.__setattr__(self, "_rows", None)  # after the value: a concurrent reader sees one or the other
        value: tuple[PropertyValue, ...] = _PROPERTIES.__get__(self)
        return value

    @properties.setter
    def properties(self, value: tuple[PropertyValue, ...]) -> None:  # dataclass __init__, replace(), copies
        _PROPERTIES.__set__(self, value)

    @property
    def message(self) -> str:
        write = getattr(self, "_write", None)
        if write is not None:
            _MESSAGE.__set__(self, write(self.properties))
            object.__setattr__(self, "_write", None)
        value: str = _MESSAGE.__get__(self)
        return value

    @message.setter
    def message(self, value: str) -> None:
        _MESSAGE.__set__(self, value)

    def __eq__(self, other: object) -> bool:
        if type(other) not in (Decision, LazyDecision):
            return NotImplemented
        return tuple(getattr(self, f.name) for f in fields(Decision)) == \
            tuple(getattr(other, f.name) for f in fields(Decision))

    __hash__ = Decision.__hash__

    def __repr__(self) -> str:
        return "Decision" + Decision.__repr__(self).removeprefix(type(self).__qualname__)


class _Draft(Decision):
    """A :class:`LazyDecision` being filled in :meth:`LazyDecision.pending`: the same slots, writable.

    A frozen dataclass stores a field through a call (~0.2 µs; a first-time decision sets 25), a
    class with plain ``__setattr__`` and ``__delattr__`` straight into the slot (~10 ns). Once filled,
    the object's class becomes ``LazyDecision`` (same layout), frozen like every Decision.
    """

    __slots__ = LazyDecision.__slots__  # the same layout, which the class change requires
    __setattr__ = object.__setattr__  # both, or CPython keeps the slow path for the pair
    __delattr__ = object.__delattr__
