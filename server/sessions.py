"""Live sessions: the in-memory ``guard.runtime.Session`` of each run, and its resumption.

What a session needs to go on is its current abstract state and its monitors' states:
the database holds them with every step, so a session that is not in memory, after a
restart or an eviction, resumes from its *last* row alone (an index look-up, whatever
the session's length), and a live one keeps only its last step in memory.
Everything here runs on the event loop thread, without awaiting, so two requests
never see a session half-updated.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import InputError
from ..guard.policy import Policy
from ..guard.runtime import MonitorStates, Session
from .models_registry import LoadedModel, ModelRegistry
from .storage import StorageBase

__all__ = ["LiveSession", "SessionManager", "SessionNotFound", "effective_policy"]


class SessionNotFound(InputError, KeyError):
    """No session of this id (a KeyError too, as it always was). Catch it before ForewarnError:
    the HTTP layer answers it with 404, other ForewarnErrors of a session with 503."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}")
        self.session_id = session_id
        self.args = (session_id,)  # what __init__ takes: a copy (pickle, copy) says the same


@dataclass(slots=True, eq=False)
class LiveSession:
    id: str
    model_name: str
    loaded: LoadedModel
    overrides: dict[str, Any] | None
    session: Session
    closed: bool
    next_step: int
    tenant: str = ""
    inflight: int = 0  # committed-but-not-yet-acknowledged steps: never evict while > 0


def effective_policy(policy: Policy) -> dict[str, Any]:
    return {"thresholds": policy.thresholds.model_dump(), "unseen_state": policy.unseen_state.value,
            "act_on": policy.act_on, "min_visits": policy.min_visits,
            "trigger": "increase" if policy.trigger is None else policy.trigger.value,  # the sidecar's default
            "min_increase": policy.min_increase}


def make_session(loaded: LoadedModel, overrides: dict[str, Any] | None,
                 metadata: dict[str, Any] | None = None) -> Session:
    """A core session on ``loaded`` with the policy overrides (raises ValueError if they are invalid).

    ``metadata`` is the run's context: predicates read it as ``meta``, and a bundle picks its member by it.
    """
    guard = loaded.guard
    if not overrides:
        return _untraced(guard.session(metadata=metadata))
    member = guard.for_metadata(metadata)  # a bundle's member: the overrides apply over its own policy
    return _untraced(member.session(member.policy.with_overrides(overrides), metadata=metadata))


def _untraced(session: Session) -> Session:
    session.traced = False  # the routes record each decision's span, with the caller's trace (trace_decision)
    return session


class SessionManager:
    """Live sessions, least recently used first; at most ``capacity`` of them stay in memory."""

    def __init__(self, storage: StorageBase, registry: ModelRegistry, capacity: int) -> None:
        self._storage = storage
        self._registry = registry
        self._capacity = capacity
        self._live: OrderedDict[str, LiveSession] = OrderedDict()
        self.open_count = storage.count_open_sessions()

    def __len__(self) -> int:
        return len(self._live)

    def get(self, session_id: str) -> LiveSession:
        live = self._live.get(session_id)
        if live is not None:
            self._live.move_to_end(session_id)
            return live
        live = self._resume(session_id)
        self._remember(live)
        return live

    def add(self, live: LiveSession) -> None:
        """A new session, once its row is committed."""
        self.open_count += 1
        self._remember(live)

    def closed(self, live: LiveSession) -> None:
        if not live.closed:
            live.closed = True
            self.open_count = max(0, self.open_count - 1)

    def reopened(self, live: LiveSession) -> None:
        """Undo :meth:`closed` (its write failed)."""
        if live.closed:
            live.closed = False
            self.open_count += 1

    def forget(self, live: LiveSession) -> None:
        """Drop a session from memory (after a failed write: the database is the truth)."""
        if self._live.get(live.id) is live:
            del self._live[live.id]

    def drop(self, session_id: str) -> None:
        """Forget a cached session another replica changed (closed, migrated); unless a step of it is in
        flight here, whose commit will find out by itself."""
        live = self._live.get(session_id)
        if live is not None and live.inflight == 0:
            del self._live[session_id]

    def cached(self, model_name: str) -> list[LiveSession]:
        return [s for s in self._live.values() if s.model_name == model_name and not s.closed]

    def switch_model(self, live: LiveSession, loaded: LoadedModel) -> None:
        """Move a live session to another version of its model (same predicates), keeping its history.
        The monitor states are recomputed from the abstract states: the new version's monitors rule."""
        session = make_session(loaded, live.overrides, _metadata(live.session.metadata))
        # the whole history, from the database (a rare admin action): monitors may differ between versions
        rows = self._storage.history(live.id)
        history = _replay(session, [(abstract, None, _action(a)) for _step, abstract, _m, a, _t in rows])
        session.restore(history if session.guard.kinds is not None else history[-1:])
        live.session = session
        live.loaded = loaded

    def _remember(self, live: LiveSession) -> None:
        self._live[live.id] = live
        if len(self._live) <= self._capacity:
            return
        for key in list(self._live):
            if len(self._live) <= self._capacity:
                break
            if self._live[key].inflight == 0:
                del self._live[key]

    def _resume(self, session_id: str) -> LiveSession:
        row = self._storage.session_row(session_id)
        if row is None:
            raise SessionNotFound(session_id)
        loaded = self._registry.version(row["model_version"])
        overrides = orjson.loads(row["policy"]) if row["policy"] else None
        session = make_session(loaded, overrides, orjson.loads(row["metadata"]) if row["metadata"] else None)
        last = self._storage.last_step(session_id)
        next_step = 0
        if last is not None:
            step, abstract, monitors = last
            next_step = step + 1
            if session.guard.kinds is not None:  # the posterior over kinds rests on every step: replay them all
                rows = self._storage.history(session_id)
                session.restore(_replay(session, [(a, None, _action(x)) for _s, a, _m, x, _t in rows]))
            elif monitors is not None:
                session.restore([(abstract, tuple(orjson.loads(monitors)))])
            elif not session.guard.monitors:
                session.restore([(abstract, ())])
            else:  # rows written before monitor states were stored: replay them once
                rows = self._storage.history(session_id)
                session.restore(_replay(session, [(a, None, _action(x)) for _s, a, _m, x, _t in rows])[-1:])
            if session.guard.kinds is None and session.baseline is not None and session.last is not None \
                    and session.last.p_unsafe is None:
                # increase trigger, resumed from a last step the model never saw: its baseline is the risk of
                # the last step whose risk was known, not the start's (what restoring the last row leaves)
                known = self._storage.last_known_risk(session_id)
                if known is not None and len(known) == len(session.baseline):
                    session.baseline = known
        return LiveSession(session_id, row["model_name"], loaded, overrides, session,
                           closed=row["closed_at"] is not None, next_step=next_step,
                           tenant=row["tenant"] or row["created_by"])


def _metadata(metadata: Any) -> dict[str, Any] | None:
    return None if metadata is None else dict(metadata)


def _replay(session: Session, steps: list[tuple[int, MonitorStates | None, Any]]) -> list[tuple[int, MonitorStates]]:
    """(abstract state, monitor states) of each step; stored monitor states are taken as they are,
    missing ones are computed by running the session's monitors (and memory, which may remember
    the steps' actions) over the abstract states."""
    guard = session.guard
    history: list[tuple[int, MonitorStates]] = []
    q: MonitorStates | None = None
    for bits, stored, action in steps:
        if stored is not None:
            q = stored
        else:
            q = guard.first_monitor_states(bits, action) if q is None else guard.next_monitor_states(q, bits, action)
        history.append((bits, q))
    return history


def _action(stored: str | None) -> Any:
    """A step's action as the database keeps it (JSON text, or None)."""
    return None if stored is None else orjson.loads(stored)
