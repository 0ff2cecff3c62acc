"""Run time: a guard holds a checked model; a session follows one agent run.

A decision is: evaluate the predicates, advance the monitors, look up the cached values
of the product state, apply the policy. No solver call on this path; decisions are
cached per product state because the model, and so the answer, is fixed.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from threading import Lock
from typing import Any, NamedTuple

import numpy as np

from ..errors import PredicateBudgetExceeded
from ..monitors.base import VIOL
from ._cel_cost import DEFAULT_CPU_BUDGET
from ._lazy_decision import LazyDecision, PropertyRow
from .chain import count_totals
from .decision import Decision, PropertyValue
from .mdp import Advice
from .memory import build_memory
from .mixture_posterior import Belief
from .model import GuardModel
from .monitoring import build_monitors
from .nearest import back_off, nearest
from .policy import Policy, act
from .predicates import PredicateSet, PythonPredicate
from .spec import Action, Meaning, Trigger
from .telemetry import record_decision
from .thresholds import start_risk, supported_increase, warn_initial_crossings

__all__ = ["Accepted", "Decision", "PropertyValue", "Guard", "Session", "StepRecord"]

MonitorStates = tuple[int, ...]


class _StateWords(NamedTuple):
    abstract: dict[str, bool]  # shared by the decisions made in the state: never mutated
    monitor_words: dict[str, str]
    violated: list[str]
    unsafe_now: bool


class Guard:
    """A loaded model plus a policy; makes sessions.

    Args:
        model: a learned and checked model.
        policy: overrides the spec's thresholds and unseen-state action (for every
            property that has no thresholds of its own).
        python_predicates: predicates defined in code, by name.
        predicates: compiled predicates of the same spec to share (the members of a bundle
            share one set, and so its memo).
        cpu_budget: seconds of CPU the CEL predicates of one step may cost, estimated before
            they run (``guard/_cel_cost.py``); a step past it is decided as an unseen state.
            None: unbounded. Applies to predicates built here (shared ones keep theirs).
        near_states: how many predicates away an unseen abstract state looks for seen ones to be judged
            from (guard/nearest.py); None: the spec's ``guard.near_states``.

    Attributes:
        start_warning: whether the guard's first session under the level trigger warns
            (:class:`~forewarn.errors.ThresholdWarning`) when a threshold is already crossed where
            runs start (:mod:`guard.thresholds`); :meth:`load` sets it, the constructor does not.
    """

    # set by load(): not at load, where the guard's trigger is not known yet (the LangChain middleware
    # sets increase), but at the first session that decides under the level trigger, once per guard
    start_warning = False

    def __init__(self, model: GuardModel, *, policy: Policy | None = None,
                 python_predicates: Mapping[str, PythonPredicate] | None = None,
                 predicates: PredicateSet | None = None, cpu_budget: float | None = DEFAULT_CPU_BUDGET,
                 near_states: int | None = None) -> None:
        self.model = model
        self.policy = policy or Policy.from_settings(model.spec.guard)
        self._rules = self._rules_of(self.policy)
        if predicates is None:
            predicates = PredicateSet(model.spec, python_predicates)
            predicates.cpu_budget = cpu_budget
        self.predicates = predicates
        self.monitors = build_monitors(model.spec)
        # learning.memory (guard/memory.py) rides along as one more automaton state after the monitors'
        self.memory = build_memory(model.spec.learning.memory, self.predicates.width, model.dtmc.actions)
        self.property = model.outcome.formula
        self._index = model.dtmc.product_index()
        self._fallback: dict[tuple[int, MonitorStates], int] = {}
        self._columns = [(p.definition, p.outcome.formula, p.outcome.values.tolist(),
                          None if p.outcome.lower is None else p.outcome.lower.tolist(),
                          None if p.outcome.upper is None else p.outcome.upper.tolist(),
                          None if p.ci_low is None else p.ci_low.tolist(),
                          None if p.ci_high is None else p.ci_high.tolist())
                         for p in model.properties]
        self._visits = model.visits.tolist()
        self._size = len(self._visits)  # the chain's states; history fallbacks are appended past them
        self._confidence = 1.0 - model.intervals.delta if model.intervals is not None else None
        self.start_risk = start_risk(model)  # per property: what a session's first step is compared with
        self._decisions: dict[tuple[Any, ...], Decision] = {}
        # with learning.memory: decisions by what they are made of (bits, monitor states, chain index), which
        # memory states that differ only where the chain does not look — histories it never saw — share
        self._by_index: dict[tuple[Any, ...], Decision] = {}
        self._words: dict[tuple[int, MonitorStates], _StateWords] = {}  # by (bits, monitor states)
        self._origin: tuple[str | None, str | None, bool, str] = (None, None, False, "")  # see with_origin
        self.kinds = model.kinds  # learning.kinds: sessions weigh the kinds by their posterior
        # learning.mdp: per state, the next moves safest first and p_min (docs/shield.md)
        self.advice = Advice(model.mdp) if model.mdp is not None and model.mdp.risk is not None else None
        if self.memory is not None:
            self._add_history_fallback()
        # an unseen abstract state backs off to the nearest seen ones (guard/nearest.py), found on first sight
        reach = model.spec.guard.near_states if near_states is None else near_states
        self._near_states = reach if self.kinds is None else 0
        self._seen = self._seen_states() if self._near_states else {}
        self._near: dict[tuple[int, MonitorStates], int | None] = {}
        self._near_note: dict[int, tuple[int, int]] = {}  # appended entry → (distance, neighbours)
        self._near_lock = Lock()

    def _add_history_fallback(self) -> None:
        """Entries for a history the training runs never showed, from the histories of the same
        (predicate bits, monitor states) that they did show: the visit-weighted mean of their
        values and of Storm's bounds (which bound that mean), the widest of their confidence
        intervals (which contains it), and their visits summed.

        They are appended to the columns, so such a state has an index past the model's.
        """
        mask = (1 << len(self.model.dtmc.predicates)) - 1
        visits = count_totals(self.model.dtmc)
        groups: dict[tuple[int, MonitorStates], list[int]] = {}
        for (bits, q), i in self._index.items():
            groups.setdefault((bits & mask, q), []).append(i)
        for key, members in groups.items():
            weight = visits[members] if visits[members].sum() > 0 else np.ones(len(members))
            weight = weight / weight.sum()
            self._fallback[key] = len(self._visits)
            self._visits.append(sum(self._visits[i] for i in members))
            for _, _, column, lower, upper, low, high in self._columns:
                for col in (column, lower, upper):
                    if col is not None:
                        col.append(float(np.dot(weight, [col[i] for i in members])))
                if low is not None:
                    low.append(min(low[i] for i in members))
                if high is not None:
                    high.append(max(high[i] for i in members))

    def _seen_states(self) -> dict[MonitorStates, tuple[list[int], list[int]]]:
        """Per monitor states, the safe abstract states the runs left at least once, and their entries."""
        mask = (1 << len(self.model.dtmc.predicates)) - 1
        seen: dict[MonitorStates, tuple[list[int], list[int]]] = {}
        for (bits, q), i in (self._index if self.memory is None else self._fallback).items():
            if self._visits[i] > 0 and not self.predicates.is_unsafe(bits & mask) and VIOL not in q:
                group = seen.setdefault(q, ([], []))
                group[0].append(bits & mask)
                group[1].append(i)
        return seen

    def _near_index(self, bits: int, q: MonitorStates) -> int | None:
        """The entry of an unseen abstract state, backed off to its nearest seen states (appended on first
        sight, as a history fallback is at load); None where none is within ``near_states`` predicates."""
        key = (bits, q)
        with self._near_lock:  # sessions on other threads may meet the same state: one entry each
            if key in self._near:
                return self._near[key]
            index = None
            seen = self._seen.get(q)
            if seen is not None and not self.predicates.is_unsafe(bits) and VIOL not in q:
                distance, near = nearest(bits, seen[0], self._near_states)
                if near:
                    index = self._append_near([seen[1][p] for p in near])
                    self._near_note[index] = (distance, len(near))
            self._near[key] = index
        return index

    def _append_near(self, members: list[int]) -> int:
        visits = [self._visits[i] for i in members]
        index = len(self._visits)
        for _, _, column, lower, upper, low, high in self._columns:
            near = back_off([column[i] for i in members], visits, None if low is None else [low[i] for i in members],
                            None if high is None else [high[i] for i in members])
            column.append(near.value)
            for bound in (lower, upper):  # Storm's bounds: a mean of bounds bounds the mean
                if bound is not None:
                    bound.append(back_off([bound[i] for i in members], visits).value)
            if low is not None and near.low is not None:
                low.append(near.low)
            if high is not None and near.high is not None:
                high.append(near.high)
        self._visits.append(sum(visits))
        return index

    @classmethod
    def load(cls, path: str | Path, *, trusted_keys: Any = None, **options: Any) -> Guard:
        """Load a model file written by ``forewarn learn`` (validated, and its signature checked against
        ``trusted_keys`` when given or set in the environment; see :meth:`GuardModel.load`).

        Its first session under the level trigger warns (:class:`~forewarn.errors.ThresholdWarning`)
        when a threshold is already crossed in an initial state (see :mod:`guard.thresholds`); loading
        does not, since the guard may go where another trigger applies (the LangChain middleware).
        """
        guard = cls(GuardModel.load(path, trusted_keys=trusted_keys), **options)
        guard.start_warning = True
        return guard

    def session(self, policy: Policy | None = None, *, metadata: Mapping[str, Any] | None = None) -> Session:
        """A new session for one agent run.

        Args:
            policy: overrides the guard's for this session alone.
            metadata: the run's context, which predicates read as ``meta``.

        Warns (:class:`~forewarn.errors.ThresholdWarning`), for a guard of :meth:`load` and once per
        guard, when this is its first session under the level trigger and a threshold is already
        crossed where runs start: the session's first steps will all be acted on.
        """
        guard = self if policy is None else self.with_policy(policy)
        if self.start_warning and guard.policy.trigger is not Trigger.INCREASE:
            self.start_warning = False
            warn_initial_crossings(guard.model, guard.policy, stacklevel=2)
        return Session(guard, metadata=metadata)

    def for_metadata(self, metadata: Mapping[str, Any] | None) -> Guard:
        """The guard that decides for a run with this metadata: this one (a bundle picks a member)."""
        return self

    def with_policy(self, policy: Policy) -> Guard:
        """The same model under another policy (shares predicates, monitors and values)."""
        clone = object.__new__(Guard)
        clone.__dict__.update(self.__dict__)
        clone.policy = policy
        clone._rules = clone._rules_of(policy)
        clone._decisions = {}
        clone._by_index = {}
        return clone

    def with_origin(self, member: str | None, group: str | None, fallback: bool, note: str = "") -> Guard:
        """The same guard whose decisions name the bundle member that took them (``note`` ends their message)."""
        clone = self.with_policy(self.policy)
        clone._origin = (member, group, fallback, note)
        return clone

    @property
    def member(self) -> str | None:
        """The bundle member this guard decides as; ``None`` for a single model or the pooled one standing in."""
        member, _, fallback, _ = self._origin
        return None if fallback else member

    def _rules_of(self, policy: Policy) -> list[list[tuple[Action, float]]]:
        """Per property, what :func:`~guard.policy.act` reads: its own thresholds', else the policy's."""
        return [(policy.thresholds if p.definition.thresholds is None else p.definition.thresholds).items()
                for p in self.model.properties]

    # -- monitors -------------------------------------------------------------------

    def first_monitor_states(self, bits: int, action: Any = None) -> MonitorStates:
        """Each monitor's state after a run's first abstract state (then the memory's, with learning.memory,
        which may remember the step's ``action``)."""
        q = tuple(m.step(m.initial, bits) for m in self.monitors) if self.monitors else ()
        return q if self.memory is None else q + (self.memory.step(self.memory.initial, bits, action),)

    def next_monitor_states(self, q: MonitorStates, bits: int, action: Any = None) -> MonitorStates:
        nxt = tuple(m.step(qk, bits) for m, qk in zip(self.monitors, q)) if self.monitors else ()  # () costs no generator
        return nxt if self.memory is None else nxt + (self.memory.step(q[-1], bits, action),)

    # -- decisions ------------------------------------------------------------------

    def decide(self, state: Mapping[str, Any], metadata: Mapping[str, Any] | None = None, action: Any = None) -> Decision:
        """The decision for a concrete state (reached by ``action``) taken as the first step of a run."""
        try:
            bits = self.predicates.evaluate(state, metadata, action)
        except PredicateBudgetExceeded as exc:
            return self.over_budget(exc)
        return self.decide_product(bits, self.first_monitor_states(bits, action))

    def over_budget(self, exc: PredicateBudgetExceeded) -> Decision:
        """The decision for a state the predicates could not read within their CPU budget: its abstract
        state is unknown, so the policy's unseen-state action, and a one-line reason (never the state)."""
        action = self.policy.unseen_state
        message = (f"The predicates could not be evaluated within their CPU budget: {exc}; the state is treated "
                   f"as unseen and the policy for unseen states is '{action.value}'.")
        return Decision(action, None, None, self.property, {}, message, known=False, visits=0, over_budget=True)

    def decide_bits(self, bits: int, q: MonitorStates | None = None) -> Decision:
        """The decision for an abstract state (with the monitors' first-step states by default)."""
        return self.decide_product(bits, self.first_monitor_states(bits) if q is None else q)

    def decide_product(self, bits: int, q: MonitorStates, baseline: tuple[float, ...] | None = None,
                       belief: Belief | None = None) -> Decision:
        """The decision for a product state (cached); ``baseline``: the run's risk per property,
        under the increase trigger; ``belief``: the session's posterior over kinds (learning.kinds), which
        weighs the kinds' values (not cached: it moves with every step)."""
        if belief is not None and self.kinds is not None:
            return self._originated(self._make_decision(bits, q, self.state_index(bits, q), baseline, belief))
        key = (bits, q) if baseline is None else (bits, q, baseline)
        decision = self._decisions.get(key)
        if decision is None:
            index = self.state_index(bits, q)
            if self.memory is None:
                decision = self._originated(self._make_decision(bits, q, index, baseline))
            else:  # a decision reads the memory only through the chain state's index
                shared = (bits, q[:len(self.monitors)], index, baseline)
                decision = self._by_index.get(shared)
                if decision is None:
                    decision = self._by_index[shared] = self._originated(self._make_decision(bits, q, index, baseline))
            self._decisions[key] = decision
        return decision

    def _originated(self, decision: Decision) -> Decision:
        member, group, fallback, note = self._origin
        if member is None:
            return decision
        return replace(decision, member=member, group=group, fallback=fallback,
                       message=f"{decision.message} {note}" if decision.message and note else decision.message)

    def state_index(self, bits: int, q: MonitorStates) -> int | None:
        """The product state's index in the model (None: never seen)."""
        n = len(self.monitors)
        if self.memory is None:
            index = self._index.get((bits, q))
        else:  # the chain state carries the memory's label; an unseen history borrows its abstract state's
            index = self._index.get((self.memory.encode(bits, q[n]), q[:n]))
            if index is None:
                index = self._fallback.get((bits, q[:n]))
        if index is None and self._near_states:  # an unseen abstract state: the nearest seen ones
            index = self._near_index(bits, q[:n])
        return index

    def believe(self, belief: Belief | None, bits: int, q: MonitorStates) -> Belief | None:
        """The posterior over kinds after a step into (bits, q), from the one before it (None: the run's first
        step); None for a model of one kind."""
        if self.kinds is None:
            return None
        index = self.state_index(bits, q)
        return self.kinds.start(index) if belief is None else self.kinds.step(belief, index)

    def _state_words(self, bits: int, q: MonitorStates) -> _StateWords:
        """What a decision says of its product state, shared by the chain states (memory) behind it."""
        key = (bits, q[:len(self.monitors)])
        words = self._words.get(key)
        if words is None:
            monitor_words = {m.name: m.describe(qk) for m, qk in zip(self.monitors, q)}
            violated = [m.name for m, qk in zip(self.monitors, q) if qk == -1]
            words = self._words[key] = _StateWords(self.predicates.as_context(bits), monitor_words, violated,
                                                   self.predicates.is_unsafe(bits) or bool(violated))
        return words

    def _make_decision(self, bits: int, q: MonitorStates, index: int | None,
                       baseline: tuple[float, ...] | None = None, belief: Belief | None = None) -> Decision:
        """The decision in product state (bits, q), the chain's state ``index``; its message and its
        properties are written when first read (:class:`~guard._lazy_decision.LazyDecision`)."""
        abstract, monitor_words, violated, unsafe_now = self._state_words(bits, q)
        policy = self.policy
        if index is None and not unsafe_now:
            return LazyDecision.pending((), partial(self._unseen_message, policy, bits, monitor_words),
                                    action=policy.unseen_state, p_unsafe=None, p_safe=None, property=self.property,
                                    abstract_state=abstract, known=False, monitors=monitor_words, visits=0)
        visits = None if index is None else self._visits[index]
        upper_end, rules = policy.act_on == "upper", self._rules
        lower: float | None
        upper: float | None
        ci_low: float | None
        ci_high: float | None
        rows: list[PropertyRow] = []
        for k, (definition, formula, column, lower_col, upper_col, low_col, high_col) in enumerate(self._columns):
            if index is None:  # unsafe but never observed: a violation has happened
                p_unsafe, lower, upper, ci_low, ci_high = 1.0, 1.0, 1.0, 1.0, 1.0
            else:
                if belief is not None and self.kinds is not None:
                    p_unsafe, lower, upper, ci_low, ci_high = self.kinds.mix(belief, k, index)
                else:
                    p_unsafe = column[index]
                    lower = lower_col[index] if lower_col is not None else None
                    upper = upper_col[index] if upper_col is not None else None
                    ci_low = low_col[index] if low_col is not None else None
                    ci_high = high_col[index] if high_col is not None else None
                if definition.meaning is Meaning.SATISFACTION:
                    p_unsafe = 1.0 - p_unsafe
                    lower, upper = (None if upper is None else 1.0 - upper), (None if lower is None else 1.0 - lower)
                    ci_low, ci_high = (None if ci_high is None else 1.0 - ci_high), \
                        (None if ci_low is None else 1.0 - ci_low)
            acted = ci_high if upper_end and ci_high is not None else p_unsafe
            action, theta = act(rules[k], 1.0 - acted)
            base = rise = None
            if baseline is not None:  # increase trigger: a step that does not raise the risk passes
                base, rise = baseline[k], p_unsafe - baseline[k]
                if not unsafe_now and not supported_increase(base, p_unsafe, ci_low, policy.min_increase):
                    action, theta = Action.ALLOW, None
            rows.append((definition.name, formula, p_unsafe, 1.0 - p_unsafe, lower, upper, action, theta,
                         ci_low, ci_high, base, rise))
        w = _worst(rows)
        _, formula, p_unsafe, p_safe, lower, upper, action, threshold, ci_low, ci_high, base, rise = rows[w]
        write: Callable[[tuple[PropertyValue, ...]], str] | None = None
        if not unsafe_now and visits is not None and visits < policy.min_visits:
            action, threshold = policy.unseen_state, None  # too little evidence: as if never seen
            write = partial(self._evidence_message, policy, bits, monitor_words, w, visits)
        elif action is not Action.ALLOW:
            write = partial(self._risk_message, policy, bits, monitor_words, w, unsafe_now, violated, visits)
        if write is not None and index in self._near_note:
            write = partial(self._near_message, write, index)
        return LazyDecision.pending(tuple(rows), write, action=action, p_unsafe=p_unsafe, p_safe=p_safe,
                                property=formula, abstract_state=abstract, lower=lower, upper=upper,
                                threshold=threshold, known=index is not None, unsafe_now=unsafe_now,
                                monitors=monitor_words, ci_low=ci_low, ci_high=ci_high, visits=visits,
                                baseline_p_unsafe=base, increase=rise,
                                index=index if index is not None and index < self._size else None,
                                p_min=None if self.advice is None else self.advice.p_min(index),
                                alternatives=() if self.advice is None else self.advice.alternatives(index))

    def _describe(self, bits: int, monitor_words: dict[str, str]) -> str:
        words = self.predicates.describe(bits)
        if monitor_words:
            words += "; monitors: " + ", ".join(f"{name} {state}" for name, state in monitor_words.items())
        return words

    def _unseen_message(self, policy: Policy, bits: int, monitor_words: dict[str, str],
                        values: tuple[PropertyValue, ...]) -> str:
        return (f"The current state ({self._describe(bits, monitor_words)}) never occurred in the runs this "
                f"model was learned from, so its risk is unknown; the policy for unseen states is "
                f"'{policy.unseen_state.value}'.")

    def _near_message(self, write: Callable[[tuple[PropertyValue, ...]], str], index: int,
                      values: tuple[PropertyValue, ...]) -> str:
        distance, count = self._near_note[index]
        states = "the seen state" if count == 1 else f"the {count} seen states"
        return (f"{write(values)} The runs this model was learned from never showed this state: its risk is "
                f"that of {states} {distance} predicate{'s' * (distance > 1)} away, its interval spans theirs.")

    def _evidence(self, value: PropertyValue, visits: int | None) -> str:
        """"p_unsafe 31.0 %, 95 % interval [12.0 %, 58.0 %], from 14 visits" (what is known of it)."""
        text = f"{value.p_unsafe:.1%}"
        if value.ci_low is not None and value.ci_high is not None and self._confidence is not None:
            text += f" ({self._confidence:.0%} interval [{value.ci_low:.1%}, {value.ci_high:.1%}]"
            text += ")" if visits is None else f", from {visits} visits)"
        elif visits is not None:
            text += f" (from {visits} visits)"
        return text

    def _evidence_message(self, policy: Policy, bits: int, monitor_words: dict[str, str], w: int, visits: int,
                          values: tuple[PropertyValue, ...]) -> str:
        return (f"The current state ({self._describe(bits, monitor_words)}) was left only {visits} times in the runs "
                f"this model was learned from, fewer than min_visits {policy.min_visits}, so it is treated as "
                f"unseen: its estimated risk {self._evidence(values[w], visits)} is not trusted, and the policy for "
                f"unseen states is '{policy.unseen_state.value}'.")

    def _risk_message(self, policy: Policy, bits: int, monitor_words: dict[str, str], w: int, unsafe_now: bool,
                      violated: list[str], visits: int | None, values: tuple[PropertyValue, ...]) -> str:
        """Why the decision acts (property ``values[w]`` decided it)."""
        worst, state = values[w], self._describe(bits, monitor_words)
        spec = self.model.spec
        if unsafe_now:
            what = []
            if self.predicates.is_unsafe(bits):
                what.append(f"the unsafe condition '{spec.unsafe}' holds")
            what += [f"monitor '{name}' is violated" for name in violated]
            return (f"Safety violation ({spec.name}): in the current state ({state}) " + " and ".join(what)
                    + f". Action: {worst.action.value}.")
        target = f"'{spec.unsafe}'" if spec.unsafe else "a monitor violation"
        text = (f"Risk alert ({spec.name}): in the current state ({state}) the probability that property "
                f"'{worst.name}' ({worst.formula}) fails is {self._evidence(worst, visits)}. ")
        if policy.act_on == "upper" and worst.ci_high is not None:
            text += (f"The pessimistic probability of staying safe, {1.0 - worst.ci_high:.1%} (from the interval's "
                     f"upper end), is below the '{worst.action.value}' threshold {worst.threshold}.")
        else:
            text += (f"The probability of staying safe, {worst.p_safe:.1%}, is below the '{worst.action.value}' "
                     f"threshold {worst.threshold}.")
        if worst.increase is not None:
            text += f" This step raises the risk from {worst.baseline_p_unsafe:.1%} to {worst.p_unsafe:.1%}."
        others = [v for v in values if v is not worst and v.action is not Action.ALLOW]
        if others:
            text += " Also at risk: " + ", ".join(f"'{v.name}' ({v.p_unsafe:.1%})" for v in others) + "."
        return text + f" Revise the plan so that {target} never comes about."


def _worst(rows: list[PropertyRow]) -> int:
    """The property that decides: the most severe action, then the highest p_unsafe (the first of equals)."""
    if len(rows) == 1:
        return 0
    return max(range(len(rows)), key=lambda k: (rows[k][6].severity, rows[k][2]))


@dataclass(frozen=True, slots=True)
class StepRecord:
    index: int
    abstract: int
    monitors: MonitorStates
    decision: Decision
    action: Any = None
    t: float | None = None


@dataclass(frozen=True, slots=True)
class Accepted:
    """Where a run stood before a person approved a call: its last committed step then (None: the
    approved call was its first), its risk ``baseline`` then (increase trigger, else None). An
    approval covers that one call, so the risk it took the run to is not one later calls may rely on
    (:mod:`guard.judge`)."""

    last: StepRecord | None
    baseline: tuple[float, ...] | None


@dataclass
class Session:
    """One agent run under a guard. ``observe`` commits a step; ``preview`` does not.

    ``baseline`` (increase trigger only, else None): the run's current risk per property —
    the guard's starting risk, then that of the last committed step whose risk is known.
    ``accepted``: where the run stood before a step a person approved, while the run is still
    where that approval took it (None: no approval carries the run). ``traced``: each decision is a
    ``forewarn.decision`` span when the application configured OpenTelemetry (:mod:`guard.telemetry`);
    an integration that records a richer span of its own turns it off.
    """

    guard: Guard
    history: list[StepRecord] = field(default_factory=list)
    monitor_states: MonitorStates | None = None  # None before the first step
    metadata: Mapping[str, Any] | None = None  # the run's context: predicates read it as `meta`
    baseline: tuple[float, ...] | None = None
    belief: Belief | None = None  # learning.kinds: the posterior over kinds given the committed steps
    accepted: Accepted | None = None
    traced: bool = True

    def __post_init__(self) -> None:
        if self.baseline is None and self.guard.policy.increase is not None:
            self.baseline = self.guard.start_risk

    def _next(self, state: Mapping[str, Any], action: Any) -> tuple[int, MonitorStates]:
        guard = self.guard
        bits = guard.predicates.evaluate(state, self.metadata, action)
        if self.monitor_states is None:
            return bits, guard.first_monitor_states(bits, action)
        return bits, guard.next_monitor_states(self.monitor_states, bits, action)

    def observe(self, state: Mapping[str, Any], *, action: Any = None, t: float | None = None,
                approved: bool = False) -> Decision:
        """Commit the agent's new state (reached by ``action``, which predicates read) and decide on it;
        ``approved``: a person approved the call that led here (see :attr:`accepted`).

        A state the predicates cannot read within their CPU budget gets :meth:`Guard.over_budget`'s
        decision; the step is recorded, but the session's abstract and monitor states stay where they
        were (the all-false state before a first step): nothing was learned of it.
        """
        try:
            bits, q = self._next(state, action)
        except PredicateBudgetExceeded as exc:
            decision = self._commit_unread(exc, action, t)
        else:
            if approved:
                self.accepted = self.accepted or Accepted(self.history[-1] if self.history else None, self.baseline)
            elif self.accepted is not None and self._decide_from(self.accepted, bits, q).action is Action.ALLOW:
                self.accepted = None  # back where the guard allows on its own: no approval carries the run
            decision = self._commit(bits, q, action, t)
        if self.traced:
            record_decision(decision, phase="observed")
        return decision

    def _commit_unread(self, exc: PredicateBudgetExceeded, action: Any, t: float | None) -> Decision:
        guard = self.guard
        decision = guard.over_budget(exc)
        if self.history:
            bits, q = self.history[-1].abstract, self.history[-1].monitors
        else:
            bits = 0
            q = self.monitor_states if self.monitor_states is not None else guard.first_monitor_states(0)
        self.monitor_states = q
        self.history.append(StepRecord(len(self.history), bits, q, decision, action, t))
        return decision

    def _commit(self, bits: int, q: MonitorStates, action: Any = None, t: float | None = None) -> Decision:
        belief = self.guard.believe(self.belief if self.history else None, bits, q)
        decision = self.guard.decide_product(bits, q, self.baseline, belief)
        self.monitor_states, self.belief = q, belief
        self.history.append(StepRecord(len(self.history), bits, q, decision, action, t))
        if self.baseline is not None and decision.p_unsafe is not None:
            self.baseline = tuple(p.p_unsafe for p in decision.properties)  # type: ignore[misc]
        return decision

    def preview(self, state: Mapping[str, Any], *, action: Any = None) -> Decision:
        """Decide on a state the agent might move to by ``action``, committing nothing (look-ahead)."""
        try:
            bits, q = self._next(state, action)
        except PredicateBudgetExceeded as exc:
            decision = self.guard.over_budget(exc)
        else:
            belief = self.guard.believe(self.belief if self.history else None, bits, q)
            decision = self.guard.decide_product(bits, q, self.baseline, belief)
        if self.traced:
            record_decision(decision, phase="proposed")
        return decision

    def preview_from_approval(self, state: Mapping[str, Any], *, action: Any = None) -> Decision | None:
        """:meth:`preview` as if the run still stood where it did before the approval that carries it
        (its risk then as the baseline), or None when no approval does."""
        if self.accepted is None:
            return None
        try:
            bits, q = self._next(state, action)
        except PredicateBudgetExceeded as exc:
            return self.guard.over_budget(exc)
        return self._decide_from(self.accepted, bits, q)

    def _decide_from(self, accepted: Accepted, bits: int, q: MonitorStates) -> Decision:
        belief = self.guard.believe(self.belief if self.history else None, bits, q)
        return self.guard.decide_product(bits, q, accepted.baseline, belief)

    def restore(self, abstract_history: list[tuple[int, MonitorStates]]) -> None:
        """Resume a session from its committed (abstract state, monitor states) history."""
        self.history, self.monitor_states, self.baseline, self.belief = [], None, None, None
        self.accepted = None
        self.__post_init__()
        for bits, q in abstract_history:
            self._commit(bits, q)

    @property
    def last(self) -> Decision | None:
        return self.history[-1].decision if self.history else None
