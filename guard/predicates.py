"""Predicates: a concrete state (any JSON object) → an abstract state (a bit mask).

All CEL predicates of a spec are compiled into one list program, evaluated in one call.
Two things keep that call cheap, because converting a large Python dict into CEL values
costs far more than evaluating ten comparisons:

* projection — only the fields the expressions select (``state.objects.Fork.isPickedUp``)
  are handed to CEL, not the whole state;
* memoisation — the values of those fields, tagged with their types, key a cache of
  abstract states, so a field configuration seen before costs a dictionary look-up.

Both are exact: a predicate is a pure function of the fields it selects.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any

import cel

from guard.errors import PredicateError
from guard.spec import Spec

__all__ = ["PredicateSet", "resolve_callable"]

PythonPredicate = Callable[[Mapping[str, Any]], bool]

_FULL = None  # trie marker: copy this whole subtree
_MISSING = object()
_NOT_A_MAP = object()
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
# A selection stops before a method or macro call: in `state.objects.size()` the map
# `objects` is needed whole, not its (absent) field `size`.
_STATE_SELECT = re.compile(r"(?<![\w.])state((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*(?![\w(]|\s+\())*)")
_MEMO_LIMIT = 1 << 16


def resolve_callable(reference: str) -> Callable[..., Any]:
    """Import ``'package.module:function'`` and return the function."""
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {reference!r}: {exc}") from exc
    if not callable(target):
        raise ValueError(f"{reference!r} is not callable")
    return target


def _selected_paths(expression: str) -> list[tuple[str, ...]]:
    """Field paths under ``state`` that an expression selects (over-approximated)."""
    code = _STRING_LITERAL.sub('""', expression)
    return [tuple(part.strip() for part in m.group(1).split(".") if part.strip())
            for m in _STATE_SELECT.finditer(code)]


def _build_trie(paths: list[tuple[str, ...]]) -> dict[str, Any] | None:
    """Merge paths into a trie; ``None`` (``_FULL``) marks a subtree needed whole."""
    if any(len(p) == 0 for p in paths):
        return _FULL
    trie: dict[str, Any] = {}
    for path in paths:
        node = trie
        for i, key in enumerate(path):
            last = i == len(path) - 1
            if last:
                node[key] = _FULL
            else:
                child = node.get(key, {})
                if child is _FULL:
                    break
                node[key] = child
                node = child
    return trie


def _freeze(value: Any) -> Any:
    """A hashable, type-tagged image of a JSON value (True, 1 and 1.0 stay distinct)."""
    cls = value.__class__
    if cls is dict:
        return (dict, tuple((k, _freeze(v)) for k, v in value.items()))
    if cls is list or cls is tuple:
        return (list, tuple(_freeze(v) for v in value))
    if cls is float and value == 0.0:  # 0.0 == -0.0, but CEL tells them apart (1.0 / x, string(x))
        return (cls, value, str(value))
    return (cls, value)


def _key(node: Any, trie: dict[str, Any] | None, out: list[Any]) -> None:
    if trie is _FULL:
        out.append(_freeze(node))
        return
    if node.__class__ is not dict:
        # not a map where fields are selected (CEL fails on it): tag it with its trie node,
        # or {"m": 5} and {"m": {"k": 5}} would share a key and the memo would answer for both
        out.append((_NOT_A_MAP, id(trie), _freeze(node)))
        return
    for key, sub in trie.items():
        child = node.get(key, _MISSING)
        if child is _MISSING:
            out.append(_MISSING)
        else:
            _key(child, sub, out)


def _project(node: Any, trie: dict[str, Any] | None) -> Any:
    if trie is _FULL or node.__class__ is not dict:
        return node
    out = {}
    for key, sub in trie.items():
        if key in node:
            out[key] = _project(node[key], sub)
    return out


class PredicateSet:
    """The compiled predicates of a spec, and its compiled ``unsafe`` condition.

    Args:
        spec: the validated spec; predicate order is the bit order.
        python_predicates: extra predicates defined in code, by name; they override
            spec entries of the form ``{python: 'module:function'}`` with the same name.
    """

    def __init__(self, spec: Spec, python_predicates: Mapping[str, PythonPredicate] | None = None) -> None:
        self.spec = spec
        self.names: list[str] = spec.predicate_names
        self.width = len(self.names)
        python_predicates = dict(python_predicates or {})
        cel_items: list[tuple[int, str, str]] = []
        self._python: list[tuple[int, str, PythonPredicate]] = []
        for index, (name, definition) in enumerate(spec.predicates.items()):
            if name in python_predicates:
                self._python.append((index, name, python_predicates[name]))
            elif definition.python is not None:
                try:
                    self._python.append((index, name, resolve_callable(definition.python)))
                except ValueError as exc:
                    raise spec.error(f"predicate {name!r}: {exc}", "predicates", name) from exc
            else:
                assert definition.cel is not None  # guaranteed by PredicateDef
                try:
                    cel.compile(definition.cel)
                except ValueError as exc:
                    raise spec.error(f"predicate {name!r} does not parse as CEL: {_first_line(exc)}",
                                     "predicates", name) from exc
                cel_items.append((index, name, definition.cel))
        self._cel_items = cel_items
        self._program = cel.compile("[" + ", ".join(f"({expr})" for _, _, expr in cel_items) + "]") if cel_items else None
        self._trie = _build_trie([p for _, _, expr in cel_items for p in _selected_paths(expr)])
        self._memo: dict[tuple[Any, ...], int] = {}
        self._unsafe_program = self._compile_unsafe(spec)
        self._unsafe_memo: dict[int, bool] = {}

    def _compile_unsafe(self, spec: Spec) -> Any:
        if spec.unsafe is None:  # monitors alone define the violations
            return None
        try:
            program = cel.compile(spec.unsafe)
        except ValueError as exc:
            raise spec.error(f"'unsafe' does not parse as CEL: {_first_line(exc)}", "unsafe") from exc
        unknown = sorted(set(program.variables()) - set(self.names))
        if unknown:
            raise spec.error(f"'unsafe' names unknown predicate(s) {unknown}; known: {self.names}", "unsafe")
        return program

    # -- evaluation ---------------------------------------------------------------

    def evaluate(self, state: Mapping[str, Any]) -> int:
        """The abstract state of ``state``: bit ``i`` is set when predicate ``i`` holds.

        Raises:
            PredicateError: naming the predicate and the field it could not read.
        """
        bits = 0
        if self._program is not None:
            key_parts: list[Any] = []
            _key(state, self._trie, key_parts)
            key = tuple(key_parts)
            try:
                cached = self._memo.get(key)
            except TypeError:  # an unhashable leaf (e.g. a set from Python code): no memo
                cached, key = None, None
            if cached is None:
                cached = self._evaluate_cel(state)
                if key is not None:
                    if len(self._memo) >= _MEMO_LIMIT:
                        self._memo.clear()
                    self._memo[key] = cached
            bits = cached
        for index, name, function in self._python:
            try:
                value = function(state)
            except Exception as exc:  # a user's function: report whatever it raised
                raise PredicateError(f"predicate {name!r} raised {type(exc).__name__}: {exc}",
                                     predicate=name) from exc
            if value.__class__ is not bool:
                raise PredicateError(f"predicate {name!r} returned {type(value).__name__} {value!r}, "
                                     "expected a bool", predicate=name)
            if value:
                bits |= 1 << index
        return bits

    def _evaluate_cel(self, state: Mapping[str, Any]) -> int:
        assert self._program is not None
        projected = _project(state, self._trie)
        try:
            values = self._program.execute({"state": projected})
        except Exception:  # find which predicate failed, and why, one at a time
            self._raise_for_culprit(projected)
            raise
        bits = 0
        for (index, name, _), value in zip(self._cel_items, values):
            if value.__class__ is not bool:
                raise PredicateError(f"predicate {name!r} evaluates to {type(value).__name__} {value!r}, "
                                     "expected a bool", predicate=name)
            if value:
                bits |= 1 << index
        return bits

    def _raise_for_culprit(self, projected: Any) -> None:
        for _, name, expression in self._cel_items:
            try:
                cel.compile(expression).execute({"state": projected})
            except KeyError as exc:
                field = exc.args[0] if exc.args else "?"
                raise PredicateError(f"predicate {name!r} ({expression}) reads field {field!r}, "
                                     "which the state lacks", predicate=name) from exc
            except Exception as exc:
                raise PredicateError(f"predicate {name!r} ({expression}) cannot be evaluated: "
                                     f"{_first_line(exc)}", predicate=name) from exc

    def is_unsafe(self, bits: int) -> bool:
        """Whether the spec's ``unsafe`` condition holds in abstract state ``bits``."""
        if self._unsafe_program is None:
            return False
        cached = self._unsafe_memo.get(bits)
        if cached is None:
            value = self._unsafe_program.execute(self.as_context(bits))
            if value.__class__ is not bool:
                raise self.spec.error(f"'unsafe' evaluates to {type(value).__name__} {value!r}, expected a bool",
                                      "unsafe")
            cached = self._unsafe_memo[bits] = value
        return cached

    # -- presentation ---------------------------------------------------------------

    def as_context(self, bits: int) -> dict[str, bool]:
        return {name: bool(bits >> i & 1) for i, name in enumerate(self.names)}

    def valuation(self, bits: int) -> tuple[bool, ...]:
        return tuple(bool(bits >> i & 1) for i in range(self.width))

    @staticmethod
    def bits_of(valuation: tuple[bool, ...] | list[bool]) -> int:
        return sum(1 << i for i, value in enumerate(valuation) if value)

    def describe(self, bits: int) -> str:
        """The abstract state in words: which predicates hold and which do not."""
        holding, absent = [], []
        for i, name in enumerate(self.names):
            text = self.spec.predicates[name].description
            label = f"{name} ({text})" if text else name
            (holding if bits >> i & 1 else absent).append(label)
        parts = []
        if holding:
            parts.append("holds: " + ", ".join(holding))
        if absent:
            parts.append("does not hold: " + ", ".join(absent))
        return "; ".join(parts)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
