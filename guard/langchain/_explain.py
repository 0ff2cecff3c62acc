"""The words of an intervention: what a call would lead to, the property, the probability.

Pro2Guard's risk alert (§3.3) carries the abstract state, the property at risk and the
predicted probability of violating it against the threshold. Here the state is the one
the proposed call would lead to (a look-ahead), so the text says so.
"""
from __future__ import annotations

import json
from typing import Any

from guard.runtime import Decision, Guard
from guard.spec import Action

__all__ = ["describe_call", "consequence", "held_back", "stopped_before", "approval_request", "after_call"]


def describe_call(name: str, args: Any) -> str:
    try:
        shown = json.dumps(args, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        shown = repr(args)
    if len(shown) > 300:
        shown = shown[:297] + "..."
    return f"`{name}` with arguments {shown}"


def _state_words(guard: Guard, decision: Decision) -> str:
    spec = guard.model.spec
    holding = []
    for name, value in decision.abstract_state.items():
        if value:
            text = spec.predicates[name].description if name in spec.predicates else None
            holding.append(f"{name} ({text})" if text else name)
    return "; ".join(holding) if holding else "none of the watched conditions holds"


def consequence(guard: Guard, decision: Decision, *, subject: str = "Running it", past: bool = False) -> str:
    """What the guard predicts, in words: state, property, probability and threshold."""
    spec = guard.model.spec
    if not decision.abstract_state:  # a fallback decision: the call could not be read
        return decision.message
    state = _state_words(guard, decision)
    unsafe = spec.unsafe or "a monitor violation"
    if decision.monitors:
        state += "; monitors: " + ", ".join(f"{name} {words}" for name, words in decision.monitors.items())
    if decision.unsafe_now:
        if past:
            return (f"{subject} violated the safety specification '{spec.name}' (unsafe: {unsafe}); "
                    f"it led to a state where {state}.")
        return (f"{subject} would violate the safety specification '{spec.name}' "
                f"(unsafe: {unsafe}); it would lead to a state where {state}.")
    verb = "led" if past else "would lead"
    if decision.p_unsafe is None:
        return (f"{subject} {verb} to a state the guard's model never saw (where {state}), so its risk is "
                f"unknown; the policy for unseen states is '{decision.action.value}'.")
    policy = guard.policy
    evidence = ""
    if decision.ci_low is not None and decision.ci_high is not None and guard.model.intervals is not None:
        evidence = (f" ({1 - guard.model.intervals.delta:.0%} interval [{decision.ci_low:.1%}, "
                    f"{decision.ci_high:.1%}]" + ("" if decision.visits is None else f", from {decision.visits} visits")
                    + ")")
    if decision.visits is not None and decision.visits < policy.min_visits:
        threshold = (f"; that state was seen only {decision.visits} times in the runs the model was learned from "
                     f"(fewer than min_visits {policy.min_visits}), so it is treated as unseen: "
                     f"'{decision.action.value}'")
    elif decision.threshold is None:
        threshold = ""
    elif policy.act_on == "upper" and decision.ci_high is not None:
        threshold = (f"; the pessimistic probability of staying safe, {1 - decision.ci_high:.1%}, is below the "
                     f"'{decision.action.value}' threshold {decision.threshold:g}")
    else:
        threshold = (f"; the probability of staying safe, {decision.p_safe:.1%}, is below the "
                     f"'{decision.action.value}' threshold {decision.threshold:g}")
    return (f"{subject} {verb} to a state where {state}. From there, the probability of eventually reaching "
            f"an unsafe state ({unsafe}; property {decision.property}) is {decision.p_unsafe:.1%}{evidence}"
            f"{threshold}.")


def held_back(guard: Guard, decision: Decision, name: str, args: Any) -> str:
    """The risk alert the model gets in place of a call's result (reflect)."""
    return (f"Forewarn held back your call to {describe_call(name, args)}; it was not executed. "
            f"{consequence(guard, decision)} Revise your plan: choose a next step that keeps the run "
            f"safe, or finish and tell the user what you did not do and why.")


def stopped_before(guard: Guard, decision: Decision, name: str, args: Any) -> str:
    """The final message of a run the guard stopped before a call."""
    return (f"Forewarn stopped this run before {describe_call(name, args)} could run; it was not executed. "
            f"{consequence(guard, decision)}")


def approval_request(guard: Guard, decision: Decision, name: str, args: Any) -> str:
    """What a human reviewer reads before approving, editing or rejecting a call."""
    return f"Forewarn asks for approval of {describe_call(name, args)}. {consequence(guard, decision)}"


def after_call(guard: Guard, decision: Decision) -> str:
    """The alert appended to a tool's result when the state it led to is risky."""
    if decision.action is Action.STOP:
        return f"[Forewarn] {consequence(guard, decision, subject='This call', past=True)} The run stops here."
    return (f"[Forewarn] Risk alert: {consequence(guard, decision, subject='This call', past=True)} "
            f"Take this into account before your next step.")
