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
released.  How the machines make one body:
``docs/state-machines/request-body.md``.

A chunk is not an input: every transition sets, as an output, what a chunk
does in the state it enters (:attr:`ArrivalCore.on_piece`: held while
``Arriving``, the state the machine starts in; counted while
``Discarding``; ignored once ``Arrived`` or ``Lost``), and the body calls
that for each chunk.  A machine input costs a few µs (automat finds a
transition by walking the machine's list of them); a chunk costs a call.
The behaviour is set before anything else a transition does, so a chunk
that comes meanwhile is treated as the new state treats it.
"""

from __future__ import annotations

from typing import Callable, Protocol

from attrs import Factory, define, field
from automat import TypeMachine, TypeMachineBuilder
from twisted.python.failure import Failure

from .body_consumer import BodyCore, ConsumerInputs


class ArrivalInputs(Protocol):
    """What can happen to the arriving body."""

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
    :ivar on_piece: what a chunk (not empty) does in the machine's state, set
        by its transitions: :meth:`take` while ``Arriving``, :meth:`count`
        while ``Discarding``, :meth:`ignore` once ``Arrived`` or ``Lost``.
    """

    body: BodyCore
    consumer: ConsumerInputs
    on_piece: Callable[[bytes], None] = field(
        default=Factory(lambda core: core.take, takes_self=True), init=False)

    def take(self, data: bytes) -> None:
        """A chunk while the body arrives: held for the consumer."""
        body = self.body
        body.received += len(data)
        body.queue.append(data)
        body.queued += len(data)

    def count(self, data: bytes) -> None:
        """A chunk once the consumer stopped: counted and dropped."""
        self.body.received += len(data)

    def ignore(self, data: bytes) -> None:
        """A chunk after the end or the loss."""


# The behaviours of the transitions, each named after what it does.


def _arrive(inputs: ArrivalInputs, core: ArrivalCore) -> None:
    core.on_piece = core.ignore
    core.body.complete = True


def _lose(inputs: ArrivalInputs, core: ArrivalCore, reason: Failure) -> None:
    core.on_piece = core.ignore
    core.body.drop_queue()
    core.consumer.lose(reason)


def _discard(inputs: ArrivalInputs, core: ArrivalCore) -> None:
    core.on_piece = core.count
    core.body.drop_queue()


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
    for each in (arriving, discarding):
        each.upon(ArrivalInputs.end).to(arrived)(_arrive)
    arriving.upon(ArrivalInputs.fail).to(lost)(_lose)
    arriving.upon(ArrivalInputs.discard).to(discarding)(_discard)
    for each in (discarding, arrived, lost):
        each.upon(ArrivalInputs.discard).loop()(_drop)
    arriving.upon(ArrivalInputs.settle).loop()(_ask_consumer)
    for each in (discarding, arrived, lost):
        each.upon(ArrivalInputs.settle).loop()(_release)

    # What cannot change a state any more: the body arrived or was lost; a loss once discarding.
    for each in (arrived, lost):
        for signal in (ArrivalInputs.end, ArrivalInputs.fail):
            each.upon(signal).loop().returns(None)
    discarding.upon(ArrivalInputs.fail).loop().returns(None)
    return builder.build()


#: The arrival machine; calling it with an :class:`ArrivalCore` gives one body's arrival inputs.
ARRIVAL_MACHINE = _build_arrival()


__all__ = ["ARRIVAL_MACHINE", "ArrivalCore", "ArrivalInputs"]
