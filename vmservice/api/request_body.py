# -*- test-case-name: tests.api.test_streaming,tests.api.test_request_body -*-
"""
A request body arriving chunk by chunk, as a push producer with back-pressure
(see :mod:`.streaming` for how a request gets one).

Theory of operation
-------------------

Two sides move the body: the network feeds chunks and ends (or loses) it;
the consumer claims it once (:meth:`RequestBody.deliver_to`) and, as the
producer registered with it, pauses, resumes or stops it.  The body's
lifecycle is two small automat machines, one per side (how they combine:
``docs/state-machines/request-body.md``):

- what has arrived (:mod:`.body_arrival`): ``Arriving``, ``Discarding``
  (the consumer stopped: the rest is read and dropped), ``Arrived`` (later
  chunks are ignored) or ``Lost`` (the connection went before the end);
- where the consumer stands (:mod:`.body_consumer`): ``Waiting`` and
  ``WaitingPaused`` (not claimed; the producer registered before the claim
  may be paused), ``Flowing``, ``Paused``, ``Stopped``, ``Delivered`` once
  it has had every byte, ``LostWaiting`` (its claim will fail with the
  loss) and ``Failed`` once it was told.

Each input goes to the machine of its side; the arrival machine tells the
consumer's of a loss while the body arrives, and a stop goes to both (the
held chunks are dropped, the delivery fires).  A chunk is no machine input:
what it does in the arrival's state (held, counted, ignored) is set by that
machine's transitions (``on_piece``), as is where the pump writes in the
consumer's state (``outlet``) and what a release does in the valve's; a
chunk the consumer takes at once, while the network is not held, costs no
input of any machine (automat finds a transition by walking the machine's
list of them, a few µs an input).

Chunks are written to the consumer outside the machines, by
:meth:`RequestBody._pump` after each input: a consumer that pauses or
stops from inside its ``write`` is heard at once (automat would postpone an
input sent from one of its own outputs), and the pump does not run inside
itself (its one guard, ``_pumping``).  When it has written what it held it
tells the consumer's machine ``drained`` once the body has arrived (then it
is delivered), then ``settle``: while the body arrives the consumer's state
decides whether the network is held (from ``high_water`` bytes on, or as
soon as anything waits for a paused consumer); otherwise it is released, as
in every state when nothing waits: then the pump releases it without asking.
That hold is a small machine of its own (:mod:`.network_valve`): a hold is
asserted again on every chunk (the HTTP channel may resume the connection
by itself when its send buffer drains), a release only after a hold (while
the valve is open, the release its state sets does nothing).
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from .body_arrival import ARRIVAL_MACHINE, ArrivalCore
from .body_consumer import CONSUMER_MACHINE, BodyCore
from .network_valve import network_valve

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
    or the consumer is paused, the network is paused (see the module docstring).

    :param pause_network: stop reading the connection.
    :param resume_network: read it again.
    :param high_water: bytes held before the network is paused.
    """

    def __init__(
        self,
        pause_network: Callable[[], None] = lambda: None,
        resume_network: Callable[[], None] = lambda: None,
        high_water: int = BODY_HIGH_WATER,
    ) -> None:
        self._core = BodyCore(network_valve(pause_network, resume_network), high_water)
        self._consumer = CONSUMER_MACHINE(self._core)
        self._arriving = ArrivalCore(self._core, self._consumer)
        self._arrival = ARRIVAL_MACHINE(self._arriving)
        self._pumping = False  # the pump does not run inside itself (a consumer's write may resume it)

    @property
    def received(self) -> int:
        """Body bytes received so far."""
        return self._core.received

    @property
    def complete(self) -> bool:
        """Whether the whole body arrived."""
        return self._core.complete

    # -- the network side ----------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """A chunk of the body arrived: what the arrival's state does with one, then the pump."""
        if data:
            self._arriving.on_piece(data)
            self._pump()

    def end(self) -> None:
        """The whole body arrived."""
        self._arrival.end()
        self._pump()

    def fail(self, reason: Failure) -> None:
        """The connection was lost before the body ended."""
        self._arrival.fail(reason)

    # -- the consumer side -------------------------------------------------------------

    def deliver_to(self, write: Callable[[bytes], None]) -> Deferred[int]:
        """
        Send every chunk (held ones first) to ``write``.

        :return: fires with the body's length once all of it was written, or
            fails with the connection's loss.
        :raises RuntimeError: if the body was claimed already (or its
            consumer stopped it).
        """
        done = self._consumer.deliver_to(write)
        self._pump()
        return done

    def pauseProducing(self) -> None:
        """The consumer is full: hold chunks and pause the network."""
        self._consumer.pause()
        self._arrival.settle()

    def resumeProducing(self) -> None:
        """The consumer has room again."""
        self._consumer.resume()
        self._pump()

    def stopProducing(self) -> None:
        """The consumer is gone: discard the rest of the body (and keep reading it)."""
        self._arrival.discard()
        self._consumer.stop()

    # -- moving data -----------------------------------------------------------------------

    def _pump(self) -> None:
        """Write what is held while the consumer takes it; then tell the machines."""
        if self._pumping:
            return
        self._pumping = True
        core = self._core
        try:
            while core.outlet is not None and core.queue:
                chunk = core.queue.popleft()
                core.queued -= len(chunk)
                core.outlet(chunk)
            if not core.queue and core.complete:
                self._consumer.drained()  # only once the whole body arrived (the consumer's machine counts on it)
        finally:
            self._pumping = False
        if core.queued == 0 and core.high_water > 0:
            core.valve.release()  # what every state settles on when nothing waits; while open, no input
        else:
            self._arrival.settle()


__all__ = ["BODY_HIGH_WATER", "RequestBody"]
