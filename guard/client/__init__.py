"""A client of the HTTP sidecar (``forewarn serve``) with the in-process API.

Switching an agent from the library to the sidecar is one line::

    guard = Guard.load("model.json")                       # in process
    guard = Client("http://127.0.0.1:8321", api_key=KEY)   # over HTTP
    session = guard.session()
    decision = session.observe(state)                      # the same Decision

``Client`` is synchronous and ``AsyncClient`` its asyncio twin; both use httpx. The URL and
key default to ``FOREWARN_URL`` and ``FOREWARN_API_KEY``.

Retries: every write that changes state (observe, batch, approve/reject) carries an
``Idempotency-Key`` (a fresh UUID per call, the same on each of its attempts), so when the
connection fails the client retries by itself (``retries`` times, backing off) and the server
answers a retry of a committed write with the stored answer instead of committing it twice.
Reads are retried too; other writes only when the connection could not even be opened. Decisions are
:class:`RemoteDecision`, a :class:`guard.runtime.Decision` that also carries the step
number and, when the action is ``ask_human``, the approval to wait on.

One implementation (issue 11): every operation is written once, without I/O, in
:mod:`guard.client._core`; the two classes here only drive those operations, one with
``httpx.Client``, the other with ``httpx.AsyncClient``, and their methods are made from
the operations by :func:`_sync` and :func:`_async` (same names, signatures and docs).
"""
from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from .._extras import extra_error

try:
    import httpx
except ModuleNotFoundError as exc:
    raise extra_error("client", "forewarn.guard.client", exc) from None

from ..policy import Policy
from . import _core as core
from ._core import Op, RemoteDecision, Request, ServerError, SidecarUnreachable
from ._loopback import async_loopback, loopback

__all__ = ["AsyncClient", "AsyncRemoteSession", "Client", "RemoteDecision", "RemoteSession", "ServerError",
           "SidecarUnreachable", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8321"
P = ParamSpec("P")
T = TypeVar("T")


def _headers(api_key: str | None) -> dict[str, str]:
    key = api_key if api_key is not None else os.environ.get("FOREWARN_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def _url(url: str | None) -> str:
    return (url or os.environ.get("FOREWARN_URL") or DEFAULT_URL).rstrip("/")


class _Sync(Protocol):
    def _drive(self, op: Op[T]) -> T: ...


class _Async(Protocol):
    async def _drive(self, op: Op[T]) -> T: ...


class _SyncSession(_Sync, core.SessionLike, Protocol):
    pass


class _AsyncSession(_Async, core.SessionLike, Protocol):
    pass


def _like(method: Any, op: Callable[..., Any], *, on_session: bool) -> Any:
    """Give ``method`` the name, doc and signature (``self`` first) of the operation it drives."""
    method.__name__ = method.__qualname__ = op.__name__.removeprefix("session_")
    method.__doc__ = op.__doc__
    params = list(inspect.signature(op).parameters.values())
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    answer = inspect.signature(op).return_annotation  # 'Op[X]': the method answers X
    if isinstance(answer, str) and answer.startswith("Op[") and answer.endswith("]"):
        answer = answer[3:-1]
    method.__signature__ = inspect.signature(op).replace(parameters=[self_param, *params[on_session:]],
                                                         return_annotation=answer)
    return method


def _sync(op: Callable[P, Op[T]]) -> Callable[Concatenate[_Sync, P], T]:
    def method(self: _Sync, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._drive(op(*args, **kwargs))
    return cast(Callable[Concatenate[_Sync, P], T], _like(method, op, on_session=False))


def _async(op: Callable[P, Op[T]]) -> Callable[Concatenate[_Async, P], Coroutine[Any, Any, T]]:
    async def method(self: _Async, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._drive(op(*args, **kwargs))
    return cast(Callable[Concatenate[_Async, P], Coroutine[Any, Any, T]], _like(method, op, on_session=False))


def _sync_session(op: Callable[Concatenate[core.SessionLike, P], Op[T]]
                  ) -> Callable[Concatenate[_SyncSession, P], T]:
    def method(self: _SyncSession, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._drive(op(self, *args, **kwargs))
    return cast(Callable[Concatenate[_SyncSession, P], T], _like(method, op, on_session=True))


def _async_session(op: Callable[Concatenate[core.SessionLike, P], Op[T]]
                   ) -> Callable[Concatenate[_AsyncSession, P], Coroutine[Any, Any, T]]:
    async def method(self: _AsyncSession, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._drive(op(self, *args, **kwargs))
    return cast(Callable[Concatenate[_AsyncSession, P], Coroutine[Any, Any, T]], _like(method, op, on_session=True))


class Client:
    """A synchronous client of one sidecar.

    Args:
        url: the server's base URL (default ``FOREWARN_URL`` or http://127.0.0.1:8321).
        api_key: the bearer key (default ``FOREWARN_API_KEY``).
        timeout: seconds per request (long polls add their wait to it).
        transport: an httpx transport, e.g. for tests.
        retries: attempts after a transport error (see the module docstring for which requests).
    """

    def __init__(self, url: str | None = None, *, api_key: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None, retries: int = 8) -> None:
        self.url = _url(url)
        self.retries = retries
        self._http = httpx.Client(base_url=self.url, headers=_headers(api_key), timeout=timeout,
                                  transport=transport)
        # a sidecar on this machine: the standard library's connections (see guard.client._loopback)
        self._fast = None if transport is not None else loopback(self.url, _headers(api_key), timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        if self._fast is not None:
            self._fast.close()

    def _send(self, request: Request) -> Any:
        headers, content, timeout = request.headers(), request.content(), request.timeout(self._http.timeout)
        http: Any = self._fast or self._http
        attempt = 0
        while True:
            try:
                return request.answer(http.request(request.method, request.path, headers=headers,
                                                   content=content, params=request.params, **timeout))
            except httpx.TransportError as exc:
                time.sleep(request.backoff(exc, attempt, self.retries, self.url))
                attempt += 1

    def _drive(self, op: Op[T]) -> T:
        """Run an operation: send each request it yields, hand it the answer (or the error)."""
        try:
            request = next(op)
            while True:
                try:
                    answer = self._send(request)
                except ServerError as exc:
                    request = op.throw(exc)
                else:
                    request = op.send(answer)
        except StopIteration as done:
            return cast(T, done.value)

    def session(self, policy: Policy | Mapping[str, Any] | None = None, *, model: str | None = None,
                metadata: Mapping[str, Any] | None = None) -> RemoteSession:
        """A new session on the server (``Guard.session`` over HTTP)."""
        created = self._drive(core.create_session(policy, model=model, metadata=metadata))
        return RemoteSession(self, created["id"], created)

    def attach(self, session_id: str) -> RemoteSession:
        """An existing session, e.g. after the agent restarted."""
        return RemoteSession(self, session_id, self.get_session(session_id, limit=1))

    get_session = _sync(core.get_session)
    batch = _sync(core.batch)
    approvals = _sync(core.approvals)
    approval = _sync(core.approval)
    wait_for_approval = _sync(core.wait_for_approval)
    approve = _sync(core.approve)
    reject = _sync(core.reject)
    proposals = _sync(core.proposals)
    proposal = _sync(core.proposal)
    wait_for_proposal = _sync(core.wait_for_proposal)
    resolve_proposal = _sync(core.resolve_proposal)
    cancel_proposal = _sync(core.cancel_proposal)
    models = _sync(core.models)
    load_model = _sync(core.load_model)
    model_document = _sync(core.model_document)
    ready = _sync(core.ready)

    def guard(self, name: str | None = None, *, trusted_keys: Any = None) -> Any:
        """A local :class:`~guard.runtime.Guard` (or bundle guard) on the model the server serves as
        ``name``: the same decisions, computed in process (what the middleware previews with)."""
        from ..bundle import GuardBundle, parse_model_or_bundle
        from ..bundle_guard import BundleGuard
        from ..runtime import Guard

        loaded = parse_model_or_bundle(self.model_document(name), f"{self.url} model {name or '(default)'}",
                                       trusted_keys=trusted_keys)
        if isinstance(loaded, GuardBundle):
            return BundleGuard(loaded)
        return Guard(loaded)


class AsyncClient:
    """The asyncio twin of :class:`Client` (same arguments, same methods but ``guard``)."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None, retries: int = 8) -> None:
        self.url = _url(url)
        self.retries = retries
        self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(api_key), timeout=timeout,
                                       transport=transport)
        self._api_key = api_key  # for a synchronous twin (synchronous())
        # a sidecar on this machine: asyncio streams of our own, as the synchronous client's (guard.client._loopback)
        self._fast = None if transport is not None else async_loopback(self.url, _headers(api_key), timeout)

    def synchronous(self) -> Client:
        """A synchronous :class:`Client` of the same sidecar, key, timeout and retries (the caller closes
        it): for the paths that cannot await, as the LangChain middleware's sync hooks and approvals."""
        return Client(self.url, api_key=self._api_key, timeout=self._http.timeout.read or 30.0,
                      retries=self.retries)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._fast is not None:
            self._fast.close()

    async def _send(self, request: Request) -> Any:
        headers, content, timeout = request.headers(), request.content(), request.timeout(self._http.timeout)
        http: Any = self._fast or self._http
        attempt = 0
        while True:
            try:
                return request.answer(await http.request(request.method, request.path, headers=headers,
                                                         content=content, params=request.params, **timeout))
            except httpx.TransportError as exc:
                await asyncio.sleep(request.backoff(exc, attempt, self.retries, self.url))
                attempt += 1

    async def _drive(self, op: Op[T]) -> T:
        """Run an operation: send each request it yields, hand it the answer (or the error)."""
        try:
            request = next(op)
            while True:
                try:
                    answer = await self._send(request)
                except ServerError as exc:
                    request = op.throw(exc)
                else:
                    request = op.send(answer)
        except StopIteration as done:
            return cast(T, done.value)

    async def session(self, policy: Policy | Mapping[str, Any] | None = None, *, model: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> AsyncRemoteSession:
        """A new session on the server (``Guard.session`` over HTTP)."""
        created = await self._drive(core.create_session(policy, model=model, metadata=metadata))
        return AsyncRemoteSession(self, created["id"], created)

    async def attach(self, session_id: str) -> AsyncRemoteSession:
        """An existing session, e.g. after the agent restarted."""
        return AsyncRemoteSession(self, session_id, await self.get_session(session_id, limit=1))

    get_session = _async(core.get_session)
    batch = _async(core.batch)
    approvals = _async(core.approvals)
    approval = _async(core.approval)
    wait_for_approval = _async(core.wait_for_approval)
    approve = _async(core.approve)
    reject = _async(core.reject)
    proposals = _async(core.proposals)
    proposal = _async(core.proposal)
    wait_for_proposal = _async(core.wait_for_proposal)
    resolve_proposal = _async(core.resolve_proposal)
    cancel_proposal = _async(core.cancel_proposal)
    models = _async(core.models)
    load_model = _async(core.load_model)
    model_document = _async(core.model_document)
    ready = _async(core.ready)


class RemoteSession:
    """A session on the server, with the methods of :class:`guard.runtime.Session`."""

    def __init__(self, client: Client, session_id: str, info: Mapping[str, Any]) -> None:
        self.client = client
        self.id = session_id
        self.info = dict(info)
        self.last: RemoteDecision | None = None

    def _drive(self, op: Op[T]) -> T:
        return self.client._drive(op)

    observe = _sync_session(core.observe)
    propose = _sync_session(core.propose)
    preview = _sync_session(core.preview)
    wait_for_approval = _sync_session(core.session_wait_for_approval)
    history = _sync_session(core.history)
    close = _sync_session(core.close)


class AsyncRemoteSession:
    """The asyncio twin of :class:`RemoteSession`."""

    def __init__(self, client: AsyncClient, session_id: str, info: Mapping[str, Any]) -> None:
        self.client = client
        self.id = session_id
        self.info = dict(info)
        self.last: RemoteDecision | None = None

    async def _drive(self, op: Op[T]) -> T:
        return await self.client._drive(op)

    observe = _async_session(core.observe)
    propose = _async_session(core.propose)
    preview = _async_session(core.preview)
    wait_for_approval = _async_session(core.session_wait_for_approval)
    history = _async_session(core.history)
    close = _async_session(core.close)
