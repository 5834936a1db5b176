# -*- test-case-name: tests.e2b.test_data_plane -*-
"""
A sandbox's data plane (envd: every request carrying ``E2b-Sandbox-Id``):
the router between the HTTP requests and the services that serve them.

``GET /health`` answers 204 for a running sandbox and 502 for one that is
paused or gone (the only status the SDKs read as "not running"; with
``Should-Retry: false``, which they obey); any other call to a sandbox that
is not running gets the same 502.  Then the call's user is read
(:mod:`.users`), its ``X-Access-Token`` checked against the sandbox's
(envd's 401 otherwise; the plain routes, which may be signed instead, are
told whether it matched), its node's guest found and its idle timer held
for the call's length, and the call goes to its service:

- a Connect RPC (``POST /<package.Service>/<Method>``) to the
  :class:`RpcMethod` registered under ``package.Service/Method``: a unary
  one answers one message, a server-streaming one sends its messages to a
  :class:`MessageSink` and the router ends the stream (``{}`` or the error);
  a ``Connect-Timeout-Ms`` header bounds either (``deadline_exceeded``);
- any other path to the :data:`PlainHandler` registered for it (``/files``).

A client that goes away cancels its call; a streaming call's client that
stops reading loses its connection once :data:`MAX_UNREAD` bytes of
messages wait for it.  Every failure is answered through
:func:`~.envd_failures.connect_error_of`.
"""

from __future__ import annotations

import json
import re
from hmac import compare_digest
from typing import Any, Awaitable, Callable, Coroutine, Mapping, Optional, Protocol

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.server import NOT_DONE_YET, Request
from zope.interface import implementer

from ..api.streaming import drop_connection
from ..errors import NotFound
from ..guestport.guest import IGuest
from .connect import (STREAM_TYPE, UNARY_TYPE, Code, ConnectError, end_envelope, envelope, error_body,
                      message_bytes, request_message, stream_request)
from .control import answer, body_of
from .envd_failures import connect_error_of
from .failures import error_body as e2b_error_body
from .host import SandboxHost
from .sandbox import Sandbox, SandboxState
from .sandboxes import Sandboxes
from .users import EnvdUser, user_of_authorization

log = Logger(namespace="vmservice.e2b")

#: A Connect RPC call's path.
RPC_PATH = re.compile(r"/([A-Za-z_][A-Za-z0-9_.]*\.[A-Za-z_][A-Za-z0-9_]*/[A-Za-z_][A-Za-z0-9_]*)")
#: The longest ``Connect-Timeout-Ms`` honoured (Connect allows 10 digits).
MAX_TIMEOUT_MS = 10 ** 10 - 1
#: The most bytes of a stream's messages kept for a client that stopped reading them.
MAX_UNREAD = 8 * 1024 * 1024


@frozen
class EnvdCall:
    """
    One call to a sandbox's data plane, as its service sees it.

    :ivar sandbox: the sandbox (its environment, its access token).
    :ivar guest: its node's guest.
    :ivar user: the user the call acts as.
    :ivar token_ok: whether the call carried the sandbox's access token (or
        the sandbox has none); a plain route that accepts a signature instead
        checks one when this is false.
    """

    sandbox: Sandbox
    guest: IGuest
    user: EnvdUser
    token_ok: bool


class MessageSink(Protocol):
    """Where a server-streaming method sends its messages."""

    @property
    def expired(self) -> bool:
        """Whether the call's ``Connect-Timeout-Ms`` passed (the method is cancelled for it)."""

    def send(self, message: Mapping[str, Any]) -> None:
        """Send one message to the client."""

    def abort(self) -> None:
        """Break the connection (no end envelope: the stream did not end, it broke)."""


#: A unary method: the request's message in, the answer's out.
Unary = Callable[[EnvdCall, dict[str, Any]], Awaitable[Mapping[str, Any]]]
#: A server-streaming method: the request's message in, its messages to the sink; it returns when the stream ends.
ServerStream = Callable[[EnvdCall, dict[str, Any], MessageSink], Awaitable[None]]
#: A plain HTTP route: it answers the request itself.
PlainHandler = Callable[[EnvdCall, IRequest], Awaitable[None]]


@frozen
class RpcMethod:
    """A method of a service: exactly one of ``unary`` and ``stream``."""

    unary: Optional[Unary] = None
    stream: Optional[ServerStream] = None


@implementer(IPushProducer)
class _ResponseSink:
    """
    A :class:`MessageSink` over a streaming response.  It is the response's
    producer, so it hears when the client's connection stops taking bytes:
    a client that leaves more than :data:`MAX_UNREAD` bytes of messages
    unread loses its connection, rather than the daemon keeping them.
    """

    def __init__(self, request: Request) -> None:
        self._request = request
        self.started = self.aborted = self.expired = self._paused = False
        self._unread = 0

    def start(self) -> None:
        if not self.started:
            self.started = True
            self._request.setResponseCode(200)
            self._request.setHeader(b"Content-Type", STREAM_TYPE)
            self._request.registerProducer(self, True)

    def send(self, message: Mapping[str, Any]) -> None:
        if not (self.aborted or getattr(self._request, "_disconnected", False)):
            self.start()
            data = envelope(message)
            if self._paused:
                self._unread += len(data)
                if self._unread > MAX_UNREAD:
                    self.abort()
                    return
            self._request.write(data)

    def finish(self, data: bytes) -> None:
        """Write the end envelope ``data`` and end the response."""
        if self.started and not getattr(self._request, "_disconnected", False):
            self._request.unregisterProducer()
        _finish(self._request, data)

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused, self._unread = False, 0

    def stopProducing(self) -> None:
        """The connection is gone: the router hears it from the request."""

    def abort(self) -> None:
        self.aborted = True
        drop_connection(self._request)


class DataPlane:
    """
    The sandboxes' data plane.

    :param clock: the reactor's clock (deadlines).
    :param sandboxes: the sandboxes.
    :param host: the nodes under them (guests, idle holds).
    :param methods: the RPC methods, by ``package.Service/Method``.
    :param plain: the plain routes, by method and path.
    """

    def __init__(self, clock: IReactorTime, sandboxes: Sandboxes, host: SandboxHost,
                 methods: Mapping[str, RpcMethod] | None = None,
                 plain: Mapping[tuple[bytes, str], PlainHandler] | None = None) -> None:
        self._clock, self.sandboxes, self._host = clock, sandboxes, host
        self._methods = dict(methods or {})
        self._plain = dict(plain or {})

    def _sandbox(self, sandbox_id: str) -> Sandbox | None:
        try:
            view = self.sandboxes.get(sandbox_id)
        except NotFound:
            return None
        return view.sandbox if view.state is SandboxState.RUNNING else None

    def render(self, request: Request, sandbox_id: str) -> int:
        """Answer ``request`` of sandbox ``sandbox_id``."""
        path = (request.path or b"").decode("latin-1")
        sandbox = self._sandbox(sandbox_id)
        if sandbox is None:
            # Said once: the SDKs retry a 502 without it.
            answer(request, 502, json.dumps({"sandboxId": sandbox_id[:64], "code": 502,
                                             "message": "The sandbox is not running"}).encode(),
                   {b"Should-Retry": b"false"})
        elif path == "/health" and request.method in (b"GET", b"HEAD"):
            answer(request, 204, None)
        else:
            served = Deferred.fromCoroutine(self._serve(request, sandbox, path))
            request.notifyFinish().addErrback(lambda _: served.cancel())
        return NOT_DONE_YET

    async def _serve(self, request: Request, sandbox: Sandbox, path: str) -> None:
        rpc = RPC_PATH.fullmatch(path) if request.method == b"POST" else None
        streaming = rpc is not None and media_type(request) == STREAM_TYPE
        sink = _ResponseSink(request)
        release = self._host.hold(sandbox.sandbox_id)
        try:
            token = (request.getHeader(b"x-access-token") or b"").decode("latin-1")
            token_ok = not sandbox.access_token or compare_digest(token, sandbox.access_token)
            handler = self._handler(request, path, rpc.group(1) if rpc else None, streaming)
            if not token_ok and not (rpc is None and (request.method, path) in self._plain):
                raise ConnectError(Code.UNAUTHENTICATED, "unauthorized access, please provide a valid access "
                                                         "token or method signing if supported")
            user = user_of_authorization(request.getHeader(b"authorization"))
            call = EnvdCall(sandbox, await self._host.guest(sandbox.sandbox_id), user, token_ok)
            await self._bounded(request, handler(call, request, sink), sink)
        except CancelledError:
            return
        except Exception as error:
            self._failed(request, path, error, sink if streaming else None)
            return
        finally:
            release()
        if streaming and not sink.aborted:
            sink.start()
            sink.finish(end_envelope())

    def _handler(self, request: IRequest, path: str, name: str | None,
                 streaming: bool) -> Callable[[EnvdCall, IRequest, _ResponseSink], Awaitable[None]]:
        if name is None:
            plain = self._plain.get((request.method, path))
            if plain is None:
                raise NotFound(f"{path[:200]} is not served by this daemon")
            return lambda call, request, sink: plain(call, request)
        method = self._methods.get(name)
        if method is None:
            raise ConnectError(Code.UNIMPLEMENTED, f"{name} is not served by this daemon")
        if streaming and method.stream is not None:
            stream = method.stream
            return lambda call, request, sink: stream(call, stream_request(body_of(request)), sink)
        if not streaming and method.unary is not None:
            unary = method.unary

            async def answered(call: EnvdCall, request: IRequest, sink: _ResponseSink) -> None:
                result = await unary(call, request_message(body_of(request)))
                request.setHeader(b"Content-Type", UNARY_TYPE)
                _finish(request, message_bytes(result))
            return answered
        raise ConnectError(Code.INVALID_ARGUMENT, f"{name} is {'not ' if streaming else ''}a unary method")

    async def _bounded(self, request: IRequest, work: Awaitable[None], sink: _ResponseSink) -> None:
        """Await ``work``, cancelled at the call's ``Connect-Timeout-Ms`` (``sink`` told it expired)."""
        try:
            timeout = _timeout_ms(request)
        except ConnectError:
            if isinstance(work, Coroutine):
                work.close()
            raise
        running: Deferred[None] = Deferred.fromCoroutine(_awaited(work))
        if timeout is None:
            await running
            return
        expired: list[bool] = []

        def expire() -> None:
            expired.append(True)
            sink.expired = True
            running.cancel()

        timer: IDelayedCall = self._clock.callLater(timeout / 1000, expire)
        try:
            await running
        except CancelledError:
            if expired:
                raise ConnectError(Code.DEADLINE_EXCEEDED, "the call's deadline passed") from None
            raise
        finally:
            if timer.active():
                timer.cancel()

    def _failed(self, request: IRequest, path: str, error: Exception, sink: _ResponseSink | None) -> None:
        if isinstance(error, NotFound) and not RPC_PATH.fullmatch(path):
            answer(request, 404, e2b_error_body(404, error.message))
            return
        failure = connect_error_of(error)
        if failure.code is Code.INTERNAL and not isinstance(error, ConnectError):
            log.failure("envd {path} failed", Failure(error), path=path)
        if sink is not None and sink.aborted:
            return
        if sink is not None:
            sink.start()
            sink.finish(end_envelope(failure))
        elif getattr(request, "startedWriting", False):
            _finish(request, b"")
        else:
            answer(request, failure.status, error_body(failure))


async def _awaited(work: Awaitable[None]) -> None:
    await work


def _finish(request: IRequest, data: bytes) -> None:
    if not getattr(request, "_disconnected", False):
        if data:
            request.write(data)
        request.finish()


def media_type(request: IRequest) -> bytes:
    """A request's media type (its ``Content-Type`` without parameters, lower case)."""
    return (request.getHeader(b"content-type") or b"").split(b";")[0].strip().lower()


def _timeout_ms(request: IRequest) -> int | None:
    header = request.getHeader(b"connect-timeout-ms")
    if header is None:
        return None
    if not header.isdigit() or len(header) > 10:
        raise ConnectError(Code.INVALID_ARGUMENT, "Connect-Timeout-Ms is not a number of milliseconds")
    return min(int(header), MAX_TIMEOUT_MS)


__all__ = ["DataPlane", "EnvdCall", "MessageSink", "PlainHandler", "RPC_PATH", "RpcMethod", "ServerStream", "Unary", "media_type"]
