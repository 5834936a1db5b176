# -*- test-case-name: tests.agent.test_shell -*-
"""
The host's end of a ``shell`` stream: open it, send terminal input and
resizes as frames of :mod:`vmservice.wire.shellframes`, decode the guest's
frames and hand them to an :class:`~vmservice.guestport.shell.IShellSink`; a
stream that ends early becomes an :class:`~vmservice.errors.AgentError`.

Nothing here knows HTTP or WebSockets.
"""

from __future__ import annotations

from typing import cast

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.shell import IShellSession, IShellSink, ShellRequest
from .channel import Channel
from .errors import AgentRequestFailed, stream_error
from .stream import AgentStream
from vmservice.wire import ResetCode
from vmservice.wire.shellframes import (
    DATA,
    EXIT,
    REJECTED,
    STARTED,
    Frame,
    FrameDecoder,
    FrameError,
    encode_data,
    encode_window_size,
)

log = Logger()

#: Largest frame accepted from the guest (it sends at most 16 KiB of output a frame).
MAX_GUEST_FRAME = 256 * 1024


class _ShellProtocol(Protocol):
    """Decodes the frames of one shell stream and drives an :class:`IShellSink`."""

    def __init__(self, sink: IShellSink) -> None:
        self._sink = sink
        self._decoder = FrameDecoder(MAX_GUEST_FRAME)
        self._ended = False

    def dataReceived(self, data: bytes) -> None:
        if self._ended:
            return
        try:
            for frame in self._decoder.feed(data):
                self._frame(frame)
                if self._ended:
                    return
        except FrameError as e:
            log.warn("shell stream: bad frame from the guest: {error}", error=str(e))
            self._ended = True
            cast(AgentStream, self.transport).abortConnection(ResetCode.PROTOCOL_ERROR, "bad shell frame")
            self._sink.lost(AgentRequestFailed(f"bad shell frame from the guest: {e}", kind=GuestErrorKind.MALFORMED))

    def _frame(self, frame: Frame) -> None:
        if frame.kind == DATA:
            self._sink.output(frame.payload)
        elif frame.kind == STARTED:
            pid = frame.json().get("pid")
            if not isinstance(pid, int):
                raise FrameError("started frame without a pid")
            self._sink.started(pid)
        elif frame.kind == EXIT:
            value = frame.json()
            exit_code, signal = value.get("exit_code"), value.get("signal")
            if not isinstance(exit_code, int) or not (signal is None or isinstance(signal, str)):
                raise FrameError("malformed exit frame")
            self._ended = True
            self._sink.exited(exit_code, signal)
        elif frame.kind == REJECTED:
            self._ended = True
            self._sink.lost(AgentError(GuestErrorKind.REJECTED, str(frame.json().get("message", ""))))

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if self._ended:
            return
        self._ended = True
        if reason.check(ConnectionDone):
            reason = Failure(ConnectionDone("the shell stream ended without an exit frame"))
        self._sink.lost(stream_error(reason, "the shell stream"))


@implementer(IShellSession)
class ShellSession:
    """
    A running shell (see :class:`~vmservice.guestport.shell.IShellSession`).

    :param stream: its agent stream.
    """

    def __init__(self, stream: AgentStream) -> None:
        self._stream = stream

    def write(self, data: bytes) -> None:
        for frame in encode_data(data):
            self._stream.write(frame)

    def resize(self, cols: int, rows: int) -> None:
        self._stream.write(encode_window_size(cols, rows))

    def register_input_producer(self, producer: IPushProducer) -> None:
        self._stream.registerProducer(producer, True)

    def unregister_input_producer(self) -> None:
        self._stream.unregisterProducer()

    def pauseProducing(self) -> None:
        self._stream.pauseProducing()

    def resumeProducing(self) -> None:
        self._stream.resumeProducing()

    def stopProducing(self) -> None:
        self.hangup()

    def hangup(self) -> None:
        self._stream.abortConnection(ResetCode.CANCEL, "shell hung up")


def start_shell(agent: Channel, request: ShellRequest, sink: IShellSink) -> ShellSession:
    """
    Open a shell stream for ``request`` whose frames go to ``sink``.

    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    return ShellSession(agent.open_stream(request.to_json(), _ShellProtocol(sink)))


__all__ = ["ShellSession", "start_shell"]
