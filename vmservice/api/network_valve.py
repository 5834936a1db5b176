# -*- test-case-name: tests.api.test_request_body -*-
"""
Whether a streamed request body holds the network, as a small automat
machine (diagram: ``docs/state-machines/request-body-valve.dot``; the
body's other machines: :mod:`.body_arrival`, :mod:`.body_consumer`).

A hold is asserted again every time it is asked for: the HTTP channel may
resume the connection by itself (it does when its send buffer drains).  A
release reads the connection again only after a hold.

The body releases the network after every chunk, so a release is not sent
to the machine while it is ``Open``: each transition sets, as an output,
what a release does in the state it enters (:attr:`ValveCore.on_release`:
nothing while ``Open``, the machine's ``release`` while ``Shut``), and the
body's :class:`NetworkValve` calls that.  A hold always goes to the machine.
"""

from __future__ import annotations

from typing import Callable, Protocol

from attrs import define, field
from automat import TypeMachine, TypeMachineBuilder


class ValveInputs(Protocol):
    """What the body tells the network: hold it or let it flow."""

    def hold(self) -> None:
        """Too much waits: stop reading the connection (again)."""

    def release(self) -> None:
        """Read the connection again, if it was held."""


def _stay_open() -> None:
    """A release while ``Open``: the connection is read already."""


@define
class ValveCore:
    """
    The network's two controls.

    :ivar pause_network: stop reading the connection.
    :ivar resume_network: read it again.
    :ivar on_release: what a release does in the valve's state, set by its
        transitions: nothing while ``Open`` (the state it starts in), the
        machine's ``release`` while ``Shut``.
    """

    pause_network: Callable[[], None]
    resume_network: Callable[[], None]
    on_release: Callable[[], None] = field(default=_stay_open, init=False)


def _build_valve() -> TypeMachine[ValveInputs, ValveCore]:
    """The valve: ``Open`` until a hold, ``Shut`` until a release."""
    builder = TypeMachineBuilder(ValveInputs, ValveCore)
    open_ = builder.state("Open")
    shut = builder.state("Shut")

    @open_.upon(ValveInputs.hold).to(shut)
    def start_holding(inputs: ValveInputs, core: ValveCore) -> None:
        core.on_release = inputs.release
        core.pause_network()

    @shut.upon(ValveInputs.hold).loop()
    def pause(inputs: ValveInputs, core: ValveCore) -> None:
        core.pause_network()

    @shut.upon(ValveInputs.release).to(open_)
    def resume(inputs: ValveInputs, core: ValveCore) -> None:
        core.on_release = _stay_open
        core.resume_network()

    open_.upon(ValveInputs.release).loop().returns(None)
    return builder.build()


#: The network's valve; calling it with a :class:`ValveCore` gives one.
VALVE_MACHINE = _build_valve()


@define(frozen=True)
class NetworkValve:
    """
    A valve as the body uses it: a hold goes to the machine, a release to
    what the machine's state does with one (:attr:`ValveCore.on_release`).

    :ivar inputs: the valve's machine.
    :ivar core: what it works on.
    """

    inputs: ValveInputs
    core: ValveCore

    def hold(self) -> None:
        """Stop reading the connection (again)."""
        self.inputs.hold()

    def release(self) -> None:
        """Read the connection again, if it was held."""
        self.core.on_release()


def network_valve(pause_network: Callable[[], None], resume_network: Callable[[], None]) -> NetworkValve:
    """A valve, ``Open``, over the network's two controls."""
    core = ValveCore(pause_network, resume_network)
    return NetworkValve(VALVE_MACHINE(core), core)


__all__ = ["NetworkValve", "VALVE_MACHINE", "ValveCore", "ValveInputs", "network_valve"]
