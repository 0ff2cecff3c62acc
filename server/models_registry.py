"""The models a server serves, by name, and their versions.

A *version* is the SHA-256 (first 16 hex digits) of the model file. Every version ever
loaded is kept in the database with the file itself, so a session resumes after a
restart on exactly the model it was using, even if the file has since been replaced.

Replacement is atomic: a new version is read, validated and compiled off the event
loop, then, under the name's lock (:meth:`ModelRegistry.lock`), checked against the version
served (rollback protection), committed and swapped in with one dictionary assignment: no
other replacement of the name runs between the check and the swap. The commit itself is a
compare-and-set on the signing time, for replicas that check against what each serves. A step
runs start to finish on the loop thread without yielding, so one that has begun
finishes on the old version; sessions hold their own version and keep it unless
they are migrated; new sessions get the new one.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import ForewarnError, InputError, ModelFileError
from ..guard._cel_cost import DEFAULT_CPU_BUDGET
from ..guard.bundle import GuardBundle, parse_model_or_bundle
from ..guard.bundle_guard import BundleGuard
from ..guard.model import GuardModel
from ..guard.runtime import Guard
from ..guard.thresholds import with_default_trigger
from ._confined import open_beneath
from .storage import StorageBase

__all__ = ["LoadRules", "LoadedModel", "ModelRegistry", "UnknownModel", "parse_model", "read_confined", "read_model",
           "signed_at", "with_sidecar_trigger"]

log = logging.getLogger("forewarn.server")


MAX_MODEL_BYTES = 1 << 30


class UnknownModel(InputError):
    """A model name or version that this server does not have."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    name: str
    version: str
    source: str
    loaded_at: float
    loaded_by: str
    model: GuardModel  # for a bundle: its pooled model
    guard: Guard | BundleGuard  # the model with its spec's policy; sessions with overrides clone it

    @property
    def signed_at(self) -> float | None:
        return signed_at(self.guard)

    def describe(self, name: str, *, default: bool, full_pac: bool = False, admin: bool = True) -> dict[str, Any]:
        """The model as ``GET /v1/models`` shows it, under ``name`` (one file may serve two names).
        Where it came from (a path on the server, who loaded it) is for admins only (``admin``)."""
        model, spec = self.model, self.model.spec
        pac = model.pac
        worst = pac.worst
        policy = self.guard.policy
        return {
            "name": name,
            "version": self.version,
            "default": default,
            "source": self.source if admin else None,
            "loaded_at": self.loaded_at,
            "loaded_by": self.loaded_by if admin else None,
            "spec": spec.name,
            "predicates": list(spec.predicate_names),
            "unsafe": spec.unsafe,
            "property": self.guard.property,
            "states": model.dtmc.size,
            "policy": {"thresholds": policy.thresholds.model_dump(), "unseen_state": policy.unseen_state.value,
                       "act_on": policy.act_on, "min_visits": policy.min_visits},
            "intervals": None if model.intervals is None else model.intervals.to_document(),
            "provenance": _jsonable(model.provenance),
            "bundle": _bundle_summary(self.guard),
            "signed_at": self.signed_at,
            "pac": {
                "epsilon": pac.epsilon,
                "delta": pac.delta,
                "delta_per_state": pac.delta_per_state,
                "amplification": pac.amplification if math.isfinite(pac.amplification) else None,
                "satisfied": pac.satisfied,
                "states_total": len(pac.states),
                "states_satisfied": pac.satisfied_count,
                "worst": None if worst is None else {"state": worst.state, "visits": worst.visits,
                                                     "required": worst.required, "satisfied": worst.satisfied},
                "states": [{"state": s.state, "visits": s.visits, "required": s.required, "satisfied": s.satisfied}
                           for s in pac.states] if full_pac else None,
            },
        }


def signed_at(guard: Guard | BundleGuard) -> float | None:
    """When the served file was signed (its signature's ``signed_at``; None: unsigned or untimed)."""
    return guard.bundle.signed_at if isinstance(guard, BundleGuard) else guard.model.signed_at


def _bundle_summary(guard: Guard | BundleGuard) -> dict[str, Any] | None:
    """For a bundle: how sessions pick their member (``model``, ``states``, ``pac`` describe the pooled one)."""
    if not isinstance(guard, BundleGuard):
        return None
    bundle = guard.bundle
    own = bundle.spec.guard.member_thresholds
    tuned = sorted(g for g in (own.groups if own is not None else {}) if g in bundle.members)
    return {"group_by": bundle.group_by, "min_group_runs": bundle.min_group_runs, "members": sorted(bundle.members),
            "groups_without_model": len(bundle.group_runs) - len(bundle.members),
            # members deciding under thresholds of their own (guard.member_thresholds), and those thresholds
            "member_thresholds": {g: guard.member_policy(g).thresholds.model_dump() for g in tuned}}


def _jsonable(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=str))


@dataclass(frozen=True)
class LoadRules:
    """What a model must satisfy to be served: the keys that must have signed it (none: unsigned
    models are accepted), the folders ``POST /v1/models`` may read. The Python it may name is
    what the process registered (guard.trust), the same for every model."""

    trusted_keys: tuple[Any, ...] = ()
    model_dirs: tuple[Path, ...] = ()
    memo_bytes: int | None = None  # the predicates' memo budget per model version
    cpu_budget: float | None = DEFAULT_CPU_BUDGET  # seconds of CPU one step's predicates may cost

    @classmethod
    def from_settings(cls, settings: Any) -> LoadRules:
        from ..guard.signing import load_trusted_keys

        return cls(load_trusted_keys(settings.trusted_keys),
                   tuple(Path(d) for d in settings.model_dirs), settings.limits.memo_bytes,
                   settings.limits.predicate_cpu_seconds)

    def open_confined(self, path: str) -> int:
        """A descriptor of ``path``, opened beneath a configured model folder with no symbolic link
        followed on the way (:func:`server._confined.open_beneath`: no check-then-open window)."""
        return open_beneath(path, self.model_dirs)


def read_model(path: str | Path, rules: LoadRules | None = None
               ) -> tuple[bytes, str, GuardModel, Guard | BundleGuard]:
    """Read, validate and compile a model file (blocking: call it off the event loop).

    Raises:
        ModelFileError: the file is missing, corrupt, invalid or not signed as ``rules`` require.
        ForewarnError: the embedded spec does not compile, or names a Python function nobody registered.
    """
    path = Path(path)
    try:
        # O_NOFOLLOW: a configured model file is the operator's, but a symlink swapped in is not followed
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read model file: {exc.strerror}") from exc
    except ValueError as exc:  # e.g. a NUL byte in the path
        raise ModelFileError(f"{str(path)!r}: not a usable path: {exc}") from exc
    return parse_model(_read_fd(fd, str(path)), str(path), rules)


def read_confined(path: str, rules: LoadRules) -> tuple[bytes, str, GuardModel, Guard | BundleGuard]:
    """:func:`read_model` for a path ``POST /v1/models`` names: opened beneath ``rules.model_dirs``."""
    return parse_model(_read_fd(rules.open_confined(path), path), path, rules)


def _read_fd(fd: int, shown: str) -> bytes:
    """The bytes of the regular file open on ``fd`` (closed here), at most :data:`MAX_MODEL_BYTES`."""
    try:
        info = os.fstat(fd)
        # only regular files of sane size: an admin's typo must not make the server read /dev/zero
        if not stat.S_ISREG(info.st_mode):
            raise ModelFileError(f"{shown}: not a regular file")
        if info.st_size > MAX_MODEL_BYTES:
            raise ModelFileError(f"{shown}: {info.st_size} bytes is larger than a model file may be "
                                 f"({MAX_MODEL_BYTES} bytes)")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(MAX_MODEL_BYTES + 1)
    except OSError as exc:
        raise ModelFileError(f"{shown}: cannot read model file: {exc.strerror}") from exc
    finally:
        os.close(fd)


def parse_model(raw: bytes, source: str, rules: LoadRules | None = None
                ) -> tuple[bytes, str, GuardModel, Guard | BundleGuard]:
    """A model from its bytes (a file, an upload, a database row): (raw, version, model, guard)."""
    if len(raw) > MAX_MODEL_BYTES:
        raise ModelFileError(f"{source}: larger than a model file may be ({MAX_MODEL_BYTES} bytes)")
    model, guard = _parse(raw, source, rules or LoadRules())
    return raw, hashlib.sha256(raw).hexdigest()[:16], model, guard


def _parse(raw: bytes, source: str, rules: LoadRules) -> tuple[GuardModel, Guard | BundleGuard]:
    loaded = parse_model_or_bundle(raw, source, trusted_keys=rules.trusted_keys)  # a model file or a bundle
    guard: Guard | BundleGuard
    if isinstance(loaded, GuardBundle):
        model, guard = loaded.pooled, BundleGuard(loaded)
    else:
        model, guard = loaded, Guard(loaded)
    guard = with_sidecar_trigger(guard)
    if rules.memo_bytes is not None:
        guard.predicates.memo_limit = rules.memo_bytes
    guard.predicates.cpu_budget = rules.cpu_budget
    return model, guard


def with_sidecar_trigger(guard: Guard | BundleGuard) -> Guard | BundleGuard:
    """``guard`` with the sidecar's default trigger, ``increase``, wherever its spec sets none: a step is
    acted on (and an approval asked for) only when it raises the session's risk, as under the LangChain
    middleware and the MCP proxy, and as ``forewarn tune`` assumes. A spec's trigger, and a session's
    policy, still choose; a bundle's members keep their own policies, each with the default."""
    if isinstance(guard, BundleGuard):
        return guard.with_member_policies(lambda p: with_default_trigger(p, None))
    policy = with_default_trigger(guard.policy, None)
    return guard if policy == guard.policy else guard.with_policy(policy)


class ModelRegistry:
    """Name → current version, and every version loaded so far. Used on the event loop thread."""

    def __init__(self, storage: StorageBase, rules: LoadRules | None = None) -> None:
        self._storage = storage
        self.rules = rules or LoadRules()
        self._versions: dict[str, LoadedModel] = {}
        self._current: dict[str, str] = {}
        # name -> (version, why): current in the database, not served here (GET /v1/models says so)
        self.refused: dict[str, tuple[str, str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def lock(self, name: str) -> asyncio.Lock:
        """The lock a change of ``name``'s current version holds from its check to its swap (a local
        upload, or following another replica): one lock per name, made on first use (names are an
        admin's, few)."""
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    def cache_bytes(self) -> float:
        """Bytes the predicates' memo tables of every loaded version hold (each bounded in bytes)."""
        return float(sum(v.guard.predicates.memo_bytes for v in self._versions.values()))

    def names(self) -> list[str]:
        return sorted(self._current)

    def current(self, name: str) -> LoadedModel:
        version = self._current.get(name)
        if version is None:
            raise UnknownModel(f"no model named {name!r}; loaded: {self.names()}")
        return self._versions[version]

    def version(self, version: str) -> LoadedModel:
        """A version by id, restored from the database if it is not in memory (blocking, short)."""
        loaded = self._versions.get(version)
        if loaded is not None:
            return loaded
        row = self._storage.model_version(version)
        if row is None:
            raise UnknownModel(f"model version {version!r} is not in the database")
        # the same checks as a file: registered names and signatures hold for what the database returns
        model, guard = _parse(bytes(row["document"]), f"database model {row['name']}@{version}", self.rules)
        loaded = LoadedModel(row["name"], version, row["source"], row["loaded_at"], row["loaded_by"], model, guard)
        self._versions[version] = loaded
        return loaded

    def install(self, name: str, version: str, source: str, model: GuardModel, guard: Guard | BundleGuard,
                by: str) -> LoadedModel:
        """Make ``version`` the current one of ``name`` (after it is committed). One assignment: atomic."""
        loaded = self._versions.get(version)
        if loaded is None:
            loaded = LoadedModel(name, version, source, time.time(), by, model, guard)
            self._versions[version] = loaded
        self._current[name] = version
        self.refused.pop(name, None)
        return loaded

    def current_version(self, name: str) -> str | None:
        return self._current.get(name)

    def follow(self, name: str, version: str) -> None:
        """Make an already loaded ``version`` current (another replica did): one assignment, atomic."""
        self._versions[version]  # loaded first, or this is a bug
        self._current[name] = version
        self.refused.pop(name, None)

    def refuse(self, name: str, version: str, exc: Exception) -> None:
        """Record (and log) that the database's current ``version`` of ``name`` is not served here."""
        log.error("model %s@%s is not served: %s", name, version, exc)
        self.refused[name] = (version, str(exc))

    def describe_refused(self) -> list[dict[str, str]]:
        return [{"name": n, "version": v, "reason": why} for n, (v, why) in sorted(self.refused.items())]

    def restore_current(self) -> None:
        """Load, from the database, the current version of every name not loaded yet."""
        for name, version in self._storage.current_models().items():
            if name not in self._current:
                try:
                    self.version(version)
                except ForewarnError as exc:  # e.g. it names a predicate nobody registered: not served
                    self.refuse(name, version, exc)
                    continue
                self._current[name] = version
