"""The words of an intervention: what a call would lead to, the property, the probability.

Pro2Guard's risk alert (§3.3) carries the abstract state, the property at risk and the
predicted probability of violating it against the threshold. Here the state is the one
the proposed call would lead to (a look-ahead), so the text says so.
"""
from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import ConfigError
from ..runtime import Decision
from ..shield import call_advice
from ..spec import Action
from ..toolcalls.transcript import describe_call

if TYPE_CHECKING:
    from ..model import GuardModel
    from ..policy import Policy

__all__ = ["describe_call"]  # names other modules import through this one


class Explained(Protocol):
    """What the words read of a guard: a Guard, a BundleGuard or a RemoteGuard."""

    @property
    def model(self) -> GuardModel: ...

    @property
    def policy(self) -> Policy: ...


def _state_words(guard: Explained, decision: Decision) -> str:
    spec = guard.model.spec
    holding = []
    for name, value in decision.abstract_state.items():
        if value:
            text = spec.predicates[name].description if name in spec.predicates else None
            holding.append(f"{name} ({text})" if text else name)
    return "; ".join(holding) if holding else "none of the watched conditions holds"


def avoid_words(guard: Explained) -> str:
    """What the spec's unsafe condition means, in the predicates' own words (no CEL)."""
    spec = guard.model.spec
    unsafe = spec.unsafe or ""
    named = [n for n in spec.predicates if re.search(rf"\b{re.escape(n)}\b", unsafe)]
    words = [spec.predicates[n].description or n for n in named]
    if not words:
        return "a violation of its safety rules" if not unsafe else f"the unsafe condition of '{spec.name}'"
    return "; or ".join(words)


def consequence(guard: Explained, decision: Decision, *, subject: str = "Running it", past: bool = False,
                formula: bool = False) -> str:
    """What the guard predicts, in words: state, what to avoid, probability and threshold; the
    raw CEL condition and PCTL property only with ``formula``."""
    spec = guard.model.spec
    if not decision.abstract_state:  # a fallback decision: the call could not be read
        return decision.message
    state = _state_words(guard, decision)
    unsafe = (spec.unsafe or "a monitor violation") if formula else avoid_words(guard)
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
    what = f"{unsafe}; property {decision.property}" if formula else unsafe
    rise = ""
    if decision.baseline_p_unsafe is not None and decision.increase is not None and decision.increase > 0 \
            and decision.action is not Action.ALLOW:  # the increase trigger acted
        verb_now = "raised" if past else "raises"
        rise = (f" This call {verb_now} the risk from {decision.baseline_p_unsafe:.1%} to "
                f"{decision.p_unsafe:.1%}.")
    return (f"{subject} {verb} to a state where {state}. From there, the probability of eventually reaching "
            f"an unsafe state ({what}) is {decision.p_unsafe:.1%}{evidence}{threshold}.{rise}")


DEFAULT_REFLECTION = ("Forewarn held back your call to {call}; it was not executed. {consequence} Revise your "
                      "plan: choose a next step that keeps the run safe, or finish and tell the user what you did "
                      "not do and why.")
"""The default reflection text. Fields a template may use: ``{call}`` (tool and arguments), ``{tool}``,
``{consequence}`` (the prediction in plain words), ``{probability}`` (of reaching an unsafe state, e.g.
``42.0%``), ``{avoid}`` (what the spec's unsafe condition means, in words), ``{state}`` (the conditions
that would hold), ``{threshold}``, and only where a template asks for them ``{formula}`` (the PCTL
property) and ``{unsafe}`` (the raw CEL condition)."""


def held_back(guard: Explained, decision: Decision, name: str, args: Any, template: str | None = None) -> str:
    """The risk alert the model gets in place of a call's result (reflect), from ``template``."""
    spec = guard.model.spec
    fields = {"call": describe_call(name, args), "tool": name, "consequence": consequence(guard, decision),
              "probability": "unknown" if decision.p_unsafe is None else f"{decision.p_unsafe:.1%}",
              "avoid": avoid_words(guard), "state": _state_words(guard, decision) if decision.abstract_state else "",
              "threshold": "" if decision.threshold is None else f"{decision.threshold:g}",
              "formula": decision.property, "unsafe": spec.unsafe or ""}
    return (template or DEFAULT_REFLECTION).format(**fields) + _advice(guard, decision)


def _advice(guard: Explained, decision: Decision) -> str:
    """With the model's MDP: the call's move and the safer moves from here, in words (guard/shield.py)."""
    words = call_advice(guard, decision)
    return f" {words}" if words else ""


def check_template(template: str) -> None:
    """Raise ValueError naming a field a reflection template uses that does not exist."""
    known = {"call", "tool", "consequence", "probability", "avoid", "state", "threshold", "formula", "unsafe"}
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None and field not in known:
            raise ConfigError(f"reflection_template: unknown field {{{field}}}; known: {sorted(known)}")


def stopped_before(guard: Explained, decision: Decision, name: str, args: Any) -> str:
    """The final message of a run the guard stopped before a call."""
    return (f"Forewarn stopped this run before {describe_call(name, args)} could run; it was not executed. "
            f"{consequence(guard, decision)}{_advice(guard, decision)}")


def rule_at_stake(guard: Explained, decision: Decision) -> str | None:
    """The guarded property (rule) the decision is about, in its own words: its ``description``, else its name
    (None for a spec with the single default property and no description)."""
    name = next((p.name for p in decision.properties if p.formula == decision.property), None)
    rule = next((d for d in guard.model.spec.guard.effective_properties() if d.name == name), None)
    if rule is None:
        return None
    if rule.description:
        return rule.description
    return None if len(guard.model.spec.guard.effective_properties()) == 1 else rule.name


def approval_request(guard: Explained, decision: Decision, name: str, args: Any, *, request: str | None = None,
                     metadata: Mapping[str, Any] | None = None) -> str:
    """What a human reviewer reads before approving, editing or rejecting a call: the rule at stake first,
    then what the run is — the user's ``request`` and the run's ``metadata`` in words (a person approving a
    production delete reads "env: production", not only a predicate's name)."""
    rule = rule_at_stake(guard, decision) if decision.abstract_state else None
    stake = f" The rule at stake: {rule}." if rule else ""
    run = context_words(request, metadata)
    return (f"Forewarn asks for approval of {describe_call(name, args)}.{stake} "
            f"{consequence(guard, decision, formula=True)}{_advice(guard, decision)}{run}")


def context_words(request: str | None, metadata: Mapping[str, Any] | None) -> str:
    """" The user asked: “…”. Run: env: production." (what of them there is; long values cut)."""
    words = ""
    if request:
        words += f" The user asked: “{_cut(request, 300)}”."
    shown = [f"{k}: {_cut(v if isinstance(v, str) else repr(v), 80)}" for k, v in list((metadata or {}).items())[:12]
             if k != "thread_id"]
    if shown:
        words += f" Run: {'; '.join(shown)}."
    return words


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def after_call(guard: Explained, decision: Decision) -> str:
    """The alert appended to a tool's result when the state it led to is risky."""
    if decision.action is Action.STOP:
        return f"[Forewarn] {consequence(guard, decision, subject='This call', past=True)} The run stops here."
    return (f"[Forewarn] Risk alert: {consequence(guard, decision, subject='This call', past=True)} "
            f"Take this into account before your next step.")
