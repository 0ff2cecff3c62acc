"""A small LTL evaluator on finite traces, and Dwyer's pattern mappings written in it.

Independent of ``monitors/``: no automaton, no segments — formulas are evaluated by
the textbook recursion, backwards over the positions of a finite trace (LTLf).
``X`` is the *weak* next (true on the last position), so a deadline beyond the end of
a run is not missed; ``W`` is weak until (true if the left side holds to the end).

The project's finite-run reading (docs/monitors.md): a run breaks a rule on step t
when its prefix of length t+1, read as a complete run, does not satisfy the rule's
formula; the reported step is the first such t. Safety parts use Dwyer's
"after Q until R" mappings (a P inside an open scope is a violation even if R never
comes); existence and response obligations are met before R or at the end of the run.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Trace = Sequence[frozenset[str]]


class F:
    def __and__(self, other: F) -> F:
        return And(self, other)

    def __or__(self, other: F) -> F:
        return Or(self, other)

    def __invert__(self) -> F:
        return Not(self)

    def __rshift__(self, other: F) -> F:  # implication
        return Or(Not(self), other)


@dataclass(frozen=True)
class Const(F):
    value: bool


@dataclass(frozen=True)
class Atom(F):
    name: str


@dataclass(frozen=True)
class Not(F):
    arg: F


@dataclass(frozen=True)
class And(F):
    left: F
    right: F


@dataclass(frozen=True)
class Or(F):
    left: F
    right: F


@dataclass(frozen=True)
class WeakNext(F):
    arg: F


@dataclass(frozen=True)
class Until(F):  # strong: the right side must come
    left: F
    right: F


@dataclass(frozen=True)
class WeakUntil(F):
    left: F
    right: F


def always(f: F) -> F:
    return WeakUntil(f, Const(False))


def eventually(f: F) -> F:
    return Until(Const(True), f)


TRUE, FALSE = Const(True), Const(False)


def holds(f: F, trace: Trace) -> list[bool]:
    """The truth value of ``f`` at every position of ``trace`` (LTLf)."""
    n = len(trace)
    if isinstance(f, Const):
        return [f.value] * n
    if isinstance(f, Atom):
        return [f.name in step for step in trace]
    if isinstance(f, Not):
        return [not v for v in holds(f.arg, trace)]
    if isinstance(f, And):
        return [a and b for a, b in zip(holds(f.left, trace), holds(f.right, trace))]
    if isinstance(f, Or):
        return [a or b for a, b in zip(holds(f.left, trace), holds(f.right, trace))]
    if isinstance(f, WeakNext):
        arg = holds(f.arg, trace)
        return [i + 1 >= n or arg[i + 1] for i in range(n)]
    if isinstance(f, (Until, WeakUntil)):
        left, right = holds(f.left, trace), holds(f.right, trace)
        out = [False] * n
        later = isinstance(f, WeakUntil)  # the value "after the end"
        for i in reversed(range(n)):
            later = out[i] = right[i] or (left[i] and later)
        return out
    raise TypeError(f)


def first_violation(f: F, trace: Trace) -> int | None:
    """The first t whose prefix trace[0..t], as a complete run, does not satisfy ``f``."""
    return next((t for t in range(len(trace)) if not holds(f, trace[:t + 1])[0]), None)


P, S, Q, R = Atom("p"), Atom("s"), Atom("q"), Atom("r")


def within(k: int, goal: F, close: F) -> F:
    """``goal`` at one of the next k+1 steps, before ``close``: E_0 = goal ∧ ¬close,
    E_k = (goal ∧ ¬close) ∨ (¬close ∧ X E_(k-1)) with the weak X (the run may end first)."""
    f: F = goal & ~close
    for _ in range(k):
        f = (goal & ~close) | (~close & WeakNext(f))
    return f


def pattern_body(pattern: str, bound: int | None, close: F) -> F:
    """The pattern from the scope's opening step, up to ``close`` (Dwyer's "until R" forms)."""
    if pattern == "absence":
        return WeakUntil(~P, close)
    if pattern == "universality":
        return WeakUntil(P, close)
    if pattern == "existence":
        return WeakUntil(~close, P & ~close) if bound is None else within(bound, P, close)
    if pattern == "precedence":
        return WeakUntil(~P, S | close)
    if pattern == "response":
        met = WeakUntil(~close, P & ~close) if bound is None else within(bound, P, close)
        return WeakUntil(S >> met, close)
    raise ValueError(pattern)


def dwyer(pattern: str, scope: str, bound: int | None = None) -> F:
    """Dwyer's mapping of a pattern in a scope (p, s: the pattern's; q, r: the scope's)."""
    if scope == "globally":
        return pattern_body(pattern, bound, FALSE)
    if scope == "before":
        return pattern_body(pattern, bound, R)
    if scope == "after":
        return WeakUntil(~Q, Q & pattern_body(pattern, bound, FALSE))
    if scope == "between":  # every Q ∧ ¬R step opens an obligation
        return always((Q & ~R) >> pattern_body(pattern, bound, R))
    raise ValueError(scope)


def bounded_response(k: int) -> F:
    """G(s → F[0,k] p), the weak finite-run reading."""
    return always(S >> within(k, P, FALSE))


# Dwyer's own "existence between Q and R", with ◇R and the strong U, as printed. On finite
# runs it says the same as the "until R" form above (a run that never closes the scope
# leaves ¬R true to its end); the test checks that too.
DWYER_EXISTENCE_BETWEEN = always((Q & ~R & eventually(R)) >> Until(~R, P & ~R))


def letters(bits: int, names: Sequence[str] = ("p", "s", "q", "r")) -> frozenset[str]:
    return frozenset(name for i, name in enumerate(names) if bits >> i & 1)
