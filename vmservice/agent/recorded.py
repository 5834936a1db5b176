# -*- test-case-name: tests.agent.test_execution,tests.agent.test_shell -*-
"""
One reading of a stream whose guest side sends records (an exec's records of
:mod:`vmservice.wire.payloads`, a shell's frames of
:mod:`vmservice.wire.shellframes`) to a sink: :class:`RecordedProtocol` feeds
the decoder and hands each record to its subclass; a record that does not
decode resets the stream (``PROTOCOL_ERROR``) and the sink hears it lost
(``MALFORMED``); a stream that ends before the record that ends it is lost
too (:func:`.errors.stream_error`).
"""

from __future__ import annotations

from typing import Generic, Iterator, Protocol as Interface, TypeVar, cast

from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import AgentError, GuestErrorKind
from ..wire import ResetCode
from .errors import AgentRequestFailed, stream_error
from .stream import AgentStream


class LosableSink(Interface):
    """What every record sink hears when its stream fails."""

    def lost(self, error: AgentError) -> None:
        """The stream was refused or lost."""


class RecordDecoder(Interface):
    """An incremental decoder (``RecordDecoder``, ``FrameDecoder``)."""

    def feed(self, data: bytes) -> Iterator[object]:
        """Add ``data``; yield every record it completes (raise on a bad one)."""


SinkT = TypeVar("SinkT", bound=LosableSink)
RecordT = TypeVar("RecordT")


class RecordedProtocol(Protocol, Generic[SinkT, RecordT]):
    """
    Decodes the records of one stream and drives a sink (see the module's
    description); a subclass handles each record in :meth:`_record`, and sets
    ``_ended`` once the sink heard the last thing it will hear.

    :param sink: what is told.
    :param decoder: the stream's decoder.
    :param stream: the stream's name in messages (``exec``).
    :param item: what a record is called (``record``, ``frame``).
    :param error: what the decoder raises on a bad record.
    :param log: where a bad record is logged.
    """

    def __init__(self, sink: SinkT, decoder: RecordDecoder, stream: str, item: str, error: type[Exception],
                 log: Logger) -> None:
        self._sink = sink
        self._decoder = decoder
        self._stream = stream
        self._item = item
        self._error = error
        self._log = log
        self._ended = False

    def _record(self, record: RecordT) -> None:
        """Tell the sink of one record; raise ``error`` if it is not one."""
        raise NotImplementedError

    def dataReceived(self, data: bytes) -> None:
        if self._ended:
            return
        try:
            for record in self._decoder.feed(data):
                self._record(cast(RecordT, record))
                if self._ended:
                    return
        except self._error as e:
            self._log.warn("{stream} stream: bad {item} from the guest: {error}", stream=self._stream,
                           item=self._item, error=str(e))
            self._ended = True
            cast(AgentStream, self.transport).abortConnection(ResetCode.PROTOCOL_ERROR, f"bad {self._stream} {self._item}")
            self._sink.lost(AgentRequestFailed(f"bad {self._stream} {self._item} from the guest: {e}",
                                               kind=GuestErrorKind.MALFORMED))

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if self._ended:
            return
        self._ended = True
        if reason.check(ConnectionDone):
            reason = Failure(ConnectionDone(f"the {self._stream} stream ended without an exit {self._item}"))
        self._sink.lost(stream_error(reason, f"the {self._stream} stream"))


__all__ = ["LosableSink", "RecordDecoder", "RecordedProtocol"]
