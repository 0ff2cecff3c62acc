"""The MDP beside the chain: abstract state × action class → next abstract state (docs/shield.md).

The chain averages over whatever the agent did next; the MDP keeps the agent's choices apart.
Its states are the chain's (same indices, same ``end`` and unsafe states); from each state, one
*choice* per action class the runs took there (:func:`guard.actions.action_class`, as
``learning.memory.action_class`` defines it), plus

* ``(end)``: the run ended there (observed): a choice to ``end`` with probability 1;
* ``(any)``: for a state no run left by an action (seen only as a run's last state, or added as an
  unsafe state the spec allows), the chain's own row; for an absorbing state, its self-loop.

Stored beside each choice: its risk ``Q(s, a) = Σ_j P(s, a, j) · Pmin(j)`` — the probability of the
guarded property's violation after taking ``a`` from ``s`` and then the safest continuation — with a
confidence interval and the times it was taken; beside each state ``Pmin`` and ``Pmax`` (Storm's MDP
engine). ``Pmin(s) = min_a Q(s, a)`` (Bellman), so no choice is below ``p_min``.

This module is the load side (plain numpy, no scipy, no Storm): reading the model file's ``mdp``
section and precomputing per state what a decision carries (:class:`Advice`). Learning it is
:mod:`guard.mdp_learn`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ModelFileError
from .actions import ActionClass, action_class, action_view
from .decision import Alternative

END_CHOICE = "(end)"  # the run ended here
ANY = "(any)"  # no action observed from here: the chain's row (or an absorbing self-loop)
_TOLERANCE = 1e-9


@dataclass
class LearnedMDP:
    """An MDP over the chain's ``n`` states, choices in CSR form.

    ``choices[s]:choices[s + 1]`` are state ``s``'s choices; choice ``c`` has class
    ``classes[choice_class[c]]`` and the row ``indptr[c]:indptr[c + 1]`` of ``indices`` (targets),
    ``probabilities`` (smoothed) and ``counts`` (observed). ``pmin``/``pmax`` per state and
    ``risk``/``risk_low``/``risk_high``/``visits`` per choice are for ``formula`` (the first guarded
    property; None where it is not an unbounded violation property, and then no advice).
    """

    classes: tuple[str, ...]
    action_class: ActionClass
    choices: np.ndarray
    choice_class: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    probabilities: np.ndarray
    counts: np.ndarray
    formula: str | None = None
    pmin: np.ndarray | None = None
    pmax: np.ndarray | None = None
    risk: np.ndarray | None = None
    risk_low: np.ndarray | None = None
    risk_high: np.ndarray | None = None
    delta: float | None = None

    @property
    def states(self) -> int:
        return len(self.choices) - 1

    @property
    def visits(self) -> np.ndarray:
        """Per choice, the times the runs took it."""
        return np.add.reduceat(self.counts, self.indptr[:-1]) if len(self.counts) else np.zeros(0)

    def choice_names(self, state: int) -> list[str]:
        return [self.classes[k] for k in self.choice_class[self.choices[state]:self.choices[state + 1]].tolist()]


def mdp_document(mdp: LearnedMDP) -> dict[str, Any]:
    """The model file's ``mdp`` section (docs/model-file.md)."""
    def floats(a: np.ndarray | None) -> list[float] | None:
        return None if a is None else a.tolist()

    return {"classes": list(mdp.classes), "action_class": mdp.action_class, "choices": mdp.choices.tolist(),
            "choice_class": mdp.choice_class.tolist(), "indptr": mdp.indptr.tolist(),
            "indices": mdp.indices.tolist(), "probabilities": mdp.probabilities.tolist(),
            "counts": mdp.counts.tolist(), "formula": mdp.formula, "pmin": floats(mdp.pmin),
            "pmax": floats(mdp.pmax), "risk": floats(mdp.risk), "risk_low": floats(mdp.risk_low),
            "risk_high": floats(mdp.risk_high), "delta": mdp.delta}


def read_mdp(entry: Any, n: int, source: str) -> LearnedMDP:
    """The ``mdp`` section of a model file of ``n`` states, checked (a ModelFileError names the field)."""
    def bad(message: str) -> ModelFileError:
        return ModelFileError(f"{source}: mdp.{message}")

    choices = np.array(entry.choices, dtype=np.int64)
    choice_class = np.array(entry.choice_class, dtype=np.int64)
    indptr = np.array(entry.indptr, dtype=np.int64)
    indices = np.array(entry.indices, dtype=np.int64)
    probabilities = np.array(entry.probabilities, dtype=float)
    counts = np.array(entry.counts, dtype=float)
    m = len(choice_class)
    if len(choices) != n + 1 or choices[0] != 0 or choices[-1] != m or np.any(np.diff(choices) < 1):
        raise bad(f"choices: must give {n + 1} ascending offsets from 0 to {m}, each state at least one choice")
    if len(indptr) != m + 1 or indptr[0] != 0 or indptr[-1] != len(indices) or np.any(np.diff(indptr) < 1) \
            or len(probabilities) != len(indices) or len(counts) != len(indices):
        raise bad("indptr/indices/probabilities/counts: inconsistent lengths (every choice needs a target)")
    if m and (choice_class.min() < 0 or choice_class.max() >= len(entry.classes)):
        raise bad(f"choice_class: an index is outside 0..{len(entry.classes) - 1}")
    if len(indices) and (indices.min() < 0 or indices.max() >= n):
        raise bad(f"indices: a target is outside 0..{n - 1}")
    if np.any(~np.isfinite(probabilities)) or np.any(probabilities <= 0) or np.any(probabilities > 1 + _TOLERANCE):
        raise bad("probabilities: must lie in (0, 1]")
    if np.any(~np.isfinite(counts)) or np.any(counts < 0):
        raise bad("counts: must be finite and non-negative")
    sums = np.add.reduceat(probabilities, indptr[:-1]) if m else np.zeros(0)
    off = np.flatnonzero(np.abs(sums - 1.0) > 1e-9)
    if off.size:
        raise bad(f"probabilities: choice {int(off[0])} sums to {float(sums[off[0]])!r}, not 1")

    def vector(name: str, size: int) -> np.ndarray | None:
        values = getattr(entry, name)
        if values is None:
            return None
        array = np.array(values, dtype=float)
        if array.shape != (size,) or np.any(~np.isfinite(array)) or np.any(array < -_TOLERANCE) \
                or np.any(array > 1 + _TOLERANCE):
            raise bad(f"{name}: must give {size} probabilities in [0, 1]")
        return array

    pmin, pmax = vector("pmin", n), vector("pmax", n)
    risk, low, high = vector("risk", m), vector("risk_low", m), vector("risk_high", m)
    if (risk is None) != (pmin is None) or (low is None) != (high is None) or (low is not None and risk is None):
        raise bad("risk, pmin (and risk_low with risk_high) come together")
    if pmin is not None and pmax is not None and np.any(pmin > pmax + 1e-6):
        raise bad("pmin: above pmax in some state")
    if risk is not None and low is not None and high is not None \
            and np.any((low > risk + 1e-6) | (risk > high + 1e-6)):
        raise bad("risk_low/risk_high: an interval does not contain its risk")
    return LearnedMDP(tuple(entry.classes), entry.action_class, choices, choice_class, indptr, indices,
                      probabilities, counts, entry.formula, pmin, pmax, risk, low, high, entry.delta)


class Advice:
    """Per state, what a decision says of the next move, precomputed when a guard loads.

    ``alternatives(s)``: the choices from ``s`` ordered by risk (then by name), ``p_min(s)``, and
    ``risk(s, cls)`` for a proposed action's class (None: the runs never took it from ``s``).
    """

    def __init__(self, mdp: LearnedMDP) -> None:
        if mdp.risk is None or mdp.pmin is None:
            raise ValueError("an MDP without risks gives no advice")
        self.action_class: ActionClass = mdp.action_class
        self.formula = mdp.formula
        risk = mdp.risk.tolist()
        low = mdp.risk_low.tolist() if mdp.risk_low is not None else [None] * len(risk)
        high = mdp.risk_high.tolist() if mdp.risk_high is not None else [None] * len(risk)
        visits = np.rint(mdp.visits).astype(np.int64).tolist()
        names = [mdp.classes[k] for k in mdp.choice_class.tolist()]
        starts = mdp.choices.tolist()
        self._p_min: list[float] = mdp.pmin.tolist()
        self._alternatives: list[tuple[Alternative, ...]] = []
        self._by_class: list[dict[str, Alternative]] = []
        for s in range(mdp.states):
            here = [Alternative(names[c], risk[c], low[c], high[c], visits[c]) for c in range(starts[s], starts[s + 1])
                    if names[c] != ANY]
            here.sort(key=lambda a: (a.risk, a.action_class))
            self._alternatives.append(tuple(here))
            self._by_class.append({a.action_class: a for a in here})
        self._class_cache: dict[str, str] = {}

    def p_min(self, state: int | None) -> float | None:
        return None if state is None or state >= len(self._p_min) else self._p_min[state]

    def alternatives(self, state: int | None) -> tuple[Alternative, ...]:
        return () if state is None or state >= len(self._alternatives) else self._alternatives[state]

    def class_of(self, action: Any) -> str:
        """An action's class, as the MDP was learned with."""
        if self.action_class == "verb" and action.__class__ is dict and action.get("tool").__class__ is str:
            tool: str = action["tool"]  # a tool call's verb is its name: no view of its arguments needed
            return tool
        if action.__class__ is str:
            found = self._class_cache.get(action)
            if found is None and len(self._class_cache) < 4096:
                found = self._class_cache[action] = action_class(action_view(action), self.action_class)
            if found is not None:
                return found
        return action_class(action_view(action), self.action_class)

    def option(self, state: int | None, cls: str) -> Alternative | None:
        """The choice of class ``cls`` from ``state`` (None: never taken there)."""
        if state is None or state >= len(self._by_class):
            return None
        return self._by_class[state].get(cls)

    def under(self, state: int | None, theta: float) -> tuple[Alternative, ...]:
        """The choices from ``state`` whose risk is under ``theta``, safest first."""
        return tuple(a for a in self.alternatives(state) if a.risk < theta)


def percent(p: float) -> str:
    """A risk in words: whole percents, one decimal where they would say 0 % or 100 % of what is neither."""
    text = f"{p:.0%}"
    return f"{p:.1%}" if (text in ("0%", "100%")) and 0.0 < p < 1.0 else text


def advice_words(proposed: Alternative | None, alternatives: Sequence[Alternative], *, limit: int = 3) -> str:
    """"`delete_file` from here leads to a violation in 62 % of runs [48 %, 75 %]; `list_files` keeps it
    at 3 %" — the proposed call's risk and the safest other moves, in words."""
    def span(a: Alternative) -> str:
        return "" if a.ci_low is None or a.ci_high is None else f" [{percent(a.ci_low)}, {percent(a.ci_high)}]"

    parts = []
    if proposed is not None:
        parts.append(f"`{proposed.action_class}` from here leads to a violation in {percent(proposed.risk)} of runs"
                     f"{span(proposed)} even if every later step is the safest")
    others = [a for a in alternatives
              if proposed is None or (a.action_class != proposed.action_class and a.risk < proposed.risk)][:limit]
    if others:
        parts.append(("safer" if proposed is not None else "safest") + " next moves: " + ", ".join(
            f"`{a.action_class}` keeps it at {percent(a.risk)}{span(a)}" if a.action_class != END_CHOICE
            else f"ending the run here keeps it at {percent(a.risk)}" for a in others))
    return "; ".join(parts) + "." if parts else ""
