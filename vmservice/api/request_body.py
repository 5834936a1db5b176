# -*- test-case-name: tests.api.test_streaming,tests.api.test_request_body -*-
"""
A request body arriving chunk by chunk, as a push producer with back-pressure
(see :mod:`.streaming` for how a request gets one).

Theory of operation
-------------------

Two sides move the body: the network feeds chunks and ends (or loses) it;
the consumer claims it once (:meth:`RequestBody.deliver_to`) and, as the
producer registered with it, pauses, resumes or stops it.  The body's
lifecycle is one automat machine (diagram:
``docs/state-machines/request-body.dot``) whose states are the product of
what has arrived and where the consumer stands:

- *arriving*: ``Waiting`` (nobody claimed the body yet), ``Flowing`` (the
  consumer takes chunks as they come), ``Paused`` and ``WaitingPaused`` (the
  consumer, or the producer registered before the claim, is paused: chunks
  are held), ``Discarding`` (the consumer stopped: the rest is read and
  dropped);
- *arrived* (``end``: later chunks are ignored): ``Arrived``,
  ``ArrivedPaused``, ``Draining``, ``DrainingPaused``, ``Discarded``, and
  ``Delivered`` once the consumer has had every byte;
- *lost* (``fail``: the connection went before the end): ``Lost`` until a
  claim, which fails with the loss; ``Failed`` once the consumer was told.

Chunks are written to the consumer outside the machine, by
:meth:`RequestBody._pump` after each input: a consumer that pauses or
stops from inside its ``write`` is heard at once (automat would postpone an
input sent from one of its own outputs), and the pump does not run inside
itself (its one guard, ``_pumping``).  When it has written what it held it
sends ``drained`` once the body has arrived (then it is delivered), then
``settle``: each state decides whether the network is held.  While arriving
it is held from ``high_water`` bytes on, or as soon as anything waits for a
paused consumer; otherwise it is released, as by every state when nothing
waits: then the pump releases it without asking (an input costs a walk
through the machine's transitions; a chunk, one: ``feed``).  That hold is a small machine of its own
(:mod:`.network_valve`, ``Open``/``Shut`` in the same diagram): a hold is
asserted again on every chunk (the HTTP channel may resume the connection
by itself when its send buffer drains), a release only after a hold.
"""

from __future__ import annotations

import collections
from typing import Callable, Deque, Optional, Protocol

from attrs import define, field
from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from .network_valve import VALVE_MACHINE, ValveCore, ValveInputs

#: Body bytes held (not yet taken by the consumer) before the connection pauses.
BODY_HIGH_WATER = 256 * 1024


class BodyInputs(Protocol):
    """What can happen to a request body."""

    def feed(self, data: bytes) -> None:
        """A chunk (not empty) arrived."""

    def end(self) -> None:
        """The whole body arrived."""

    def fail(self, reason: Failure) -> None:
        """The connection was lost."""

    def deliver_to(self, write: Callable[[bytes], None]) -> Deferred[int]:
        """The consumer claims the body."""

    def pause(self) -> None:
        """The consumer is full."""

    def resume(self) -> None:
        """The consumer has room again."""

    def stop(self) -> None:
        """The consumer is gone."""

    def drained(self) -> None:
        """The pump holds no chunk any more."""

    def settle(self) -> None:
        """The pump has moved what it could: hold or release the network."""


@define
class BodyCore:
    """
    What every state shares.

    :ivar valve: the network's hold.
    :ivar high_water: bytes held before the network is held.
    :ivar queue: chunks not yet written to the consumer.
    :ivar queued: their bytes.
    :ivar received: body bytes received so far.
    :ivar complete: whether the whole body arrived (told to the request).
    :ivar consumer: the claimant's ``write``, from the claim until it stops
        or has the whole body.
    :ivar outlet: ``consumer`` while it takes chunks (not paused): what the
        pump writes to.
    :ivar done: fires once the consumer had the whole body or stopped.
    """

    valve: ValveInputs
    high_water: int
    queue: Deque[bytes] = field(factory=collections.deque)
    queued: int = 0
    received: int = 0
    complete: bool = False
    consumer: Optional[Callable[[bytes], None]] = None
    outlet: Optional[Callable[[bytes], None]] = None
    done: Optional[Deferred[int]] = None

    def drop_queue(self) -> None:
        self.queue.clear()
        self.queued = 0

    def let_go(self) -> Optional[Deferred[int]]:
        """The consumer is done with: forget it; its Deferred, if not fired yet."""
        self.consumer = self.outlet = None
        done, self.done = self.done, None
        return done


# The behaviours of the transitions, each named after what it does.


def _take(inputs: BodyInputs, core: BodyCore, data: bytes) -> None:
    core.received += len(data)
    core.queue.append(data)
    core.queued += len(data)


def _count(inputs: BodyInputs, core: BodyCore, data: bytes) -> None:
    core.received += len(data)


def _arrive(inputs: BodyInputs, core: BodyCore) -> None:
    core.complete = True


def _claim(inputs: BodyInputs, core: BodyCore, write: Callable[[bytes], None]) -> Deferred[int]:
    core.consumer = core.outlet = write
    core.done = Deferred()
    return core.done


def _claim_paused(inputs: BodyInputs, core: BodyCore, write: Callable[[bytes], None]) -> Deferred[int]:
    done = _claim(inputs, core, write)
    core.outlet = None
    return done


def _claimed_already(inputs: BodyInputs, core: BodyCore, write: Callable[[bytes], None]) -> Deferred[int]:
    raise RuntimeError("the body is already being delivered")


def _lost(inputs: BodyInputs, core: BodyCore, reason: Failure) -> Failure:
    """``Lost`` keeps the loss for the claim that comes."""
    core.drop_queue()
    return reason


def _claim_lost(inputs: BodyInputs, core: BodyCore, reason: Failure, write: Callable[[bytes], None]) -> Deferred[int]:
    return fail(reason)


def _fail_consumer(inputs: BodyInputs, core: BodyCore, reason: Failure) -> None:
    core.drop_queue()
    done = core.let_go()
    if done is not None:
        done.errback(reason)


def _pause(inputs: BodyInputs, core: BodyCore) -> None:
    core.outlet = None


def _resume(inputs: BodyInputs, core: BodyCore) -> None:
    core.outlet = core.consumer


def _stop(inputs: BodyInputs, core: BodyCore) -> None:
    core.drop_queue()
    core.valve.release()
    done = core.let_go()
    if done is not None:
        done.callback(core.received)


def _stop_lost(inputs: BodyInputs, core: BodyCore, reason: Failure) -> None:
    _stop(inputs, core)


def _finish(inputs: BodyInputs, core: BodyCore) -> None:
    done = core.let_go()
    if done is not None:
        done.callback(core.received)


def _hold_at_high_water(inputs: BodyInputs, core: BodyCore) -> None:
    if core.queued >= core.high_water:
        core.valve.hold()
    else:
        core.valve.release()


def _hold_while_held(inputs: BodyInputs, core: BodyCore) -> None:
    if core.queued >= core.high_water or core.queued > 0:
        core.valve.hold()
    else:
        core.valve.release()


def _release(inputs: BodyInputs, core: BodyCore) -> None:
    core.valve.release()


def _release_lost(inputs: BodyInputs, core: BodyCore, reason: Failure) -> None:
    core.valve.release()


def _build_body() -> TypeMachine[BodyInputs, BodyCore]:
    """The body's machine: its states, what each input does in them, and what each ignores."""
    builder = TypeMachineBuilder(BodyInputs, BodyCore)
    waiting, waiting_paused, flowing, paused, discarding = (builder.state(name) for name in (
        "Waiting", "WaitingPaused", "Flowing", "Paused", "Discarding"))
    arrived, arrived_paused, draining, draining_paused, discarded, delivered, failed = (builder.state(name) for name in (
        "Arrived", "ArrivedPaused", "Draining", "DrainingPaused", "Discarded", "Delivered", "Failed"))
    lost = builder.state("Lost", _lost)
    arriving = (waiting, waiting_paused, flowing, paused)
    over = (arrived, arrived_paused, draining, draining_paused, discarded, delivered)
    for each in arriving:
        each.upon(BodyInputs.feed).loop()(_take)
    discarding.upon(BodyInputs.feed).loop()(_count)
    for each, after in zip(arriving + (discarding,), (arrived, arrived_paused, draining, draining_paused, discarded)):
        each.upon(BodyInputs.end).to(after)(_arrive)
    for each in (waiting, waiting_paused):
        each.upon(BodyInputs.fail).to(lost).returns(None)
    for each in (flowing, paused):
        each.upon(BodyInputs.fail).to(failed)(_fail_consumer)
    for each, after in ((waiting, flowing), (arrived, draining), (delivered, draining)):
        each.upon(BodyInputs.deliver_to).to(after)(_claim)
    for each, after in ((waiting_paused, paused), (arrived_paused, draining_paused)):
        each.upon(BodyInputs.deliver_to).to(after)(_claim_paused)
    for each in (flowing, paused, draining, draining_paused, discarding, discarded, failed):
        each.upon(BodyInputs.deliver_to).loop()(_claimed_already)
    lost.upon(BodyInputs.deliver_to).to(failed)(_claim_lost)
    for each, held in zip((waiting, flowing, arrived, draining), (waiting_paused, paused, arrived_paused, draining_paused)):
        each.upon(BodyInputs.pause).to(held)(_pause)
        held.upon(BodyInputs.resume).to(each)(_resume)
        held.upon(BodyInputs.pause).loop().returns(None)
        each.upon(BodyInputs.resume).loop().returns(None)
    for each in arriving + (discarding,):
        each.upon(BodyInputs.stop).to(discarding)(_stop)
    for each in over + (failed,):
        each.upon(BodyInputs.stop).to(discarded)(_stop)
    lost.upon(BodyInputs.stop).to(discarded)(_stop_lost)
    for each in (draining, draining_paused):
        each.upon(BodyInputs.drained).to(delivered)(_finish)
    for each in (waiting, flowing):
        each.upon(BodyInputs.settle).loop()(_hold_at_high_water)
    for each in (waiting_paused, paused):
        each.upon(BodyInputs.settle).loop()(_hold_while_held)
    for each in over + (discarding, failed):
        each.upon(BodyInputs.settle).loop()(_release)

    # What cannot change a state any more: the body arrived, or the consumer is gone.
    for each in over + (failed,):
        for signal in (BodyInputs.feed, BodyInputs.end, BodyInputs.fail):
            each.upon(signal).loop().returns(None)
    for each in (discarding, discarded, delivered, failed):
        each.upon(BodyInputs.pause).loop().returns(None)
        each.upon(BodyInputs.resume).loop().returns(None)
    for each in arriving + (discarding, arrived, arrived_paused, discarded, delivered, failed):
        each.upon(BodyInputs.drained).loop().returns(None)
    discarding.upon(BodyInputs.fail).loop().returns(None)
    lost.upon(BodyInputs.settle).loop()(_release_lost)
    for signal in (BodyInputs.feed, BodyInputs.end, BodyInputs.fail, BodyInputs.pause, BodyInputs.resume,
                   BodyInputs.drained):
        lost.upon(signal, nodata=True).loop().returns(None)
    return builder.build()


#: The body's machine; calling it with a :class:`BodyCore` gives one body's inputs.
BODY_MACHINE = _build_body()


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
        self._core = BodyCore(VALVE_MACHINE(ValveCore(pause_network, resume_network)), high_water)
        self._inputs = BODY_MACHINE(self._core)
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
        """A chunk of the body arrived."""
        if data:
            self._inputs.feed(data)
            self._pump()

    def end(self) -> None:
        """The whole body arrived."""
        self._inputs.end()
        self._pump()

    def fail(self, reason: Failure) -> None:
        """The connection was lost before the body ended."""
        self._inputs.fail(reason)

    # -- the consumer side -------------------------------------------------------------

    def deliver_to(self, write: Callable[[bytes], None]) -> Deferred[int]:
        """
        Send every chunk (held ones first) to ``write``.

        :return: fires with the body's length once all of it was written, or
            fails with the connection's loss.
        :raises RuntimeError: if the body was claimed already (or its
            consumer stopped it).
        """
        done = self._inputs.deliver_to(write)
        self._pump()
        return done

    def pauseProducing(self) -> None:
        """The consumer is full: hold chunks and pause the network."""
        self._inputs.pause()
        self._inputs.settle()

    def resumeProducing(self) -> None:
        """The consumer has room again."""
        self._inputs.resume()
        self._pump()

    def stopProducing(self) -> None:
        """The consumer is gone: discard the rest of the body (and keep reading it)."""
        self._inputs.stop()

    # -- moving data -----------------------------------------------------------------------

    def _pump(self) -> None:
        """Write what is held while the consumer takes it; then tell the machine."""
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
                self._inputs.drained()  # before the end it changes nothing: spared on every chunk
        finally:
            self._pumping = False
        if core.queued == 0 and core.high_water > 0:
            core.valve.release()  # what every state settles on when nothing waits: spared on every chunk
        else:
            self._inputs.settle()


__all__ = ["BODY_HIGH_WATER", "BODY_MACHINE", "BodyCore", "BodyInputs", "RequestBody"]
