# -*- test-case-name: tests.api.test_streaming -*-
"""
A request body arriving chunk by chunk, as a push producer with back-pressure
(see :mod:`.streaming` for how a request gets one).
"""

from __future__ import annotations

import collections
from typing import Callable, Deque, Optional

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

#: Body bytes held (not yet taken by the consumer) before the connection pauses.
BODY_HIGH_WATER = 256 * 1024


@implementer(IPushProducer)
class RequestBody:
    """
    A request body arriving chunk by chunk, as a push producer.

    The network side calls :meth:`feed`, :meth:`end` and :meth:`fail`; the
    consumer side calls :meth:`deliver_to` once, and then controls the flow
    with ``pauseProducing``/``resumeProducing`` (as an ``IPushProducer``
    registered with its consumer).  While more than ``high_water`` bytes wait,
    or the consumer is paused, the network is paused.

    :param pause_network: stop reading the connection.
    :param resume_network: read it again.
    :param high_water: bytes held before the network is paused.
    :ivar received: body bytes received so far.
    :ivar complete: whether the whole body arrived.
    """

    def __init__(
        self,
        pause_network: Callable[[], None] = lambda: None,
        resume_network: Callable[[], None] = lambda: None,
        high_water: int = BODY_HIGH_WATER,
    ) -> None:
        self._pause_network = pause_network
        self._resume_network = resume_network
        self._high_water = high_water
        self._queue: Deque[bytes] = collections.deque()
        self._queued = 0
        self._write: Optional[Callable[[bytes], None]] = None
        self._done: Optional[Deferred[int]] = None
        self._paused = False
        self._network_paused = False
        self._discarding = False
        self._failure: Optional[Failure] = None
        self._delivering = False
        self.received = 0
        self.complete = False

    # -- the network side ----------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """A chunk of the body arrived."""
        if not data or self.complete:
            return
        self.received += len(data)
        if self._discarding:
            return
        self._queue.append(data)
        self._queued += len(data)
        self._pump()

    def end(self) -> None:
        """The whole body arrived."""
        if self.complete:
            return
        self.complete = True
        self._pump()

    def fail(self, reason: Failure) -> None:
        """The connection was lost before the body ended."""
        if self.complete or self._failure is not None:
            return
        self._failure = reason
        self._queue.clear()
        self._queued = 0
        done, self._done = self._done, None
        if done is not None:
            done.errback(reason)

    # -- the consumer side -------------------------------------------------------------

    def deliver_to(self, write: Callable[[bytes], None]) -> Deferred[int]:
        """
        Send every chunk (held ones first) to ``write``.

        :return: fires with the body's length once all of it was written, or
            fails with the connection's loss.
        """
        if self._write is not None or self._discarding:
            raise RuntimeError("the body is already being delivered")
        self._write = write
        self._done = Deferred()
        done = self._done
        if self._failure is not None:
            self._done = None
            done.errback(self._failure)
            return done
        self._pump()
        return done

    def pauseProducing(self) -> None:
        """The consumer is full: hold chunks and pause the network."""
        self._paused = True
        self._regulate()

    def resumeProducing(self) -> None:
        """The consumer has room again."""
        self._paused = False
        self._pump()

    def stopProducing(self) -> None:
        """The consumer is gone: discard the rest of the body (and keep reading it)."""
        self._discarding = True
        self._write = None
        self._queue.clear()
        self._queued = 0
        self._paused = False
        self._regulate()
        done, self._done = self._done, None
        if done is not None:
            done.callback(self.received)

    # -- moving data -----------------------------------------------------------------------

    def _pump(self) -> None:
        if self._delivering:
            return
        self._delivering = True
        try:
            while self._write is not None and self._queue and not self._paused:
                chunk = self._queue.popleft()
                self._queued -= len(chunk)
                self._write(chunk)
            if self._write is not None and not self._queue and self.complete:
                self._write = None
                done, self._done = self._done, None
                if done is not None:
                    done.callback(self.received)
        finally:
            self._delivering = False
        self._regulate()

    def _regulate(self) -> None:
        stuck = not self.complete and not self._discarding and (
            self._queued >= self._high_water or (self._paused and self._queued > 0)
        )
        if stuck:
            # Asserted again on every chunk: the HTTP channel itself may have
            # resumed the connection meanwhile (it does when its send buffer drains).
            self._network_paused = True
            self._pause_network()
        elif self._network_paused:
            self._network_paused = False
            self._resume_network()


__all__ = ["BODY_HIGH_WATER", "RequestBody"]
