# -*- test-case-name: tests.e2b.test_inflating -*-
"""
A gzip request body inflated as it arrives, with back-pressure both ways:
:class:`Inflater` takes compressed chunks (:meth:`~Inflater.feed`) and
writes the inflated bytes on in slices of at most :data:`SLICE` bytes; as
the push producer of what it writes, it stops inflating while its consumer
is paused and holds the compressed body's producer meanwhile.  So however
far a body inflates, no more than a slice is made before the consumer
takes it (a gzip bomb costs time, not memory).
"""

from __future__ import annotations

import zlib
from typing import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

#: The most inflated bytes written at once.
SLICE = 64 * 1024


class BadGzip(ValueError):
    """The body is not gzip data."""


@implementer(IPushProducer)
class Inflater:
    """
    Inflates one gzip body.

    :param upstream: the producer of the compressed body (paused while
        compressed bytes wait).
    :param write: where the inflated bytes go.
    """

    def __init__(self, upstream: IPushProducer, write: Callable[[bytes], None]) -> None:
        self._upstream, self._write = upstream, write
        self._inflate = zlib.decompressobj(wbits=31)
        self._pending = b""
        self._paused = self._pumping = False
        self._drained: Deferred[None] | None = None
        self._failed: BadGzip | None = None

    def feed(self, data: bytes) -> None:
        """More of the compressed body.  :raise BadGzip: it is not gzip."""
        if not self._inflate.eof and self._failed is None:
            self._pending += data
        self._pump()
        if self._failed is not None:
            raise self._failed

    def end(self) -> Deferred[None]:
        """The compressed body ended: fires once all of it was written on (fails BadGzip if it was cut short)."""
        self._drained = Deferred()
        self._pump()
        return self._drained

    def _pump(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            while self._pending and not self._paused and not self._inflate.eof:
                try:
                    out = self._inflate.decompress(self._pending, SLICE)
                except zlib.error:
                    self._failed, self._pending = BadGzip("the body is not gzip data"), b""
                    break
                self._pending = self._inflate.unconsumed_tail
                if out:
                    self._write(out)
        finally:
            self._pumping = False
        if self._pending and not self._inflate.eof:
            self._upstream.pauseProducing()
        if self._drained is not None and not self._drained.called and (not self._pending or self._inflate.eof):
            if self._inflate.eof:
                self._drained.callback(None)
            else:
                self._drained.errback(self._failed or BadGzip("the gzip body ends before its end"))

    def pauseProducing(self) -> None:
        self._paused = True
        self._upstream.pauseProducing()

    def resumeProducing(self) -> None:
        self._paused = False
        self._pump()
        if not self._pending:
            self._upstream.resumeProducing()

    def stopProducing(self) -> None:
        self._pending = b""
        self._upstream.stopProducing()


__all__ = ["BadGzip", "Inflater", "SLICE"]
