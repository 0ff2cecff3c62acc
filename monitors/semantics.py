"""The finite-run meaning of every rule, evaluated directly on a whole trace.

This is the executable definition the monitors are tested against: each function
takes a run as a list of per-step truth values and returns the index of the step on
which the rule is first known to be broken, or ``None``. It works on index arithmetic
over the whole trace, not on automaton states.
"""
from __future__ import annotations

from collections.abc import Sequence

Signal = Sequence[bool]


def bounded_response_violation(trigger: Signal, response: Signal, within: int, *,
                               restart: bool = False) -> int | None:
    """First step at which ``G(trigger → F[0,K] response)`` is broken on a finite run.

    A trigger at t is broken at step t+K if no response holds in t..t+K (and t+K is a
    step of the run). With ``restart``, a later trigger within (t, t+K] replaces t's
    deadline by its own.
    """
    n = len(trigger)
    worst: int | None = None
    for t in range(n):
        if not trigger[t] or t + within >= n:
            continue
        window = range(t, t + within + 1)
        if any(response[u] for u in window):
            continue
        if restart and any(trigger[u] for u in range(t + 1, t + within + 1)):
            continue
        worst = t + within if worst is None else min(worst, t + within)
    return worst


def segments(n: int, scope: str, q: Signal | None, r: Signal | None) -> list[tuple[int, int, bool]]:
    """The scope's segments ``(start, end, closed)``: steps start..end-1, closed by R at end.

    ``between`` segments overlap: one per Q ∧ ¬R step, each up to the next R.
    """
    if scope == "globally":
        return [(0, n, False)]
    if scope == "before":
        assert r is not None
        first = next((t for t in range(n) if r[t]), None)
        return [(0, n, False)] if first is None else [(0, first, True)]
    if scope == "after":
        assert q is not None
        first = next((t for t in range(n) if q[t]), None)
        return [] if first is None else [(first, n, False)]
    assert q is not None and r is not None
    # Dwyer: every Q ∧ ¬R step opens its own segment, also inside an open one
    out = []
    for t in range(n):
        if q[t] and not r[t]:
            end = next((u for u in range(t + 1, n) if r[u]), None)
            out.append((t, n, False) if end is None else (t, end, True))
    return out


def pattern_violation(pattern: str, p: Signal, *, s: Signal | None = None, within: int | None = None,
                      scope: str = "globally", q: Signal | None = None, r: Signal | None = None) -> int | None:
    """First step at which a Dwyer pattern in its scope is broken on a finite run."""
    found: list[int] = []
    for a, b, closed in segments(len(p), scope, q, r):
        v = _in_segment(pattern, p, s, within, a, b, closed)
        if v is not None:
            found.append(v)
    return min(found) if found else None


def _in_segment(pattern: str, p: Signal, s: Signal | None, within: int | None, a: int, b: int,
                closed: bool) -> int | None:
    if pattern == "absence":
        return next((t for t in range(a, b) if p[t]), None)
    if pattern == "universality":
        return next((t for t in range(a, b) if not p[t]), None)
    if pattern == "existence":
        limit = b if within is None else min(b, a + within + 1)
        if any(p[t] for t in range(a, limit)):
            return None
        if within is not None and a + within < b:
            return a + within
        return b if closed else None
    assert s is not None
    if pattern == "precedence":
        return next((t for t in range(a, b) if p[t] and not any(s[u] for u in range(a, t + 1))), None)
    if pattern == "response":
        found = []
        for t in range(a, b):
            if not s[t]:
                continue
            limit = b if within is None else min(b, t + within + 1)
            if any(p[u] for u in range(t, limit)):
                continue
            if within is not None and t + within < b:
                found.append(t + within)
            elif closed:
                found.append(b)
        return min(found) if found else None
    raise ValueError(f"unknown pattern {pattern!r}")  # a bug: Pattern is an enum and every member is handled above
