# -*- test-case-name: tests.agent.test_execution -*-
"""
The host's end of an ``exec`` stream: open it, feed stdin, decode the guest's
records (:mod:`vmservice.guest.execution` holds the codec, stdlib only, shared
with the guest) and hand them to an :class:`~vmservice.guestport.exec.IExecSink`
as they arrive; a stream that ends early becomes an
:class:`~vmservice.errors.AgentError` (:func:`.errors.stream_error`).

Nothing here knows HTTP; the API couples a sink to a response and the stdin
producer to a request body.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.exec import ExecRequest, IExecProcess, IExecSink
from .channel import Channel
from .recorded import RecordedProtocol
from .relay import GuestOutput
from .stream import AgentStream
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

log = Logger()


class _ExecProtocol(RecordedProtocol[IExecSink, Record]):
    """
    Decodes the records of one exec stream and drives an :class:`IExecSink`.
    """

    def __init__(self, sink: IExecSink) -> None:
        super().__init__(sink, RecordDecoder(), "exec", "record", RecordError, log)

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
            self._sink.lost(AgentError(GuestErrorKind.REJECTED, str(record.json().get("message", ""))))


@implementer(IExecProcess)
class ExecProcess(GuestOutput):
    """
    A running exec, as the caller sees it.

    - :meth:`write_stdin`, :meth:`close_stdin` and :meth:`register_stdin_producer`
      feed the process (the stream's credit paces a registered producer).
    - As an ``IPushProducer`` (:class:`~.relay.GuestOutput`) it controls the
      *output*: :meth:`pauseProducing` withholds credit from the guest, which
      stops reading the process's pipes, which blocks the process;
      :meth:`stopProducing` kills it.
    - :meth:`kill` resets the stream: the guest kills the process group.
    """

    def __init__(self, stream: AgentStream) -> None:
        super().__init__(stream, "exec cancelled")

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

    #: Pause a producer of stdin while the guest does not take it.
    register_stdin_producer = GuestOutput.register_input_producer
    #: Forget the stdin producer.
    unregister_stdin_producer = GuestOutput.unregister_input_producer

    def kill(self) -> None:
        """Reset the stream; the guest kills the process group (SIGTERM, then SIGKILL)."""
        self.cancel()


def start_exec(agent: Channel, request: ExecRequest, sink: IExecSink) -> ExecProcess:
    """
    Open an exec stream for ``request`` whose records go to ``sink``.

    When ``request.stdin`` is false, stdin is closed at once.

    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    stream = agent.open_stream(request.to_json(), _ExecProtocol(sink))
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


@implementer(IExecSink)
class _Collector:
    """
    An :class:`IExecSink` that keeps everything, for :func:`run_collected`.
    """

    def __init__(self, clock: IReactorTime) -> None:
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

    def lost(self, error: AgentError) -> None:
        self.done.errback(error)


async def run_collected(agent: Channel, request: ExecRequest, clock: IReactorTime, stdin: bytes = b"") -> ExecOutcome:
    """
    Run ``request`` to the end and return all it produced.

    :param clock: for the start and end times.
    :param stdin: written to stdin (when ``request.stdin``), then EOF.
    :raises vmservice.errors.AgentError: the guest refused the request (kind
        ``REJECTED``), or the stream was lost (reset, agent gone).
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


__all__ = ["ExecOutcome", "ExecProcess", "run_collected", "start_exec"]
