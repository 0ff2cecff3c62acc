"""The HTTP sidecar: ``forewarn serve`` puts the guard in front of any agent, in any language.

Modules, one concept each: ``settings`` (configuration), ``storage/`` (the database, below),
``auth`` (API keys and
roles), ``metrics`` (Prometheus), ``models_registry`` (loaded models, atomic replacement),
``sessions`` (live sessions and their resumption), ``approvals`` (human approval waits),
``proposals`` (approval before a call runs), ``idempotency`` (``Idempotency-Key``), ``replicas``
(what other replicas commit), ``schemas`` (the HTTP boundary), ``state`` (what a running server
holds, and its start), ``cli`` (the ``serve`` command).

The database, ``storage/``: ``schema`` (the tables, their version and migration, the errors),
``backend`` (write jobs, the connection they get, group commit, what a backend implements),
``writer`` (SQLite's group-commit writers and its checkpointer), ``sessions`` (sessions and
steps), ``approvals`` (approvals and proposals), ``base`` (``StorageBase``: every job and query,
with the idempotency records and models), ``sqlite`` (``Storage``, the SQLite backend). The
package re-exports what other modules use (``Storage``, ``StorageBase``, ``open_storage``,
``is_postgres``, the errors, the channels): import it from ``forewarn.server.storage``.

The HTTP app: ``app`` (``create_app``, which only assembles the rest), ``routers/`` (the routes,
one module per resource: ``health``, ``steps``, ``sessions``, ``approvals``, ``proposals``,
``console``, ``docs``, ``models``), ``deps`` (what routes depend on: the state, the caller's
role, idempotency, tenant-scoped look-ups), ``handlers`` (every error in the one error shape).
Private: ``_http`` (errors, parsing, checks), ``_middleware`` (before the router: the key
first, the body limits, the step fast path), ``_steps`` (the step path after
parsing), ``_views`` (stored rows as JSON). A new endpoint goes in the router of its resource,
or in a new module of ``routers/`` that ``create_app`` includes.
"""
from __future__ import annotations

# The sidecar's dependencies are the server extra: say so, not ModuleNotFoundError: fastapi
import sys

from ..guard._extras import MissingExtra, require

try:
    require("server", "forewarn.server")
except MissingExtra as exc:
    if sys.argv[:1] == ["-m"]:  # `python -m forewarn.server` being located: one line, not runpy's traceback
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None
    raise

__all__: list[str] = []
