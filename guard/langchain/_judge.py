"""What the middleware's concerns may use of it: the narrow interface of ``ForewarnMiddleware``.

The look-ahead (``_lookahead``), asking a human (``_approval``) and what follows a tool's run
(``_after_tool``) get a :class:`Judge` from the middleware, never the middleware itself: the
guard under the effective policy, the checked settings, the callables that read a call's state
and decide on it, the run a conversation belongs to, and the lock the runs share. So the class
stays in one file, and its concerns sit below it (the ``langchain-middleware`` import contract
keeps them there).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..bundle_guard import BundleGuard
from ..judge import CallVerdict
from ..runtime import Decision, Guard, Session
from ..toolcalls.transcript import ToolStep, Transcript
from ._options import Approvals, Settings
from ._remote import RemoteGuard
from .runs import GuardedRun

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage


class Decide(Protocol):
    def __call__(self, session: Session, transcript: Transcript, step: ToolStep, *, commit: bool) -> Decision:
        """The decision on the state ``transcript`` (ending with ``step``) leads to: observed with
        ``commit``, else previewed; an unreadable call gets the configured fallback's decision."""


class JudgeCall(Protocol):
    def __call__(self, session: Session, transcript: Transcript, step: ToolStep) -> CallVerdict:
        """The verdict on the proposed call ``step`` (``transcript`` ends with it), by
        :func:`guard.judge.judge_call`; an unreadable call gets the configured fallback's decision."""


class ADecide(Protocol):
    async def __call__(self, session: Session, transcript: Transcript, step: ToolStep) -> Decision:
        """:class:`Decide` committing, for the async hooks: a sidecar's commit is awaited."""


Extract = Callable[[Transcript, ToolStep | None], Mapping[str, Any]]
"""The concrete state a transcript leads to; a user's extractor failing is an ``ExtractionError`` naming the call."""

TryExtract = Callable[[Transcript, ToolStep | None], Mapping[str, Any] | None]
"""As :data:`Extract`, or None where a fallback action is configured."""


@dataclass(frozen=True, slots=True)
class Judge:
    """The middleware as its concerns see it (fixed at the middleware's construction).

    Attributes:
        guard: the guard under the effective policy (all sessions share it and its decision cache).
        settings: the checked settings (reflections, extraction fallback, reviews, unknown tools, template).
        judge_unchanged: act on calls that leave the watched state as it is, too.
        approvals: who is asked about a call (``interrupt`` or ``sidecar``); ``approval_timeout``
            how long a sidecar's approvers are waited on.
        decide: the decision on a call (:class:`Decide`); ``adecide`` its committing, awaited form.
        judge_call: the verdict on a proposed call (:class:`JudgeCall`).
        extract: the concrete state a transcript leads to; ``try_extract`` the same, or None.
        places: whether the extractor places a proposed call (``places(tool, transcript, step)``,
            the transcript ending with the call); warns once per tool it does not place.
        run_of: the run a conversation belongs to (kept, or rebuilt from its messages).
        lock: held while a run's session, verdicts and interventions change.
    """

    guard: Guard | BundleGuard | RemoteGuard
    settings: Settings
    judge_unchanged: bool
    approvals: Approvals
    approval_timeout: float
    decide: Decide
    adecide: ADecide
    judge_call: JudgeCall
    extract: Extract
    try_extract: TryExtract
    places: Callable[[str, Transcript, ToolStep], bool]
    run_of: Callable[[Sequence[BaseMessage]], GuardedRun]
    lock: threading.RLock
