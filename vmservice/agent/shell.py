# -*- test-case-name: tests.agent.test_shell -*-
"""
The host's end of a ``shell`` stream: open it, send terminal input and
resizes as frames of :mod:`vmservice.wire.shellframes`, decode the guest's
frames and hand them to an :class:`~vmservice.guestport.shell.IShellSink`; a
stream that ends early becomes an :class:`~vmservice.errors.AgentError`.

Nothing here knows HTTP or WebSockets.
"""

from __future__ import annotations


from twisted.logger import Logger
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.shell import IShellSession, IShellSink, ShellRequest
from .channel import Channel
from .recorded import RecordedProtocol
from .relay import GuestOutput
from .stream import AgentStream
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


class _ShellProtocol(RecordedProtocol[IShellSink, Frame]):
    """Decodes the frames of one shell stream and drives an :class:`IShellSink`."""

    def __init__(self, sink: IShellSink) -> None:
        super().__init__(sink, FrameDecoder(MAX_GUEST_FRAME), "shell", "frame", FrameError, log)

    def _record(self, frame: Frame) -> None:
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


@implementer(IShellSession)
class ShellSession(GuestOutput):
    """
    A running shell (see :class:`~vmservice.guestport.shell.IShellSession`); as
    a push producer (:class:`~.relay.GuestOutput`) it controls the terminal's
    output, and stopping it hangs the shell up.

    :param stream: its agent stream.
    """

    def __init__(self, stream: AgentStream) -> None:
        super().__init__(stream, "shell hung up")

    def write(self, data: bytes) -> None:
        for frame in encode_data(data):
            self._stream.write(frame)

    def resize(self, cols: int, rows: int) -> None:
        self._stream.write(encode_window_size(cols, rows))

    def hangup(self) -> None:
        self.cancel()


def start_shell(agent: Channel, request: ShellRequest, sink: IShellSink) -> ShellSession:
    """
    Open a shell stream for ``request`` whose frames go to ``sink``.

    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    return ShellSession(agent.open_stream(request.to_json(), _ShellProtocol(sink)))


__all__ = ["ShellSession", "start_shell"]
