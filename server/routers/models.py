"""Models: ``GET /v1/models`` (list), ``GET /v1/models/{name}`` (with its full PAC report),
``GET /v1/models/{name}/document`` (the model file as stored) and ``POST /v1/models`` (load or
atomically replace one; admin only).

The loaded models and their versions are :class:`server.models_registry.ModelRegistry`'s; a
replacement is written to the database first, then swapped in with one assignment.
"""
from __future__ import annotations

from datetime import UTC, datetime

import anyio
import orjson
from fastapi import APIRouter
from starlette.responses import Response

from ...errors import ForewarnError
from ...guard.bundle_guard import BundleGuard
from ...guard.model import GuardModel
from ...guard.runtime import Guard
from .. import schemas as S
from .._http import ERRORS, JSON, ApiError, Route, errors_for
from .._steps import write
from ..deps import Admin, Anyone, AppState, ModelName
from ..models_registry import LoadedModel, UnknownModel, parse_model, read_confined, signed_at
from ..settings import Role
from ..state import ServerState
from ..storage import Storage

router = APIRouter(route_class=Route, tags=["models"], responses=dict(ERRORS))


def _current(state: ServerState, name: str) -> LoadedModel:
    try:
        return state.registry.current(name)
    except UnknownModel as exc:
        raise ApiError(404, "unknown_model", str(exc), field="path.name") from None


def _document_bytes(document: object) -> bytes:
    """The uploaded document as the bytes stored and parsed; JSON Python reads but orjson cannot write
    (nested past 254 levels, integers past 64 bits) is no model file: one line, 422."""
    try:
        return orjson.dumps(document)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise ApiError(422, "invalid_model", f"document: not a model file: {exc} (a model nests at most 254 levels "
                       "and holds 64-bit integers)", field="body.document") from exc


def _refuse_rollback(name: str, served: LoadedModel, new: float | None, version: str) -> None:
    """Rollback protection: with signatures required, a model signed before the one served under
    ``name`` replaces it only when the admin says so (``allow_rollback``)."""
    old = served.signed_at
    if old is None or version == served.version:
        return
    if new is None or new < old:
        when = "without a signing time" if new is None else f"at {_utc(new)}"
        raise ApiError(409, "older_model", f"model {name!r}: the upload was signed {when}, before the version "
                       f"served ({served.version}, signed at {_utc(old)}); set allow_rollback: true to serve it "
                       "anyway", field="body.allow_rollback")


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="seconds")


@router.get("/v1/models", response_model=S.ModelList)
async def list_models(state: AppState, principal: Anyone) -> Response:
    """The models served: provenance, policy and PAC summary of each; for admins, also the models
    the database holds as current that this server refused (at start or from another replica)."""
    default = state.settings.default
    admin = principal.role is Role.ADMIN
    models = [state.registry.current(n).describe(n, default=n == default, admin=admin) for n in state.registry.names()]
    refused = state.registry.describe_refused() if admin else []
    return Response(orjson.dumps({"models": models, "default": default, "refused": refused}), media_type=JSON)


@router.get("/v1/models/{name}", response_model=S.ModelOut, responses=errors_for((404, "Unknown model")))
async def get_model(name: ModelName, state: AppState, principal: Anyone) -> Response:
    """One model, with its full PAC report (every state's visits)."""
    out = _current(state, name).describe(name, default=name == state.settings.default, full_pac=True,
                                         admin=principal.role is Role.ADMIN)
    return Response(orjson.dumps(out), media_type=JSON)


@router.get("/v1/models/{name}/document", responses=errors_for((404, "Unknown model")))
async def get_model_document(name: ModelName, state: AppState, _: Anyone) -> Response:
    """The current version's model file, exactly as stored: what a remote middleware previews
    states with (``Client.guard()``), so its look-ahead decides as this server does."""
    loaded = _current(state, name)
    row = state.storage.model_version(loaded.version)
    if row is None:
        raise ApiError(404, "unknown_model", f"model version {loaded.version!r} is not in the database",
                       field="path.name")
    return Response(bytes(row["document"]), media_type=JSON, headers={"X-Forewarn-Model-Version": loaded.version})


@router.post("/v1/models", response_model=S.ModelLoaded,
             responses=errors_for((409, "The open sessions cannot move to this model, or it was signed before "
                                        "the version served (allow_rollback)")))
async def load_model(body: S.ModelLoad, state: AppState, principal: Admin) -> Response:
    """Load a model file under a name, or atomically replace the model of that name. New sessions
    get it; open sessions keep theirs unless ``migrate_sessions`` is set."""
    rules = state.registry.rules
    source = body.path if body.path is not None else f"upload by {principal.name}"
    field_name = "body.path" if body.path is not None else "body.document"
    try:
        if body.path is not None:
            raw, version, model, guard = await anyio.to_thread.run_sync(read_confined, body.path, rules)
        else:
            raw = _document_bytes(body.document)
            raw, version, model, guard = await anyio.to_thread.run_sync(parse_model, raw, source, rules)
    except ForewarnError as exc:
        raise ApiError(422, "invalid_model", str(exc), field=field_name) from exc
    async with state.registry.lock(body.name):  # the check and the swap: no other replacement of the name between
        loaded, previous, moved = await _replace(state, body, principal.name, source, raw, version, model, guard)
    state.metrics.model_loads.labels(body.name).inc()
    out = {**loaded.describe(body.name, default=body.name == state.settings.default), "replaced": previous,
           "migrated_sessions": moved}
    return Response(orjson.dumps(out), media_type=JSON)


async def _replace(state: ServerState, body: S.ModelLoad, by: str, source: str, raw: bytes, version: str,
                   model: GuardModel, guard: Guard | BundleGuard) -> tuple[LoadedModel, str | None, int]:
    """Check, commit and install a parsed model under ``body.name`` (the caller holds the name's lock):
    (the version installed, the one it replaced, how many sessions moved)."""
    rules = state.registry.rules
    previous = state.registry.current_version(body.name)
    protect = bool(rules.trusted_keys) and not body.allow_rollback
    if previous is not None and protect:
        _refuse_rollback(body.name, state.registry.current(body.name), signed_at(guard), version)
    to_move: list[str] = []
    if body.migrate_sessions:
        to_move = state.storage.open_sessions(body.name)
        wanted = model.spec.predicate_names
        for live in (state.sessions.get(i) for i in to_move):
            if live.loaded.model.spec.predicate_names != wanted:
                raise ApiError(409, "incompatible_model",
                               f"session {live.id!r} uses predicates {live.loaded.model.spec.predicate_names}, "
                               f"the new model {wanted}: it cannot be migrated", field="body.migrate_sessions")
    # the database's compare-and-set: another replica may serve (and have committed) a newer one
    current = await write(state, Storage.put_model(body.name, version, source, raw, by, current=True,
                                                   signed_at=signed_at(guard), newer_only=protect))
    if not current:
        raise ApiError(409, "older_model", f"model {body.name!r}: another replica made a version signed after this "
                       "upload current meanwhile; set allow_rollback: true to serve it anyway",
                       field="body.allow_rollback")
    loaded = state.registry.install(body.name, version, source, model, guard, by)
    if to_move:
        await write(state, Storage.migrate_sessions(body.name, version, to_move))
        for live in (state.sessions.get(i) for i in to_move):
            if live.loaded.version != version and not live.closed:
                state.sessions.switch_model(live, loaded)
    return loaded, previous, len(to_move)
