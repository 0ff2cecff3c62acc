"""What a running server holds, and how it starts: the database, the models, the live sessions."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .approvals import ApprovalHub
from .auth import Authenticator
from .idempotency import IdempotencyKeys
from .metrics import Metrics
from .models_registry import LoadRules, ModelRegistry, read_model, signed_at
from .sessions import SessionManager
from .settings import BUILTIN_MODEL, ConfigError, ServerSettings
from .storage import Storage, StorageBase, open_storage

__all__ = ["ServerState", "start"]


@dataclass(eq=False)
class ServerState:
    """Everything a running server holds. Built by :func:`start`, closed by :meth:`close`."""

    settings: ServerSettings
    storage: StorageBase
    registry: ModelRegistry
    sessions: SessionManager
    hub: ApprovalHub
    auth: Authenticator
    metrics: Metrics = field(init=False)
    idempotency: IdempotencyKeys = field(init=False)
    stopping: bool = False

    def __post_init__(self) -> None:
        self.idempotency = IdempotencyKeys(self.storage)
        self.metrics = Metrics(sessions_open=lambda: self.sessions.open_count,
                               sessions_cached=lambda: len(self.sessions),
                               approvals_pending=lambda: self.hub.pending,
                               models_loaded=lambda: len(self.registry.names()),
                               cache_bytes=self.registry.cache_bytes,
                               limits=self.settings.limits.model_dump())

    def close(self) -> None:
        self.stopping = True
        self.storage.close()


def start(settings: ServerSettings, *, builtin: Callable[[], Path] | None = None) -> ServerState:
    """Open the database and load the configured models (blocking; seconds for the built-in one).

    ``builtin`` gives the model file served as ``builtin`` when none is configured; the
    entry points pass the demo domain's (the server itself builds on no domain).

    Raises:
        ConfigError: no API keys and no explicit ``insecure_no_auth``; no model configured
            and no ``builtin``.
        StorageError: the database is locked by another server or unusable.
        ModelFileError: a configured model file is missing or invalid.
    """
    if not settings.api_keys and not settings.insecure_no_auth:
        raise ConfigError("no API keys are configured: set FOREWARN_API_KEYS='KEY:agent,KEY:approver,KEY:admin' "
                          "or api_keys in the config file (or, on a loopback address only, insecure_no_auth)")
    sources: dict[str, Path] = dict(settings.models)
    if not sources:
        if builtin is None:
            raise ConfigError("no model to serve: give --model FILE (or models: in the config file)")
        sources = {BUILTIN_MODEL: builtin()}
    rules = LoadRules.from_settings(settings)
    # fail before touching the DB; the operator's own files, but the code and signature rules hold for them too
    loaded_files = {name: read_model(path, rules) for name, path in sources.items()}
    storage = open_storage(settings.db, synchronous=settings.synchronous)
    shared = getattr(storage, "shared", False)
    try:
        storage.write_sync(Storage.forget_idempotency(time.time() - settings.idempotency_hours * 3600))
        registry = ModelRegistry(storage, rules)
        in_db = storage.current_models()
        for name, (raw, version, model, guard) in loaded_files.items():
            # The configured file is what the operator asked for at this start, so it becomes current;
            # on a shared database only if the name has none yet: a replica restarting must not undo
            # a replacement the others serve.
            current = not shared or name not in in_db
            if (current and in_db.get(name) != version) or storage.model_version(version) is None:
                storage.write_sync(Storage.put_model(name, version, str(sources[name]), raw, "config",
                                                     current=current, signed_at=signed_at(guard)))
            if current or in_db.get(name) == version:
                registry.install(name, version, str(sources[name]), model, guard, "config")
        registry.restore_current()
        _warn_start_crossings(registry)
        sessions = SessionManager(storage, registry, settings.session_cache)
        hub = ApprovalHub(storage.count_pending_approvals())
    except BaseException:
        storage.close()
        raise
    return ServerState(settings, storage, registry, sessions, hub,
                       Authenticator(settings.api_keys, insecure=settings.insecure_no_auth))


def _warn_start_crossings(registry: ModelRegistry) -> None:
    """Log, per model served, a threshold its sessions cross at their first step (the sidecar's sessions use the
    spec's trigger, increase when it sets none, and decide on the first state observed): only models whose
    spec sets the level trigger can, since under increase a first step acts only if it raises the risk."""
    from ..guard.thresholds import initial_crossings

    for name in registry.names():
        loaded = registry.current(name)
        for line in initial_crossings(loaded.model, loaded.guard.policy):
            logging.getLogger("forewarn.server").warning("model %r: %s", name, line)
