"""What the middleware's concerns may use of it: the narrow interface of ``ForewarnMiddleware``.

The look-ahead (``_lookahead``), asking a human (``_approval``) and what follows a tool's run
(``_after_tool``) get a :class:`Judge` from the middleware, never the middleware itself: its
guard, its checked settings, a decide callable and the lock its runs share. So the class stays
in one file, and its concerns sit below it (an import contract keeps them there).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..bundle_guard import BundleGuard
from ..runtime import Decision, Guard, Session
from ..toolcalls.transcript import ToolStep, Transcript
from ._options import Approvals, Settings
from ._remote import RemoteGuard
from .runs import GuardedRun

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

__all__ = ["Decide", "Extract", "Judge"]


class Decide(Protocol):
    def __call__(self, session: Session, transcript: Transcript, step: ToolStep, *, commit: bool) -> Decision:
        """The decision on the state ``transcript`` leads to (``commit``: observed, else previewed);
        an unreadable call gets the configured fallback's decision."""


Extract = Callable[[Transcript, ToolStep | None], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Judge:
    """The middleware as its concerns see it.

    Attributes:
        guard: the guard under the effective policy (all sessions share it and its decision cache).
        settings: the checked settings (reflections, fallbacks, reviews, unknown tools, template).
        judge_unchanged: act on calls that leave the watched state as it is.
        approvals: who is asked about a call (``interrupt`` or ``sidecar``), and ``approval_timeout``
            how long a sidecar's approvers are waited on.
        decide: the decision on a call (see :class:`Decide`).
        extract: the concrete state a transcript leads to (raises an ``ExtractionError`` naming the call);
            ``try_extract`` the same, or None where a fallback action is configured.
        knows: whether the extractor knows a tool.
        run_of: the run a conversation belongs to (opened, or rebuilt from its messages).
        lock: held while a run's session, verdicts and interventions change.
    """

    guard: Guard | BundleGuard | RemoteGuard
    settings: Settings
    judge_unchanged: bool
    approvals: Approvals
    approval_timeout: float
    decide: Decide
    extract: Extract
    try_extract: Callable[[Transcript, ToolStep | None], Mapping[str, Any] | None]
    knows: Callable[[str], bool]
    run_of: Callable[[Sequence[BaseMessage]], GuardedRun]
    lock: threading.RLock
