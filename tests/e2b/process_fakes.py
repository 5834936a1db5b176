"""
What the tests of the process service share: a guest that runs nothing
(:class:`FakeProcessGuest`: it records each exec and shell with the sink it
reports to, and what was done to it) and a sink that records messages
(:class:`RecordingSink`).
"""

from __future__ import annotations

from typing import Any, Mapping

from twisted.internet.interfaces import IPushProducer

from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.exec import ExecRequest, IExecSink
from vmservice.guestport.shell import IShellSink, ShellRequest


class FakeExec:
    """One exec the guest was asked for: its request, its sink and what was done to it."""

    def __init__(self, request: ExecRequest, sink: IExecSink) -> None:
        self.request, self.sink = request, sink
        self.stdin: list[bytes] = []
        self.stdin_closed = self.killed = False

    def write_stdin(self, data: bytes) -> None:
        self.stdin.append(data)

    def close_stdin(self) -> None:
        self.stdin_closed = True

    def register_stdin_producer(self, producer: IPushProducer) -> None:
        pass

    def unregister_stdin_producer(self) -> None:
        pass

    def kill(self) -> None:
        """As the agent's: the stream is reset, which the sink hears as a loss."""
        self.killed = True
        self.sink.lost(AgentError(GuestErrorKind.UNAVAILABLE, "the exec stream was reset"))

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        self.killed = True


class FakeShell:
    """One shell the guest was asked for: its request, its sink and what was done to it."""

    def __init__(self, request: ShellRequest, sink: IShellSink) -> None:
        self.request, self.sink = request, sink
        self.typed: list[bytes] = []
        self.sizes: list[tuple[int, int]] = []
        self.hung_up = False

    def write(self, data: bytes) -> None:
        self.typed.append(data)

    def resize(self, cols: int, rows: int) -> None:
        self.sizes.append((cols, rows))

    def register_input_producer(self, producer: IPushProducer) -> None:
        pass

    def unregister_input_producer(self) -> None:
        pass

    def hangup(self) -> None:
        """As the agent's: the stream is reset, which the sink hears as a loss."""
        self.hung_up = True
        self.sink.lost(AgentError(GuestErrorKind.UNAVAILABLE, "the shell stream was reset"))

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        self.hung_up = True


class FakeProcessGuest:
    """A guest whose execs and shells are recorded (``execs``, ``shells``); ``error``: each start raises it."""

    def __init__(self) -> None:
        self.execs: list[FakeExec] = []
        self.shells: list[FakeShell] = []
        self.error: Exception | None = None

    def exec(self, request: ExecRequest, sink: IExecSink) -> FakeExec:
        if self.error is not None:
            raise self.error
        self.execs.append(FakeExec(request, sink))
        return self.execs[-1]

    def shell(self, request: ShellRequest, sink: IShellSink) -> FakeShell:
        if self.error is not None:
            raise self.error
        self.shells.append(FakeShell(request, sink))
        return self.shells[-1]


class RecordingSink:
    """A message sink that keeps what it was sent (``sent``) and whether it was aborted."""

    def __init__(self) -> None:
        self.sent: list[Mapping[str, Any]] = []
        self.aborted = self.expired = False

    def send(self, message: Mapping[str, Any]) -> None:
        self.sent.append(message)

    def abort(self) -> None:
        self.aborted = True
