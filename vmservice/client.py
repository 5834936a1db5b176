# -*- test-case-name: tests.test_client -*-
"""
The Python client of the vmservice HTTP API, built on treq.

It speaks to a daemon over TCP (``http://host:port``) or over a UNIX socket
(any address that starts with ``/``, ``./``, ``../``, ``~/`` or ``unix://``, or
ends in ``.sock``: the rule every Slicer client follows, so one address works
with all of them).  Every call is a coroutine that answers the decoded JSON
body; a non-2xx answer raises :class:`ApiError` carrying the daemon's
ErrorResponse, and a daemon that cannot be reached raises
:class:`ConnectFailed` naming the address, so callers never see raw Twisted
connection errors.

All requests go through :meth:`Client._send` (and :meth:`Client._request`,
which reads the whole answer), so each operation is one small method.
Operations whose data can be large stream it both ways instead of holding it:

- :meth:`Client.exec` hands each NDJSON record to a callback as it arrives
  (read with :func:`treq.collect`); with ``stdin`` the request body streams
  from an ``IBodyProducer`` or a file while the output comes back (full
  duplex, see :class:`_DuplexPool`);
- :meth:`Client.upload` streams a file, a pipe (chunked) or a producer;
  :meth:`Client.download` hands each chunk to a ``write`` callback.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

import treq
from treq.client import HTTPClient
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.error import ConnectError, DNSLookupError
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http import RESPONSES
from twisted.web.iweb import IAgentEndpointFactory, IResponse
from zope.interface import implementer

from . import __version__

__all__ = ["ApiError", "Client", "ConnectFailed", "DEFAULT_URL", "is_unix_socket", "socket_path"]

#: Where a daemon listens when nothing else is configured.
DEFAULT_URL = "http://127.0.0.1:8080"

#: The base URL requests carry over a UNIX socket; the daemon ignores the host.
_SOCKET_BASE = "http://localhost"

_USER_AGENT = f"vmservice-client/{__version__}".encode("ascii")

_Params = Mapping[str, "str | int | Sequence[str] | None"]


class ApiError(Exception):
    """
    The daemon answered with a status other than 2xx.

    :ivar status: the HTTP status code.
    :ivar code: the ErrorResponse's stable snake_case ``code``, or ``None``
        when the body had none (or was not an ErrorResponse at all).
    :ivar message: the ErrorResponse's ``error``; for a body that is not
        JSON, its text; for an empty body, the status phrase.
    """

    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    @classmethod
    def from_body(cls, status: int, body: bytes) -> "ApiError":
        """
        Build the error from a response body: an ErrorResponse when it is
        one, otherwise whatever text the body holds.
        """
        text = body.decode("utf-8", "replace").strip()
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
            code = decoded.get("code")
            return cls(status, code if isinstance(code, str) and code else None, decoded["error"])
        if not text:
            text = RESPONSES.get(status, b"").decode("ascii") or f"HTTP {status}"
        return cls(status, None, text)


class ConnectFailed(Exception):
    """
    The daemon could not be reached at all (refused, no such socket, no
    such host).

    :ivar url: the address the client was made with.
    :ivar reason: what the operating system said.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url, reason)
        self.url = url
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot connect to {self.url}: {self.reason}"


def is_unix_socket(url: str) -> bool:
    """
    Whether ``url`` names a UNIX socket rather than an HTTP address, by the
    rule shared with the Go and TypeScript clients.
    """
    return url.startswith(("/", "./", "../", "~/", "unix://")) or url.endswith(".sock")


def socket_path(url: str) -> str:
    """
    The file system path of the UNIX socket ``url`` names: ``unix://`` is
    dropped and a leading ``~`` expanded.
    """
    path = url[len("unix://"):] if url.startswith("unix://") else url
    return os.path.expanduser(path)


def _base_url(url: str) -> str:
    """``url`` without a trailing slash, with ``http://`` when no scheme is given."""
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


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
        pairs.extend((name, str(item)) for item in values)
    return pairs


@implementer(IAgentEndpointFactory)
class _UnixEndpoints:
    """Every URI goes to the one UNIX socket (the Host is meaningless there)."""

    def __init__(self, reactor: Any, path: str) -> None:
        self._reactor = reactor
        self._path = path

    def endpointForURI(self, uri: Any) -> UNIXClientEndpoint:
        return UNIXClientEndpoint(self._reactor, self._path)


class Client:
    """
    A connection to one vmservice daemon.

    :param reactor: an ``IReactorTCP``, ``IReactorUNIX`` and ``IReactorTime``
        provider the requests run on.
    :param url: ``http(s)://host:port``, or a UNIX socket path (see
        :func:`is_unix_socket`).
    :param token: the bearer token; no ``Authorization`` header is sent when
        it is ``None`` (a daemon with authentication off).

    Connections are kept open between calls; :meth:`close` closes them.
    """

    def __init__(self, reactor: Any, url: str = DEFAULT_URL, token: str | None = None) -> None:
        self._reactor = reactor
        self.url = url
        self._token = token
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        if is_unix_socket(url):
            self._base = _SOCKET_BASE
            agent = Agent.usingEndpointFactory(reactor, _UnixEndpoints(reactor, socket_path(url)), pool=self._pool)
        else:
            self._base = _base_url(url)
            agent = Agent(reactor, pool=self._pool)
        self._http = HTTPClient(agent)

    async def close(self) -> None:
        """Close the connections kept for reuse; call it when done with the client."""
        await self._pool.closeCachedConnections()

    # -- the one way requests are made -----------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        params: _Params | None = None,
        json: Any = None,
        *,
        ok: Sequence[int] = (),
    ) -> tuple[IResponse, bytes]:
        """
        Send one request and read its whole body.

        :param path: the request path, built with :func:`_path`.
        :param params: query parameters (see :func:`_params`).
        :param json: a JSON body, or ``None`` for no body.
        :param ok: non-2xx statuses the caller handles itself instead of an
            :class:`ApiError` (``HEAD /health`` answers 503 for "unhealthy").
        :raise ApiError: the daemon answered another non-2xx status.
        :raise ConnectFailed: the daemon could not be reached.
        """
        headers = {b"User-Agent": [_USER_AGENT], b"Accept": [b"application/json"]}
        if self._token is not None:
            headers[b"Authorization"] = [b"Bearer " + self._token.encode("utf-8")]
        kwargs: dict[str, Any] = {}
        if json is not None:
            kwargs["json"] = json
        try:
            response = await self._http.request(
                method,
                self._base + path,
                params=_params(params),
                headers=headers,
                allow_redirects=False,
                reactor=self._reactor,
                **kwargs,
            )
        except (ConnectError, DNSLookupError) as error:
            raise ConnectFailed(self.url, _reason(error)) from error
        body = await treq.content(response)
        if not 200 <= response.code < 300 and response.code not in ok:
            raise ApiError.from_body(response.code, body)
        return response, body

    async def _json(self, method: str, path: str, params: _Params | None = None, json: Any = None) -> Any:
        """Send a request and decode its JSON answer."""
        response, body = await self._request(method, path, params, json)
        try:
            return _loads(body)
        except ValueError as error:
            raise ApiError(response.code, "invalid_response", f"the daemon's answer is not JSON: {error}") from None

    # -- the daemon ------------------------------------------------------

    async def info(self) -> dict[str, Any]:
        """The daemon's version and platform (``GET /info``)."""
        result: dict[str, Any] = await self._json("GET", _path("info"))
        return result

    # -- host groups and nodes -------------------------------------------

    async def hostgroups(self) -> list[dict[str, Any]]:
        """Every host group with its limits (``GET /hostgroup``)."""
        result: list[dict[str, Any]] = await self._json("GET", _path("hostgroup"))
        return result

    async def nodes(
        self, group: str | None = None, *, tag: str | None = None, tag_prefix: str | None = None
    ) -> list[dict[str, Any]]:
        """
        The nodes of the daemon, or of one host group, optionally only those
        with an exact ``tag`` or a tag starting with ``tag_prefix``.
        """
        path = _path("hostgroup", group, "nodes") if group is not None else _path("nodes")
        result: list[dict[str, Any]] = await self._json("GET", path, {"tag": tag, "tag_prefix": tag_prefix})
        return result

    async def create_node(
        self, group: str, body: dict[str, Any] | None = None, *, wait: str | None = None, timeout: str | None = None
    ) -> dict[str, Any]:
        """
        Create a node in ``group``.

        :param body: a CreateNodeRequest (``{"tags": [...], "cpus": 1}``);
            ``None`` for the group's defaults.
        :param wait: ``"agent"`` to answer only once the guest agent is up.
        :param timeout: how long ``wait`` may take, as a Go duration
            (``"2m"``); past it the daemon removes the node and answers 408.
        :return: the CreateNodeResponse (``hostname``, ``ip``, ...).
        """
        result: dict[str, Any] = await self._json(
            "POST", _path("hostgroup", group, "nodes"), {"wait": wait, "timeout": timeout}, body or {}
        )
        return result

    async def delete_node(self, group: str, hostname: str) -> dict[str, Any]:
        """Delete node ``hostname`` of ``group``; answers the DeleteResponse."""
        result: dict[str, Any] = await self._json("DELETE", _path("hostgroup", group, "nodes", hostname))
        return result

    # -- one node --------------------------------------------------------

    async def logs(self, hostname: str, lines: int | None = None) -> dict[str, Any]:
        """
        The tail of the node's serial console: the last ``lines`` lines (the
        daemon's default when ``None``; ``0`` for all of it).
        """
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "logs"), {"lines": lines})
        return result

    async def health(self, hostname: str) -> dict[str, Any]:
        """
        The guest agent's health (uptimes in nanoseconds).

        :raise ApiError: status 503 when the agent does not answer.
        """
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "health"))
        return result

    async def healthy(self, hostname: str) -> bool:
        """
        Whether the node's agent answers, asked with ``HEAD`` (no body):
        ``True`` on 200, ``False`` on 503.

        :raise ApiError: any other status, e.g. 404 for an unknown node.
        """
        response, _ = await self._request("HEAD", _path("vm", hostname, "health"), ok=(503,))
        return response.code != 503


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
