# -*- test-case-name: tests.api.test_request_body -*-
"""
Whether a streamed request body holds the network, as a small automat
machine (diagram: ``docs/state-machines/request-body-valve.dot``; the
body's other machines: :mod:`.body_arrival`, :mod:`.body_consumer`).

A hold is asserted again every time it is asked for: the HTTP channel may
resume the connection by itself (it does when its send buffer drains).  A
release reads the connection again only after a hold.
"""

from __future__ import annotations

from typing import Callable, Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder


class ValveInputs(Protocol):
    """What the body tells the network: hold it or let it flow."""

    def hold(self) -> None:
        """Too much waits: stop reading the connection (again)."""

    def release(self) -> None:
        """Read the connection again, if it was held."""


@define
class ValveCore:
    """
    The network's two controls.

    :ivar pause_network: stop reading the connection.
    :ivar resume_network: read it again.
    """

    pause_network: Callable[[], None]
    resume_network: Callable[[], None]


def _build_valve() -> TypeMachine[ValveInputs, ValveCore]:
    """The valve: ``Open`` until a hold, ``Shut`` until a release."""
    builder = TypeMachineBuilder(ValveInputs, ValveCore)
    open_ = builder.state("Open")
    shut = builder.state("Shut")

    @open_.upon(ValveInputs.hold).to(shut)
    @shut.upon(ValveInputs.hold).loop()
    def pause(inputs: ValveInputs, core: ValveCore) -> None:
        core.pause_network()

    @shut.upon(ValveInputs.release).to(open_)
    def resume(inputs: ValveInputs, core: ValveCore) -> None:
        core.resume_network()

    open_.upon(ValveInputs.release).loop().returns(None)
    return builder.build()


#: The network's valve; calling it with a :class:`ValveCore` gives one.
VALVE_MACHINE = _build_valve()


__all__ = ["VALVE_MACHINE", "ValveCore", "ValveInputs"]
