# -*- test-case-name: tests.client.test_bodies,tests.integration.test_client -*-
"""
Request bodies that stream: a file read in chunks, a pipe, socket or
terminal read as data arrives (:class:`FdBodyProducer`), and
:func:`producer_of`, which turns whatever a caller gives into a producer.
"""

from __future__ import annotations

import io
import os
import stat
from typing import IO, Callable

from twisted.internet import abstract, fdesc
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IConsumer, IReactorFDSet
from twisted.internet.task import Cooperator
from twisted.python.failure import Failure
from twisted.web.client import FileBodyProducer
from twisted.web.iweb import UNKNOWN_LENGTH, IBodyProducer
from zope.interface import implementer

from .reactors import IBodyReactor

__all__ = ["FdBodyProducer", "FdReader", "body_producer", "producer_of"]


class FdReader(abstract.FileDescriptor):
    """Reads a non-blocking file descriptor when the reactor says it is readable."""

    def __init__(
        self, reactor: IReactorFDSet, fd: int, received: Callable[[bytes], None], ended: Callable[[Failure], None]
    ) -> None:
        super().__init__(reactor)
        self._fd = fd
        self._received = received
        self._ended = ended

    def fileno(self) -> int:
        return self._fd

    def doRead(self) -> Exception | None:
        """Read what is there; the connection's end (an exception) when the descriptor is done."""
        ended: Exception | None = fdesc.readFromFD(self._fd, self._received)
        return ended

    def connectionLost(self, reason: Failure) -> None:
        abstract.FileDescriptor.connectionLost(self, reason)
        self._ended(reason)


@implementer(IBodyProducer)
class FdBodyProducer:
    """
    A request body read from a pipe, socket or terminal (``vmctl exec
    --stdin`` reading its stdin, a tar stream written by a thread) as data
    becomes available, without blocking the reactor and without reading
    ahead: when the connection pauses, the descriptor is not read, so the
    writer on the other side blocks.  Its length is unknown, so the body is
    sent chunked.

    The descriptor is made non-blocking while the body is sent and its flags
    are restored afterwards (a terminal is shared with the shell); it is
    never closed here.

    :param reactor: an ``IReactorFDSet`` provider.
    :param fd: the descriptor to read; it must be pollable (not a regular
        file: use :func:`body_producer`, which picks).
    """

    length = UNKNOWN_LENGTH

    def __init__(self, reactor: IReactorFDSet, fd: int) -> None:
        self._reactor = reactor
        self._fd = fd
        self._flags: int | None = None
        self._consumer: IConsumer | None = None
        self._done: Deferred[None] = Deferred()
        self._reader: abstract.FileDescriptor = FdReader(reactor, fd, self._received, self._ended)
        self._stopped = False

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        import fcntl

        self._consumer = consumer
        self._flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fdesc.setNonBlocking(self._fd)
        self._reader.startReading()
        return self._done

    def _received(self, data: bytes) -> None:
        if self._consumer is not None and not self._stopped:
            self._consumer.write(data)

    def _restore(self) -> None:
        import fcntl

        if self._flags is not None:
            try:
                fcntl.fcntl(self._fd, fcntl.F_SETFL, self._flags)
            except OSError:
                pass
            self._flags = None

    def _ended(self, reason: Failure) -> None:
        self._restore()
        if self._stopped or self._done.called:
            return
        if reason.check(ConnectionDone):
            self._done.callback(None)
        else:
            self._done.errback(reason)

    def pauseProducing(self) -> None:
        if not self._reader.disconnected:
            self._reader.stopReading()

    def resumeProducing(self) -> None:
        if not self._reader.disconnected and not self._stopped:
            self._reader.startReading()

    def abort(self, reason: Failure) -> None:
        """
        Fail the body with ``reason`` (the writer on the other side of a pipe
        failed): the request is abandoned rather than sent short.
        """
        self._reader.stopReading()
        self._restore()
        if not self._stopped and not self._done.called:
            self._stopped = True
            self._done.errback(reason)

    def stopProducing(self) -> None:
        """Stop reading for good; the Deferred of :meth:`startProducing` never fires then."""
        self._stopped = True
        self._reader.stopReading()
        self._restore()


def body_producer(reactor: IBodyReactor, source: IO[bytes]) -> IBodyProducer:
    """
    A streaming request body read from ``source``: a regular file (or an
    in-memory one) is read in chunks with its length known; a pipe, socket
    or terminal by :class:`FdBodyProducer` (chunked, as data arrives).

    :param reactor: an ``IReactorTime`` and ``IReactorFDSet`` provider.
    :param source: the file, pipe, socket or terminal to read.
    """
    try:
        fd = source.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):
        fd, mode = -1, stat.S_IFREG
    if fd >= 0 and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        return FdBodyProducer(reactor, fd)
    cooperator = Cooperator(scheduler=lambda work: reactor.callLater(0, work))
    producer: IBodyProducer = FileBodyProducer(source, cooperator=cooperator)
    return producer


def producer_of(reactor: IBodyReactor, source: IBodyProducer | IO[bytes] | bytes) -> IBodyProducer:
    """
    ``source`` as a request body: a producer as it is, bytes or a file
    through :func:`body_producer`.
    """
    if IBodyProducer.providedBy(source):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        return body_producer(reactor, io.BytesIO(bytes(source)))
    return body_producer(reactor, source)
