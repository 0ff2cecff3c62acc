"""After a ``stop``: which later calls are refused, and how a person resumes the session.

A desktop host keeps one proxy per server for as long as it runs, so a stop that refused every later call
for good left the host's session dead until the host restarted the server. ``after_stop`` in the config
says what a stop refuses from then on:

* ``all`` (default): every call, until a person resets the session;
* ``kinds``: calls of the stopped tool, of tools of its kind (unless that kind is ``other``, which says
  nothing of what a tool does) and of tools of unknown effect, until reset; other calls are judged as
  usual (after a stopped ``git_reset``, a ``git_log`` goes on);
* ``session``: every call, for good (the proxy lists no reset).

The proxy lists a tool of its own, ``forewarn_reset``: calling it asks a person (elicitation, else the
sidecar's console, where the approvers see it as a proposal) and, approved, lifts the stop. Where nobody
can be asked, ``reset_asks: false`` lets the call itself reset (for a host that asks its user before every
tool call); otherwise the reset is refused, saying so.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..spec import Action
from ..toolcalls.extractor import ToolStateExtractor
from ..toolcalls.kinds import ToolKind
from .approval import Approval, Elicit, ask_human
from .judge import GuardedSession, Verdict, stopped_text

RESET_TOOL = "forewarn_reset"
AFTER_STOP = ("all", "kinds", "session")


def reset_tool() -> dict[str, Any]:
    """The proxy's own tool, as a ``tools/list`` entry."""
    return {"name": RESET_TOOL, "title": "Resume after Forewarn stopped the session",
            "description": "Forewarn stopped this session's risky line of work. Call this only when the user asks "
                           "to go on: a person is asked to confirm, and the stop is lifted if they approve.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True,
                            "openWorldHint": False}}


def refuses(guarded: GuardedSession, name: str, extractor: ToolStateExtractor, after_stop: str) -> bool:
    """Whether the stopped session ``guarded`` refuses a call of ``name`` (``after_stop``: the config's)."""
    if guarded.stopped is None:
        return False
    if after_stop != "kinds":
        return True
    kinds = {extractor.kind_of(t) for t in guarded.stopped_tools} - {ToolKind.OTHER}
    return name in guarded.stopped_tools or not extractor.knows(name) or extractor.kind_of(name) in kinds


def refusal_text(name: str, guarded: GuardedSession, after_stop: str) -> str:
    """The error for a call the stop refuses."""
    assert guarded.stopped is not None
    decision = guarded.stopped.decision
    risk = decision.message or "the run was at risk"
    if after_stop == "session":
        return (f"Forewarn stopped this session earlier; the call to `{name}` was refused, as is every later call "
                f"of the session. {risk}")
    what = ("every later call of the session" if after_stop == "all" else
            f"every later call of {', '.join(f'`{t}`' for t in sorted(guarded.stopped_tools))}, of a tool of its "
            f"kind or of a tool of unknown effect")
    return (f"Forewarn stopped this session earlier; the call to `{name}` was refused, as is {what}, until a "
            f"person resets the session (the tool `{RESET_TOOL}`, which asks them). {risk}")


def stop_text(name: str, verdict: Verdict, after_stop: str) -> str:
    """The error for the call the guard stopped (``after_stop``: what the stop refuses from then on)."""
    if after_stop == "session":
        return stopped_text(name, verdict)
    what = "every later call of the session is refused" if after_stop == "all" else \
        "later calls of it, of tools of its kind and of tools of unknown effect are refused"
    return (f"Forewarn stopped this session before the call to `{name}`: it did not run, and {what} until a person "
            f"resets the session (the tool `{RESET_TOOL}`, which asks them). "
            f"{verdict.decision.message or 'The run was at risk.'}{verdict.note}")


async def reset(guarded: GuardedSession, *, elicit: Elicit | None, remote: Callable[[], Awaitable[Any]] | None,
                asks: bool, timeout: float) -> tuple[bool, str]:
    """A call of ``forewarn_reset``: whether the stop was lifted, and the text the model reads."""
    if guarded.stopped is None:
        return False, "Forewarn has not stopped this session: there is nothing to reset."
    if not asks:
        approval = Approval(True, via="the call itself (reset_asks: false)")
    elif elicit is None and remote is None:
        return False, ("Forewarn cannot lift the stop: this client does not support elicitation and the proxy has no "
                       "console (--serve-url) to ask a person through. The session stays stopped; restart the "
                       "server in the host, or set reset_asks: false where the host asks before every tool call.")
    else:
        verdict = Verdict(Action.ASK_HUMAN, guarded.stopped.decision,
                          " Approving lifts Forewarn's stop: the session's calls are judged again as usual.")
        approval = await ask_human(elicit, RESET_TOOL, {}, verdict, guarded.state,
                                   remote=None if remote is None else await remote(), tools=[RESET_TOOL],
                                   timeout=timeout)
    if not approval.approved:
        return False, f"The stop stays: {approval.message or 'the person did not approve lifting it.'}"
    guarded.stopped = None
    guarded.stopped_tools = set()
    return True, ("Forewarn's stop is lifted: the session's calls are judged again as usual. Avoid the line of work "
                  "that was stopped.")
