"""The runs as columns: every leaf field of ``state``, ``meta`` and the step's action, one value per step.

Discovery reads every field the runs carry, so this pass must stay cheap on 10⁵ steps
of 10² fields: it walks the states *level by level* (one list comprehension per key of
a level, over all steps at once) instead of step by step, so Python touches each value
once and never builds a path per value.

A field that cannot make a readable, well-defined predicate is skipped and counted by
reason (:class:`Skipped`), never an error: values of mixed types at one path, lists
longer than :data:`MAX_LIST` or holding objects, nesting deeper than :data:`MAX_DEPTH`,
strings that are not valid Unicode, keys CEL cannot select.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

MAX_DEPTH = 6  # levels below a root (state.a.b.c.d.e.f)
MAX_LIST = 64  # elements a list field may hold to offer membership predicates
MISSING: Any = object()  # no value at this path on this step
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# CEL's reserved words cannot follow a dot; such keys are read with an index, state["in"]
_CEL_RESERVED = frozenset({"as", "break", "const", "continue", "else", "false", "for", "function", "if", "import",
                           "in", "let", "loop", "package", "namespace", "null", "return", "true", "var", "void",
                           "while"})

Kind = Literal["bool", "number", "string", "list"]


@dataclass(frozen=True)
class Column:
    """One leaf field over every step. ``values`` holds Python values (``MISSING`` where absent).

    ``missing`` says whether some step lacks the field (or has null there): its predicate then
    guards the selection with ``has()`` so CEL never fails on such a step.
    """

    path: tuple[str, ...]
    kind: Kind
    values: list[Any]
    missing: bool


@dataclass
class Skipped:
    """Fields left out, by reason, with a few of their paths."""

    reasons: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, path: Sequence[str]) -> None:
        self.reasons[reason] += 1
        places = self.examples.setdefault(reason, [])
        if len(places) < 3:
            places.append(path_text(path))

    @property
    def total(self) -> int:
        return sum(self.reasons.values())

    def lines(self) -> list[str]:
        return [f"{count} field(s) skipped: {reason} (e.g. {', '.join(self.examples[reason])})"
                for reason, count in self.reasons.most_common()]


@dataclass(frozen=True)
class Table:
    """The columns of the runs' steps, steps in run order (``run_of`` gives each step's run)."""

    columns: list[Column]
    run_of: NDArray[np.int64]
    skipped: Skipped


def path_text(path: Sequence[str]) -> str:
    """``("state", "light", "color")`` → ``state.light.color`` (``state["in"]`` for keys CEL cannot select)."""
    out = path[0]
    for key in path[1:]:
        out += f".{key}" if _IDENT.match(key) and key not in _CEL_RESERVED else "[" + _quote(key) + "]"
    return out


# CEL's string literals take no raw line break, carriage return included ("c\r\n" from a Windows log):
# control characters are written as escapes, and read back as themselves
_ESCAPES = {**{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}, ord("\\"): "\\\\", ord('"'): '\\"',
            ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def _quote(text: str) -> str:
    return '"' + text.translate(_ESCAPES) + '"'


_KIND_OF_TYPE = {bool: "bool", int: "number", float: "number", str: "string", list: "list", dict: "object"}
_ABSENT = (type(MISSING), type(None))


def _walk(nodes: list[Any], path: tuple[str, ...], depth: int, out: list[Column], skipped: Skipped) -> None:
    """Columns of the leaves under ``path``; ``nodes`` are each step's value there."""
    types = set(map(type, nodes))  # at C speed: the kinds present decide everything below
    missing = any(t in types for t in _ABSENT)
    kinds = {_KIND_OF_TYPE.get(t, "other") for t in types if t not in _ABSENT}
    if not kinds:
        return
    if "object" in kinds:
        if len(kinds) > 1:
            skipped.add("an object at some steps, a value at others (mixed types)", path)
            return
        if depth >= MAX_DEPTH:
            skipped.add(f"nested deeper than {MAX_DEPTH} levels", path)
            return
        for key, child in _children(nodes, missing):
            if key.__class__ is not str or not _valid_text(key):
                skipped.add("a key that is not valid text", path)
                continue
            _walk(child, path + (key,), depth + 1, out, skipped)
        return
    if len(kinds) > 1:
        skipped.add("values of mixed types (" + ", ".join(sorted(kinds)) + ")", path)
        return
    kind = next(iter(kinds))
    if kind == "other":
        skipped.add("values that are not JSON", path)
        return
    if kind == "string":
        if not all(_valid_text(v) for v in set(nodes) if v.__class__ is str):
            skipped.add("strings that are not valid Unicode (not UTF-8)", path)
            return
    elif kind == "list":
        reason = _list_problem(nodes)
        if reason is not None:
            skipped.add(reason, path)
            return
    out.append(Column(path, kind, nodes, missing))  # type: ignore[arg-type]


def _children(nodes: list[Any], missing: bool) -> list[tuple[Any, list[Any]]]:
    """Each key under these objects, with each step's value there (``MISSING`` where absent)."""
    if not missing:
        signatures = set(map(tuple, map(dict.keys, nodes)))
        if len(signatures) == 1:  # the same keys in the same order everywhere: transpose at C speed
            keys = next(iter(signatures))
            return list(zip(keys, map(list, zip(*map(dict.values, nodes)))))
    order: dict[Any, None] = {}
    for node in nodes:
        if node.__class__ is dict:
            order.update(dict.fromkeys(node))
    out = []
    for key in order:
        try:  # every step has the key: itemgetter at C speed
            child = list(map(itemgetter(key), nodes))
        except (KeyError, TypeError):
            child = [n.get(key, MISSING) if n.__class__ is dict else MISSING for n in nodes]
        out.append((key, child))
    return out


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not writable into a spec, not comparable in CEL
        return False
    return True


def _list_problem(nodes: list[Any]) -> str | None:
    lists = [node for node in nodes if node.__class__ is list]
    if max(map(len, lists), default=0) > MAX_LIST:
        return f"lists longer than {MAX_LIST} elements"
    element_types = set(map(type, chain.from_iterable(lists)))
    element_kinds = {_KIND_OF_TYPE.get(t, "other") for t in element_types}
    if element_kinds - {"string", "number", "bool"}:  # objects, lists, null
        return "lists holding objects, lists or null"
    if len(element_kinds) > 1:
        return "lists mixing element types"
    if "string" in element_kinds and not all(_valid_text(t) for t in set(chain.from_iterable(lists))):
        return "strings that are not valid Unicode (not UTF-8)"
    return None


def build_table(states: list[Any], metas: list[Any], actions: list[Any], run_of: NDArray[np.int64],
                skipped: Skipped | None = None) -> Table:
    """The columns of all steps.

    Args:
        states: each step's ``state`` (steps of all runs, in run order).
        metas: each *run's* ``meta`` (spread over its steps here).
        actions: each step's action view (:func:`guard.discovery.actions.action_columns`).
        run_of: each step's run index.
    """
    skipped = skipped if skipped is not None else Skipped()
    columns: list[Column] = []
    _walk(states, ("state",), 0, columns, skipped)
    _walk(actions, ("action",), 0, columns, skipped)
    meta_columns: list[Column] = []
    _walk(metas, ("meta",), 0, meta_columns, skipped)
    index = run_of.tolist()
    for column in meta_columns:
        per_run = column.values
        columns.append(Column(column.path, column.kind, [per_run[r] for r in index], column.missing))
    return Table(columns, run_of, skipped)
