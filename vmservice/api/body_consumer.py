# -*- test-case-name: tests.api.test_request_body -*-
"""
Where a streamed request body's consumer stands, as a small automat machine
(diagram: ``docs/state-machines/request-body-consumer.dot``), and what it
shares with the machine of what has arrived (:mod:`.body_arrival`).

The consumer claims the body once and, as the producer registered with it,
pauses, resumes or stops it; it may register the body (and pause it) before
the claim.  Its states: ``Waiting`` and ``WaitingPaused`` (not claimed yet),
``Flowing`` and ``Paused`` (claimed), ``Stopped`` (gone: the rest is
dropped), ``Delivered`` (it had every byte), ``LostWaiting`` (the body was
lost before the claim, which will fail with the loss) and ``Failed`` (it was
told of the loss).  How the two machines and the network's hold make one
body: ``docs/state-machines/request-body.md``.
"""

from __future__ import annotations

import collections
from typing import Callable, Deque, Optional, Protocol

from attrs import define, field
from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred, fail
from twisted.python.failure import Failure

from .network_valve import ValveInputs


class ConsumerInputs(Protocol):
    """What can happen to the body's consumer."""

    def deliver_to(self, write: Callable[[bytes], None]) -> Deferred[int]:
        """The consumer claims the body."""

    def pause(self) -> None:
        """The consumer is full."""

    def resume(self) -> None:
        """The consumer has room again."""

    def stop(self) -> None:
        """The consumer is gone."""

    def lose(self, reason: Failure) -> None:
        """The connection was lost before the body ended."""

    def drained(self) -> None:
        """The whole body arrived and the pump holds no chunk any more."""

    def settle(self) -> None:
        """The body still arrives: hold or release the network, by where the consumer stands."""


@define
class BodyCore:
    """
    What the body's machines share.

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


def _claim(inputs: ConsumerInputs, core: BodyCore, write: Callable[[bytes], None]) -> Deferred[int]:
    core.consumer = core.outlet = write
    core.done = Deferred()
    return core.done


def _claim_paused(inputs: ConsumerInputs, core: BodyCore, write: Callable[[bytes], None]) -> Deferred[int]:
    done = _claim(inputs, core, write)
    core.outlet = None
    return done


def _claimed_already(inputs: ConsumerInputs, core: BodyCore, write: Callable[[bytes], None]) -> Deferred[int]:
    raise RuntimeError("the body is already being delivered")


def _lost(inputs: ConsumerInputs, core: BodyCore, reason: Failure) -> Failure:
    """``LostWaiting`` keeps the loss for the claim that comes."""
    return reason


def _claim_lost(
    inputs: ConsumerInputs, core: BodyCore, reason: Failure, write: Callable[[bytes], None]
) -> Deferred[int]:
    return fail(reason)


def _fail_consumer(inputs: ConsumerInputs, core: BodyCore, reason: Failure) -> None:
    done = core.let_go()
    if done is not None:
        done.errback(reason)


def _pause(inputs: ConsumerInputs, core: BodyCore) -> None:
    core.outlet = None


def _resume(inputs: ConsumerInputs, core: BodyCore) -> None:
    core.outlet = core.consumer


def _stop(inputs: ConsumerInputs, core: BodyCore) -> None:
    core.valve.release()
    done = core.let_go()
    if done is not None:
        done.callback(core.received)


def _stop_lost(inputs: ConsumerInputs, core: BodyCore, reason: Failure) -> None:
    _stop(inputs, core)


def _finish(inputs: ConsumerInputs, core: BodyCore) -> None:
    done = core.let_go()
    if done is not None:
        done.callback(core.received)


def _hold_at_high_water(inputs: ConsumerInputs, core: BodyCore) -> None:
    if core.queued >= core.high_water:
        core.valve.hold()
    else:
        core.valve.release()


def _hold_while_held(inputs: ConsumerInputs, core: BodyCore) -> None:
    if core.queued >= core.high_water or core.queued > 0:
        core.valve.hold()
    else:
        core.valve.release()


def _release(inputs: ConsumerInputs, core: BodyCore) -> None:
    core.valve.release()


def _release_lost(inputs: ConsumerInputs, core: BodyCore, reason: Failure) -> None:
    core.valve.release()


def _build_consumer() -> TypeMachine[ConsumerInputs, BodyCore]:
    """The consumer's machine: its states, what each input does in them, and what each ignores."""
    builder = TypeMachineBuilder(ConsumerInputs, BodyCore)
    waiting, waiting_paused, flowing, paused, stopped, delivered, failed = (builder.state(name) for name in (
        "Waiting", "WaitingPaused", "Flowing", "Paused", "Stopped", "Delivered", "Failed"))
    lost = builder.state("LostWaiting", _lost)
    gone = (stopped, delivered, failed)
    for each, after in ((waiting, flowing), (delivered, flowing)):
        each.upon(ConsumerInputs.deliver_to).to(after)(_claim)
    waiting_paused.upon(ConsumerInputs.deliver_to).to(paused)(_claim_paused)
    for each in (flowing, paused, stopped, failed):
        each.upon(ConsumerInputs.deliver_to).loop()(_claimed_already)
    lost.upon(ConsumerInputs.deliver_to).to(failed)(_claim_lost)
    for each, held in ((waiting, waiting_paused), (flowing, paused)):
        each.upon(ConsumerInputs.pause).to(held)(_pause)
        held.upon(ConsumerInputs.resume).to(each)(_resume)
        held.upon(ConsumerInputs.pause).loop().returns(None)
        each.upon(ConsumerInputs.resume).loop().returns(None)
    for each in (waiting, waiting_paused, flowing, paused) + gone:
        each.upon(ConsumerInputs.stop).to(stopped)(_stop)
    lost.upon(ConsumerInputs.stop).to(stopped)(_stop_lost)
    for each in (waiting, waiting_paused):
        each.upon(ConsumerInputs.lose).to(lost).returns(None)
    for each in (flowing, paused):
        each.upon(ConsumerInputs.lose).to(failed)(_fail_consumer)
        each.upon(ConsumerInputs.drained).to(delivered)(_finish)
    for each in (waiting, flowing):
        each.upon(ConsumerInputs.settle).loop()(_hold_at_high_water)
    for each in (waiting_paused, paused):
        each.upon(ConsumerInputs.settle).loop()(_hold_while_held)
    for each in gone:
        each.upon(ConsumerInputs.settle).loop()(_release)
    lost.upon(ConsumerInputs.settle).loop()(_release_lost)

    # What cannot change a state any more: the consumer is gone, or nothing is left to deliver.
    for each in gone:
        for signal in (ConsumerInputs.pause, ConsumerInputs.resume, ConsumerInputs.lose, ConsumerInputs.drained):
            each.upon(signal).loop().returns(None)
    for each in (waiting, waiting_paused):
        each.upon(ConsumerInputs.drained).loop().returns(None)
    for signal in (ConsumerInputs.pause, ConsumerInputs.resume, ConsumerInputs.lose, ConsumerInputs.drained):
        lost.upon(signal, nodata=True).loop().returns(None)
    return builder.build()


#: The consumer's machine; calling it with a :class:`BodyCore` gives one body's consumer inputs.
CONSUMER_MACHINE = _build_consumer()


__all__ = ["BodyCore", "CONSUMER_MACHINE", "ConsumerInputs"]
