# -*- test-case-name: tests.agent.test_link,tests.agent.test_protocol -*-
"""
What :class:`~vmservice.agent.protocol.AgentProtocol` knows of its link that
the codec cannot: whether the socket is up, and whether the owner was told
that the agent acknowledged our session (diagram:
``docs/state-machines/agent-link.dot``).

Theory of operation
-------------------

The HELLO exchange is the codec's alone (:class:`vmservice.wire.Connection`,
:mod:`vmservice.wire.handshake`): after each HELLO the protocol reads its
``established`` and tells this machine ``acknowledged`` or
``unacknowledged``; nothing here keeps a copy of it.  What the codec does
not know is the socket (the protocol is made before it connects and outlives
it) and what the protocol has told its owner, who must hear
``on_established`` and ``on_lost`` in turn, each once per session:

- **Unconnected**: made, not connected.  ``connected`` → Greeting.
- **Greeting**: the socket is up, the owner was not told the session is up.
  ``acknowledged`` → Ready (the owner hears ``on_established``);
  ``unacknowledged`` keeps the HELLO timer running.
- **Ready**: the owner was told.  ``unacknowledged`` (the agent restarted and
  has not acknowledged us in its new session) → Greeting, the owner hears
  ``on_lost`` and the HELLO timer runs again.
- **Gone**: the socket is lost; an owner that was told hears ``on_lost``.
  Nothing comes back from here: a new connection has a new protocol.

A new agent session that we asked for (``adopt``) is no restart: the
protocol answers its HELLOs itself and sends neither input, so the owner
hears nothing.  The socket lives in :attr:`LinkCore.socket` while it is up:
what the protocol writes goes nowhere after the loss.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder


class LinkSocket(Protocol):
    """What the protocol writes to while the link is up."""

    def write(self, data: bytes) -> None: ...


class LinkInputs(Protocol):
    """What happens to the link, as the protocol sees it."""

    def connected(self, socket: LinkSocket) -> None:
        """The socket is up."""

    def acknowledged(self) -> None:
        """After a HELLO of the session we expect, the codec is established."""

    def unacknowledged(self) -> None:
        """After a HELLO of the session we expect, the codec is not established."""

    def lost(self) -> None:
        """The socket is gone."""


@define
class LinkCore:
    """
    What the link's states share.

    :ivar ready: the agent acknowledged us: tell the owner (``on_established``).
    :ivar unready: the session the owner was told of ended: tell it (``on_lost``).
    :ivar await_hello: start the HELLO timer unless it runs.
    :ivar socket: the socket, while it is up.
    """

    ready: Callable[[], None]
    unready: Callable[[], None]
    await_hello: Callable[[], None]
    socket: Optional[LinkSocket] = None


def _connect(inputs: LinkInputs, core: LinkCore, socket: LinkSocket) -> None:
    core.socket = socket


def _ready(inputs: LinkInputs, core: LinkCore) -> None:
    core.ready()


def _await_hello(inputs: LinkInputs, core: LinkCore) -> None:
    core.await_hello()


def _unready(inputs: LinkInputs, core: LinkCore) -> None:
    core.unready()
    core.await_hello()


def _drop(inputs: LinkInputs, core: LinkCore) -> None:
    core.socket = None


def _drop_ready(inputs: LinkInputs, core: LinkCore) -> None:
    core.socket = None
    core.unready()


def _build() -> TypeMachine[LinkInputs, LinkCore]:
    """The machine: its states, what each input does in them, and what each ignores."""
    builder = TypeMachineBuilder(LinkInputs, LinkCore)
    unconnected = builder.state("Unconnected")
    greeting = builder.state("Greeting")
    ready = builder.state("Ready")
    gone = builder.state("Gone")

    unconnected.upon(LinkInputs.connected).to(greeting)(_connect)
    unconnected.upon(LinkInputs.lost).to(gone).returns(None)
    greeting.upon(LinkInputs.acknowledged).to(ready)(_ready)
    greeting.upon(LinkInputs.unacknowledged).loop()(_await_hello)
    greeting.upon(LinkInputs.lost).to(gone)(_drop)
    ready.upon(LinkInputs.acknowledged).loop().returns(None)
    ready.upon(LinkInputs.unacknowledged).to(greeting)(_unready)
    ready.upon(LinkInputs.lost).to(gone)(_drop_ready)
    gone.upon(LinkInputs.acknowledged).loop().returns(None)
    gone.upon(LinkInputs.unacknowledged).loop().returns(None)
    gone.upon(LinkInputs.lost).loop().returns(None)
    # A socket connects once, and nothing is received before it does: ``connected``
    # anywhere but Unconnected, or a HELLO before it, raises NoTransition (a bug).
    return builder.build()


#: The machine; calling it with a :class:`LinkCore` gives one link's inputs.
LINK_MACHINE = _build()


__all__ = ["LINK_MACHINE", "LinkCore", "LinkInputs", "LinkSocket"]
