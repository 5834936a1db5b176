# -*- test-case-name: tests.cluster.test_watch_loop -*-
"""
:class:`WatchLoop`: a collection of the API kept in view: listed, then
watched from the list's resourceVersion; a stream that ends is watched
again from the last version seen; a failure waits a back-off (capped,
exponential, with jitter) before the next watch; a 410 Gone (the version
is too old) or a stream that cannot be trusted any more lists again.  The
handler gets the whole list after each listing and each event after it.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol as TypingProtocol
from urllib.parse import urlencode

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.http import PotentialDataLoss

from .api_client import ApiClient, Json
from .api_errors import ApiError, BadResponse, Gone
from .backoff import Backoff
from .watch_events import MAX_EVENT_LINE, WatchDecodeError, WatchDecoder, WatchEvent

log = Logger(namespace="vmservice.cluster")

#: Seconds the server is asked to keep a watch open before it ends it (the loop then watches again).
WATCH_SECONDS = 300


class WatchHandler(TypingProtocol):
    """What a watch loop tells."""

    def listed(self, items: list[Json]) -> None:
        """The whole collection, as just listed (after a start or a relist)."""

    def changed(self, event: WatchEvent) -> None:
        """One change since (``ADDED``, ``MODIFIED`` or ``DELETED``)."""


class _Stream(Protocol):
    """One watch's body: decoded into events for the loop; its end or a bad line told once."""

    def __init__(self, decoder: WatchDecoder, event: Callable[[WatchEvent], bool],
                 ended: Callable[[Failure | None], None]) -> None:
        self._decoder, self._event, self._ended = decoder, event, ended
        self._over = False

    def dataReceived(self, data: bytes) -> None:
        if self._over:
            return
        try:
            events = self._decoder.feed(data)
        except WatchDecodeError:
            return self._finish(Failure())
        for event in events:
            if not self._event(event):
                return self._finish(None, close=True)
        return None

    def _finish(self, failure: Failure | None, close: bool = True) -> None:
        self._over = True
        if close and self.transport is not None:
            self.transport.loseConnection()
        self._ended(failure)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._over:
            return
        if not reason.check(ResponseDone, PotentialDataLoss):
            return self._finish(reason, close=False)
        try:
            events = self._decoder.end()
        except WatchDecodeError:
            return self._finish(Failure(), close=False)
        for event in events:
            if not self._event(event):
                break
        return self._finish(None, close=False)


class WatchLoop:
    """
    One collection listed and watched until stopped.

    :param clock: the back-off's timers.
    :param client: the API.
    :param path: the collection (``/api/v1/pods``).
    :param query: its selectors (``{"fieldSelector": "spec.nodeName=vms-a"}``).
    :param handler: told the list and the changes.
    :param random: numbers in [0, 1) for the jitter.
    """

    def __init__(self, clock: IReactorTime, client: ApiClient, path: str, query: dict[str, str],
                 handler: WatchHandler, random: Callable[[], float], list_kind: str | None = None,
                 max_line: int = MAX_EVENT_LINE) -> None:
        self._clock, self._client, self._path, self._query = clock, client, path, query
        self._handler, self._list_kind, self._max_line = handler, list_kind, max_line
        self._backoff = Backoff(random)
        self.version: str | None = None
        self._timer: IDelayedCall | None = None
        self._call: Deferred[Any] | None = None
        self._stream: _Stream | None = None
        self._relist = True
        self._error: ApiError | None = None
        self._stopped = False
        #: Listings and watches begun (for tests and logs).
        self.listings = self.watches = 0

    def start(self) -> None:
        """List, then watch."""
        self._next()

    def stop(self) -> None:
        """End the watch, the call under way and the timer."""
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if self._call is not None:
            self._call.cancel()
        if self._stream is not None and self._stream.transport is not None:
            self._stream.transport.loseConnection()

    @property
    def idle(self) -> bool:
        """Whether nothing is pending (no timer, no call, no open stream)."""
        return self._timer is None and self._call is None and self._stream is None

    def _url(self, **more: str) -> str:
        return f"{self._path}?{urlencode({**self._query, **more})}"

    def _next(self) -> None:
        self._timer = None
        if self._stopped:
            return
        if self._relist or self.version is None:
            self._list()
        else:
            self._watch()

    def _after(self, failure: Failure | None) -> None:
        """A listing or a watch is over: go on at once, or after a back-off when it failed."""
        self._call = self._stream = None
        if self._stopped:
            return
        if failure is None:
            self._next()
            return
        if failure.check(Gone, WatchDecodeError, BadResponse):
            self._relist = True
        log.warn("watch of {path} failed ({why}); again after a back-off", path=self._path,
                 why=failure.getErrorMessage())
        self._timer = self._clock.callLater(self._backoff.delay(), self._next)

    def _list(self) -> None:
        self.listings += 1
        self._call = self._client.call("GET", self._url(), kind=self._list_kind)
        self._call.addCallbacks(self._listed, self._after)

    def _listed(self, listing: Json) -> None:
        metadata, items = listing.get("metadata"), listing.get("items")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if not isinstance(version, str) or not version or not isinstance(items, list):
            return self._after(Failure(BadResponse(0, "Malformed", "a list without resourceVersion or items")))
        self.version, self._relist = version, False
        self._handler.listed([item for item in items if isinstance(item, dict)])
        return self._after(None)

    def _watch(self) -> None:
        assert self.version is not None
        self.watches += 1
        stream = self._stream = _Stream(WatchDecoder(self._max_line), self._event, self._ended)
        url = self._url(watch="1", resourceVersion=self.version, allowWatchBookmarks="true",
                        timeoutSeconds=str(WATCH_SECONDS))
        self._call = self._client.stream(url, stream)

        def opened(_: object) -> None:
            self._call = None

        def refused(failure: Failure) -> None:
            if self._stream is stream:
                self._after(failure)

        self._call.addCallbacks(opened, refused)

    def _event(self, event: WatchEvent) -> bool:
        """One event of the stream; False when the stream is to end (a relist)."""
        if self._stopped:
            return False
        if event.expired:
            self._relist = True
            return False
        if event.type == "ERROR":
            self._relist = True
            self._error = ApiError(int(event.object.get("code") or 0) if isinstance(event.object.get("code"), int)
                                   else 0, str(event.object.get("reason") or "ERROR"),
                                   str(event.object.get("message") or "an error event"))
            return False
        self._backoff.reset()
        if event.resource_version is not None:
            self.version = event.resource_version
        if event.type != "BOOKMARK":
            self._handler.changed(event)
        return True

    def _ended(self, failure: Failure | None) -> None:
        if failure is None and self._error is not None:
            failure = Failure(self._error)
        self._error = None
        self._after(failure)


__all__ = ["WATCH_SECONDS", "WatchHandler", "WatchLoop"]
