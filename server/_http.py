"""HTTP plumbing of the sidecar: errors, request parsing and checks, OpenAPI helpers.

Everything here is about the wire, nothing about the guard: the error shape every
response shares, strict parsing (orjson; unknown or repeated query parameters refused),
the nesting-depth check, the API-key check, ids. The middleware that runs before the
router (the key first, the body-size limit, the step fast path) is :mod:`server._middleware`.
"""
from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from fastapi import Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from . import schemas as S
from .auth import Authenticator, Principal

log = logging.getLogger("forewarn.server")
JSON = "application/json"


class ApiError(Exception):
    """An error answered as ``{"error": {code, message, field, predicate}}`` with an HTTP status."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 predicate: str | None = None, headers: dict[str, str] | None = None,
                 detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.detail = detail
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.predicate = predicate
        self.headers = headers


def error_response(status: int, code: str, message: str, *, field: str | None = None,
                   predicate: str | None = None, detail: list[dict[str, Any]] | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"code": code, "message": message, "field": field, "predicate": predicate}, "detail": detail}
    return Response(orjson.dumps(body), status_code=status, media_type=JSON, headers=headers)


class OrjsonRequest(Request):
    """Bodies parsed by orjson: faster than json, and it refuses NaN and nesting past 1024 levels
    with a decode error (a 422) where json would raise RecursionError."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


class Route(APIRoute):
    """Bodies through orjson, and unknown or repeated query parameters refused like unknown body
    fields are (a misspelt ``?limt=5`` would otherwise be silently ignored)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()
        known = frozenset(_query_names(self.dependant))

        async def route(request: Request) -> Response:
            if request.scope["query_string"]:
                names = [name for name, _ in request.query_params.multi_items()]
                unknown = sorted(set(names) - known)
                if unknown:
                    raise ApiError(422, "invalid_request", f"unknown query parameter(s) {unknown}; "
                                   f"known: {sorted(known)}", field=f"query.{unknown[0]}")
                repeated = sorted({name for name in names if names.count(name) > 1})
                if repeated:  # every parameter takes one value; FastAPI would silently keep the last
                    raise ApiError(422, "invalid_request", f"query parameter {repeated[0]!r} is given more "
                                   "than once", field=f"query.{repeated[0]}")
            response: Response = await handler(OrjsonRequest(request.scope, request.receive))
            return response

        return route


def _query_names(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names



def short(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters: an error names what is wrong, it never echoes the input."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_window(since: float | None, until: float | None) -> None:
    """A list's time window: ``since`` after ``until`` is a one-line 400 (every list endpoint says it alike)."""
    if since is not None and until is not None and since > until:
        raise bad_request(f"since ({since}) is after until ({until})", "query.since")


def shape_error(value: Any, depth: int, items: int | None) -> tuple[str, str] | None:
    """What is wrong with a JSON value's shape, and where: nested deeper than ``depth``, or more
    than ``items`` values in all (what a predicate may have to walk, and what an evaluation costs).
    One cheap pass, no paths built: nearly every state is small and shallow."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = 0
    while stack:
        node, level = stack.pop()
        if level > depth:
            return f"is nested deeper than {depth} levels", _deep_path(value, depth)
        children = node.values() if node.__class__ is dict else node
        count += len(children)
        if items is not None and count > items:
            return f"holds more than {items} values", ""
        for child in children:
            if child.__class__ is dict or child.__class__ is list:
                stack.append((child, level + 1))
    return None


_SINGLETONS = (None, True, False)
_ALLOCATION = 16  # pymalloc's alignment: what an object may cost past sys.getsizeof


def held_bytes(value: Any) -> int:
    """The memory a JSON value parsed into Python objects holds, estimated from above, cheaply: each
    object's ``sys.getsizeof`` (CPython 3.11: an empty list 56 bytes + 8 per slot, a dict 64 + its keys
    table, a str 49 + its length, an int 28) plus pymalloc's rounding, per allocation (a list's or a
    dict's table is one more); None, True and False are shared. Run after :func:`shape_error` has bounded
    the value's items and depth."""
    total = 0
    stack = [value]
    while stack:
        node = stack.pop()
        cls = node.__class__
        if cls is dict:
            total += sys.getsizeof(node) + 2 * _ALLOCATION
            stack.extend(node.keys())
            stack.extend(node.values())
        elif cls is list:
            total += sys.getsizeof(node) + 2 * _ALLOCATION
            stack.extend(node)
        elif node is None or node is True or node is False:
            continue
        else:
            total += sys.getsizeof(node) + _ALLOCATION
    return total


def _deep_path(value: Any, limit: int) -> str:
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        if node.__class__ is dict:
            if depth > limit:
                return path
            stack.extend((v, depth + 1, f"{path}.{k}") for k, v in node.items())
        elif node.__class__ is list:
            if depth > limit:
                return path
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(node))
    return ""


def field_of(loc: Any) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int) and parts:
            parts[-1] = f"{parts[-1]}[{part}]"
        else:
            parts.append(str(part))
    return ".".join(parts)


def authorize(auth: Authenticator, header: str | None, roles: frozenset[Any],
              known: Principal | None = None) -> Principal:
    """The caller of a request with this ``Authorization`` header, if its role is one of ``roles``;
    ``known``: the caller the middleware already found for this very header (not looked up again)."""
    principal = auth.principal(header) if known is None else known
    if principal is None:
        raise ApiError(401, "unauthorized", "a valid API key is required: 'Authorization: Bearer KEY'",
                       field="header.authorization", headers={"WWW-Authenticate": "Bearer"})
    if principal.role not in roles:
        allowed = ", ".join(sorted(r.value for r in roles))
        raise ApiError(403, "forbidden", f"the role '{principal.role.value}' may not do this (needs one of: {allowed})")
    return principal


_ID = re.compile(S.ID_PATTERN)


def check_id(value: str, name: str) -> str:
    if not _ID.match(value):
        raise ApiError(422, "invalid_request", f"path.{name}: should match pattern '{S.ID_PATTERN}'",
                       field=f"path.{name}")
    return str(value)


_M = TypeVar("_M", bound=BaseModel)


def parse_json(raw: bytes, model: type[_M]) -> _M:
    """Parse and validate a JSON body the way FastAPI would, with the same 422s."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(422, "invalid_request", f"body: JSON decode error: {exc}", field="body") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        detail = validation_detail(exc.errors(), ("body",))
        first = detail[0]
        field = field_of(first["loc"])
        raise ApiError(422, "invalid_request", f"{field}: {first['msg']}", field=field, detail=detail) from None


def validation_detail(errors: Any, prefix: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [{"loc": [*prefix, *(p if isinstance(p, int) else str(p) for p in e.get("loc", ()))],
             "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in errors]


def step_openapi() -> dict[str, Any]:
    """What FastAPI would have documented for ``(session_id: path, body: StepIn, key: bearer)``."""
    return {
        "parameters": [{"name": "session_id", "in": "path", "required": True, "description": "A session id.",
                        "schema": {"type": "string", "pattern": S.ID_PATTERN, "title": "Session Id"}}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": S.StepIn.model_json_schema()}}},
        "security": [{"HTTPBearer": []}],
    }


def bad_request(message: str, field: str) -> ApiError:
    return ApiError(422, "invalid_request", message, field=field)


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": S.ErrorBody, "description": text} for status, text in [
        (401, "No API key, or an unknown one"), (403, "The key's role may not do this"),
        (413, "Request body too large"), (422, "Malformed request; the error names the field"),
        (503, "Not ready, or the database refused the write")]
}


def errors_for(*extra: tuple[int, str]) -> dict[int | str, dict[str, Any]]:
    out = dict(ERRORS)
    for status, text in extra:
        out[status] = {"model": S.ErrorBody, "description": text}
    return out
