"""The models a server serves, by name, and their versions.

A *version* is the SHA-256 (first 16 hex digits) of the model file. Every version ever
loaded is kept in the database with the file itself, so a session resumes after a
restart on exactly the model it was using, even if the file has since been replaced.

Replacement is atomic: a new version is read, validated and compiled off the event
loop, committed, and only then swapped in with one dictionary assignment. A step
runs start to finish on the loop thread without yielding, so one that has begun
finishes on the old version; sessions hold their own version and keep it unless
they are migrated; new sessions get the new one.
"""
from __future__ import annotations

import hashlib
import math
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from guard.errors import ForewarnError, ModelFileError
from guard.bundle import GuardBundle, parse_model_or_bundle
from guard.bundle_guard import BundleGuard
from guard.model import GuardModel
from guard.runtime import Guard
from server.storage import Storage

__all__ = ["LoadedModel", "ModelRegistry", "UnknownModel", "read_model"]


MAX_MODEL_BYTES = 1 << 30


class UnknownModel(ForewarnError):
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

    def describe(self, name: str, *, default: bool, full_pac: bool = False) -> dict[str, Any]:
        """The model as ``GET /v1/models`` shows it, under ``name`` (one file may serve two names)."""
        model, spec = self.model, self.model.spec
        pac = model.pac
        worst = pac.worst
        policy = self.guard.policy
        return {
            "name": name,
            "version": self.version,
            "default": default,
            "source": self.source,
            "loaded_at": self.loaded_at,
            "loaded_by": self.loaded_by,
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


def _bundle_summary(guard: Guard | BundleGuard) -> dict[str, Any] | None:
    """For a bundle: how sessions pick their member (``model``, ``states``, ``pac`` describe the pooled one)."""
    if not isinstance(guard, BundleGuard):
        return None
    bundle = guard.bundle
    return {"group_by": bundle.group_by, "min_group_runs": bundle.min_group_runs, "members": sorted(bundle.members),
            "groups_without_model": len(bundle.group_runs) - len(bundle.members)}


def _jsonable(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=str))


def read_model(path: str | Path) -> tuple[bytes, str, GuardModel, Guard | BundleGuard]:
    """Read, validate and compile a model file (blocking: call it off the event loop).

    Raises:
        ModelFileError: the file is missing, corrupt or invalid; the message says which.
        ForewarnError: the embedded spec does not compile.
    """
    path = Path(path)
    try:
        info = path.stat()
        # only regular files of sane size: an admin's typo must not make the server read /dev/zero
        if not stat.S_ISREG(info.st_mode):
            raise ModelFileError(f"{path}: not a regular file")
        if info.st_size > MAX_MODEL_BYTES:
            raise ModelFileError(f"{path}: {info.st_size} bytes is larger than a model file may be "
                                 f"({MAX_MODEL_BYTES} bytes)")
        raw = path.read_bytes()
    except ModelFileError:
        raise
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read model file: {exc.strerror}") from exc
    except ValueError as exc:  # e.g. a NUL byte in the path
        raise ModelFileError(f"{str(path)!r}: not a usable path: {exc}") from exc
    model, guard = _parse(raw, str(path))
    return raw, hashlib.sha256(raw).hexdigest()[:16], model, guard


def _parse(raw: bytes, source: str) -> tuple[GuardModel, Guard | BundleGuard]:
    loaded = parse_model_or_bundle(raw, source)  # a model file or a bundle
    if isinstance(loaded, GuardBundle):
        return loaded.pooled, BundleGuard(loaded)
    return loaded, Guard(loaded)


class ModelRegistry:
    """Name → current version, and every version loaded so far. Used on the event loop thread."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._versions: dict[str, LoadedModel] = {}
        self._current: dict[str, str] = {}

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
        model, guard = _parse(bytes(row["document"]), f"database model {row['name']}@{version}")
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
        return loaded

    def restore_current(self) -> None:
        """Load, from the database, the current version of every name not loaded yet."""
        for name, version in self._storage.current_models().items():
            if name not in self._current:
                self.version(version)
                self._current[name] = version
