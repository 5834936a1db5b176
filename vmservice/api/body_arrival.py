# -*- test-case-name: tests.api.test_request_body -*-
"""
What of a streamed request body has arrived, as a small automat machine
(diagram: ``docs/state-machines/request-body-arrival.dot``).

Its states: ``Arriving`` (chunks are held for the consumer), ``Discarding``
(the consumer stopped: chunks are counted and dropped), ``Arrived`` (the
whole body came: later chunks are ignored) and ``Lost`` (the connection went
before the end).  A loss while the body arrives is told to the consumer's
machine (:mod:`.body_consumer`), and while it arrives that machine decides
the network's hold; once it came, was lost or is discarded, the network is
released.  Every chunk is one input here (``feed``), so this machine stays
small: automat finds a transition by walking the machine's list of them.
How the machines make one body: ``docs/state-machines/request-body.md``.
"""

from __future__ import annotations

from typing import Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder
from twisted.python.failure import Failure

from .body_consumer import BodyCore, ConsumerInputs


class ArrivalInputs(Protocol):
    """What can happen to the arriving body."""

    def feed(self, data: bytes) -> None:
        """A chunk (not empty) arrived."""

    def end(self) -> None:
        """The whole body arrived."""

    def fail(self, reason: Failure) -> None:
        """The connection was lost."""

    def discard(self) -> None:
        """The consumer stopped: drop what is held, and what comes."""

    def settle(self) -> None:
        """The pump has moved what it could: hold or release the network."""


@define
class ArrivalCore:
    """
    What the arrival machine works on.

    :ivar body: what the body's machines share.
    :ivar consumer: the consumer's machine, told of a loss and asked to settle.
    """

    body: BodyCore
    consumer: ConsumerInputs


# The behaviours of the transitions, each named after what it does.


def _take(inputs: ArrivalInputs, core: ArrivalCore, data: bytes) -> None:
    body = core.body
    body.received += len(data)
    body.queue.append(data)
    body.queued += len(data)


def _count(inputs: ArrivalInputs, core: ArrivalCore, data: bytes) -> None:
    core.body.received += len(data)


def _arrive(inputs: ArrivalInputs, core: ArrivalCore) -> None:
    core.body.complete = True


def _lose(inputs: ArrivalInputs, core: ArrivalCore, reason: Failure) -> None:
    core.body.drop_queue()
    core.consumer.lose(reason)


def _drop(inputs: ArrivalInputs, core: ArrivalCore) -> None:
    core.body.drop_queue()


def _ask_consumer(inputs: ArrivalInputs, core: ArrivalCore) -> None:
    core.consumer.settle()


def _release(inputs: ArrivalInputs, core: ArrivalCore) -> None:
    core.body.valve.release()


def _build_arrival() -> TypeMachine[ArrivalInputs, ArrivalCore]:
    """The arrival machine: its states, what each input does in them, and what each ignores."""
    builder = TypeMachineBuilder(ArrivalInputs, ArrivalCore)
    arriving, discarding, arrived, lost = (builder.state(name) for name in (
        "Arriving", "Discarding", "Arrived", "Lost"))
    arriving.upon(ArrivalInputs.feed).loop()(_take)
    discarding.upon(ArrivalInputs.feed).loop()(_count)
    for each in (arriving, discarding):
        each.upon(ArrivalInputs.end).to(arrived)(_arrive)
    arriving.upon(ArrivalInputs.fail).to(lost)(_lose)
    arriving.upon(ArrivalInputs.discard).to(discarding)(_drop)
    for each in (discarding, arrived, lost):
        each.upon(ArrivalInputs.discard).loop()(_drop)
    arriving.upon(ArrivalInputs.settle).loop()(_ask_consumer)
    for each in (discarding, arrived, lost):
        each.upon(ArrivalInputs.settle).loop()(_release)

    # What cannot change a state any more: the body arrived or was lost; a loss once discarding.
    for each in (arrived, lost):
        for signal in (ArrivalInputs.feed, ArrivalInputs.end, ArrivalInputs.fail):
            each.upon(signal).loop().returns(None)
    discarding.upon(ArrivalInputs.fail).loop().returns(None)
    return builder.build()


#: The arrival machine; calling it with an :class:`ArrivalCore` gives one body's arrival inputs.
ARRIVAL_MACHINE = _build_arrival()


__all__ = ["ARRIVAL_MACHINE", "ArrivalCore", "ArrivalInputs"]
