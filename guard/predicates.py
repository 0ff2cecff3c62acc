"""Predicates: a concrete state (any JSON object) → an abstract state (a bit mask).

A CEL predicate reads ``state`` (the step's state) and may read ``meta`` (the run's
metadata: the trace line's ``meta``, or what a session was opened with), so
``meta.task_hazard == "stove" && state.stove_on`` depends on the task, and ``action`` (the
step's action, parsed: :mod:`guard.actions`), so ``action.verb == "pick"`` or
``"external" in action.classes`` depend on what the agent did. The three are fields of one
root, ``{"state": ..., "meta": ..., "action": ...}``, for everything below.

A bare ``action`` — compared, tested with ``in``, given to a string function — is the
action's text, ``action.name``: ``action == "find Bowl"`` holds on a step that logged the
text ``"find Bowl"``, and a tool call compares as its tool name (``action == "send_email"``),
as ``action.name`` and ``learning.memory.actions`` already name it. The CEL package has no
custom types or operator overloads, so this is a rewrite of the expression when it is
compiled (:func:`guard._cel_fields.text_actions`): exact for every form, since it changes
what the name denotes rather than one operator, and free at run time. Error messages quote
the expression as written.

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
* projection — what still reads ``state`` or ``meta`` sees only the fields it selects.

All are exact: a predicate is a pure function of the fields it selects. Whenever the
fast path cannot answer (a missing field, a value CEL rejects, a map that is not a
dict), the original expressions run on the projected state, as they always did, and
give the same result or the same error.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import cel

from ..errors import PredicateBudgetExceeded, PredicateError
from ._cel_cost import UNIT_SECONDS, bound_units, comprehension_degree, work_units
from ._cel_fields import (
    MEMO_LIMIT,
    PROGRAM_LIMIT,
    Leaves,
    build_trie,
    compile_key,
    compile_leaves,
    list_program,
    project,
    selected_paths,
    sub_key_getters,
    text_actions,
    walk_key,
)
from ._cel_regex import FUNCTION, check_pattern, literal_patterns, rewrite_matches, search
from .actions import NO_ACTION, action_view
from .spec import Spec
from .trust import CodeNotAllowed, registered_callable

__all__ = ["CodeNotAllowed", "PredicateBudgetExceeded", "registered_callable"]  # names other modules import through this one

PythonPredicate = Callable[[Mapping[str, Any]], bool]
MEMO_BYTES = 64 << 20  # default budget of a predicate set's memo tables (``memo_limit`` changes it)
_EMPTY_STR = sys.getsizeof("")  # an ASCII string is this plus its length (a compact str)
_NO_META: dict[str, Any] = {}  # a run without metadata (never mutated: CEL only reads it)



def resolve_python_predicates(spec: Spec, given: Mapping[str, PythonPredicate] | None = None
                              ) -> dict[str, PythonPredicate]:
    """The function of each Python predicate of ``spec`` (``{python: NAME}``), by predicate name: the one
    ``given`` in code under the predicate's name, else the one operator code registered under NAME
    (:mod:`guard.trust`). A model whose spec names code this process cannot find cannot decide anything:
    what loads a model to decide calls this first (a :class:`PredicateSet` does).

    Raises:
        SpecError: a name nobody registered (saying which, and how to register it), an import path,
            a name registered twice, or an entry point that does not load; one line, naming the predicate.
    """
    given = given or {}
    found: dict[str, PythonPredicate] = {}
    for name, definition in spec.predicates.items():
        if name in given:
            found[name] = given[name]
        elif definition.python is not None:
            try:
                found[name] = registered_callable(definition.python)
            except ValueError as exc:
                raise spec.error(f"predicate {name!r}: {exc}", "predicates", name) from exc
    return found


class PredicateSet:
    """The compiled predicates of a spec, and its compiled ``unsafe`` condition.

    Args:
        spec: the validated spec; predicate order is the bit order.
        python_predicates: extra predicates defined in code, by predicate name; they override
            the spec's entries of that name. A spec's ``{python: NAME}`` is looked up among the
            functions operator code registered (:mod:`guard.trust`); nothing else is imported.
    """

    def __init__(self, spec: Spec, python_predicates: Mapping[str, PythonPredicate] | None = None) -> None:
        self.spec = spec
        self.names: list[str] = spec.predicate_names
        self.width = len(self.names)
        functions = resolve_python_predicates(spec, python_predicates)
        cel_items: list[tuple[int, str, str]] = []
        self._python: list[tuple[int, str, PythonPredicate]] = []
        item_variables: list[set[str]] = []
        for index, (name, definition) in enumerate(spec.predicates.items()):
            if name in functions:
                self._python.append((index, name, functions[name]))
            else:
                assert definition.cel is not None  # guaranteed by PredicateDef
                try:
                    item_variables.append(set(cel.compile(definition.cel).variables()))
                except ValueError as exc:
                    raise spec.error(f"predicate {name!r} does not parse as CEL: {_first_line(exc)}",
                                     "predicates", name) from exc
                for pattern in literal_patterns(definition.cel):
                    try:  # a pattern CEL would reject at every evaluation is the spec's error, now
                        check_pattern(pattern)
                    except ValueError as exc:
                        raise spec.error(f"predicate {name!r}: {exc}", "predicates", name) from None
                cel_items.append((index, name, rewrite_matches(text_actions(definition.cel))))
        # name -> function of every Python predicate, as resolved here: what Spark's workers get
        # (they need not have run the decorators that registered them)
        self.python_functions: dict[str, PythonPredicate] = {name: fn for _, name, fn in self._python}
        # what decides every abstract state, bit by bit: two sets with equal definitions abstract a run alike
        self.definitions: tuple[Any, ...] = tuple(
            ("python", id(functions[name])) if name in functions else definition.cel
            for name, definition in spec.predicates.items())
        self._cel_items = cel_items
        # the action's view is built only for a spec that reads it
        self.reads_action = any("action" in variables for variables in item_variables)
        self._program = list_program([expr for _, _, expr in cel_items]) if cel_items else None
        paths = [selected_paths(expr) for _, _, expr in cel_items]
        self._trie = build_trie([p for item_paths in paths for p in item_paths])
        self._cap = [float("inf")]  # the budget in units, read by the memo key (a list: changed in place)
        self._fast_key = compile_key(self._trie, self._cap, self._refuse_large)
        self._memo: dict[tuple[Any, ...], int] = {}
        self._memo_bytes = 0
        self.memo_limit = MEMO_BYTES
        # Second level, for a new combination of known values: per predicate, its result
        # keyed by the images of the fields it reads (taken from the fast key).
        self._item_memos: list[dict[Any, bool]] = [{} for _ in cel_items]
        # per CEL item: its sub-key getter, its memo, its bit (one tuple: a miss reads all three per item)
        self._items: list[tuple[Callable[[Any], Any], dict[Any, bool], int]] | None = [
            (getter, memo, 1 << index) for getter, memo, (index, _, _)
            in zip(sub_key_getters(self._trie, paths), self._item_memos, cel_items)
        ] if self._fast_key is not None and self._trie is not None else None
        self._item_variables = item_variables
        self._leaf_programs: dict[int, Leaves | None] = {}  # by set of CEL items (a bit mask)
        self._all_items = (1 << len(cel_items)) - 1
        # the CPU budget of one step's CEL evaluation (guard/_cel_cost.py): None, unbounded (learning
        # reads the operator's own traces); a Guard sets it for the steps agents send
        self._cpu_budget: float | None = None
        self._budget_units: float | None = None
        # per CEL item whose reads repeat under comprehension macros: (its index, degree); usually none
        self._nested = [(c, degree) for c, (_, _, expr) in enumerate(cel_items)
                        if (degree := comprehension_degree(expr)) > 1]
        self._unsafe_program = self._compile_unsafe(spec)
        self._unsafe_memo: dict[int, bool] = {}
        # bits the unsafe condition reads: its value depends on nothing else
        self.unsafe_mask = 0 if self._unsafe_program is None else sum(
            1 << self.names.index(name) for name in set(self._unsafe_program.variables()))

    def _compile_unsafe(self, spec: Spec) -> Any:
        if spec.unsafe is None:  # monitors alone define the violations
            return None
        try:
            program = cel.compile(rewrite_matches(spec.unsafe))
        except ValueError as exc:
            raise spec.error(f"'unsafe' does not parse as CEL: {_first_line(exc)}", "unsafe") from exc
        unknown = sorted(set(program.variables()) - set(self.names))
        if unknown:
            raise spec.error(f"'unsafe' names unknown predicate(s) {unknown}; known: {self.names}", "unsafe")
        return program

    @property
    def cpu_budget(self) -> float | None:
        """Seconds of CPU one step's CEL predicates may cost (None: unbounded); see :meth:`evaluate`."""
        return self._cpu_budget

    @cpu_budget.setter
    def cpu_budget(self, seconds: float | None) -> None:
        self._cpu_budget = seconds
        self._budget_units = None if seconds is None else seconds / UNIT_SECONDS
        self._cap[0] = float("inf") if self._budget_units is None else self._budget_units

    def _refuse_large(self) -> None:
        """With a CPU budget, a list or map leaf with more entries than the budget has units is refused
        before the memo key images it: imaging it (a pass in Python over every value) would cost as much
        as the budget, and its predicates could not be evaluated on it anyway."""
        units = self._cap[0]
        raise PredicateBudgetExceeded(
            f"a field the predicates read holds more than {units:.0f} values, more than the CPU budget "
            f"of {units * UNIT_SECONDS * 1e3:g} ms per step can evaluate")

    # -- evaluation ---------------------------------------------------------------

    def evaluate(self, state: Mapping[str, Any], meta: Mapping[str, Any] | None = None, action: Any = None) -> int:
        """The abstract state of ``state``: bit ``i`` is set when predicate ``i`` holds.

        Args:
            state: the step's concrete state.
            meta: the run's metadata (``None``: none, read as ``{}``).
            action: the step's action as logged (a string, an object, ``None``: none).

        Raises:
            PredicateError: naming the predicate and the field it could not read, or a
                state nested too deeply to read.
            PredicateBudgetExceeded: (a PredicateError) with ``cpu_budget`` set, evaluating the
                CEL predicates on this state would cost more CPU than that; nothing was evaluated
                past the estimate (:mod:`guard._cel_cost`).
        """
        try:
            return self._evaluate(state, meta, action)
        except RecursionError:
            raise PredicateError("the state is nested too deeply to evaluate the predicates on (Python's "
                                 "recursion limit); flatten the fields the predicates read") from None

    def _evaluate(self, state: Mapping[str, Any], meta: Mapping[str, Any] | None, action: Any) -> int:
        bits = 0
        if self._program is not None:
            root = {"state": state, "meta": _NO_META if meta is None else meta,
                    "action": action_view(action) if self.reads_action else NO_ACTION}
            key = self._fast_key(root) if self._fast_key is not None else None
            fast = key is not None
            if key is None:
                key_parts: list[Any] = []
                walk_key(root, self._trie, key_parts)
                key = tuple(key_parts)
            try:
                cached = self._memo.get(key)
            except TypeError:  # an unhashable leaf (e.g. a set from Python code): no memo
                cached, key, fast = None, None, False
            if cached is None:
                budget = None if self._budget_units is None else [self._budget_units]
                cached = self._evaluate_missed(root, key, budget) if fast and key is not None \
                    else self._evaluate_cel(root, budget)
                if key is not None:
                    if len(self._memo) >= MEMO_LIMIT:
                        self._memo.clear()
                    if self._account(key):
                        self._memo[key] = cached
            bits = cached
        for index, name, function in self._python:
            try:
                value = function(state)
            except Exception as exc:  # a user's function: report whatever it raised
                raise PredicateError(f"predicate {name!r} raised {type(exc).__name__}: {exc}",
                                     predicate=name) from exc
            if value.__class__ is not bool:
                raise PredicateError(f"predicate {name!r} returned {_shown(value)}, "
                                     "expected a bool", predicate=name)
            if value:
                bits |= 1 << index
        return bits

    def _evaluate_missed(self, root: dict[str, Any], key: tuple[Any, ...], budget: list[float] | None = None) -> int:
        """Bits for a new fast key: per-predicate memo, then one program for the predicates it lacks."""
        assert self._items is not None
        bits = missed = 0
        for c, (getter, memo, bit) in enumerate(self._items):
            value = memo.get(getter(key))
            if value is None:
                missed |= 1 << c
            elif value:
                bits |= bit
        if missed:
            values = self._run_leaves(missed, root, budget)
            if values is None:
                return self._evaluate_original(root, budget)
            for c, value in zip((c for c in range(len(self._items)) if missed >> c & 1), values):
                getter, memo, bit = self._items[c]
                if len(memo) >= MEMO_LIMIT:
                    memo.clear()
                sub = getter(key)
                if self._account(sub):
                    memo[sub] = value
                if value:
                    bits |= bit
        return bits

    def _account(self, key: Any) -> bool:
        """Count a new memo key's bytes; False for a key too large to be worth keeping. Past the
        budget every memo is emptied: the memos hold what the states' leaves hold, and a caller who
        sends large unique states must not make them grow without bound."""
        size = _key_bytes(key)
        if size > self.memo_limit >> 4:
            return False
        if self._memo_bytes + size > self.memo_limit:
            self.clear_memos()
        self._memo_bytes += size
        return True

    def clear_memos(self) -> None:
        self._memo.clear()
        for memo in self._item_memos:
            memo.clear()
        self._memo_bytes = 0

    @property
    def memo_bytes(self) -> int:
        """About how many bytes the memo tables hold (their keys and entries)."""
        return self._memo_bytes

    def _evaluate_cel(self, root: dict[str, Any], budget: list[float] | None = None) -> int:
        """The CEL predicates' bits, without the memos: leaf variables, else the original program."""
        values = self._run_leaves(self._all_items, root, budget)
        if values is None:
            return self._evaluate_original(root, budget)
        bits = 0
        for (index, _, _), value in zip(self._cel_items, values):
            if value:
                bits |= 1 << index
        return bits

    def _charge(self, budget: list[float], size: float, items: int, predicate: str | None = None) -> None:
        """Take a program's estimated work from the step's ``budget`` (units left), before it runs:
        ``size`` units of values bound, and the repeated reads of the items (a bit mask) that nest."""
        work = size
        for c, degree in self._nested:
            if items >> c & 1:
                work += size ** degree / 4
        budget[0] -= work
        if budget[0] < 0:
            assert self.cpu_budget is not None
            what = "the CEL predicates" if predicate is None else f"predicate {predicate!r}"
            raise PredicateBudgetExceeded(
                f"evaluating {what} on this step would cost more than the CPU budget of "
                f"{self.cpu_budget * 1e3:g} ms per step (an estimated {work:.3g} units of work, about "
                f"{work * UNIT_SECONDS * 1e3:.3g} ms)", predicate=predicate)

    def _run_leaves(self, items: int, root: dict[str, Any], budget: list[float] | None = None) -> list[bool] | None:
        """The values of some CEL predicates (a bit mask over them) in one call on leaf variables.

        None when that cannot be done exactly or fails in any way: the caller then runs the
        original program, which gives today's result or error.
        """
        try:
            leaves = self._leaf_programs[items]
        except KeyError:
            if len(self._leaf_programs) >= PROGRAM_LIMIT:
                self._leaf_programs.clear()
            chosen = [c for c in range(len(self._cel_items)) if items >> c & 1]
            leaves = self._leaf_programs[items] = compile_leaves(
                [self._cel_items[c][2] for c in chosen], set().union(*(self._item_variables[c] for c in chosen)))
        if leaves is None:
            return None
        context = leaves.bind(root)
        if context is None:
            return None
        if leaves.reads_state:
            context.update(project(root, leaves.state_trie))
        if budget is not None:
            self._charge(budget, bound_units(context.values(), budget[0]), items)
        context[FUNCTION] = search
        try:
            values: list[Any] = leaves.program.execute(context)  # CEL may return any value: checked below
        except Exception:  # report it as the original expressions would
            return None
        for value in values:
            if value is not True and value is not False:
                return None
        return values

    def _evaluate_original(self, root: dict[str, Any], budget: list[float] | None = None) -> int:
        assert self._program is not None
        projected = project(root, self._trie)
        size = 0.0
        if budget is not None:
            size = work_units(projected, budget[0])
            self._charge(budget, size, self._all_items)
        projected = {**projected, FUNCTION: search}
        try:
            values = self._program.execute(projected)
        except Exception:  # find which predicate failed, and why, one at a time
            self._raise_for_culprit(projected, budget, size)
            raise
        bits = 0
        for (index, name, _), value in zip(self._cel_items, values):
            if value.__class__ is not bool:
                raise PredicateError(f"predicate {name!r} evaluates to {_shown(value)}, "
                                     "expected a bool", predicate=name)
            if value:
                bits |= 1 << index
        return bits

    def _raise_for_culprit(self, projected: Any, budget: list[float] | None = None, size: float = 0.0) -> None:
        for c, (_, name, expression) in enumerate(self._cel_items):
            if budget is not None:  # each program converts the projected state again
                self._charge(budget, size, 1 << c, name)
            try:
                cel.compile(expression).execute(projected)
            except KeyError as exc:
                field = exc.args[0] if exc.args else "?"
                where = next((root for root in ("meta", "action") if _missing_in(root, expression, projected, field)),
                             "state")
                owner = {"meta": "the run's meta", "action": "the step's action"}.get(where, "the state")
                raise PredicateError(f"predicate {name!r} ({self._written(name)}) reads field {field!r}, "
                                     f"which {owner} lacks", predicate=name, where=where) from exc
            except Exception as exc:
                raise PredicateError(f"predicate {name!r} ({self._written(name)}) cannot be evaluated: "
                                     f"{_first_line(exc)}", predicate=name) from exc

    def _written(self, name: str) -> str:
        """A predicate's CEL as the spec wrote it (what runs may be rewritten: :func:`text_actions`)."""
        return self.spec.predicates[name].cel or ""

    def is_unsafe(self, bits: int) -> bool:
        """Whether the spec's ``unsafe`` condition holds in abstract state ``bits``."""
        if self._unsafe_program is None:
            return False
        bits &= self.unsafe_mask
        cached = self._unsafe_memo.get(bits)
        if cached is None:
            value = self._unsafe_program.execute({**self.as_context(bits), FUNCTION: search})
            if value.__class__ is not bool:
                raise self.spec.error(f"'unsafe' evaluates to {_shown(value)}, expected a bool",
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


def _key_bytes(key: Any) -> int:
    """About what a memo key keeps alive: its tuples and strings (a JSON scalar is small), plus the entry.

    The number :func:`_walk_bytes` gives for ``100 + key``, got faster for the leaves keys are made of
    (this runs on every memo miss): ``sys.getsizeof`` looks a method up per call, while an ASCII
    string's size is ``getsizeof("")`` plus its length, and the common list image ``(list, (str,
    ...))`` is sized from one join of its strings.
    """
    if key.__class__ is not tuple:
        return 100 + _walk_bytes(key)
    total = 100 + 56 + 8 * len(key)  # the entry, the key's tuple
    for leaf in key:
        cls = leaf.__class__
        if cls is bool or leaf is None:
            total += 32
        elif cls is str and leaf.isascii():
            total += _EMPTY_STR + len(leaf)
        elif cls is tuple and len(leaf) == 2:
            tag, body = leaf
            if tag is list and body.__class__ is tuple and (not body or body[0].__class__ is str):
                try:  # an image's list holds exact strs or no strs at all (_cel_fields._freeze)
                    joined = "".join(body)
                except TypeError:  # strings and other values
                    joined = "\x80"
                # two tuples (56 + 16, 56 + 8 a string), the type (32), the strings
                total += 160 + (8 + _EMPTY_STR) * len(body) + len(joined) if joined.isascii() \
                    else _walk_bytes(leaf)
            elif (tag is float or tag is int) and body.__class__ is tag:
                total += 136  # a tuple of two (56 + 16), the type and the number (32 each)
            else:
                total += _walk_bytes(leaf)
        else:
            total += _walk_bytes(leaf)
    return total


def _walk_bytes(node: Any) -> int:
    """A value's tuples (56 bytes and 8 a slot), strings and bytes (their size), anything else 32 bytes."""
    total = 0
    stack = [node]
    while stack:
        node = stack.pop()
        cls = node.__class__
        if cls is tuple:
            total += 56 + 8 * len(node)
            stack.extend(node)
        elif cls is str and node.isascii():
            total += _EMPTY_STR + len(node)
        elif cls is str or cls is bytes:
            total += sys.getsizeof(node)
        else:
            total += 32
    return total


def _missing_in(root: str, expression: str, projected: Any, field: Any) -> bool:
    """Whether ``field`` is missing on one of the paths under ``root`` the expression selects."""
    for path in selected_paths(expression):
        if path[0] != root:
            continue
        node = projected.get(root)
        for key in path[1:]:
            if node.__class__ is not dict:
                break
            if key not in node:
                if key == field:
                    return True
                break
            node = node[key]
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return _cut(text.splitlines()[0]) if text else type(exc).__name__


def _shown(value: Any) -> str:
    """A value in an error message: its type and a short excerpt, never the whole input echoed."""
    return f"{type(value).__name__} {_cut(repr(value), 80)}"


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
