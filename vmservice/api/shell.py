# -*- test-case-name: tests.api.test_shell -*-
"""
``GET /vm/{hostname}/shell``: an interactive shell over a WebSocket.

Before the upgrade the handler checks the request (:func:`.websocket.check_upgrade`),
finds the node's guest (404, 409 paused, 503 agent not connected) and starts
the shell in it, waiting for the guest's answer: a refused ``cwd`` or shell is
a 400.  Only then does it answer 101 (:func:`.websocket.accept`).

On the socket each binary message carries one frame of
:mod:`vmservice.wire.shellframes` (``docs/api.md`` documents them): client
DATA is typed into the terminal, WINDOW_SIZE resizes it, SHUTDOWN hangs up,
HEARTBEAT is ignored, as are text messages; the terminal's output comes
back as DATA messages of at most 32 KiB.  When the shell exits the server
sends SESSION_CLOSE and closes with 1000; when the client goes away the
guest hangs the session up (SIGHUP).

Back-pressure both ways: while the socket's send buffer is full the shell's
output is paused (no credit to the guest, which stops reading the terminal);
while the guest takes no input the socket is not read.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen
from autobahn.twisted.websocket import WebSocketServerProtocol
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.web.resource import IResource
from twisted.web.server import Request
from zope.interface import implementer

from ..errors import AgentError
from ..nodes.fleet import Fleet
from ..nodes.guest import IShellSession, IShellSink, ShellRequest
from .models import ErrorResponse
from .query import Text, UserId, param
from .routing import Reply, Route
from .websocket import accept, check_upgrade, take_transport_producer
from vmservice.wire.shellframes import (
    DATA,
    HEARTBEAT,
    MAX_MESSAGE,
    SESSION_CLOSE,
    SHUTDOWN,
    WINDOW_SIZE,
    FrameError,
    decode_message,
    encode_data,
    encode_frame,
)

log = Logger()

#: The close code when the shell was lost rather than ended (agent gone,
#: stream reset); autobahn lets an application send only 1000 or 3000-4999.
LOST_CLOSE_CODE = 4000
#: The shell when the query names none (the contract's default).
DEFAULT_SHELL = "/bin/bash"


@frozen
class ShellQuery:
    """The query of a shell (see docs/api.md)."""

    uid: Optional[int] = param(UserId(), "User id (default 0; 4294967295 = not set)")
    gid: Optional[int] = param(UserId(), "Group id (default 0; 4294967295 = not set)")
    shell: Optional[str] = param(Text(), "Shell, run as a login shell (default /bin/bash)")
    cwd: str = param(Text(), "Working directory: absolute, ~, ~/dir or relative to the user's home", default="")

    def request(self) -> ShellRequest:
        """What to start in the guest."""
        return ShellRequest(uid=self.uid or 0, gid=self.gid or 0, shell=self.shell or DEFAULT_SHELL, cwd=self.cwd)


@implementer(IShellSink)
class ShellBridge:
    """
    Joins a guest's shell to one WebSocket.

    Until the socket is open (:meth:`attach`) the shell's output is held
    (and the shell paused); then everything goes to the socket.

    :ivar ready: fires once the shell runs, or fails with the guest's
        AgentError (before the upgrade that is the HTTP answer).
    """

    def __init__(self) -> None:
        self.ready: Deferred[None] = Deferred()
        self.session: Optional[IShellSession] = None
        self._socket: Optional["ShellProtocol"] = None
        self._held: list[bytes] = []
        self._ended = False
        self._end: Optional[tuple[int, str]] = None

    # -- IShellSink --------------------------------------------------------------------

    def started(self, pid: int) -> None:
        if self.session is not None:
            self.session.pauseProducing()  # until the socket is open
        self.ready.callback(None)

    def output(self, data: bytes) -> None:
        if self._socket is None:
            self._held.append(data)
            return
        self._socket.send_output(data)

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        self._ended = True
        self._finish(1000, "the shell exited")

    def lost(self, error: AgentError) -> None:
        self._ended = True
        if not self.ready.called:
            self.ready.errback(error)
            return
        self._finish(LOST_CLOSE_CODE, f"the shell was lost: {error}"[:120])

    # -- the socket --------------------------------------------------------------------

    def attach(self, socket: "ShellProtocol") -> None:
        """The socket is open: deliver what was held, then let output flow."""
        self._socket = socket
        for data in self._held:
            socket.send_output(data)
        self._held.clear()
        if self._end is not None:
            socket.close_session(*self._end)
            return
        if self.session is not None and not self._ended:
            take_transport_producer(socket, OutputPause(self.session))
            self.session.register_input_producer(ReadingPause(socket))
            self.session.resumeProducing()

    def detach(self) -> None:
        """The socket closed: hang the shell up unless it already ended."""
        session, self._socket = self.session, None
        if session is None:
            return
        if not self._ended:
            self._ended = True
            session.unregister_input_producer()
            session.hangup()

    def _finish(self, code: int, reason: str) -> None:
        if self.session is not None:
            self.session.unregister_input_producer()
        if self._socket is None:
            self._end = (code, reason)
        else:
            self._socket.close_session(code, reason)


@implementer(IPushProducer)
class OutputPause:
    """
    The shell's output as the WebSocket transport's producer: a full socket
    buffer pauses it.  Stopping it does nothing: the socket's close
    (``onClose``) hangs the shell up.

    :param session: the shell.
    """

    def __init__(self, session: IShellSession) -> None:
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


class ShellProtocol(WebSocketServerProtocol):
    """
    The WebSocket of one shell (see the module docstring).

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


class ShellApi:
    """
    :param fleet: the nodes of this daemon.
    :param reactor: the reactor the WebSockets run on.
    """

    def __init__(self, fleet: Fleet, reactor: IReactorTime) -> None:
        self._fleet = fleet
        self._reactor = reactor

    def routes(self) -> list[Route]:
        return [
            Route(
                "GET", "/vm/{hostname}/shell", self.shell, "Interactive shell in the node (WebSocket)", "shell",
                {101: Reply("Switching Protocols: the WebSocket of the shell (binary frames, see docs/api.md)"),
                 400: Reply("Not a WebSocket upgrade, bad uid/gid, or a cwd or shell the guest cannot use",
                            ErrorResponse),
                 404: Reply("No such node", ErrorResponse),
                 409: Reply("The node is paused, stopped or suspended", ErrorResponse),
                 503: Reply("The node's agent is not connected", ErrorResponse)},
                query=ShellQuery,
            ),
        ]

    async def shell(self, request: Request, query: ShellQuery, hostname: str) -> IResource:
        check_upgrade(request)
        bridge = ShellBridge()
        session = self._fleet.guest(hostname).shell(query.request(), bridge)
        bridge.session = session
        try:
            await bridge.ready
        except CancelledError:
            session.hangup()
            raise
        request.setResponseCode(101)
        return accept(self._reactor, lambda: ShellProtocol(bridge), MAX_MESSAGE)


__all__ = ["ShellApi", "ShellBridge", "ShellProtocol", "ShellQuery"]
