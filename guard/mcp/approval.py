"""``ask_human`` in the proxy: MCP elicitation, else the sidecar's console, else a refusal.

Outcomes (docs/mcp.md, "Asking a human"):

* the client declared ``elicitation``: it is sent a form with one boolean, ``approve``. ``accept``
  with ``approve: true`` runs the call; ``accept`` with false, ``decline`` or ``cancel`` refuses it;
* else, with ``--serve-url``, the call becomes a pending proposal in that server's ``/console``
  (the approvers' queue); ``approved`` runs it, ``rejected`` refuses it; an edit is judged again by
  the proxy, as if the client had proposed the edited call (allowed: it runs; needs approval: the
  approvers are asked about the edited call; held back: it does not run);
* else nobody can be asked, and the call is refused, saying so.

No answer within ``approval_timeout`` seconds refuses the call (a console proposal is withdrawn).
A refused call does not run; the model gets the reason as an ``isError`` tool result.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from ..client import ServerError
from .judge import Verdict, approval_text

Elicit = Callable[[str], Awaitable[types.ElicitResult]]
"""Sends the client one form elicitation (the question; the form is :data:`APPROVAL_SCHEMA`) and returns
its answer; raises ``MCPError`` when the client answers with an error."""

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Run this call?",
                               "description": "true runs the call; false refuses it"}},
    "required": ["approve"],
}


@dataclass(frozen=True, slots=True)
class Approval:
    """A human's answer: ``approved`` runs the call; ``message`` is what the model reads otherwise."""

    approved: bool
    message: str = ""
    via: str = "nobody"  # elicitation, console, nobody
    proposal: str | None = None  # the console proposal the step is linked to
    edit: tuple[str, dict[str, Any]] | None = None  # an approver's edit: the tool and arguments to judge instead


def elicit_of(ctx: ServerRequestContext[Any, Any]) -> Elicit | None:
    """How to ask the client of ``ctx`` (the SDK's server), or None when it did not declare elicitation."""
    caps = ctx.session.client_capabilities
    if caps is None or caps.elicitation is None or not ctx.session.can_send_request:
        return None

    async def elicit(question: str) -> types.ElicitResult:
        return await ctx.session.elicit_form(question, APPROVAL_SCHEMA, related_request_id=ctx.request_id)
    return elicit


async def ask_human(elicit: Elicit | None, name: str, args: Mapping[str, Any], verdict: Verdict,
                    state: Mapping[str, Any] | None, *, remote: Any, tools: list[str],
                    timeout: float, edit_of: str | None = None) -> Approval:
    """Ask about one call and wait (at most ``timeout`` seconds) for the answer (``edit_of``: the console
    proposal an approver edited into this call)."""
    question = approval_text(name, args, verdict)
    if elicit is not None:
        return await _elicit(elicit, name, question, timeout)
    if remote is not None and state is not None:
        return await _console(remote, name, args, state, tools, timeout, edit_of)
    return Approval(False, f"Forewarn would ask a human before the call to `{name}`, but this client does not "
                           f"support elicitation and the proxy has no console (--serve-url); the call did not "
                           f"run. {question.removesuffix(' Approve this call?')}")


async def _elicit(elicit: Elicit, name: str, question: str, timeout: float) -> Approval:
    answer: types.ElicitResult | None = None
    try:
        with anyio.move_on_after(timeout):
            answer = await elicit(question)
    except MCPError as exc:
        return Approval(False, f"Forewarn asked the user about the call to `{name}`, and asking failed "
                               f"({exc.error.message}); the call did not run.", "elicitation")
    if answer is None:
        return Approval(False, f"Forewarn asked the user about the call to `{name}` and got no answer within "
                               f"{timeout:g} s; the call did not run.", "elicitation")
    if answer.action == "accept" and (answer.content or {}).get("approve") is True:
        return Approval(True, via="elicitation")
    how = {"accept": "refused it", "decline": "declined it", "cancel": "dismissed the question"}[answer.action]
    return Approval(False, f"Forewarn asked the user about the call to `{name}` and the user {how}; the call did "
                           f"not run. Do not retry it; ask the user how to go on.", "elicitation")


async def _console(remote: Any, name: str, args: Mapping[str, Any], state: Mapping[str, Any], tools: list[str],
                   timeout: float, edit_of: str | None) -> Approval:
    client = remote.client
    try:
        answer = await remote.propose(name, dict(args), dict(state), tools=tools, ask=True, timeout=timeout,
                                      edit_of=edit_of)
        if answer["status"] == "pending":
            answer = await client.wait_for_proposal(answer["id"], timeout, poll=min(timeout, 30.0))
        if answer["status"] == "pending":
            try:
                answer = await client.cancel_proposal(answer["id"], f"the proxy stopped waiting after {timeout:g} s")
                return Approval(False, f"Forewarn asked the approvers (console) about the call to `{name}` and "
                                       f"nobody answered within {timeout:g} s; the call did not run.", "console",
                                answer["id"])
            except ServerError as exc:
                if exc.code != "already_resolved":
                    raise
                answer = await client.proposal(answer["id"])
    except ServerError as exc:
        return Approval(False, f"Forewarn could not ask the approvers about the call to `{name}` ({exc}); the "
                               f"call did not run.", "console")
    status, reason = answer["status"], answer.get("reason")
    if status in ("approved", "allowed"):
        return Approval(True, via="console", proposal=answer["id"])
    why = f": {reason}" if reason else ""
    if status == "edited":
        edited = answer.get("edited") or {}
        arguments = edited.get("arguments")
        return Approval(False, f"An approver edited the call to `{name}`{why}.", "console", answer["id"],
                        edit=(str(edited.get("tool") or name), dict(arguments) if isinstance(arguments, dict) else {}))
    return Approval(False, f"An approver {status} the call to `{name}`{why}; the call did not run.", "console",
                    answer["id"])
