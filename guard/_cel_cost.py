"""What a CEL evaluation will cost, estimated before it runs (the predicates' CPU budget).

The CEL interpreter runs in native code that cannot be interrupted from Python, so a
deadline checked *after* a program returns would not bound its work. What bounds it is
known beforehand: a program converts every value it is bound to into CEL (measured here,
about 0.2 to 6 µs a value: a map entry with a string key and value is the dearest), then
evaluates, which is linear in those values unless comprehension macros nest
(``xs.all(a, xs.exists(b, a == b))`` visits |xs|² pairs).

So a predicate's *work* is, in units of one converted value:

* ``S``, the values of the fields it reads (every map key, value, list element and
  container counts one; a string value one more per 256 characters), plus
* ``S ** d / 4`` when its comprehension macros nest ``d - 1`` deep (``d >= 2``): one
  iteration costs about a quarter of a conversion.

:data:`UNIT_SECONDS` turns units into seconds of CPU, taken from the dearest value kind
measured, so the estimate errs on the side of refusing. Counting stops as soon as the
budget is passed, so the estimate's own cost is bounded by the budget too.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ._cel_fields import _mask

UNIT_SECONDS = 3e-6  # CPU seconds per unit of work (a map entry of two short strings is two units, ~6 µs)
DEFAULT_CPU_BUDGET = 0.05  # seconds of CPU the predicates of one step may cost (about 16,700 units)
_MACROS = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(")
_ROOT_READ = re.compile(r"(?<![\w.])(?:state|meta|action)(?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*")
_INDEXED = re.compile(r"\s*\[\s*[A-Za-z_][A-Za-z0-9_]*\s*\]")
_SCALARS = frozenset({int, float, bool, type(None)})
_TEXT = frozenset({str, bytes})


def comprehension_degree(expression: str) -> int:
    """1 + how many comprehension macros a read of ``state``, ``meta`` or ``action`` repeats under.

    ``state.xs.exists(x, x > 1)`` is 1 (linear: the range is read once, outside the macro);
    ``xs.exists(x, x in state.ys)`` and ``xs.all(a, state.ys.exists(b, a == b))`` are 2 (each
    iteration may walk ``ys``). A read indexed at once by a variable, ``state.objects[k].isOpen``,
    looks up one entry per iteration and does not count. String literals and comments are ignored.
    """
    masked = _mask(expression)
    opens = {m.end() - 1 for m in _MACROS.finditer(masked)}
    depth_at = [0] * (len(masked) + 1)  # macro parentheses open at each position
    stack: list[bool] = []
    depth = 0
    for i, c in enumerate(masked):
        if c == "(":
            stack.append(i in opens)
            depth += stack[-1]
        elif c == ")" and stack:
            depth -= stack.pop()
        depth_at[i + 1] = depth
    degree = 1
    for match in _ROOT_READ.finditer(masked):
        if _INDEXED.match(masked, match.end()):  # one entry per iteration, by its variable
            continue
        degree = max(degree, 1 + depth_at[match.start()])
    return degree


def work_units(value: Any, cap: float) -> float:
    """Units of work to convert ``value`` into CEL (see the module docstring); stops counting past ``cap``."""
    cls = value.__class__
    if cls in _SCALARS:
        return 1.0
    if cls in _TEXT:
        return 1.0 + len(value) // 256
    total = 0.0
    stack = [value]
    while stack:
        node = stack.pop()
        cls = node.__class__
        total += 1.0
        if cls is dict:
            total += len(node)  # the keys
            if total > cap:
                break
            stack.extend(node.values())
        elif cls is list or cls is tuple:
            stack.extend(node)
        elif cls in _TEXT:
            total += len(node) // 256
        if total > cap:
            break
    return total


def bound_units(values: Iterable[Any], cap: float) -> float:
    """Units of work of the values a program is bound to (its leaf variables): one each for the
    scalars and short strings that nearly all of them are, :func:`work_units` for the rest."""
    total = 0.0
    for value in values:
        cls = value.__class__
        if cls in _SCALARS or (cls is str and len(value) < 256):
            total += 1.0
        else:
            total += work_units(value, cap - total)
            if total > cap:
                break
    return total
