# -*- test-case-name: tests.agent.test_tunnelports -*-
"""
A raw virtio-serial port's claim over time (the bulk port, a tunnel port) as
one automat machine (diagram: ``docs/state-machines/port-claim.dot``).

Theory of operation
-------------------

One user at a time holds a port (a copy, a tunnel):

- **Free**: no one holds it.  ``claim`` → Connecting (and answers ``True``).
- **Connecting**: the user connects to QEMU's socket of the port.
  ``connected`` → Held; ``released`` (the connect failed) → Free.
- **Held**: the user's link is up.  ``released`` (the link's connection is
  gone: the user closed it, the tunnel ended or died, QEMU went away) → Free.

A ``claim`` while Connecting or Held answers ``False`` (the user takes
another port, or its multiplexed stream).  ``released`` while Free is a link
lost twice and changes nothing.  What a new holder finds on the port (the
tail of a transfer cut off half way) is dropped by its token hunt
(:class:`vmservice.wire.bulk.TokenHunt`), not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from automat import TypeMachine, TypeMachineBuilder


class PortClaimInputs(Protocol):
    """What can happen to a port's claim."""

    def claim(self) -> bool:
        """A user asks for the port: whether it has it now (it connects next)."""

    def connected(self) -> None:
        """The user's connection to the port's socket is up."""

    def released(self) -> None:
        """The user's connection is gone, or never came up."""

    def busy(self) -> bool:
        """Whether someone holds (or is connecting to) the port."""


@dataclass
class PortClaimCore:
    """What the states share: the port's name, for logs and tests."""

    name: str


def _take(inputs: PortClaimInputs, core: PortClaimCore) -> bool:
    return True


def _refuse(inputs: PortClaimInputs, core: PortClaimCore) -> bool:
    return False


def _build() -> TypeMachine[PortClaimInputs, PortClaimCore]:
    builder = TypeMachineBuilder(PortClaimInputs, PortClaimCore)
    free, connecting, held = builder.state("Free"), builder.state("Connecting"), builder.state("Held")
    I = PortClaimInputs

    free.upon(I.claim).to(connecting)(_take)
    free.upon(I.released).loop().returns(None)
    free.upon(I.busy).loop().returns(False)

    connecting.upon(I.connected).to(held).returns(None)
    connecting.upon(I.released).to(free).returns(None)
    held.upon(I.released).to(free).returns(None)
    for state in (connecting, held):
        state.upon(I.claim).loop()(_refuse)
        state.upon(I.busy).loop().returns(True)
    return builder.build()


#: The machine; calling it with a core gives one port's inputs.
PORT_CLAIM_MACHINE = _build()

__all__ = ["PORT_CLAIM_MACHINE", "PortClaimCore", "PortClaimInputs"]
