"""Thresholds where runs start: a run's starting risk, and a warning when a threshold is crossed there.

A run's **starting risk** (per guarded property) is the mean of ``p_unsafe`` over the
model's initial states, weighted by how many learned runs started in each: the risk a
run carries before anything has been observed of it. Under ``trigger: increase`` the
first step of a session is compared with it; every later step with the risk of the
last committed step whose risk is known.

When ``p_safe`` of an initial state is already below a threshold, a guard with the
level trigger acts on every first step of a run that starts there, whatever the step
does — a user reads that as the guard misbehaving. :func:`initial_crossings` says so in
words; ``forewarn learn`` prints it; the first session under the level trigger of a guard from
``Guard.load`` (not the load itself: the guard may go where the trigger is increase) and the
LangChain middleware warn with :class:`~forewarn.errors.ThresholdWarning`.
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ThresholdWarning
from .chain import END
from .spec import Action, Meaning, Trigger

if TYPE_CHECKING:
    from .model import GuardModel
    from .policy import Policy

_CONSEQUENCE = {Action.REFLECT: "reflected", Action.ASK_HUMAN: "sent to a human for approval",
                Action.STOP: "stopped"}


def _p_unsafe(values: list[float], meaning: Meaning) -> list[float]:
    return values if meaning is Meaning.VIOLATION else [1.0 - v for v in values]


def start_risk(model: GuardModel) -> tuple[float, ...]:
    """Per property, ``p_unsafe`` averaged over the initial states, weighted by the runs that started there."""
    initial = model.dtmc.initial
    total = sum(initial.values()) or 1
    risks = []
    for prop in model.properties:  # only the initial states' values: a model may have 10⁵ states
        values = _p_unsafe([float(prop.outcome.values[i]) for i in initial], prop.definition.meaning)
        risks.append(sum(v * n for v, n in zip(values, initial.values())) / total)
    return tuple(risks)


def supported_increase(base: float, p_unsafe: float, ci_low: float | None, min_increase: float) -> bool:
    """Whether a step's risk ``p_unsafe`` rises over the run's current risk ``base`` by what the data
    supports (the increase trigger acts only then): by more than ``min_increase``, and, when the model
    has confidence intervals, beyond the new state's interval (``base`` below its ``ci_low``) — a rise
    inside that interval is noise the learned runs cannot tell from no rise at all."""
    return p_unsafe - base > min_increase and (ci_low is None or base < ci_low)


def _first_calls(model: GuardModel) -> list[tuple[int, int]]:
    """The states the learned runs' first calls led to, with how many runs: the successors of the
    initial states, weighted by the observed transitions (the end of a run left out)."""
    dtmc = model.dtmc
    counts = dtmc.counts
    reached: dict[int, int] = {}
    for i in dtmc.initial:
        for k in range(counts.indptr[i], counts.indptr[i + 1]):
            j, n = int(counts.indices[k]), round(float(counts.data[k]))
            if n > 0 and dtmc.states[j] != END:
                reached[j] = reached.get(j, 0) + n
    return sorted(reached.items())


def initial_crossings(model: GuardModel, policy: Policy, *, first_calls: bool = False) -> list[str]:
    """One sentence per property whose threshold is already crossed where runs start (level trigger).

    ``first_calls=False`` (a guard told of each step, the sidecar): in the initial states, on which a
    session's first step is decided. ``first_calls=True`` (a look-ahead, the LangChain middleware): in the
    states the learned runs' first calls led to, since a look-ahead never acts on a run's initial state.
    States that are themselves unsafe are left out: a run there has violated already. Empty under
    ``trigger: increase``, where a step is acted on only when it raises the risk.
    """
    if policy.trigger is Trigger.INCREASE:
        return []
    dtmc = model.dtmc
    violated = np.any(dtmc.violations, axis=1)
    reached = _first_calls(model) if first_calls else list(dtmc.initial.items())
    starts = [(i, n) for i, n in reached if not dtmc.unsafe[i] and not violated[i]]
    if not starts:
        return []
    runs = sum(n for _, n in starts)
    lines = []
    for prop in model.properties:
        values = _p_unsafe([float(prop.outcome.values[i]) for i, _ in starts], prop.definition.meaning)
        p_unsafe = dict(zip((i for i, _ in starts), values))
        thresholds = prop.definition.thresholds or policy.thresholds
        for action, theta in thresholds.items():  # most severe first: the one that will act
            crossed = [(i, n) for i, n in starts if 1.0 - p_unsafe[i] < theta]
            if not crossed:
                continue
            safe = [1.0 - p_unsafe[i] for i, _ in crossed]
            low, high = f"{min(safe):.2f}", f"{max(safe):.2f}"
            shown = low if low == high else f"{low}–{high}"
            head = f"{action.value} θ {theta:g} > p_safe {shown}"
            share = sum(n for _, n in crossed) / runs
            if first_calls:
                text = (f"{head} where {share:.0%} of the learned runs' first calls led: such first calls will be "
                        f"{_CONSEQUENCE[action]}")
            elif len(crossed) == len(starts):
                where = " at the start" if len(starts) == 1 else " in every initial state"
                text = f"{head}{where}: every first call will be {_CONSEQUENCE[action]}"
            else:
                text = (f"{head} in {len(crossed)} of {len(starts)} initial states ({share:.0%} of the learned "
                        f"runs): their first calls will be {_CONSEQUENCE[action]}")
            if len(model.properties) > 1:
                text = f"property '{prop.definition.name}': {text}"
            if policy.trigger is None:  # no trigger set: a Guard session's level (the integrations' default differs)
                lines.append(text + " under the level trigger, the default of Guard sessions (forewarn serve, "
                                    "the MCP proxy and the LangChain middleware default to increase, which acts "
                                    "only on calls that raise the risk; or lower the threshold)")
            else:
                lines.append(text + " (set guard.trigger: increase to act only on calls that raise the risk, "
                                    "or lower the threshold)")
            break
    return lines


def with_default_trigger(policy: Policy, trigger: Trigger | str | None,
                         default: Trigger = Trigger.INCREASE) -> Policy:
    """``policy`` with ``trigger`` if given, else with ``default`` where neither spec nor policy set one
    (the LangChain integrations default to increase)."""
    if trigger is not None:
        return replace(policy, trigger=Trigger(trigger))
    return policy if policy.trigger is not None else replace(policy, trigger=default)


def warn_initial_crossings(model: GuardModel, policy: Policy, *, stacklevel: int = 2,
                           first_calls: bool = False) -> list[str]:
    """Emit a :class:`ThresholdWarning` per sentence of :func:`initial_crossings`; return the sentences."""
    lines = initial_crossings(model, policy, first_calls=first_calls)
    for line in lines:
        warnings.warn(line, ThresholdWarning, stacklevel=stacklevel + 1)
    return lines
