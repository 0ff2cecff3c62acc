"""Predicates: a concrete state (any JSON object) → an abstract state (a bit mask).

All CEL predicates of a spec are compiled into one list program, evaluated in one call.
What keeps that call rare and cheap (converting Python values into CEL values costs far
more than evaluating ten comparisons):

* memoisation — the values of the fields the expressions select, tagged with their
  types, key a cache of abstract states, so a field configuration seen before costs a
  dictionary look-up; and per predicate, the values of its own fields key its result,
  so a new combination of known values costs a few more;
* leaf variables — on a miss, one program for the predicates that missed, where each
  field selection ``state.objects.Fork.isPickedUp`` is rewritten into a top-level
  variable bound to that field's value: CEL converts the leaves the expressions read,
  not the maps above them (:func:`_plan_leaves` says what stays on ``state``, and why
  the result is the same);
* projection — what still reads ``state`` sees only the fields it selects.

All are exact: a predicate is a pure function of the fields it selects. Whenever the
fast path cannot answer (a missing field, a value CEL rejects, a map that is not a
dict), the original expressions run on the projected state, as they always did, and
give the same result or the same error.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any, NamedTuple

import cel

from guard.errors import PredicateError
from guard.spec import Spec

__all__ = ["PredicateSet", "resolve_callable"]

PythonPredicate = Callable[[Mapping[str, Any]], bool]

_FULL = None  # trie marker: copy this whole subtree
_PRESENCE = "presence"  # trie marker: only whether the key is there matters (has())
_MISSING = object()
_NOT_A_MAP = object()
# A selection stops before a method or macro call: in `state.objects.size()` the map
# `objects` is needed whole, not its (absent) field `size`.
_STATE_SELECT = re.compile(r"(?<![\w.])state((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*(?![\w(]|\s+\())*)")
_HAS_OPEN = re.compile(r"(?<!\w)has\s*\(\s*$")  # has(e.f) needs a selection, not a value
_STATE_BOUND = re.compile(r"(?<![\w.])state\s*,")  # `state` as a macro's variable (or any argument)
_LITERAL_PREFIX = re.compile(r"(?<![\w])[rRbB]{1,2}$")
# Selecting a field of these fails in CEL, as selecting a missing key does.
_SCALARS = frozenset({list, str, int, float, bool, type(None), bytes})
_SELF_IMAGED = frozenset({str, bool, type(None)})  # values that are their own memo-key image
_MEMO_LIMIT = 1 << 16
_PROGRAM_LIMIT = 1 << 10  # leaf programs, one per set of predicates that missed


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


# -- reading expressions ----------------------------------------------------------

def _mask(expression: str) -> str:
    """The expression with string and bytes literals emptied and comments blanked.

    Same length, so positions carry over. Handles CEL's quotes (``'``, ``"``, triple
    quotes), raw strings (no escapes: ``r"\\"`` is one backslash) and ``//`` comments.
    """
    out = list(expression)
    i, n = 0, len(expression)
    while i < n:
        c = expression[i]
        if c == "/" and expression.startswith("//", i):
            stop = expression.find("\n", i)
            stop = n if stop < 0 else stop
            out[i:stop] = " " * (stop - i)
            i = stop
        elif c == '"' or c == "'":
            prefix = _LITERAL_PREFIX.search(expression, 0, i)
            raw = prefix is not None and "r" in prefix.group().lower()
            quote = c * 3 if expression.startswith(c * 3, i) else c
            j = i + len(quote)
            while j < n and not expression.startswith(quote, j):
                j += 2 if expression[j] == "\\" and not raw else 1
            stop = min(n, j)
            out[i + len(quote):stop] = " " * (stop - i - len(quote))
            i = stop + len(quote)
        else:
            i += 1
    return "".join(out)


def _selections(masked: str) -> list[tuple[re.Match[str], tuple[str, ...]]]:
    return [(m, tuple(part.strip() for part in m.group(1).split(".") if part.strip()))
            for m in _STATE_SELECT.finditer(masked)]


def _selected_paths(expression: str) -> list[tuple[str, ...]]:
    """Field paths under ``state`` that an expression selects (over-approximated)."""
    return [path for _, path in _selections(_mask(expression))]


def _plan_leaves(expressions: list[str]) -> tuple[list[str], dict[tuple[str, ...], str],
                                                   list[tuple[str, ...]], list[tuple[str, ...]]]:
    """Rewrite each ``state.a.b`` selection into a variable bound to the value of ``a.b``.

    Returns the rewritten expressions, the variable of each path, and the paths still
    read on ``state`` whole (``kept``) or for presence only (``presence``). Kept as they
    are: the argument of ``has()`` (it needs a selection), bare ``state``, and every
    selection of an expression that uses ``state`` as an argument or macro variable
    (``.exists(state, …)`` would shadow it). A selection whose field is missing leaves
    its variable unbound: CEL then fails where the selection would have failed, and
    ``||``, ``&&``, ``?:`` and the macros absorb both errors alike.
    """
    prefix = "_fw"
    while any(prefix in expression for expression in expressions):
        prefix += "_"
    variables: dict[tuple[str, ...], str] = {}
    kept: list[tuple[str, ...]] = []
    presence: list[tuple[str, ...]] = []
    rewritten = []
    for expression in expressions:
        masked = _mask(expression)
        shadowed = _STATE_BOUND.search(masked) is not None
        pieces, last = [], 0
        for match, path in _selections(masked):
            before = masked[:match.start()]
            if before.rstrip().endswith("."):  # `x. state.a`: a field named state
                continue
            if shadowed or not path:
                kept.append(path)
            elif _HAS_OPEN.search(before):
                presence.append(path)
            else:
                name = variables.setdefault(path, f"{prefix}{len(variables)}")
                pieces += [expression[last:match.start()], name]
                last = match.end()
        rewritten.append("".join(pieces) + expression[last:])
    return rewritten, variables, kept, presence


def _list_program(expressions: list[str]) -> Any:
    # the newline ends a trailing // comment before the closing parenthesis
    return cel.compile("[" + ", ".join(f"({expression}\n)" for expression in expressions) + "]")


# -- tries, keys, projections -------------------------------------------------------

def _build_trie(paths: list[tuple[str, ...]],
                presence: list[tuple[str, ...]] | None = None) -> dict[str, Any] | None:
    """Merge paths into a trie; ``None`` (``_FULL``) marks a subtree needed whole.

    ``presence`` paths end in ``_PRESENCE`` unless another path needs more of that key.
    """
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
    for path in presence or ():
        node = trie
        for key in path[:-1]:
            child = node.get(key, _PRESENCE)
            if child is _FULL:
                break
            if child is _PRESENCE:
                child = node[key] = {}
            node = child
        else:
            node.setdefault(path[-1], _PRESENCE)
    return trie


def _freeze(value: Any) -> Any:
    """A hashable, type-tagged image of a JSON value (True, 1 and 1.0 stay distinct).

    A string, a bool or None is its own image: none of them equals another type's image.
    """
    cls = value.__class__
    if cls in _SELF_IMAGED:
        return value
    if cls is dict:
        return (dict, tuple((k if k.__class__ is str else _freeze(k), _freeze(v)) for k, v in value.items()))
    if cls is list or cls is tuple:
        if _SELF_IMAGED.issuperset(map(type, value)):  # the common list of strings, without a call each
            return (list, tuple(value))
        return (list, tuple(map(_freeze, value)))
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
            out[key] = None if sub is _PRESENCE else _project(node[key], sub)
    return out


def _compile_function(lines: list[str], name: str, scope: dict[str, Any]) -> Any:
    """Define a generated function (None when it cannot be, e.g. nested too deeply)."""
    try:
        exec(compile("\n".join(lines), f"<forewarn {name}>", "exec"), scope)
    except (SyntaxError, RecursionError, MemoryError):
        return None
    return scope[name]


def _compile_key(trie: dict[str, Any] | None) -> Callable[[Any], tuple[Any, ...] | None] | None:
    """The memo key of a state as straight-line code: what ``_key`` gives, or None.

    None when a selected field is missing or a map on the way is not a dict; the
    caller then walks the trie with ``_key`` (same leaf order, so the same keys).
    """
    if trie is _FULL or not trie:
        return None
    lines = ["def key(s):", "    if s.__class__ is not _dict:", "        return None", "    try:"]
    leaves: list[str] = []

    def emit(parent: str, node: dict[str, Any], indent: str) -> None:
        for field, sub in node.items():
            name = f"n{len(lines)}"
            lines.append(f"{indent}{name} = {parent}[{field!r}]")
            if sub is _FULL:
                leaves.append(name)
            else:
                lines.append(f"{indent}if {name}.__class__ is not _dict:")
                lines.append(f"{indent}    return None")
                emit(name, sub, indent)

    emit("s", trie, "        ")
    lines += ["    except KeyError:", "        return None"]
    images = ", ".join(f"{v} if {v}.__class__ in _self else _freeze({v})" for v in leaves)
    lines.append(f"    return ({images},)")
    return _compile_function(lines, "key", {"_dict": dict, "_self": _SELF_IMAGED, "_freeze": _freeze})


def _compile_binder(variables: dict[tuple[str, ...], str]) -> Callable[[Any], dict[str, Any] | None] | None:
    """The leaf variables of a state, as straight-line code.

    A missing field leaves its variable (and those below it) unbound; so does a scalar
    or list on the way, which CEL cannot select from either. Anything else on the way
    (a Mapping that is not a dict, an object) returns None: the caller evaluates the
    original expressions instead.
    """
    root: dict[str, Any] = {}  # field -> [variable or None, children]
    for path, variable in variables.items():
        node = root
        for field in path[:-1]:
            node = node.setdefault(field, [None, {}])[1]
        node.setdefault(path[-1], [None, {}])[0] = variable
    lines = ["def bind(s):", "    if s.__class__ is not _dict:", "        return None", "    c = {}"]

    def emit(parent: str, node: dict[str, Any], indent: str) -> None:
        for field, (variable, children) in node.items():
            name = f"n{len(lines)}"
            lines.append(f"{indent}{name} = {parent}.get({field!r}, _missing)")
            lines.append(f"{indent}if {name} is not _missing:")
            if variable is not None:
                lines.append(f"{indent}    c[{variable!r}] = {name}")
            if children:
                lines.append(f"{indent}    if {name}.__class__ is _dict:")
                emit(name, children, indent + "        ")
                lines.append(f"{indent}    elif {name}.__class__ not in _scalars:")
                lines.append(f"{indent}        return None")

    emit("s", root, "    ")
    lines.append("    return c")
    return _compile_function(lines, "bind", {"_dict": dict, "_missing": _MISSING, "_scalars": _SCALARS})


class _Leaves(NamedTuple):
    """Some CEL predicates as one list program on leaf variables."""

    program: Any
    bind: Callable[[Any], dict[str, Any] | None]
    reads_state: bool  # whether the program still reads `state` (projected by state_trie)
    state_trie: dict[str, Any] | None


def _compile_leaves(expressions: list[str], variables: set[str]) -> _Leaves | None:
    """The expressions rewritten onto leaf variables, or None when that is not safe."""
    rewritten, leaves, kept, presence = _plan_leaves(expressions)
    try:
        program = _list_program(rewritten)
    except ValueError:  # cannot happen for expressions that parse; then stay with the original
        return None
    reads_state = bool(kept or presence)
    # a check that the rewriting left no reference behind: only the variables it bound are new
    allowed = (variables - {"state"}) | set(leaves.values()) | ({"state"} if reads_state else set())
    binder = _compile_binder(leaves)
    if binder is None or not set(program.variables()) <= allowed:
        return None
    return _Leaves(program, binder, reads_state, _build_trie(kept, presence))


def _sub_key_getters(trie: dict[str, Any], paths: list[list[tuple[str, ...]]]) -> list[Callable[[Any], Any]]:
    """Per predicate, a function of the fast key giving the images of the fields it reads."""
    leaves: list[tuple[str, ...]] = []  # the fast key's order

    def walk(node: dict[str, Any], prefix: tuple[str, ...]) -> None:
        for field, sub in node.items():
            if sub is _FULL:
                leaves.append(prefix + (field,))
            else:
                walk(sub, prefix + (field,))

    walk(trie, ())
    position = {leaf: i for i, leaf in enumerate(leaves)}
    getters: list[Callable[[Any], Any]] = []
    for item_paths in paths:
        read = set()
        for path in item_paths:
            node: Any = trie
            for depth, field in enumerate(path):
                node = node[field]
                if node is _FULL:  # the path or a prefix of it is a key leaf
                    read.add(position[path[:depth + 1]])
                    break
        getters.append(itemgetter(*sorted(read)) if read else _no_fields)
    return getters


def _no_fields(key: Any) -> tuple[()]:
    return ()


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
        item_variables: list[set[str]] = []
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
                    item_variables.append(set(cel.compile(definition.cel).variables()))
                except ValueError as exc:
                    raise spec.error(f"predicate {name!r} does not parse as CEL: {_first_line(exc)}",
                                     "predicates", name) from exc
                cel_items.append((index, name, definition.cel))
        self._cel_items = cel_items
        self._program = _list_program([expr for _, _, expr in cel_items]) if cel_items else None
        paths = [_selected_paths(expr) for _, _, expr in cel_items]
        self._trie = _build_trie([p for item_paths in paths for p in item_paths])
        self._fast_key = _compile_key(self._trie)
        self._memo: dict[tuple[Any, ...], int] = {}
        # Second level, for a new combination of known values: per predicate, its result
        # keyed by the images of the fields it reads (taken from the fast key).
        self._sub_keys = _sub_key_getters(self._trie, paths) \
            if self._fast_key is not None and self._trie is not None else None
        self._item_memos: list[dict[Any, bool]] = [{} for _ in cel_items]
        self._item_variables = item_variables
        self._leaf_programs: dict[int, _Leaves | None] = {}  # by set of CEL items (a bit mask)
        self._all_items = (1 << len(cel_items)) - 1
        self._unsafe_program = self._compile_unsafe(spec)
        self._unsafe_memo: dict[int, bool] = {}
        # bits the unsafe condition reads: its value depends on nothing else
        self.unsafe_mask = 0 if self._unsafe_program is None else sum(
            1 << self.names.index(name) for name in set(self._unsafe_program.variables()))

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
            key = self._fast_key(state) if self._fast_key is not None else None
            fast = key is not None
            if key is None:
                key_parts: list[Any] = []
                _key(state, self._trie, key_parts)
                key = tuple(key_parts)
            try:
                cached = self._memo.get(key)
            except TypeError:  # an unhashable leaf (e.g. a set from Python code): no memo
                cached, key, fast = None, None, False
            if cached is None:
                cached = self._evaluate_missed(state, key) if fast and key is not None \
                    else self._evaluate_cel(state)
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

    def _evaluate_missed(self, state: Mapping[str, Any], key: tuple[Any, ...]) -> int:
        """Bits for a new fast key: per-predicate memo, then one program for the predicates it lacks."""
        assert self._sub_keys is not None
        bits = missed = 0
        subs = []
        for c, (getter, memo) in enumerate(zip(self._sub_keys, self._item_memos)):
            sub = getter(key)
            subs.append(sub)
            value = memo.get(sub)
            if value is None:
                missed |= 1 << c
            elif value:
                bits |= 1 << self._cel_items[c][0]
        if missed:
            values = self._run_leaves(missed, state)
            if values is None:
                return self._evaluate_original(state)
            for c, value in zip((c for c in range(len(subs)) if missed >> c & 1), values):
                memo = self._item_memos[c]
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                memo[subs[c]] = value
                if value:
                    bits |= 1 << self._cel_items[c][0]
        return bits

    def _evaluate_cel(self, state: Mapping[str, Any]) -> int:
        """The CEL predicates' bits, without the memos: leaf variables, else the original program."""
        values = self._run_leaves(self._all_items, state)
        if values is None:
            return self._evaluate_original(state)
        bits = 0
        for (index, _, _), value in zip(self._cel_items, values):
            if value:
                bits |= 1 << index
        return bits

    def _run_leaves(self, items: int, state: Mapping[str, Any]) -> list[bool] | None:
        """The values of some CEL predicates (a bit mask over them) in one call on leaf variables.

        None when that cannot be done exactly or fails in any way: the caller then runs the
        original program, which gives today's result or error.
        """
        try:
            leaves = self._leaf_programs[items]
        except KeyError:
            if len(self._leaf_programs) >= _PROGRAM_LIMIT:
                self._leaf_programs.clear()
            chosen = [c for c in range(len(self._cel_items)) if items >> c & 1]
            leaves = self._leaf_programs[items] = _compile_leaves(
                [self._cel_items[c][2] for c in chosen], set().union(*(self._item_variables[c] for c in chosen)))
        if leaves is None:
            return None
        context = leaves.bind(state)
        if context is None:
            return None
        if leaves.reads_state:
            context["state"] = _project(state, leaves.state_trie)
        try:
            values: list[bool] = leaves.program.execute(context)
        except Exception:  # report it as the original expressions would
            return None
        for value in values:
            if value is not True and value is not False:
                return None
        return values

    def _evaluate_original(self, state: Mapping[str, Any]) -> int:
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
        bits &= self.unsafe_mask
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
        holding: list[str] = []
        absent: list[str] = []
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
