"""The verdict on one proposed tool call: the one rule every integration judges a call by.

The LangChain middleware's look-ahead, the MCP proxy and the sidecar's proposals each
read a proposed call into the state it would lead to, and ask this module what to do
with it (:func:`judge_call`). The rule, in order:

1. The guard's decision on that state, the call being the step's action (action
   predicates and action memory read it before it runs, not only after).
2. A call that leaves the watched state as the last committed step left it passes: the
   guard spoke when the run entered that state (unless ``judge_unchanged``).
3. **An approval covers one call.** While the run stands where a call a person approved
   took it (:attr:`~guard.runtime.Session.accepted`), a call that may have consequences
   (``consequential``: anything but a known read) or whose own step breaks the rule anew is
   judged from where the run stood *before* that approval — its risk then, its state
   then — so a second delete is asked about again, a read is not.
4. A call the extractor cannot place never passes silently: it gets ``unknown_tools``.

With the model's MDP the decision also carries the call's move and the safer moves from where the run
stands (:mod:`guard.shield`), said in its message when the verdict acts; under ``guard.enforcement:
shield`` the shield's rule replaces 1–3 for a move the runs made from here.

Pure of any protocol: the integrations do the I/O and the words around it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from .runtime import Decision, Session, StepRecord
from .shield import advise, advised_message, shield_action
from .spec import Action

__all__ = ["APPROVED_ONCE_NOTE", "CallVerdict", "Why", "judge_call", "same_state", "unchanged"]

# What the agent and the approver are told when an earlier approval does not carry a call (Why.APPROVED_ONCE).
APPROVED_ONCE_NOTE = (" A person approved an earlier call, and that approval covered that one call only: this "
                      "call is judged as if the run stood where it did before that approval.")


class Why(str, Enum):
    """Why a verdict's action is what it is."""

    GUARD = "guard"  # the guard's decision on the state, as it is
    UNCHANGED = "unchanged"  # passed: the call leaves the watched state as the last step left it
    APPROVED_ONCE = "approved_once"  # judged again: an earlier approval covered its own call only
    UNKNOWN_TOOL = "unknown_tool"  # the extractor cannot place the call: ``unknown_tools``' action
    SHIELD = "shield"  # guard.enforcement: shield: the call's move judged against θ (guard/shield.py)


@dataclass(frozen=True, slots=True)
class CallVerdict:
    """What to do with a proposed call: ``action`` on ``decision`` (the one acted on), and ``why``."""

    action: Action
    decision: Decision
    why: Why = Why.GUARD


def judge_call(session: Session, state: Mapping[str, Any], tool: str, args: Any, *, consequential: bool = True,
               known: bool | Callable[[], bool] = True, unknown_tools: Action = Action.ASK_HUMAN,
               judge_unchanged: bool = False) -> CallVerdict:
    """The verdict on calling ``tool`` with ``args`` next, leading to the concrete ``state``.

    Args:
        session: the run's guard session (nothing is committed to it).
        state: the concrete state the call would lead to.
        consequential: the call may change something (False only for a known read).
        known: the extractor places the call (it knows what the tool does); a callable is asked only
            for a call that would otherwise pass.
        unknown_tools: the action for a call it cannot place that would otherwise pass.
        judge_unchanged: act on calls that leave the watched state as it is, too.
    """
    action_of = {"tool": tool, "args": args}
    decision = advise(session, session.preview(state, action=action_of), action_of)
    shielded = shield_action(session, decision)
    action, why = (decision.action, Why.GUARD) if shielded is None else (shielded, Why.SHIELD)
    last = session.history[-1] if session.history else None
    if shielded is None and action is not Action.ALLOW and not judge_unchanged and unchanged(last, decision):
        action, why = Action.ALLOW, Why.UNCHANGED
    accepted = session.accepted
    # a step that breaks the rule anew (not the violation the run already stood in) is its own consequence
    violates = decision.unsafe_now and not unchanged(last, decision)
    if shielded is None and action is Action.ALLOW and accepted is not None and (consequential or violates):
        before = session.preview_from_approval(state, action=action_of)
        assert before is not None  # (accepted is set)
        passes = not judge_unchanged and not violates and unchanged(accepted.last, before)
        if before.action is not Action.ALLOW and not passes:
            action, why, decision = before.action, Why.APPROVED_ONCE, before
    if action is Action.ALLOW and not (known() if callable(known) else known):
        action, why = unknown_tools, Why.UNKNOWN_TOOL
    if action is not Action.ALLOW and decision.p_min is not None:  # the safer moves, in words
        decision = replace(decision, message=advised_message(session, decision, action, why is Why.SHIELD))
    return CallVerdict(action, decision, why)


def same_state(a: Decision, b: Decision) -> bool:
    """Whether two decisions are about the same watched state (abstract state and monitors)."""
    return a.abstract_state == b.abstract_state and a.monitors == b.monitors


def unchanged(last: StepRecord | None, decision: Decision) -> bool:
    """Whether a call leads to the state a committed tool step (``last``) already led to and was
    judged on."""
    if last is None or not decision.abstract_state:
        return False
    return last.action is not None and same_state(last.decision, decision)
