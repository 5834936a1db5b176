# -*- test-case-name: tests.cli.test_copying,tests.integration.cli.test_copying -*-
"""
How far a copy of ``vmctl cp`` has got: :class:`Progress`, a one-line bar on
a terminal, and :class:`Counted`, a request body whose bytes are counted on
their way to the connection.
"""

from __future__ import annotations

from typing import Callable, TextIO

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IConsumer, IProducer, IReactorTime
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from .._duplex import WrappedBody
from . import output

__all__ = ["Counted", "PROGRESS_INTERVAL", "Progress"]

#: How often the progress line is redrawn, in seconds.
PROGRESS_INTERVAL = 0.2


class Progress:
    """
    A one-line progress bar on a terminal: bytes so far, of the total when
    known, and the mean rate; redrawn at most every
    :data:`PROGRESS_INTERVAL` seconds.  Nothing is drawn when ``err`` is not
    a terminal.

    :param clock: an ``IReactorTime`` provider.
    :param err: where the line is drawn.
    :param total: the expected number of bytes, or ``None``.
    """

    def __init__(self, clock: IReactorTime, err: TextIO, total: int | None) -> None:
        self._clock = clock
        self._err = err
        self._total = total
        self._shown = _isatty(err)
        self._start = clock.seconds()
        self._drawn_at: float | None = None
        self.done = 0

    def add(self, count: int) -> None:
        """``count`` more bytes were moved."""
        self.done += count
        now = self._clock.seconds()
        if self._shown and (self._drawn_at is None or now - self._drawn_at >= PROGRESS_INTERVAL):
            self._draw(now)

    def _draw(self, now: float) -> None:
        self._drawn_at = now
        self._err.write("\r" + output.format_progress(self.done, self._total, now - self._start) + "\x1b[K")
        self._err.flush()

    def finish(self) -> None:
        """Draw the final state and end the line."""
        if self._shown:
            self._draw(self._clock.seconds())
            self._err.write("\n")
            self._err.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


@implementer(IConsumer)
class _CountingConsumer:
    """Passes everything on to ``consumer``, counting the bytes written with ``count``."""

    def __init__(self, consumer: IConsumer, count: Callable[[int], None]) -> None:
        self._consumer = consumer
        self._count = count

    def write(self, data: bytes) -> None:
        self._count(len(data))
        self._consumer.write(data)

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        self._consumer.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        self._consumer.unregisterProducer()


class Counted(WrappedBody):
    """A body producer whose bytes are counted on their way to the connection."""

    def __init__(self, inner: IBodyProducer, count: Callable[[int], None]) -> None:
        super().__init__(inner)
        self._count = count

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        return super().startProducing(_CountingConsumer(consumer, self._count))
