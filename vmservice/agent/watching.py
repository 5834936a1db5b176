# -*- test-case-name: tests.agent.test_watching -*-
"""
The host's end of a ``watch`` stream (the guest side and the stream's
contents are described in :mod:`vmservice.guest.watching` and
``docs/agent-protocol.md``).

:func:`start_watch` opens the stream (and half-closes it: the host sends
nothing) and gives a :class:`GuestWatch`: its :attr:`~GuestWatch.ready` fires
once the guest watches every path (or fails with the guest's error, a missing
path being ``NOT_FOUND``); then each event goes to the
:class:`~vmservice.guestport.watch.IWatchSink`, and its end once.  As an
``IPushProducer`` the watch withholds credit from the guest while its consumer
is paused; :meth:`~GuestWatch.cancel` resets the stream, and the guest removes
its watches.  Failures are :class:`~vmservice.errors.AgentError`\\ s; nothing
here knows HTTP.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.watch import IWatch, IWatchSink, WATCH_EVENT_TYPES, WatchEvent, WatchRequest
from ..wire import ResetCode
from ..wire.messages import MessageDecoder, MessageError
from .channel import Channel
from .errors import AgentRequestFailed, stream_error
from .filesystem import reply_value
from .stream import AgentStream

log = Logger()

#: Largest OPEN header of a watch, as compact JSON: what one frame carries, with room to spare.
MAX_WATCH_HEADER = 60 * 1024

#: The types an event from the guest may have.
EVENT_TYPES = frozenset(WATCH_EVENT_TYPES) | {"overflow"}


def _malformed(message: str) -> AgentError:
    return AgentRequestFailed(message, kind=GuestErrorKind.MALFORMED)


def parse_event(message: dict[str, Any]) -> WatchEvent:
    """
    One event message of the guest.

    :raises AgentError: ``MALFORMED``, for a message that is not one.
    """
    kind, path, size, is_dir = message.get("type"), message.get("path"), message.get("size"), message.get("is_dir")
    text = message.get("message")
    if kind not in EVENT_TYPES or not isinstance(path, str) or not isinstance(is_dir, bool):
        raise _malformed("the guest's watch event is malformed")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not (text is None or isinstance(text, str)):
        raise _malformed("the guest's watch event is malformed")
    return WatchEvent(type=str(kind), path=path, size=size, is_dir=is_dir, message=text)


@implementer(IHalfCloseableProtocol)
class _WatchProtocol(Protocol):
    """Decodes the guest's messages and hands them to the watch."""

    def __init__(self, watch: "GuestWatch") -> None:
        self._watch = watch
        self._decoder = MessageDecoder()

    def dataReceived(self, data: bytes) -> None:
        try:
            messages = self._decoder.feed(data)
        except MessageError as e:
            self._watch._broken(f"the guest's watch stream does not parse: {e}")
            return
        for message in messages:
            self._watch._message(message)

    def readConnectionLost(self) -> None:
        pass

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._watch._ended(reason)


@implementer(IWatch)
class GuestWatch:
    """
    A watch in progress, and the push producer of its events.

    :param sink: where the events and the end go.
    :ivar ready: fires once the guest watches every path, or fails with an
        :class:`~vmservice.errors.AgentError` (the guest's refusal, or the
        stream lost before its reply); cancelling it cancels the watch.
    """

    def __init__(self, sink: IWatchSink) -> None:
        self._sink = sink
        self._stream: Optional[AgentStream] = None
        self._finished = False
        self._cancelled = False
        self.ready: Deferred[None] = Deferred(lambda ready: self.cancel())

    # -- from the protocol --------------------------------------------------------

    def _message(self, message: dict[str, Any]) -> None:
        if self._finished:
            return
        if not self.ready.called:
            try:
                reply_value(message, "watch")
            except AgentError as e:
                self._finished = True
                self.ready.errback(e)
                return
            self.ready.callback(None)
            return
        try:
            event = parse_event(message)
        except AgentError as e:
            self._broken(e.message)
            return
        self._sink.event(event)

    def _broken(self, message: str) -> None:
        """The guest sent something that does not parse: reset, and end with MALFORMED."""
        log.warn("watch stream: {message}", message=message)
        self._finish(_malformed(message))
        if self._stream is not None:
            self._stream.abortConnection(ResetCode.PROTOCOL_ERROR, "bad watch message")

    def _ended(self, reason: Failure) -> None:
        if reason.check(ConnectionDone):
            self._finish(None if self.ready.called else _malformed("the guest ended the watch without a reply"))
        else:
            self._finish(stream_error(reason, "the watch"))

    def _finish(self, error: Optional[AgentError]) -> None:
        """The one end of the watch: ready fails, or the sink hears why (unless it was cancelled)."""
        if self._finished:
            return
        self._finished = True
        if not self.ready.called:
            if self._cancelled:
                self.ready.errback(CancelledError())
            else:
                self.ready.errback(error or _malformed("the watch ended before it was ready"))
        elif not self._cancelled:
            self._sink.ended(error)

    # -- for the caller -----------------------------------------------------------

    def pauseProducing(self) -> None:
        """The consumer is full: withhold credit (the guest drops events, then reports an overflow)."""
        if self._stream is not None:
            self._stream.pauseProducing()

    def resumeProducing(self) -> None:
        """The consumer has room again."""
        if self._stream is not None:
            self._stream.resumeProducing()

    def stopProducing(self) -> None:
        """The consumer went away: stop watching."""
        self.cancel()

    def cancel(self) -> None:
        """Reset the stream (the guest removes every watch); the sink hears nothing more."""
        self._cancelled = True
        if self._stream is not None and not self._finished:
            self._stream.abortConnection(ResetCode.CANCEL, "watch cancelled")


def start_watch(agent: Channel, request: WatchRequest, sink: IWatchSink) -> GuestWatch:
    """
    Open a watch stream for ``request``, whose events go to ``sink``.

    :raises AgentError: ``INVALID`` for a request too large for one OPEN
        frame (too many or too long paths and patterns), checked before
        anything is sent.
    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    header = request.to_json()
    if len(json.dumps(header, separators=(",", ":"))) > MAX_WATCH_HEADER:
        raise AgentError(GuestErrorKind.INVALID, "the watch names too many or too long paths and patterns")
    watch = GuestWatch(sink)
    stream = agent.open_stream(header, _WatchProtocol(watch))
    watch._stream = stream
    stream.loseConnection()
    return watch


__all__ = ["EVENT_TYPES", "GuestWatch", "MAX_WATCH_HEADER", "parse_event", "start_watch"]
