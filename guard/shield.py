"""Advice on a proposed call and the shield (``guard.enforcement: shield``; docs/shield.md).

With the model's MDP (:mod:`guard.mdp`), a proposed call is also judged as a *move*: its action
class from the state the run stands in, whose risk is the probability of a violation after it when
every later step is the safest (``Q(s, a)``). :func:`advise` puts that risk, the next moves from
there safest first and their least risk ``p_min`` on the decision; :func:`shield_action` is the
shield's rule — block a move whose risk is at least θ, let the others through, stop the run only
where no move is under θ; :func:`advised_message` says it in words for the agent and the approver.

Used by :func:`guard.judge.judge_call`, so the LangChain middleware, the sidecar's proposals and the
MCP proxy all judge by it. Pure: no I/O.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from .decision import Decision
from .mdp import Advice, advice_words, percent
from .runtime import Session
from .spec import Action


def _advice(session: Session) -> Advice | None:
    advice: Advice | None = getattr(session.guard, "advice", None)
    return advice


def _here(session: Session) -> int | None:
    """The MDP state the run stands in: its last committed step's (None before any, or never seen)."""
    return session.history[-1].decision.index if session.history else None


def advise(session: Session, decision: Decision, action: Any) -> Decision:
    """``decision`` (on the state a call would lead to) with the advice from where the run stands: the
    call's class's risk (``action_risk``, None if the runs never took it there), the next moves
    (``alternatives``: all, safest first; under the shield those under θ) and ``p_min``; unchanged without
    an MDP or a committed, known state."""
    advice, here = _advice(session), _here(session)
    if advice is None or here is None:
        return decision
    cls = advice.class_of(action)
    theta = shield_theta(session)  # under the shield, the moves it would let through
    # a preview's decision is the guard's cached one for its state: so is its advised twin, by identity
    key = (id(decision), here, cls, theta)
    cached = _ADVISED.get(key)
    if cached is not None and cached[0] is decision:
        return cached[1]
    advised = replace(decision, proposed=advice.option(here, cls), p_min=advice.p_min(here),
                      alternatives=advice.alternatives(here) if theta is None else advice.under(here, theta))
    if len(_ADVISED) >= _ADVISED_LIMIT:
        _ADVISED.clear()
    _ADVISED[key] = (decision, advised)  # the decision kept alive with it: its id cannot be reused meanwhile
    return advised


_ADVISED: dict[tuple[int, int, str, float | None], tuple[Decision, Decision]] = {}
_ADVISED_LIMIT = 8192


def shield_theta(session: Session) -> float | None:
    """θ when the guard's spec asks for the shield (``guard.enforcement: shield``), else None."""
    settings = session.guard.model.spec.guard
    return settings.shield_theta if settings.enforcement == "shield" else None


def shield_action(session: Session, decision: Decision) -> Action | None:
    """The shield's action on an :func:`advise`-d decision: stop where no move is under θ (``p_min`` ≥ θ),
    reflect (block the call, the run goes on) where the call's move risks θ or more, allow otherwise —
    unless the call would itself break the rule (the guard's action stands). None: not shielded here
    (no shield, no MDP state, or — where some move is under θ — a move the runs never made from here:
    the guard's thresholds judge it)."""
    theta = shield_theta(session)
    if theta is None or decision.p_min is None:
        return None
    if decision.p_min >= theta:  # whatever the call: no move from here is under θ
        return Action.STOP
    if decision.action_risk is None:
        return None
    if decision.action_risk >= theta:
        return Action.REFLECT
    return decision.action if decision.unsafe_now else Action.ALLOW


def call_advice(guard: Any, decision: Decision) -> str:
    """The advice on a proposed call in words, from its :func:`advise`-d decision: its move's risk and the
    safer moves from here ("" without an MDP state)."""
    if getattr(guard, "advice", None) is None or decision.p_min is None:
        return ""
    return advice_words(decision.proposed, decision.alternatives)


def advised_message(session: Session, decision: Decision, action: Action, shielded: bool) -> str:
    """The decision's words with the advice on its call (the call's move and the safer moves from here)."""
    words = call_advice(session.guard, decision)
    if not shielded:
        return f"{decision.message} {words}".strip()
    theta = shield_theta(session) or 0.0
    spec = session.guard.model.spec.name
    if action is Action.STOP:
        return (f"Shield ({spec}): no next move from the current state keeps the risk of a violation under "
                f"{theta:.0%}: the least any continuation reaches is {percent(decision.p_min or 0.0)}. {words}").strip()
    return (f"Shield ({spec}): this call is blocked because its risk is at least {theta:.0%}; the run goes on. "
            f"{words} Choose another next step.")


@dataclass(frozen=True)
class Counterfactual:
    """What the shield would have done on logged runs (:func:`shield_counterfactual`).

    ``caught``: runs that reached a violation, blocked (or stopped) before it; ``blocked_safe``: runs that
    stayed safe, blocked anyway; ``steps_left``: in those, the steps from the first block to the run's
    end (what the shield would have left undone unless the agent found another way).
    """

    runs: int
    unsafe_runs: int
    caught: int
    blocked_safe: int
    steps_left: int
    safe_steps: int


def shield_counterfactual(guard: Any, runs: Iterable[Any], theta: float) -> Counterfactual:
    """Replay logged runs (``Run``: ``steps`` with ``state`` and ``action``, ``meta``) under the shield's rule
    at ``theta``: each step's move judged from the state the run stood in before it, as :func:`shield_action`
    judges a proposed call (a move no run made there, or a state the model never saw, passes)."""
    advice: Advice | None = guard.advice
    if advice is None:
        raise ValueError("the shield needs the model's MDP (learning.mdp)")
    total = unsafe = caught = blocked_safe = steps_left = safe_steps = 0
    for run in runs:
        session = guard.session(metadata=run.meta)
        session.traced = False
        first: int | None = None
        violated = False
        decision: Decision | None = None
        for t, step in enumerate(run.steps):
            action = step.get("action")
            if decision is not None and first is None:
                here = decision.index
                p_min = advice.p_min(here)
                move = advice.option(here, advice.class_of(action))
                if (p_min is not None and p_min >= theta) or (move is not None and move.risk >= theta):
                    first = t
            decision = session.observe(step["state"], action=action)
            if decision.unsafe_now:
                violated = True
                break
        total += 1
        unsafe += violated
        caught += violated and first is not None
        if not violated:
            safe_steps += len(run.steps)
            if first is not None:
                blocked_safe += 1
                steps_left += len(run.steps) - first
    return Counterfactual(total, unsafe, caught, blocked_safe, steps_left, safe_steps)
