# -*- test-case-name: tests.cluster.test_api_client -*-
"""
:class:`ApiClient`: calls of the Kubernetes API over treq, as the node.

Every call carries the node's bearer token; when the server answers 401 the
token is read again (tokens rotate) and the call made once more.  Redirects
are not followed (the token goes to the configured server only).  An answer
is read up to :data:`MAX_BODY` bytes within the call's timeout, parsed as
JSON and checked to be an object of the kind asked for; anything else is a
typed error of :mod:`.api_errors`, never a crash.  Watch streams are opened
with :meth:`ApiClient.stream`: their body goes to a protocol as it arrives.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Protocol as TypingProtocol

from twisted.internet.defer import CancelledError, Deferred, TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse

from ..bounded_body import BodyTooLarge, BoundedBody
from .api_errors import ApiError, BadResponse, Unavailable, status_error

#: The most bytes of one answer read (a Node or a Lease is a few KiB; a list of a node's pods far less than this).
MAX_BODY = 4 * 1024 * 1024
#: Seconds a call may take, from the request to the end of its answer.
CALL_TIMEOUT = 30.0

#: A JSON object as the API sends and takes it.
Json = dict[str, Any]

#: Content types of a PATCH body.
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class Requester(TypingProtocol):
    """What makes HTTP requests: treq's ``HTTPClient`` (and its test double)."""

    def request(self, method: str, url: str, *, headers: Headers | None = None, data: bytes | None = None,
                allow_redirects: bool = True, unbuffered: bool = False) -> "Deferred[Any]":
        """One request; its answer (an ``IResponse``), whose body the caller reads."""


def parse_object(body: bytes, kind: str | None) -> Json:
    """``body`` as a JSON object (of ``kind`` when given); :raise BadResponse: it is not one."""
    try:
        document = json.loads(body)
    except ValueError:
        raise BadResponse(0, "Malformed", "the answer is not JSON") from None
    if not isinstance(document, dict):
        raise BadResponse(0, "Malformed", "the answer is not a JSON object")
    if kind is not None and document.get("kind") != kind:
        raise BadResponse(0, "WrongKind", f"expected a {kind}, got {str(document.get('kind'))[:60]!r}")
    return document


class ApiClient:
    """
    The Kubernetes API as the node calls it.

    :param clock: times the calls.
    :param http: makes the requests (treq's ``HTTPClient`` with the TLS policy
        that trusts the configured CA only).
    :param server: the API server's URL, without a final ``/``.
    :param token: reads the node's token (again at each 401).
    """

    def __init__(self, clock: IReactorTime, http: Requester, server: str, token: Callable[[], str],
                 timeout: float = CALL_TIMEOUT, max_body: int = MAX_BODY) -> None:
        self._clock, self._http, self._server, self._read_token = clock, http, server, token
        self._timeout, self._max_body = timeout, max_body
        self._token: str | None = None

    def _headers(self, content_type: str | None) -> Headers:
        if self._token is None:
            self._token = self._read_token()
        headers = {b"Authorization": [b"Bearer " + self._token.encode("ascii")], b"Accept": [b"application/json"]}
        if content_type is not None:
            headers[b"Content-Type"] = [content_type.encode("ascii")]
        return Headers(headers)

    async def _answer(self, method: str, path: str, data: bytes | None, content_type: str | None) -> IResponse:
        """The answer's head, after one more try with the token read again when it is a 401."""
        for attempt in (1, 2):
            try:
                response: IResponse = await self._http.request(
                    method, self._server + path, headers=self._headers(content_type), data=data,
                    allow_redirects=False, unbuffered=True)
            except (CancelledError, ApiError):
                raise
            except Exception as error:  # a connection refused, reset, a TLS failure: the server is not reached
                raise Unavailable(0, type(error).__name__, str(error)) from None
            if response.code != 401 or attempt == 2:
                return response
            await self._body(response)  # read (and bounded) before the retry
            self._token = None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _body(self, response: IResponse) -> bytes:
        reader = BoundedBody(self._max_body)
        response.deliverBody(reader)
        try:
            return await reader.done
        except BodyTooLarge as error:
            raise BadResponse(0, "TooLarge", str(error)) from None
        except (CancelledError, ApiError):
            raise
        except Exception as error:
            raise Unavailable(0, "ConnectionLost", str(error) or type(error).__name__) from None

    async def _call(self, method: str, path: str, body: Mapping[str, Any] | None, content_type: str | None,
                    kind: str | None) -> Json:
        data = None if body is None else json.dumps(body).encode("utf-8")
        response = await self._answer(method, path, data, content_type)
        payload = await self._body(response)
        if not 200 <= response.code < 300:
            raise status_error(response.code, payload)
        return parse_object(payload, kind)

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None, *,
             content_type: str | None = None, kind: str | None = None) -> "Deferred[Json]":
        """
        One call: ``method`` on ``path`` (``/api/v1/nodes/NAME``) with a JSON
        ``body``; its answer, an object of ``kind`` when given.

        :raise ApiError: a typed error of :mod:`.api_errors` (a timeout is :class:`Unavailable`).
        """
        if body is not None and content_type is None:
            content_type = "application/json"
        done = Deferred.fromCoroutine(self._call(method, path, body, content_type, kind))
        done.addTimeout(self._timeout, self._clock)
        return done.addErrback(_timed_out, f"{method} {path}")

    def stream(self, path: str, protocol: Protocol) -> "Deferred[None]":
        """
        Open a watch: GET ``path``; once it answers 200 its body goes to
        ``protocol`` as it arrives (the returned Deferred fires then), and
        ``protocol.transport.loseConnection()`` ends it.  Any other answer is
        read (bounded) into its typed error.
        """

        async def opened() -> None:
            response = await self._answer("GET", path, None, None)
            if response.code != 200:
                raise status_error(response.code, await self._body(response))
            response.deliverBody(protocol)

        done = Deferred.fromCoroutine(opened())
        done.addTimeout(self._timeout, self._clock)
        return done.addErrback(_timed_out, f"watch {path}")


def _timed_out(failure: Failure, what: str) -> Failure:
    """A timeout as :class:`Unavailable`; anything else as it is."""
    if failure.check(DeferredTimeout):
        raise Unavailable(0, "Timeout", f"{what} took too long")
    return failure


__all__ = ["ApiClient", "CALL_TIMEOUT", "Json", "MAX_BODY", "MERGE_PATCH", "Requester", "STRATEGIC_MERGE_PATCH",
           "parse_object"]
