# -*- test-case-name: tests.client.test_requests,tests.integration.test_client -*-
"""
The one way the client's requests are made: :class:`Requests` holds the
connection pool and the agent (TCP or the daemon's UNIX socket), sends each
request with the same headers, and turns non-2xx answers into
:class:`~vmservice.client.errors.ApiError` and unreachable daemons into
:class:`~vmservice.client.errors.ConnectFailed`.  Each family of calls
(:mod:`vmservice.client.nodes`, :mod:`vmservice.client.execs`, ...) is a
subclass that adds its operations as small methods over it.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any, Iterable, Mapping, Sequence
from urllib.parse import quote

import treq
from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectError, DNSLookupError
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool, RequestTransmissionFailed, ResponseFailed
from twisted.web.iweb import IBodyProducer, IResponse

from .. import __version__
from .._duplex import DuplexBody, DuplexPool
from .addresses import DEFAULT_URL, SOCKET_BASE, UnixEndpoints, base_url, is_unix_socket, socket_path
from .bodies import producer_of
from .errors import ApiError, ConnectFailed
from .reactors import IClientReactor

__all__ = ["Requests"]

_USER_AGENT = f"vmservice-client/{__version__}".encode("ascii")

_Params = Mapping[str, "str | int | bool | Sequence[str] | None"]


class Requests:
    """
    Requests to one vmservice daemon, the base of every family of calls.

    :param reactor: the reactor the requests run on (see
        :class:`~vmservice.client.reactors.IClientReactor`).
    :param url: ``http(s)://host:port``, or a UNIX socket path (see
        :func:`~vmservice.client.addresses.is_unix_socket`).
    :param token: the bearer token; no ``Authorization`` header is sent when
        it is ``None`` (a daemon with authentication off).

    Connections are kept open between calls; :meth:`close` closes them.
    """

    def __init__(self, reactor: IClientReactor, url: str = DEFAULT_URL, token: str | None = None) -> None:
        self._reactor = reactor
        self.url = url
        self._token = token
        self._pool: HTTPConnectionPool = DuplexPool(reactor, persistent=True)
        if is_unix_socket(url):
            self._base = SOCKET_BASE
            agent = Agent.usingEndpointFactory(reactor, UnixEndpoints(reactor, socket_path(url)), pool=self._pool)
        else:
            self._base = base_url(url)
            agent = Agent(reactor, pool=self._pool)
        self._http = HTTPClient(agent)

    async def close(self) -> None:
        """Close the connections kept for reuse; call it when done with the client."""
        await self._pool.closeCachedConnections()

    def _headers(self, headers: Mapping[bytes, bytes] | None) -> dict[bytes | str, list[bytes | str]]:
        """Every request's headers (User-Agent, Accept, the token) with ``headers`` over them."""
        all_headers: dict[bytes | str, list[bytes | str]] = {
            b"User-Agent": [_USER_AGENT],
            b"Accept": [b"application/json"],
        }
        for name, value in (headers or {}).items():
            all_headers[name] = [value]
        if self._token is not None:
            all_headers[b"Authorization"] = [b"Bearer " + self._token.encode("utf-8")]
        return all_headers

    async def _send(
        self,
        method: str,
        path: str,
        params: _Params | None = None,
        json: Any = None,
        *,
        data: IBodyProducer | bytes | None = None,
        headers: Mapping[bytes, bytes] | None = None,
        ok: Sequence[int] = (),
    ) -> IResponse:
        """
        Send one request and answer the response once its headers are in,
        its body unread, so callers can stream it.

        :param path: the request path, built with :func:`_path`.
        :param params: query parameters (see :func:`_params`).
        :param json: a JSON body, or ``None`` for no body.
        :param data: a raw body instead: bytes, or a producer streamed as it
            produces (a :class:`~vmservice._duplex.DuplexBody` is answered as soon as the
            response's headers arrive, before it has been sent whole).
        :param headers: extra headers (``Accept`` replaces the JSON default).
        :param ok: non-2xx statuses the caller handles itself instead of an
            :class:`ApiError` (``HEAD /health`` answers 503 for "unhealthy").
        :raise ApiError: the daemon answered another non-2xx status.
        :raise ConnectFailed: the daemon could not be reached.
        """
        kwargs: dict[str, Any] = {}
        if json is not None:
            kwargs["json"] = json
        elif data is not None:
            kwargs["data"] = data
        sent = self._http.request(
            method,
            self._base + path,
            params=_params(params),
            headers=self._headers(headers),
            allow_redirects=False,
            # treq names what it needs of a reactor with a private interface
            # (IReactorTCP, IReactorTime, IReactorPluggableNameResolver), which
            # IClientReactor includes but cannot name.
            reactor=self._reactor,  # type: ignore[arg-type]
            **kwargs,
        )
        try:
            if isinstance(data, DuplexBody):
                response = await _first(data.response, sent)
            else:
                response = await sent
        except (ConnectError, DNSLookupError) as error:
            raise ConnectFailed(self.url, _reason(error)) from error
        if not 200 <= response.code < 300 and response.code not in ok:
            body = await treq.content(response)
            raise ApiError.from_body(response.code, body)
        return response

    async def _request(
        self,
        method: str,
        path: str,
        params: _Params | None = None,
        json: Any = None,
        *,
        ok: Sequence[int] = (),
    ) -> tuple[IResponse, bytes]:
        """Send one request (see :meth:`_send`) and read its whole body."""
        response = await self._send(method, path, params, json, ok=ok)
        body = await treq.content(response)
        return response, body

    async def _json(self, method: str, path: str, params: _Params | None = None, json: Any = None) -> Any:
        """Send a request and decode its JSON answer."""
        response, body = await self._request(method, path, params, json)
        try:
            return _loads(body)
        except ValueError as error:
            raise ApiError(response.code, "invalid_response", f"the daemon's answer is not JSON: {error}") from None

    async def _text(self, method: str, path: str, params: _Params | None = None) -> str:
        """Send a request whose answer is ``text/plain`` and answer that text (UTF-8, invalid bytes replaced)."""
        response = await self._send(method, path, params, headers={b"Accept": b"text/plain, application/json"})
        body = await treq.content(response)
        return body.decode("utf-8", "replace")

    def _producer(self, source: IBodyProducer | IO[bytes] | bytes) -> IBodyProducer:
        """``source`` as a request body (see :func:`~vmservice.client.bodies.producer_of`)."""
        return producer_of(self._reactor, source)


def _path(*segments: str) -> str:
    """An absolute request path from ``segments``, each quoted whole (``/`` included)."""
    return "".join("/" + quote(segment, safe="") for segment in segments)


def _params(params: _Params | None) -> list[tuple[str, str]]:
    """Query pairs from ``params``: ``None`` left out, sequences repeated, numbers as text."""
    pairs: list[tuple[str, str]] = []
    for name, value in (params or {}).items():
        if value is None:
            continue
        values: Iterable[Any] = [value] if isinstance(value, (str, int)) else value
        pairs.extend((name, _text(item)) for item in values)
    return pairs


def _text(value: object) -> str:
    """A query value: booleans as ``true``/``false``, anything else as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _octal(value: int | str | None) -> str | None:
    """A mode as the API's octal text (``0644``); text is sent as given."""
    if value is None or isinstance(value, str):
        return value
    return f"{value:04o}"


async def _first(early: Deferred[IResponse], sent: Deferred[IResponse]) -> IResponse:
    """
    The response of a duplex request: from ``early`` (headers parsed) or
    ``sent`` (the request finished), whichever comes first; a failure of
    ``sent`` wins when ``early`` has not fired.  The other one's later result
    is consumed, so it is never reported as unhandled.
    """
    result: Deferred[IResponse] = Deferred()

    def won(value: IResponse) -> None:
        if not result.called:
            result.callback(value)

    def lost(failure: Failure) -> None:
        if not result.called:
            result.errback(failure)

    early.addCallback(won)
    sent.addCallbacks(won, lost)
    return await result


def _is_connection_loss(error: Exception) -> bool:
    return isinstance(error, (ResponseFailed, RequestTransmissionFailed))


def _losses(error: Exception) -> str:
    reasons = getattr(error, "reasons", None) or []
    return "; ".join(reason.getErrorMessage() for reason in reasons) or type(error).__name__


def _loads(body: bytes) -> Any:
    return json.loads(body.decode("utf-8"))


def _reason(error: Exception) -> str:
    """The operating system's words for a failed connection, without Twisted's prefix."""
    os_error = getattr(error, "osError", None)
    if isinstance(os_error, str) and os_error:
        return os_error.rstrip(".")
    if isinstance(os_error, int):
        return os.strerror(os_error)
    return str(error).rstrip(".") or type(error).__name__
