# -*- test-case-name: tests.agent.test_execution -*-
"""
The host's end of an ``exec`` stream: open it, feed stdin, decode the guest's
records (:mod:`vmservice.guest.execution` holds the codec, stdlib only, shared
with the guest) and hand them to an :class:`IExecSink` as they arrive.

Nothing here knows HTTP; the API couples a sink to a response and the stdin
producer to a request body.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol as TypingProtocol

from attrs import field, frozen
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from vmservice.agent.stream import AgentStream
from vmservice.wire.payloads import (
    ERROR,
    EXIT,
    REJECTED,
    STARTED,
    STDERR,
    STDOUT,
    Record,
    RecordDecoder,
    RecordError,
)
from vmservice.wire import ResetCode

log = Logger()


@frozen
class ExecRequest:
    """
    One command to run in the guest; becomes the stream's OPEN header.

    :ivar cmd: a command line for ``shell``, or the program when ``shell`` is empty.
    :ivar args: extra words: quoted and appended (shell) or the argv (no shell).
    :ivar env: ``KEY=VALUE`` entries laid over the guest's default environment.
    :ivar uid: user id (0 = root).
    :ivar gid: group id.
    :ivar cwd: working directory (absolute, ``~``, ``~/x`` or relative to the home).
    :ivar shell: the shell, ``""`` for none.
    :ivar umask: the process's umask, ``None`` to keep the agent's (022).
    :ivar stdin: whether stdin is fed from the host (else ``/dev/null``).
    :ivar stdout: whether stdout comes back.
    :ivar stderr: whether stderr comes back.
    """

    cmd: str
    args: tuple[str, ...] = field(default=(), converter=tuple)
    env: tuple[str, ...] = field(default=(), converter=tuple)
    uid: int = 0
    gid: int = 0
    cwd: str = ""
    shell: str = "/bin/bash"
    umask: Optional[int] = None
    stdin: bool = False
    stdout: bool = True
    stderr: bool = True

    def header(self) -> dict[str, Any]:
        """
        The OPEN header of the stream (documented in ``docs/agent-protocol.md``).
        """
        return {
            "op": "exec",
            "cmd": self.cmd,
            "args": list(self.args),
            "env": list(self.env),
            "uid": self.uid,
            "gid": self.gid,
            "cwd": self.cwd,
            "shell": self.shell,
            "umask": self.umask,
            "stdin": self.stdin,
            "stdout": self.stdout,
            "stderr": self.stderr,
        }


class ExecRejected(Exception):
    """
    The guest refused the request before starting anything (e.g. an unknown
    ``cwd``): the caller's input is wrong.
    """


class IExecSink(TypingProtocol):
    """
    Receives what happens to one exec, in order.  Exactly one of
    :meth:`exited`, :meth:`failed`, :meth:`rejected` or :meth:`lost` ends it.
    """

    def started(self, pid: int) -> None:
        """The process runs with ``pid`` (in the guest)."""

    def output(self, name: str, data: bytes) -> None:
        """The process wrote ``data`` on ``name`` (``stdout`` or ``stderr``)."""

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        """The process ended; ``signal`` names the one that killed it, if any."""

    def failed(self, message: str, exit_code: int) -> None:
        """The process could not be started (127: not found, 126: otherwise)."""

    def rejected(self, message: str) -> None:
        """The guest refused the request itself (bad ``cwd`` ...)."""

    def lost(self, reason: Failure) -> None:
        """The stream ended without a last record: reset, agent lost, aborted."""


class _ExecProtocol(Protocol):
    """
    Decodes the records of one exec stream and drives an :class:`IExecSink`.
    """

    def __init__(self, sink: IExecSink) -> None:
        self._sink = sink
        self._decoder = RecordDecoder()
        self._ended = False

    def dataReceived(self, data: bytes) -> None:
        if self._ended:
            return
        try:
            for record in self._decoder.feed(data):
                self._record(record)
                if self._ended:
                    return
        except RecordError as e:
            log.warn("exec stream: bad record from the guest: {error}", error=str(e))
            self._ended = True
            self.transport.abortConnection(ResetCode.PROTOCOL_ERROR, "bad exec record")
            self._sink.lost(Failure(e))

    def _record(self, record: Record) -> None:
        kind = record.kind
        if kind == STDOUT:
            self._sink.output("stdout", record.payload)
        elif kind == STDERR:
            self._sink.output("stderr", record.payload)
        elif kind == STARTED:
            pid = record.json().get("pid")
            if not isinstance(pid, int):
                raise RecordError("started record without a pid")
            self._sink.started(pid)
        elif kind == EXIT:
            value = record.json()
            exit_code, signal = value.get("exit_code"), value.get("signal")
            if not isinstance(exit_code, int) or not (signal is None or isinstance(signal, str)):
                raise RecordError("malformed exit record")
            self._ended = True
            self._sink.exited(exit_code, signal)
        elif kind == ERROR:
            value = record.json()
            exit_code = value.get("exit_code")
            self._ended = True
            self._sink.failed(str(value.get("message", "")), exit_code if isinstance(exit_code, int) else 127)
        elif kind == REJECTED:
            self._ended = True
            self._sink.rejected(str(record.json().get("message", "")))

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if self._ended:
            return
        self._ended = True
        if reason.check(ConnectionDone):
            reason = Failure(ConnectionDone("the exec stream ended without an exit record"))
        self._sink.lost(reason)


class AgentWithStreams(TypingProtocol):
    """What :func:`start_exec` needs of an agent client."""

    def open_stream(self, header: Any, protocol: Any) -> AgentStream:
        """Open a stream served by ``protocol``."""


@implementer(IPushProducer)
class ExecProcess:
    """
    A running exec, as the caller sees it.

    - :meth:`write_stdin`, :meth:`close_stdin` and :meth:`register_stdin_producer`
      feed the process (the stream's credit paces a registered producer).
    - As an ``IPushProducer`` it controls the *output*: :meth:`pauseProducing`
      withholds credit from the guest, which stops reading the process's pipes,
      which blocks the process; :meth:`stopProducing` kills it.
    - :meth:`kill` resets the stream: the guest kills the process group.
    """

    def __init__(self, stream: AgentStream) -> None:
        self._stream = stream

    @property
    def stream_id(self) -> int:
        """The stream's id on the agent channel."""
        return self._stream.stream_id

    def write_stdin(self, data: bytes) -> None:
        """Send ``data`` to the process's stdin (buffered until credit allows)."""
        self._stream.write(data)

    def close_stdin(self) -> None:
        """EOF on stdin, after what was written."""
        self._stream.loseConnection()

    def register_stdin_producer(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take stdin."""
        self._stream.registerProducer(producer, True)

    def unregister_stdin_producer(self) -> None:
        """Forget the stdin producer."""
        self._stream.unregisterProducer()

    def pauseProducing(self) -> None:
        """Hold output back (and so the process, once its pipes fill)."""
        self._stream.pauseProducing()

    def resumeProducing(self) -> None:
        """Let output flow again."""
        self._stream.resumeProducing()

    def stopProducing(self) -> None:
        """The consumer went away: kill the process."""
        self.kill()

    def kill(self) -> None:
        """Reset the stream; the guest kills the process group (SIGTERM, then SIGKILL)."""
        self._stream.abortConnection(ResetCode.CANCEL, "exec cancelled")


def start_exec(agent: AgentWithStreams, request: ExecRequest, sink: IExecSink) -> ExecProcess:
    """
    Open an exec stream for ``request`` whose records go to ``sink``.

    When ``request.stdin`` is false, stdin is closed at once.

    :raises vmservice.agent.client.AgentUnavailable: the agent is not connected.
    """
    stream = agent.open_stream(request.header(), _ExecProtocol(sink))
    process = ExecProcess(stream)
    if not request.stdin:
        process.close_stdin()
    return process


@frozen
class ExecOutcome:
    """
    Everything one exec produced (for buffered mode).

    :ivar pid: the guest pid, ``None`` if it never started.
    :ivar stdout: all of stdout.
    :ivar stderr: all of stderr.
    :ivar exit_code: the exit code (128 + N when killed by signal N).
    :ivar signal: the killing signal's name, or ``None``.
    :ivar error: why it could not start, or ``None``.
    :ivar started_at: clock seconds when the process started (or failed).
    :ivar ended_at: clock seconds when it ended.
    """

    pid: Optional[int]
    stdout: bytes
    stderr: bytes
    exit_code: int
    signal: Optional[str]
    error: Optional[str]
    started_at: float
    ended_at: float


class _Collector:
    """
    An :class:`IExecSink` that keeps everything, for :func:`run_collected`.
    """

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self.pid: Optional[int] = None
        self.started_at: Optional[float] = None
        self.chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self.done: Deferred[ExecOutcome] = Deferred()

    def _finish(self, exit_code: int, signal: Optional[str], error: Optional[str]) -> None:
        now = self._clock.seconds()
        self.done.callback(
            ExecOutcome(
                pid=self.pid,
                stdout=b"".join(self.chunks["stdout"]),
                stderr=b"".join(self.chunks["stderr"]),
                exit_code=exit_code,
                signal=signal,
                error=error,
                started_at=self.started_at if self.started_at is not None else now,
                ended_at=now,
            )
        )

    def started(self, pid: int) -> None:
        self.pid, self.started_at = pid, self._clock.seconds()

    def output(self, name: str, data: bytes) -> None:
        self.chunks[name].append(data)

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        self._finish(exit_code, signal, None)

    def failed(self, message: str, exit_code: int) -> None:
        self._finish(exit_code, None, message)

    def rejected(self, message: str) -> None:
        self.done.errback(ExecRejected(message))

    def lost(self, reason: Failure) -> None:
        self.done.errback(reason)


async def run_collected(agent: AgentWithStreams, request: ExecRequest, clock: Any, stdin: bytes = b"") -> ExecOutcome:
    """
    Run ``request`` to the end and return all it produced.

    :param clock: an ``IReactorTime`` for the start and end times.
    :param stdin: written to stdin (when ``request.stdin``), then EOF.
    :raises ExecRejected: the guest refused the request.
    :raises Exception: whatever the stream was lost with (reset, agent gone).
    """
    collector = _Collector(clock)
    process = start_exec(agent, request, collector)
    if request.stdin:
        process.write_stdin(stdin)
        process.close_stdin()
    try:
        return await collector.done
    except BaseException:
        process.kill()
        raise


__all__ = [
    "AgentWithStreams",
    "ExecOutcome",
    "ExecProcess",
    "ExecRejected",
    "ExecRequest",
    "IExecSink",
    "run_collected",
    "start_exec",
]
