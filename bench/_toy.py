"""The toy domain, written by hand, and its exact reachability (Fractions, independent of Storm).

Two predicates, ``a`` (bit 0) and ``b`` (bit 1); unsafe when both hold, so the abstract states
are NONE=0, A=1, B=2 and AB=3 (unsafe). The benchmarks' known chains (``_coverage``,
``_pac_sim``) are drawn over it, and the tests use it throughout (``tests/_support.py``
re-exports it).
"""
from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

NONE, A, B, AB = 0, 1, 2, 3

# Line numbers matter: test_spec checks errors against them.
TOY_SPEC = """\
name: toy
predicates:
  a: 'state.a'
  b:
    cel: 'state.b > 2'
    description: b is high
unsafe: 'a && b'
learning:
  alpha: 0.1
  epsilon: 0.1
  delta: 0.05
guard:
  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}
  unseen_state: ask_human
"""

Row = dict[int, Fraction]


def toy_state(bits: int, **extra: Any) -> dict[str, Any]:
    """A concrete toy state whose abstract state is ``bits``."""
    return {"a": bool(bits & 1), "b": 5 if bits & 2 else 0, **extra}


def can_reach(rows: Mapping[int, Row], targets: set[int]) -> set[int]:
    """States from which some target is reachable with positive probability."""
    reach = set(targets)
    changed = True
    while changed:
        changed = False
        for i, row in rows.items():
            if i not in reach and any(j in reach for j, p in row.items() if p > 0):
                reach.add(i)
                changed = True
    return reach


def solve_fractions(matrix: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction]:
    """Gauss-Jordan elimination over the rationals (the matrix must be regular)."""
    n = len(rhs)
    m = [list(row) + [b] for row, b in zip(matrix, rhs)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if m[r][col] != 0)
        m[col], m[pivot] = m[pivot], m[col]
        lead = m[col][col]
        m[col] = [v / lead for v in m[col]]
        for r in range(n):
            if r != col and m[r][col] != 0:
                factor = m[r][col]
                m[r] = [v - factor * w for v, w in zip(m[r], m[col])]
    return [m[r][n] for r in range(n)]


def reach_probabilities(rows: Mapping[int, Row], targets: set[int]) -> dict[int, Fraction]:
    """Exact P(F target) for every state: 1 on targets, 0 where targets are unreachable,
    and the unique solution of x = P·x on the rest."""
    reach = can_reach(rows, targets)
    maybe = sorted(i for i in rows if i in reach and i not in targets)
    position = {s: k for k, s in enumerate(maybe)}
    matrix = [[Fraction(int(r == c)) for c in range(len(maybe))] for r in range(len(maybe))]
    rhs = [Fraction(0)] * len(maybe)
    for s in maybe:
        for j, p in rows[s].items():
            if j in targets:
                rhs[position[s]] += p
            elif j in position:
                matrix[position[s]][position[j]] -= p
    solution = solve_fractions(matrix, rhs)
    values = {i: Fraction(int(i in targets)) for i in rows}
    for s, v in zip(maybe, solution):
        values[s] = v
    return values
