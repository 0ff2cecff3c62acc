"""Proposals: approval *before* a call runs (issue 13).

``POST /v1/sessions/{id}/proposals`` — "the agent wants to run this tool with these
arguments, leading to this state" — answers the guard's decision on that state without
committing anything. ``allow`` → status ``allowed``; ``reflect``/``stop`` → ``held`` (the
agent must not run it); ``ask_human`` → ``pending``: one approval a human resolves with
``POST /v1/proposals/{id}`` (approve, reject, or edit to other arguments — or another of
the agent's declared tools — whose state, when given, is re-checked and recorded). The
agent waits with ``GET /v1/proposals/{id}?wait=S``; on an edit an agent that extracts
states (the LangChain middleware) re-proposes the edited call with the state it leads to
(``edit_of``: a new proposal linked to the edited one), so an edit made where no state is
known (the console) is re-checked too; ``ask`` carries the agent's own verdict. When the
call (as approved or edited) has run, the agent observes its state with ``"proposal": id``:
that commits the step, links it, and queues no second approval. A rejected, pending or already executed proposal
cannot be observed; closing the session cancels its pending proposals.

This module holds what a proposal is and how it is shown; its routes are in
:mod:`server.routers.proposals`.
"""
from __future__ import annotations

from itertools import pairwise
from typing import Any

import orjson

from ..guard.model import GuardModel
from ..guard.spec import Action

RUNNABLE = ("allowed", "approved", "edited")  # what an observe may name
STATUS_OF = {Action.ALLOW: "allowed", Action.ASK_HUMAN: "pending", Action.REFLECT: "held", Action.STOP: "held"}


def state_words(spec: Any, abstract_state: dict[str, bool]) -> str:
    """The conditions that hold in an abstract state, in the spec's words, for the human who decides."""
    holding = []
    for name, value in abstract_state.items():
        if value:
            text = spec.predicates[name].description if name in spec.predicates else None
            holding.append(f"{name} ({text})" if text else name)
    return "; ".join(holding) if holding else "none of the watched conditions holds"


def _flips(spec: Any, before: dict[str, bool], after: dict[str, bool]) -> list[dict[str, Any]]:
    """The predicates whose truth differs between two abstract states, in the spec's words."""
    out = []
    for name, now in after.items():
        if bool(before.get(name, False)) != bool(now):
            described = spec.predicates[name].description if name in spec.predicates else None
            out.append({"predicate": name, "holds": bool(now), "description": described})
    return out


def likeliest_path(model: GuardModel, decision: Any) -> dict[str, Any] | None:
    """The most likely way from the state a call leads to into a violation (``forewarn states``'s
    "most likely path to unsafe"), as the conditions each step flips: ``{"probability", "steps":
    [{"changes": [...], "unsafe"}]}`` (no steps: the state is itself a violation). None where the
    state was never seen or the learned runs never went from it to a violation."""
    if decision.index is None:
        return None
    from ..guard.states import path_to_unsafe  # scipy: on the first proposal, not at start-up

    found = path_to_unsafe(model, decision.index)
    if found is None:
        return None
    indices, probability = found
    dtmc = model.dtmc
    mask = (1 << len(dtmc.predicates)) - 1  # above the predicates, a chain state may carry its memory's label

    def holds(i: int) -> dict[str, bool]:
        bits = int(dtmc.states[i]) & mask
        return {name: bool(bits >> b & 1) for b, name in enumerate(dtmc.predicates)}

    steps = []
    for here, there in pairwise(indices):
        changes = _flips(model.spec, holds(here), holds(there))
        if changes or bool(dtmc.unsafe[there]):  # a step only a monitor or the memory sees says nothing here
            steps.append({"changes": changes, "unsafe": bool(dtmc.unsafe[there])})
    return {"probability": probability, "steps": steps}


def review_facts(model: GuardModel, decision: Any, last: Any) -> dict[str, Any]:
    """What an approver needs beside the risk, in the spec's words: the rule at stake (its description),
    the predicates the call flips (against the session's last committed state), the risk before it,
    whether it is irreversible (it makes a ``valid_transitions.irreversible`` predicate hold), and the
    likeliest path from there to a violation."""
    spec = model.spec
    rules = spec.guard.effective_properties()
    worst = next((p.name for p in decision.properties if p.formula == decision.property), None)
    rule = next((r for r in rules if r.name == worst), None)
    words = rule.description if rule is not None and rule.description else None
    changes = [] if last is None else _flips(spec, last.abstract_state, decision.abstract_state)
    irreversible = set(spec.valid_transitions.irreversible)
    return {"rule": words or (rule.name if rule is not None and len(rules) > 1 else None),
            "changes": changes,
            "irreversible": any(c["holds"] and c["predicate"] in irreversible for c in changes),
            "before": None if last is None else {"p_unsafe": last.p_unsafe, "ci_low": last.ci_low,
                                                 "ci_high": last.ci_high, "visits": last.visits},
            "path": likeliest_path(model, decision)}


def proposal_out(row: Any, risk: list[tuple[int, float, float | None]] | None = None) -> dict[str, Any]:
    """A proposal row as the API shows it; with ``risk``, its session's risk step by step."""
    decision = orjson.loads(row["decision"])
    out = {"id": row["id"], "session_id": row["session_id"], "status": row["status"], "tool": row["tool"],
           "arguments": orjson.loads(row["arguments"]),
           "tools": orjson.loads(row["tools"]) if row["tools"] else None,
           "created_at": row["created_at"], "created_by": row["created_by"], "resolved_at": row["resolved_at"],
           "resolved_by": row["resolved_by"], "reason": row["reason"],
           "edited": orjson.loads(row["edited"]) if row["edited"] else None, "step": row["step"],
           "decision": decision, "state_words": decision.pop("_state_words", None),
           "edit_of": decision.pop("_edit_of", None), "review": decision.pop("_review", None),
           "risk": {"p_unsafe": decision.get("p_unsafe"), "ci_low": decision.get("ci_low"),
                    "ci_high": decision.get("ci_high"), "visits": decision.get("visits")}}
    if risk is not None:
        out["session_risk"] = [{"step": step, "at": at, "p_unsafe": p} for step, at, p in risk]
    return out
