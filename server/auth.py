"""API keys and roles.

A request carries ``Authorization: Bearer KEY``. The presented key is compared with
*every* configured key using :func:`hmac.compare_digest` on SHA-256 digests (equal
lengths), without stopping at a match, so the time taken says nothing about which
key, or how much of one, matched.

Roles: ``agent`` (sessions and steps, and waiting on its approvals), ``approver``
(approvals, and reading sessions for context), ``admin`` (models, and everything else).

Tenants: every session belongs to the tenant of the agent key that opened it (by default
each agent key is a tenant of its own). An agent key sees and acts on its tenant's sessions
only; an approver key on the tenants it is configured for (default: all); admin on all.
Sessions another key may not see answer 404, as if they did not exist.
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from .settings import ApiKey, Role

AGENT = frozenset({Role.AGENT, Role.ADMIN})
APPROVER = frozenset({Role.APPROVER, Role.ADMIN})
ADMIN = frozenset({Role.ADMIN})
ANY = frozenset(Role)
READERS = frozenset(Role)  # reading a session or an approval: the agent that made it, its approver, admin


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the audit log's ``principal``, the role that decides what they may do, and
    the tenants whose sessions they may see (``None``: all of them)."""

    name: str
    role: Role
    tenant: str = ""  # the tenant new sessions of this key belong to
    tenants: frozenset[str] | None = None
    # what per-caller state (idempotency records, rate buckets) is keyed by: the tenant and a digest
    # of the key itself, never the display name, which two keys of two tenants may share
    identity: str = ""

    def sees(self, tenant: str | None) -> bool:
        """Whether a session (or its approvals) of ``tenant`` is visible to this caller."""
        return self.tenants is None or tenant in self.tenants


_ANONYMOUS_ADMIN = Principal("anonymous", Role.ADMIN, "anonymous", identity="anonymous")


def _principal(key: ApiKey) -> Principal:
    if key.role is Role.ADMIN:
        scope = None
    elif key.role is Role.APPROVER:
        scope = None if key.tenants is None else frozenset(key.tenants)
    else:
        scope = frozenset({key.own_tenant})
    digest = hashlib.sha256(key.key.get_secret_value().encode()).hexdigest()[:32]
    return Principal(key.principal, key.role, key.own_tenant, scope, identity=f"{key.own_tenant}/{digest}")


class Authenticator:
    """Checks bearer keys. With ``insecure=True`` every caller is an anonymous admin."""

    def __init__(self, keys: Iterable[ApiKey], *, insecure: bool = False) -> None:
        self.insecure = insecure
        self._entries = [(hashlib.sha256(k.key.get_secret_value().encode()).digest(), _principal(k)) for k in keys]

    def principal(self, authorization: str | None) -> Principal | None:
        """The principal for an ``Authorization`` header value, or None if it names no key."""
        if self.insecure:
            return _ANONYMOUS_ADMIN
        if not authorization:
            return None
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        digest = hashlib.sha256(key.strip().encode()).digest()
        found: Principal | None = None
        for stored, principal in self._entries:  # no early exit: constant time over the key set
            if hmac.compare_digest(stored, digest):
                found = principal
        return found
