"""The rows the server writes, by name: what a route computes and a write job inserts.

Each is a ``NamedTuple`` in its table's column order, so a job passes it to ``execute`` as it is
(both drivers take a tuple) and the code that builds or reads one says which field it means.
"""
from __future__ import annotations

from typing import NamedTuple


class StepRow(NamedTuple):
    """One committed step of the audit log (table ``decisions``, without its rowid)."""

    session_id: str
    step: int
    at: float
    principal: str
    model_version: str
    input_hash: str  # sha256 of the canonical JSON of {state, action, t}
    abstract: int  # the abstract state's bit mask
    monitors: str | None  # the monitors' states after the step (JSON)
    action_in: str | None  # the agent's action (JSON), as given
    t: float | None
    state: str | None  # the concrete state (JSON), only with store_states
    action: str  # the guard's action
    p_unsafe: float | None
    decision: str  # the whole decision (JSON), as answered
    approval_id: str | None


class ApprovalRow(NamedTuple):
    """A pending approval, committed with the step that asks for it."""

    id: str
    session_id: str
    step: int
    created_at: float


class PrevStep(NamedTuple):
    """The row a step extends, as the replica that computed the step saw it (checked on a shared database)."""

    session_id: str
    step: int
    abstract: int
    monitors: str | None


class SessionRow(NamedTuple):
    """A new session."""

    id: str
    model_name: str
    model_version: str
    policy: str | None  # JSON overrides, as given
    metadata: str | None  # JSON, as given
    created_at: float
    created_by: str
    tenant: str
    metadata_held: int = 0  # the memory its metadata holds, estimated (server._http.held_bytes)


class ProposalRow(NamedTuple):
    """A new proposal (a call an agent asks about before running it)."""

    id: str
    session_id: str
    created_at: float
    created_by: str
    tool: str
    arguments: str  # JSON
    tools: str | None  # the agent's tools (JSON)
    decision: str  # JSON
    status: str


class IdempotencyRow(NamedTuple):
    """The answer to an idempotent request, committed with its write."""

    principal: str
    key: str
    request_hash: str
    status: int
    response: bytes
    at: float
