# -*- test-case-name: tests.agent.test_background -*-
"""
The host's side of background execs (``{"op": "background"}`` streams, served
by :mod:`vmservice.guest.background`): :class:`AgentBackground` implements
:class:`~vmservice.guestport.background.IBackgroundExecs` over an agent channel.

Each action's header is its record of :mod:`vmservice.wire.openheaders.background`
(``start``'s :class:`~vmservice.wire.openheaders.exec.BackgroundStartHeader`).
Every action but ``logs`` is one request and one JSON reply (read with
:func:`.filesystem.reply_result`, so the guest's error kinds become
:class:`~vmservice.errors.AgentError`\\ s).  ``logs`` is a stream: a head
(the reply), then log frames (:mod:`vmservice.wire.logframes`) handed to an
:class:`~vmservice.guestport.background.ILogSink` as they arrive, with the
stream's credit as back-pressure.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.background import (
    BackgroundInfo,
    BackgroundRequest,
    IBackgroundExecs,
    ILogSink,
    KillOutcome,
    LogFrame,
    WaitOutcome,
)
from ..wire import ResetCode
from ..wire.logframes import EXIT, GAP, FrameDecoder, FrameError
from ..wire.openheaders.background import (BackgroundDeleteHeader, BackgroundInfoHeader, BackgroundKillHeader,
                                           BackgroundListHeader, BackgroundLogsHeader, BackgroundWaitHeader)
from ..wire.openheaders.exec import BackgroundStartHeader
from .channel import Channel
from .errors import AgentRequestFailed, stream_error
from .filesystem import reply_result, reply_value
from .headed import HeadedProtocol
from .relay import GuestOutput
from .stream import AgentStream

_Request = Union[BackgroundListHeader, BackgroundInfoHeader, BackgroundKillHeader, BackgroundWaitHeader,
                 BackgroundDeleteHeader]

#: Largest reply accepted for one action (a list of every exec the guest keeps fits easily).
MAX_REPLY = 4 * 1024 * 1024


def _malformed(message: str) -> AgentError:
    return AgentRequestFailed(message, kind=GuestErrorKind.MALFORMED)


def _field(value: dict[str, Any], name: str, kind: type, optional: bool = False) -> Any:
    item = value.get(name)
    if item is None and optional:
        return None
    if not isinstance(item, kind) or (kind is int and isinstance(item, bool)):
        raise _malformed(f"the guest's background exec reply has no valid {name!r}")
    return item


def _ending(value: dict[str, Any]) -> dict[str, Any]:
    """How an exec ended, as the guest's info and wait replies say it (all ``None`` while it runs)."""
    return {
        "exit_code": _field(value, "exit_code", int, optional=True),
        "signal": _field(value, "signal", str, optional=True),
        "ended_ns": _field(value, "ended_ns", int, optional=True),
    }


def parse_info(value: Any) -> BackgroundInfo:
    """
    One exec of a guest reply.

    :raises AgentError: ``MALFORMED`` when it is not one.
    """
    if not isinstance(value, dict):
        raise _malformed("the guest's background exec reply is not an object")
    args = _field(value, "args", list)
    if not all(isinstance(a, str) for a in args):
        raise _malformed("the guest's background exec reply has no valid 'args'")
    return BackgroundInfo(
        exec_id=_field(value, "exec_id", str),
        pid=_field(value, "pid", int),
        command=_field(value, "command", str),
        args=tuple(args),
        cwd=_field(value, "cwd", str),
        uid=_field(value, "uid", int),
        gid=_field(value, "gid", int),
        started_ns=_field(value, "started_ns", int),
        running=_field(value, "running", bool),
        **_ending(value),
        bytes_written=_field(value, "bytes_written", int),
        bytes_dropped=_field(value, "bytes_dropped", int),
        next_id=_field(value, "next_id", int),
        ring_bytes=_field(value, "ring_bytes", int),
    )


def _log_frame(frame: Any) -> LogFrame:
    """The domain's record of a decoded wire frame; :class:`FrameError` if its payload is wrong."""
    if frame.kind == EXIT:
        value = frame.control()
        exit_code, signal = value.get("exit_code"), value.get("signal")
        if type(exit_code) is not int or not (signal is None or isinstance(signal, str)):
            raise FrameError("malformed exit frame")
        return LogFrame("exit", frame.id, frame.time_ns, exit_code=exit_code, signal=signal)
    if frame.kind == GAP:
        value = frame.control()
        frames, size = value.get("dropped_frames"), value.get("dropped_bytes")
        if type(frames) is not int or type(size) is not int:
            raise FrameError("malformed gap frame")
        return LogFrame("gap", 0, frame.time_ns, dropped_frames=frames, dropped_bytes=size)
    return LogFrame(frame.name, frame.id, frame.time_ns, data=frame.payload)


class _LogsReading:
    """
    The :class:`~.headed.HeadReceiver` of a logs stream: the head (the exec's
    info, or the guest's error), then frames, into an :class:`ILogSink`, which
    hears ``opened`` at most once and then ``ended`` or ``lost`` once.
    """

    def __init__(self, sink: ILogSink) -> None:
        self._sink = sink
        self._stream: Optional[AgentStream] = None
        self._opened = False
        self._ended = False
        self._decoder = FrameDecoder()

    def _fail(self, error: AgentError) -> None:
        self._ended = True
        assert self._stream is not None
        self._stream.abortConnection(ResetCode.PROTOCOL_ERROR, "bad logs stream")
        self._sink.lost(error)

    def connected(self, stream: AgentStream) -> None:
        self._stream = stream

    def head_malformed(self, error: ValueError) -> None:
        if not self._ended:
            self._fail(_malformed(f"the guest's logs head is malformed: {error}"))

    def headed(self, head: dict[str, Any], rest: bytes) -> None:
        if self._ended:
            return
        try:
            info = parse_info(reply_value(head, "background exec"))
        except AgentError as error:
            self._ended = True
            self._sink.lost(error)
            return
        self._opened = True
        self._sink.opened(info)
        self._frames(rest)

    def body(self, data: bytes) -> None:
        if not self._ended:
            self._frames(data)

    def _frames(self, data: bytes) -> None:
        try:
            for frame in self._decoder.feed(data):
                self._sink.frame(_log_frame(frame))
        except FrameError as e:
            self._fail(_malformed(f"bad log frame from the guest: {e}"))

    def read_ended(self) -> None:
        pass

    def ended(self, reason: Failure) -> None:
        if self._ended:
            return
        self._ended = True
        if self._opened and reason.check(ConnectionDone) and not self._decoder.partial:
            self._sink.ended()
            return
        if reason.check(ConnectionDone):
            reason = Failure(ConnectionDone("the logs stream ended early"))
        self._sink.lost(stream_error(reason, "the logs stream"))


class LogReader(GuestOutput):
    """One reading of a log: pausing it withholds credit from the guest; stopping it resets the stream."""

    def __init__(self, stream: AgentStream) -> None:
        super().__init__(stream, "logs reader gone")


@implementer(IBackgroundExecs)
class AgentBackground:
    """
    The background execs of the guest behind ``agent``.

    :param agent: the channel to the guest's agent.
    """

    def __init__(self, agent: Channel) -> None:
        self._agent = agent

    async def _call(self, header: _Request) -> Any:
        body = await self._agent.request(header.to_json(), MAX_REPLY)
        return reply_result(body, "background exec")

    def start(self, request: BackgroundRequest) -> Deferred[BackgroundInfo]:
        header = BackgroundStartHeader(request.exec, request.ring_bytes).to_json()

        async def start() -> BackgroundInfo:
            body = await self._agent.request(header, MAX_REPLY)
            return parse_info(reply_result(body, "background exec"))

        return Deferred.fromCoroutine(start())

    def listing(self) -> Deferred[list[BackgroundInfo]]:
        async def listing() -> list[BackgroundInfo]:
            result = await self._call(BackgroundListHeader())
            if not isinstance(result, list):
                raise _malformed("the guest's background exec list is not a list")
            return [parse_info(item) for item in result]

        return Deferred.fromCoroutine(listing())

    def info(self, exec_id: str) -> Deferred[BackgroundInfo]:
        async def info() -> BackgroundInfo:
            return parse_info(await self._call(BackgroundInfoHeader(exec_id)))

        return Deferred.fromCoroutine(info())

    def kill(self, exec_id: str, signal: str, grace_ms: int) -> Deferred[KillOutcome]:
        async def kill() -> KillOutcome:
            value = await self._call(BackgroundKillHeader(exec_id, signal, grace_ms))
            if not isinstance(value, dict):
                raise _malformed("the guest's kill reply is not an object")
            return KillOutcome(
                exec_id=_field(value, "exec_id", str),
                pid=_field(value, "pid", int),
                running=_field(value, "running", bool),
                signal_sent=_field(value, "signal_sent", str),
            )

        return Deferred.fromCoroutine(kill())

    def wait(self, exec_id: str, timeout_ms: int) -> Deferred[WaitOutcome]:
        async def wait() -> WaitOutcome:
            value = await self._call(BackgroundWaitHeader(exec_id, timeout_ms))
            if not isinstance(value, dict):
                raise _malformed("the guest's wait reply is not an object")
            return WaitOutcome(
                exec_id=_field(value, "exec_id", str),
                running=_field(value, "running", bool),
                **_ending(value),
                timed_out=_field(value, "timed_out", bool),
            )

        return Deferred.fromCoroutine(wait())

    def delete(self, exec_id: str) -> Deferred[None]:
        async def delete() -> None:
            await self._call(BackgroundDeleteHeader(exec_id))

        return Deferred.fromCoroutine(delete())

    def logs(self, exec_id: str, from_id: int, follow: bool, sink: ILogSink) -> LogReader:
        header = BackgroundLogsHeader(exec_id, from_id, follow).to_json()
        stream = self._agent.open_stream(header, HeadedProtocol(_LogsReading(sink)))
        stream.loseConnection()  # nothing to send: half-close at once
        return LogReader(stream)


__all__ = ["AgentBackground", "LogReader", "MAX_REPLY", "parse_info"]
