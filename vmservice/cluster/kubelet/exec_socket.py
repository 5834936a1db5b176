# -*- test-case-name: tests.cluster.kubelet.test_exec_session -*-
"""
The WebSocket of one ``kubectl exec``: the channels of :mod:`.channels`
joined to a command in the VM through the session of :mod:`.exec_session`.

The command starts when the socket opens, through the guest's exec (argv as
given, no shell).  As the kubelet does, the server first sends an empty
message on the lowest channel it will write (stdout, else stderr, else the
error channel), which tells the client the streams are set up.  With
``tty=1`` a lone shell (``kubectl exec -it POD -- sh``) runs as a login
shell on a terminal (:mod:`.exec_terminal`, resizes reach it); any other
command gets no terminal (the guest's exec has none): its stderr goes out on
stdout, as a terminal would merge them, and resizes are dropped
(docs/cluster.md).

Back-pressure both ways: while the socket's send buffer is full the
command's output is paused (the guest withholds it, the process blocks);
while the guest takes no stdin the socket is not read, so a flooding client
holds at most a message and the socket's buffers.
"""

from __future__ import annotations

from typing import Optional, Protocol

from autobahn.twisted.websocket import WebSocketServerProtocol
from autobahn.websocket.types import ConnectionRequest
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from zope.interface import implementer

from ...api.shell_bridge import OutputPause, ReadingPause
from ...api.websocket import take_transport_producer
from ...errors import AgentError
from ...guestport.exec import ExecRequest, IExecProcess, IExecSink
from ...guestport.guest import IGuest
from . import channels, status
from .exec_session import Command, SessionInputs, session
from .exec_terminal import TerminalCommand, terminal_shell
from .params import ExecQuery

log = Logger()

#: The largest message read from the client (stdin comes in pieces of 32 KiB or less).
MAX_MESSAGE = 256 * 1024


def exec_request(query: ExecQuery) -> ExecRequest:
    """What runs in the guest for ``query``: its argv, no shell."""
    return ExecRequest(cmd=query.command[0], args=query.command[1:], shell="", stdin=query.stdin,
                       stdout=query.stdout, stderr=query.stderr or (query.tty and query.stdout))


@implementer(IExecSink)
class ExecCommand:
    """
    The command of one session: the guest exec's sink (its events become the
    session's inputs) and what the session drives (:class:`~.exec_session.Command`).

    :param tty: stderr goes out on stdout.
    """

    def __init__(self, query: ExecQuery) -> None:
        self._query = query
        self._tty = query.tty
        self.process: Optional[IExecProcess] = None
        self.inputs: Optional[SessionInputs] = None

    def start(self, guest: IGuest) -> IPushProducer:
        """
        Start the command in ``guest``: the producer of its output.

        :raise AgentError: the guest cannot start it.
        """
        self.process = guest.exec(exec_request(self._query), self)
        return OutputPause(self.process)

    def register_stdin(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest takes no stdin."""
        if self.process is not None:
            self.process.register_stdin_producer(producer)

    # -- the session's Command -----------------------------------------------------------

    def write_stdin(self, data: bytes) -> None:
        if self.process is not None:
            self.process.write_stdin(data)

    def close_stdin(self) -> None:
        if self.process is not None:
            self.process.close_stdin()

    def resize(self, width: int, height: int) -> None:
        """No terminal: nothing to resize."""

    def kill(self) -> None:
        if self.process is not None:
            self.process.unregister_stdin_producer()
            self.process.kill()

    # -- IExecSink -----------------------------------------------------------------------

    def started(self, pid: int) -> None:
        pass

    def output(self, name: str, data: bytes) -> None:
        channel = channels.STDERR if name == "stderr" and not self._tty else channels.STDOUT
        if self.inputs is not None:
            self.inputs.output(channel, data)

    def _end(self, body: bytes) -> None:
        if self.process is not None:
            self.process.unregister_stdin_producer()
        if self.inputs is not None:
            self.inputs.ended(body)

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        self._end(status.exec_ended(exit_code, signal))

    def failed(self, message: str, exit_code: int) -> None:
        self._end(status.exec_exit(exit_code, message))

    def lost(self, error: AgentError) -> None:
        self._end(status.exec_error(f"the command was lost: {error}"))


class StartedCommand(Command, Protocol):
    """A command the socket starts: an exec, or a shell on a terminal (:mod:`.exec_terminal`)."""

    inputs: Optional[SessionInputs]

    def start(self, guest: IGuest) -> IPushProducer:
        """Start it in ``guest``: the producer of its output (:raise AgentError: it cannot start)."""

    def register_stdin(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest takes no stdin."""

    def lost(self, error: AgentError) -> None:
        """It ended without an exit (or never started)."""


def command_for(query: ExecQuery) -> StartedCommand:
    """A shell on a terminal for ``tty=1`` and a lone shell (``kubectl exec -it POD -- sh``), else an exec."""
    shell = terminal_shell(query)
    return ExecCommand(query) if shell is None else TerminalCommand(shell)


class ExecProtocol(WebSocketServerProtocol):
    """
    The socket of one exec.

    :param guest: the VM's guest.
    :param query: what to run and which streams.
    :param protocol: the channel protocol chosen before the upgrade.
    """

    def __init__(self, guest: IGuest, query: ExecQuery, protocol: str) -> None:
        super().__init__()
        self._guest = guest
        self._query = query
        self._protocol = protocol
        self._command: StartedCommand = command_for(query)
        self._inputs: Optional[SessionInputs] = None

    def onConnect(self, request: ConnectionRequest) -> str:
        return self._protocol

    def onOpen(self) -> None:
        self._inputs = self._command.inputs = session(self._command, self)
        first = channels.STDOUT if self._query.stdout else channels.STDERR if self._query.stderr else channels.ERROR
        self.send(first, b"")
        try:
            output = self._command.start(self._guest)
        except AgentError as error:
            self._command.lost(error)
            return
        take_transport_producer(self, output)
        if self._query.stdin:
            self._command.register_stdin(ReadingPause(self))

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if self._inputs is None:
            return
        event = channels.decode(payload, isBinary, self._protocol)
        if isinstance(event, channels.Stdin) and self._query.stdin:
            self._inputs.stdin(event.data)
        elif isinstance(event, channels.CloseStream) and event.channel == channels.STDIN:
            self._inputs.close_stdin()
        elif isinstance(event, channels.Resize):
            self._inputs.resize(event.width, event.height)
        elif isinstance(event, channels.Malformed):
            log.info("exec: a message ignored: {why}", why=event.why)

    def onClose(self, wasClean: bool, code: Optional[int], reason: Optional[str]) -> None:
        if self._inputs is not None:
            self._inputs.socket_closed()

    # -- the session's Socket ------------------------------------------------------------

    def send(self, channel: int, data: bytes) -> None:
        if self.state != self.STATE_OPEN:
            return
        for message in channels.encode(channel, data):
            self.sendMessage(message, isBinary=True)  # type: ignore[no-untyped-call]

    def finish(self, body: bytes) -> None:
        self.send(channels.ERROR, body)
        if self.state == self.STATE_OPEN:
            self.sendClose(1000)


__all__ = ["MAX_MESSAGE", "ExecCommand", "ExecProtocol", "StartedCommand", "command_for", "exec_request"]
