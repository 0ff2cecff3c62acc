"""Reading CEL predicates for speed: which fields they select, memo keys, leaf variables.

The machinery behind :class:`guard.predicates.PredicateSet`'s fast path (see its module
docstring for why each part is exact): a reader that finds the ``state.a.b`` and
``meta.a.b`` selections of an expression (skipping string literals and comments), tries of
selected paths, generated key functions for the memo, projections, and the rewriting of
selections into top-level leaf variables.

Paths start at a *root*: the CEL context ``{"state": ..., "meta": ..., "action": ...}``, so a
path is ``("state", "objects", "Fork")``, ``("meta", "task")`` or ``("action", "verb")`` and
one trie, one key and one projection cover the three variables.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from operator import itemgetter
from typing import Any, NamedTuple

import cel

_FULL = None  # trie marker: copy this whole subtree
_PRESENCE = "presence"  # trie marker: only whether the key is there matters (has())
_MISSING = object()
_NOT_A_MAP = object()
# A selection stops before a method or macro call: in `state.objects.size()` the map
# `objects` is needed whole, not its (absent) field `size`.
ROOTS = ("state", "meta", "action")  # the variables a predicate may read
_STATE_SELECT = re.compile(r"(?<![\w.])(state|meta|action)((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*(?![\w(]|\s+\())*)")
_HAS_OPEN = re.compile(r"(?<!\w)has\s*\(\s*$")  # has(e.f) needs a selection, not a value
_STATE_BOUND = re.compile(r"(?<![\w.])(?:state|meta|action)\s*,")  # a root as a macro's variable (or any argument)
_LITERAL_PREFIX = re.compile(r"(?<![\w])[rRbB]{1,2}$")
# Selecting a field of these fails in CEL, as selecting a missing key does.
_SCALARS = frozenset({list, str, int, float, bool, type(None), bytes})
_SELF_IMAGED = frozenset({str, bool, type(None)})  # values that are their own memo-key image
MEMO_LIMIT = 1 << 16
PROGRAM_LIMIT = 1 << 10  # leaf programs, one per set of predicates that missed


# -- reading expressions ----------------------------------------------------------

def _mask(expression: str, strings: bool = True) -> str:
    """The expression with string and bytes literals emptied (unless not ``strings``) and comments blanked.

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
            if strings:
                out[i + len(quote):stop] = " " * (stop - i - len(quote))
            i = stop + len(quote)
        else:
            i += 1
    return "".join(out)


def without_comments(expression: str) -> str:
    """The expression with its ``//`` comments blanked and its ends stripped: a part that can be put
    beside others (``a && b``, ``!(a)``) without a comment swallowing what follows it."""
    return _mask(expression, strings=False).strip()


def _selections(masked: str) -> list[tuple[re.Match[str], tuple[str, ...]]]:
    return [(m, (m.group(1),) + tuple(part.strip() for part in m.group(2).split(".") if part.strip()))
            for m in _STATE_SELECT.finditer(masked)]


# `.exists(action, …)`, `.all(i, action, …)`: a macro binds the name `action` to something else
_ACTION_BOUND = re.compile(r"\.\s*[A-Za-z_]\w*\s*\(\s*(?:[A-Za-z_]\w*\s*,\s*)?action\s*,")


def text_actions(expression: str) -> str:
    """The expression with every bare ``action`` read as its text: ``action.name``.

    ``action`` is a map (:mod:`guard.actions`), and a map never equals a string in CEL, so
    ``action == "find Bowl"`` would be false on every step. The CEL package has no custom
    types (a value is a map or a string, never both) and no operator overloads, so the
    expression is rewritten once, at compile time: ``action`` not followed by a field
    selection becomes ``action.name``, whatever the form around it — ``==``, ``!=``,
    ``in [...]``, ``"x" == action``, ``action.startsWith("find")``, ``size(action)``. Nothing
    a bare ``action`` could say as a map was worth keeping (its keys are always the same
    ten), and the step's cost goes down: the fast path keys the memo on one string leaf
    instead of the whole map. ``action.verb``, ``action.tool`` and every other selection
    are left as they are. An expression where a macro binds the name ``action`` itself
    (``list.exists(action, …)``) is left whole: there ``action`` is not the step's.
    """
    masked = _mask(expression)
    if "action" not in masked or _ACTION_BOUND.search(masked):
        return expression
    pieces, last = [], 0
    for match, path in _selections(masked):
        end = match.end()
        after = masked[end:].lstrip()
        if path != ("action",) or masked[end:end + 1].isidentifier() or masked[end:end + 1].isdigit() \
                or masked[:match.start()].rstrip().endswith("."):  # `actions`, `x.action`: other names
            continue
        if after.startswith("[") or (after.startswith(".") and after[1:].lstrip().startswith("?")):
            continue  # `action["verb"]`, `action.?verb`: reads of the map's fields, as a selection is
        pieces += [expression[last:end], ".name"]
        last = end
    return "".join(pieces) + expression[last:]


def selected_paths(expression: str) -> list[tuple[str, ...]]:
    """Field paths from the root (``state``, ``meta`` or ``action`` first) that an expression selects (over-approximated)."""
    return [path for _, path in _selections(_mask(expression))]


def _plan_leaves(expressions: list[str]) -> tuple[list[str], dict[tuple[str, ...], str],
                                                   list[tuple[str, ...]], list[tuple[str, ...]]]:
    """Rewrite each ``state.a.b`` (or ``meta.a.b``, ``action.a``) selection into a variable bound to its value.

    Returns the rewritten expressions, the variable of each path, and the paths still
    read on their root whole (``kept``) or for presence only (``presence``). Kept as they
    are: the argument of ``has()`` (it needs a selection), a bare root, and every
    selection of an expression that uses a root as an argument or macro variable
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
            if shadowed or len(path) == 1:
                kept.append(path)
            elif _HAS_OPEN.search(before):
                presence.append(path)
            else:
                name = variables.setdefault(path, f"{prefix}{len(variables)}")
                pieces += [expression[last:match.start()], name]
                last = match.end()
        rewritten.append("".join(pieces) + expression[last:])
    return rewritten, variables, kept, presence


def list_program(expressions: list[str]) -> Any:
    # the newline ends a trailing // comment before the closing parenthesis
    return cel.compile("[" + ", ".join(f"({expression}\n)" for expression in expressions) + "]")


# -- tries, keys, projections -------------------------------------------------------

def build_trie(paths: list[tuple[str, ...]],
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


def walk_key(node: Any, trie: dict[str, Any] | None, out: list[Any]) -> None:
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
            walk_key(child, sub, out)


def project(node: Any, trie: dict[str, Any] | None) -> Any:
    if trie is _FULL or node.__class__ is not dict:
        return node
    out = {}
    for key, sub in trie.items():
        if key in node:
            out[key] = None if sub is _PRESENCE else project(node[key], sub)
    return out


def _compile_function(lines: list[str], name: str, scope: dict[str, Any]) -> Callable[..., Any] | None:
    """Define a generated function (None when it cannot be, e.g. nested too deeply)."""
    try:
        exec(compile("\n".join(lines), f"<forewarn {name}>", "exec"), scope)
    except (SyntaxError, RecursionError, MemoryError):
        return None
    function: Callable[..., Any] = scope[name]
    return function


def compile_key(trie: dict[str, Any] | None, cap: list[float] | None = None,
                refuse: Callable[[], Any] | None = None) -> Callable[[Any], tuple[Any, ...] | None] | None:
    """The memo key of a state as straight-line code: what ``walk_key`` gives, or None.

    With ``cap`` (a one-element list, read at each call) and ``refuse``: a list or map leaf with
    more entries than ``cap[0]`` is not imaged; ``refuse()`` is called instead (it raises).

    None when a selected field is missing or a map on the way is not a dict; the
    caller then walks the trie with ``walk_key`` (same leaf order, so the same keys).
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
    if cap is not None:  # checked inline, so that a small list costs no call more
        for v in leaves:
            lines.append(f"    if {v}.__class__ in _sized and len({v}) > _cap[0]:")
            lines.append("        _refuse()")
    images = ", ".join(f"{v} if {v}.__class__ in _self else _freeze({v})" for v in leaves)
    lines.append(f"    return ({images},)")
    return _compile_function(lines, "key", {"_dict": dict, "_self": _SELF_IMAGED, "_freeze": _freeze,
                                            "_sized": frozenset({dict, list, tuple}), "_cap": cap,
                                            "_refuse": refuse})


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


class Leaves(NamedTuple):
    """Some CEL predicates as one list program on leaf variables."""

    program: Any
    bind: Callable[[Any], dict[str, Any] | None]
    reads_state: bool  # whether the program still reads a root (projected by state_trie, from the root)
    state_trie: dict[str, Any] | None


def compile_leaves(expressions: list[str], variables: set[str]) -> Leaves | None:
    """The expressions rewritten onto leaf variables, or None when that is not safe."""
    rewritten, leaves, kept, presence = _plan_leaves(expressions)
    try:
        program = list_program(rewritten)
    except ValueError:  # cannot happen for expressions that parse; then stay with the original
        return None
    reads_state = bool(kept or presence)
    # a check that the rewriting left no reference behind: only the variables it bound are new
    allowed = (variables - set(ROOTS)) | set(leaves.values()) | {path[0] for path in kept + presence}
    binder = _compile_binder(leaves)
    if binder is None or not set(program.variables()) <= allowed:
        return None
    return Leaves(program, binder, reads_state, build_trie(kept, presence))


def sub_key_getters(trie: dict[str, Any], paths: list[list[tuple[str, ...]]]) -> list[Callable[[Any], Any]]:
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
