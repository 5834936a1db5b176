# -*- test-case-name: tests.agent.test_transport_choice -*-
"""
Which link an agent client with ``agent_transport: auto`` connects over
(:class:`TransportChoice`; diagram: ``docs/state-machines/transport-choice.dot``).

A node whose QEMU has a vhost-vsock device is tried over vsock first: its
agent listens on both links, and vsock is the faster.  If no agent answers
over vsock within :data:`FALLBACK_AFTER` seconds (a guest image whose agent
predates the vsock listener, a kernel without the modules), the client falls
back to the virtio-serial port for good, and says so in the log:

- **Trying**: connects go to vsock; the fallback timer runs.
  ``answered`` → Vsock (the timer stops); ``timed_out`` → Serial (logged).
- **Vsock**: the agent answered over vsock; every reconnect goes there too.
- **Serial**: connects go to the serial port.

``stop`` (the client stops) ends the timer wherever it runs.  An answer
while in Serial is the serial link's, and changes nothing.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IProtocol, IProtocolFactory, IReactorTime, IStreamClientEndpoint
from twisted.logger import Logger
from zope.interface import implementer

#: Seconds without an answer over vsock before the serial port is used instead.
FALLBACK_AFTER = 20.0


class ChoiceInputs(Protocol):
    """What happens to the choice."""

    def endpoint(self) -> IStreamClientEndpoint:
        """A connect is about to be made: the endpoint it goes to."""

    def answered(self) -> None:
        """The agent answered (a HELLO exchange completed)."""

    def timed_out(self) -> None:
        """:data:`FALLBACK_AFTER` seconds passed in Trying."""

    def stop(self) -> None:
        """The client stops."""


@define
class ChoiceCore:
    """
    What the choice's states share.

    :ivar vsock: the vsock endpoint.
    :ivar serial: the virtio-serial endpoint.
    :ivar start_timer: starts the fallback timer (which sends ``timed_out``); answers it.
    :ivar fell_back: tells the log of the fallback.
    :ivar timer: the fallback timer, while it runs.
    """

    vsock: IStreamClientEndpoint
    serial: IStreamClientEndpoint
    start_timer: Callable[[], IDelayedCall]
    fell_back: Callable[[], None]
    timer: Optional[IDelayedCall] = None


def _cancel(core: ChoiceCore) -> None:
    if core.timer is not None and core.timer.active():
        core.timer.cancel()
    core.timer = None


def _trying_endpoint(inputs: ChoiceInputs, core: ChoiceCore) -> IStreamClientEndpoint:
    if core.timer is None:
        core.timer = core.start_timer()
    return core.vsock


def _vsock_endpoint(inputs: ChoiceInputs, core: ChoiceCore) -> IStreamClientEndpoint:
    return core.vsock


def _serial_endpoint(inputs: ChoiceInputs, core: ChoiceCore) -> IStreamClientEndpoint:
    return core.serial


def _answered(inputs: ChoiceInputs, core: ChoiceCore) -> None:
    _cancel(core)


def _fall_back(inputs: ChoiceInputs, core: ChoiceCore) -> None:
    core.timer = None
    core.fell_back()


def _stop(inputs: ChoiceInputs, core: ChoiceCore) -> None:
    _cancel(core)


def _build() -> TypeMachine[ChoiceInputs, ChoiceCore]:
    builder = TypeMachineBuilder(ChoiceInputs, ChoiceCore)
    trying = builder.state("Trying")
    vsock = builder.state("Vsock")
    serial = builder.state("Serial")

    trying.upon(ChoiceInputs.endpoint).loop()(_trying_endpoint)
    trying.upon(ChoiceInputs.answered).to(vsock)(_answered)
    trying.upon(ChoiceInputs.timed_out).to(serial)(_fall_back)
    trying.upon(ChoiceInputs.stop).loop()(_stop)
    vsock.upon(ChoiceInputs.endpoint).loop()(_vsock_endpoint)
    vsock.upon(ChoiceInputs.answered).loop().returns(None)
    vsock.upon(ChoiceInputs.stop).loop().returns(None)
    serial.upon(ChoiceInputs.endpoint).loop()(_serial_endpoint)
    serial.upon(ChoiceInputs.answered).loop().returns(None)
    serial.upon(ChoiceInputs.stop).loop().returns(None)
    # timed_out comes only from the timer, which runs only in Trying: anywhere else it is a bug.
    return builder.build()


#: The machine; calling it with a :class:`ChoiceCore` gives one client's inputs.
CHOICE_MACHINE = _build()


@implementer(IStreamClientEndpoint)
class TransportChoice:
    """
    An endpoint that connects over vsock or the serial port as the choice
    stands at each connect; the agent client tells it of each answer
    (:meth:`answered`, given to ``AgentClient.on_ready``).

    :param clock: runs the fallback timer.
    :param vsock: the vsock endpoint.
    :param serial: the virtio-serial endpoint.
    :param name: names the node in the fallback's log line.
    :param log: where the fallback is logged.
    :param fallback_after: seconds without an answer over vsock before the serial port is used.
    """

    def __init__(self, clock: IReactorTime, vsock: IStreamClientEndpoint, serial: IStreamClientEndpoint, name: str,
                 *, log: Optional[Logger] = None, fallback_after: float = FALLBACK_AFTER) -> None:
        self._log = log if log is not None else Logger()
        self._name = name
        self._fallback_after = fallback_after
        self._inputs = CHOICE_MACHINE(ChoiceCore(
            vsock, serial, lambda: clock.callLater(fallback_after, self._timed_out), self._fell_back,
        ))

    def _timed_out(self) -> None:
        self._inputs.timed_out()

    def _fell_back(self) -> None:
        self._log.warn("{name}: no agent answered over vsock in {seconds:g} s; using the virtio-serial port",
                       name=self._name, seconds=self._fallback_after)

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        """Connect over the link the choice names now."""
        return self._inputs.endpoint().connect(protocolFactory)

    def answered(self) -> None:
        """The agent answered on the link last connected."""
        self._inputs.answered()

    def stop(self) -> None:
        """The client stopped: no fallback timer runs on."""
        self._inputs.stop()


__all__ = ["CHOICE_MACHINE", "ChoiceCore", "ChoiceInputs", "FALLBACK_AFTER", "TransportChoice"]
