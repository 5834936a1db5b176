# -*- test-case-name: tests.api.test_shell_bridge -*-
"""
What joins a guest's shell to one WebSocket, as one automat machine
(diagram: ``docs/state-machines/shell-bridge.dot``).

Theory of operation
-------------------

The route starts the shell in the guest before it answers 101, and the
WebSocket opens only after that, so the shell's events and the socket's
arrive in any order:

- **Starting**: the guest has not answered.  ``started`` → Holding (the
  shell is paused until a socket takes its output; the route's wait ends);
  ``lost`` → Closed (the route answers the guest's error instead of 101).
- **Holding**: the shell runs, no socket yet: its output is held.  ``attach``
  → Joined (what was held goes first, then output flows with back-pressure
  both ways); ``exited``/``lost`` → Ended; ``detach`` → Closed, hanging up.
- **Joined**: output goes to the socket.  ``exited`` → Closed with
  SESSION_CLOSE and 1000, ``lost`` → Closed with SESSION_CLOSE and 4000,
  ``detach`` (the client went away or sent SHUTDOWN) → Closed, hanging the
  shell up (SIGHUP in the guest).
- **Ended** (with the close it owes): the shell ended before the socket
  opened.  ``attach`` → Closed: the held output, then that close.
- **Closed**: nothing more; every input is ignored.

:class:`ShellProtocol`, the socket's side, lives here with the bridge it
attaches to and detaches from: the two know each other.
"""

from __future__ import annotations

from typing import Optional, Protocol

from attrs import define, field
from automat import TypeMachine, TypeMachineBuilder
from autobahn.twisted.websocket import WebSocketServerProtocol
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from zope.interface import implementer

from ..errors import AgentError
from ..guestport.shell import IShellSession, IShellSink
from .websocket import take_transport_producer
from vmservice.wire.shellframes import (
    DATA, HEARTBEAT, SESSION_CLOSE, SHUTDOWN, WINDOW_SIZE, FrameError, decode_message, encode_data, encode_frame,
)

#: ShellProtocol logs under the shell route's name, as when it lived there.
log = Logger(namespace="vmservice.api.shell")

#: The close code when the shell was lost rather than ended (agent gone,
#: stream reset); autobahn lets an application send only 1000 or 3000-4999.
LOST_CLOSE_CODE = 4000


class ShellProtocol(WebSocketServerProtocol):
    """
    The WebSocket of one shell: its frames as :mod:`vmservice.api.shell` describes them.

    :param bridge: the shell it serves.
    """

    def __init__(self, bridge: ShellBridge) -> None:
        super().__init__()
        self._bridge = bridge
        self._closing = False

    def onOpen(self) -> None:
        self._bridge.attach(self)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if not isBinary or self._closing:
            return
        session = self._bridge.session
        try:
            frame = decode_message(payload)
        except FrameError as e:
            log.info("shell: malformed message ignored: {error}", error=str(e))
            return
        if session is None:
            return
        if frame.kind == DATA:
            session.write(frame.payload)
        elif frame.kind == WINDOW_SIZE:
            try:
                cols, rows = frame.window_size()
            except FrameError:
                return
            session.resize(cols, rows)
        elif frame.kind == SHUTDOWN:
            # Hang up; the client closes the socket next (autobahn answers its
            # close).  Closing from here too would race with that close, whose
            # answer drops the connection before our frames are flushed.
            self._closing = True
            self._bridge.detach()
        elif frame.kind == HEARTBEAT:
            pass

    def onClose(self, wasClean: bool, code: Optional[int], reason: Optional[str]) -> None:
        self._closing = True
        self._bridge.detach()

    def send_output(self, data: bytes) -> None:
        """Terminal output, as DATA messages."""
        if self._closing or self.state != self.STATE_OPEN:
            return
        for message in encode_data(data):
            self.sendMessage(message, isBinary=True)  # type: ignore[no-untyped-call]

    def close_session(self, code: int, reason: str) -> None:
        """SESSION_CLOSE, then the close handshake with ``code``."""
        if self._closing or self.state != self.STATE_OPEN:
            return
        self._closing = True
        self.sendMessage(encode_frame(SESSION_CLOSE), isBinary=True)  # type: ignore[no-untyped-call]
        self.sendClose(code, reason)


class BridgeInputs(Protocol):
    """The inputs of a shell's bridge: the shell's events and the socket's."""

    def started(self) -> None:
        """The shell runs in the guest."""

    def output(self, data: bytes) -> None:
        """The terminal wrote ``data``."""

    def exited(self) -> None:
        """The shell ended (its output was delivered)."""

    def lost(self, error: AgentError) -> None:
        """The shell was refused or lost."""

    def attach(self, socket: ShellProtocol) -> None:
        """The WebSocket is open."""

    def detach(self) -> None:
        """The WebSocket closed, or its client sent SHUTDOWN."""


@define
class BridgeCore:
    """
    What every state shares.

    :ivar ready: fires once the shell runs, or fails with the guest's error.
    :ivar session: the shell, once the guest was asked.
    """

    ready: Deferred[None] = field(factory=Deferred)
    session: Optional[IShellSession] = None
    socket: Optional[ShellProtocol] = None
    held: list[bytes] = field(factory=list)

    def join(self, socket: ShellProtocol) -> None:
        """Deliver what was held to ``socket``."""
        self.socket = socket
        for data in self.held:
            socket.send_output(data)
        self.held.clear()

    def stop_input(self) -> None:
        if self.session is not None:
            self.session.unregister_input_producer()

    def hang_up(self) -> None:
        self.socket = None
        if self.session is not None:
            self.session.unregister_input_producer()
            self.session.hangup()


@implementer(IPushProducer)
class OutputPause:
    """
    The shell's output (or a kubelet exec's command's) as the WebSocket
    transport's producer: a full socket buffer pauses it.  Stopping it does
    nothing: the socket's close (``onClose``) hangs the shell up.

    :param session: the shell (or command), as the producer of its output.
    """

    def __init__(self, session: IPushProducer) -> None:
        self._session = session

    def pauseProducing(self) -> None:
        self._session.pauseProducing()

    def resumeProducing(self) -> None:
        self._session.resumeProducing()

    def stopProducing(self) -> None:
        pass


@implementer(IPushProducer)
class ReadingPause:
    """
    The input side of a WebSocket as the agent stream's producer: while the
    guest takes no input the socket is not read.  Stopping it does nothing:
    the socket outlives the stream long enough to send its close frames.

    :param socket: the WebSocket protocol whose transport is paused.
    """

    def __init__(self, socket: WebSocketServerProtocol) -> None:
        self._socket = socket

    def pauseProducing(self) -> None:
        transport = self._socket.transport
        if transport is not None:
            IPushProducer(transport).pauseProducing()

    def resumeProducing(self) -> None:
        transport = self._socket.transport
        if transport is not None:
            IPushProducer(transport).resumeProducing()

    def stopProducing(self) -> None:
        pass


# The behaviours of the transitions, each named after what it does.


def _owed_close(inputs: BridgeInputs, core: BridgeCore, error: Optional[AgentError] = None) -> tuple[int, str]:
    """The close an ended shell owes its socket: 1000 when it exited, 4000 when it was lost."""
    if error is None:
        return 1000, "the shell exited"
    return LOST_CLOSE_CODE, f"the shell was lost: {error}"[:120]


def _start(inputs: BridgeInputs, core: BridgeCore) -> None:
    if core.session is not None:
        core.session.pauseProducing()  # until a socket takes the output
    core.ready.callback(None)


def _refused(inputs: BridgeInputs, core: BridgeCore, error: AgentError) -> None:
    core.ready.errback(error)


def _hold(inputs: BridgeInputs, core: BridgeCore, data: bytes) -> None:
    core.held.append(data)


def _join(inputs: BridgeInputs, core: BridgeCore, socket: ShellProtocol) -> None:
    core.join(socket)
    if core.session is not None:
        take_transport_producer(socket, OutputPause(core.session))
        core.session.register_input_producer(ReadingPause(socket))
        core.session.resumeProducing()


def _forward(inputs: BridgeInputs, core: BridgeCore, data: bytes) -> None:
    if core.socket is not None:
        core.socket.send_output(data)


def _close_exited(inputs: BridgeInputs, core: BridgeCore) -> None:
    core.stop_input()
    if core.socket is not None:
        core.socket.close_session(1000, "the shell exited")


def _close_lost(inputs: BridgeInputs, core: BridgeCore, error: AgentError) -> None:
    core.stop_input()
    if core.socket is not None:
        core.socket.close_session(LOST_CLOSE_CODE, f"the shell was lost: {error}"[:120])


def _hang_up(inputs: BridgeInputs, core: BridgeCore) -> None:
    core.hang_up()


def _hold_late(inputs: BridgeInputs, core: BridgeCore, end: tuple[int, str], data: bytes) -> None:
    core.held.append(data)


def _deliver_end(inputs: BridgeInputs, core: BridgeCore, end: tuple[int, str], socket: ShellProtocol) -> None:
    core.stop_input()
    core.join(socket)
    socket.close_session(*end)


def _build() -> TypeMachine[BridgeInputs, BridgeCore]:
    """The machine: its states, what each input does in them, and the inputs each state ignores."""
    builder = TypeMachineBuilder(BridgeInputs, BridgeCore)
    starting = builder.state("Starting")
    holding = builder.state("Holding")
    joined = builder.state("Joined")
    ended = builder.state("Ended", _owed_close)
    closed = builder.state("Closed")

    starting.upon(BridgeInputs.started).to(holding)(_start)
    starting.upon(BridgeInputs.lost).to(closed)(_refused)

    holding.upon(BridgeInputs.output).loop()(_hold)
    holding.upon(BridgeInputs.attach).to(joined)(_join)
    holding.upon(BridgeInputs.exited).to(ended).returns(None)
    holding.upon(BridgeInputs.lost).to(ended).returns(None)
    holding.upon(BridgeInputs.detach).to(closed)(_hang_up)

    joined.upon(BridgeInputs.output).loop()(_forward)
    joined.upon(BridgeInputs.exited).to(closed)(_close_exited)
    joined.upon(BridgeInputs.lost).to(closed)(_close_lost)
    joined.upon(BridgeInputs.detach).to(closed)(_hang_up)

    ended.upon(BridgeInputs.output).loop()(_hold_late)
    ended.upon(BridgeInputs.attach).to(closed)(_deliver_end)
    ended.upon(BridgeInputs.detach, nodata=True).to(closed).returns(None)

    # Nothing else can happen in a state, or it no longer matters.
    starting.upon(BridgeInputs.output).loop().returns(None)
    starting.upon(BridgeInputs.exited).to(closed).returns(None)
    starting.upon(BridgeInputs.attach).loop().returns(None)
    starting.upon(BridgeInputs.detach).loop().returns(None)
    holding.upon(BridgeInputs.started).loop().returns(None)
    joined.upon(BridgeInputs.started).loop().returns(None)
    joined.upon(BridgeInputs.attach).loop().returns(None)
    for signal in (BridgeInputs.started, BridgeInputs.exited, BridgeInputs.lost):
        ended.upon(signal, nodata=True).loop().returns(None)
    for each in (BridgeInputs.started, BridgeInputs.output, BridgeInputs.exited, BridgeInputs.lost,
                 BridgeInputs.attach, BridgeInputs.detach):
        closed.upon(each).loop().returns(None)
    return builder.build()


#: The machine; calling it with a core gives one bridge's inputs.
BRIDGE_MACHINE = _build()


@implementer(IShellSink)
class ShellBridge:
    """
    Joins a guest's shell to one WebSocket (see the module docstring): the
    shell's sink, and what the socket tells.

    :ivar ready: fires once the shell runs, or fails with the guest's
        AgentError (before the upgrade that is the HTTP answer).
    """

    def __init__(self) -> None:
        self._core = BridgeCore()
        self._inputs = BRIDGE_MACHINE(self._core)
        self.ready = self._core.ready

    @property
    def session(self) -> Optional[IShellSession]:
        return self._core.session

    @session.setter
    def session(self, session: Optional[IShellSession]) -> None:
        self._core.session = session

    # -- IShellSink ----------------------------------------------------------------------

    def started(self, pid: int) -> None:
        self._inputs.started()

    def output(self, data: bytes) -> None:
        self._inputs.output(data)

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        self._inputs.exited()

    def lost(self, error: AgentError) -> None:
        self._inputs.lost(error)

    # -- the socket ----------------------------------------------------------------------

    def attach(self, socket: ShellProtocol) -> None:
        """The socket is open: deliver what was held, then let output flow."""
        self._inputs.attach(socket)

    def detach(self) -> None:
        """The socket closed: hang the shell up unless it already ended."""
        self._inputs.detach()


__all__ = ["BRIDGE_MACHINE", "BridgeCore", "BridgeInputs", "LOST_CLOSE_CODE", "OutputPause", "ReadingPause", "ShellBridge",
           "ShellProtocol"]
