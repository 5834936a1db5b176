# -*- test-case-name: tests.guest.test_agent -*-
"""
Streams and what serves them: a :class:`GuestStream` is the agent's end of one
stream (writes buffered within the host's credit), a :class:`StreamHandler`
serves it.  The session a stream belongs to is seen through
:class:`StreamSession`, so that this module does not import the session's.
"""

from __future__ import annotations

from vmservice.wire.errors import ResetCode
from vmservice.wire.events import Data, Event, HalfClose
from vmservice.wire.frames import MAX_PAYLOAD

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Mapping, Optional, Protocol, TypeVarTuple, Unpack

    from vmservice.guest.context import AgentContext
    from vmservice.guest.loop import Loop
    from vmservice.wire.connection import Connection

    #: The arguments of a handler callback run by :meth:`StreamSession.call_handler`.
    _HandlerArguments = TypeVarTuple("_HandlerArguments")

    class StreamSession(Protocol):
        """
        What a :class:`GuestStream` uses of its session
        (:class:`vmservice.guest.session.Session` is one).

        :ivar loop: the agent's event loop.
        :ivar context: facts about the agent.
        :ivar conn: the session's codec.
        """

        loop: Loop
        context: AgentContext
        conn: Connection

        @property
        def has_room(self) -> bool:
            """Whether streams may move more data to the link."""

        def send(self, event: Event) -> None:
            """Encode ``event`` and write it."""

        def call_handler(
            self, stream: GuestStream, method: Callable[[Unpack[_HandlerArguments]], None], *args: Unpack[_HandlerArguments]
        ) -> None:
            """Run a handler callback, resetting its stream if it raises."""

        def reset_stream(self, stream_id: int, code: int, reason: str) -> None:
            """Send RESET for ``stream_id`` and forget it."""

        def acknowledge(self, stream_id: int, count: int) -> None:
            """Give back ``count`` bytes of credit on ``stream_id``."""

        def forget_if_closed(self, stream_id: int) -> None:
            """Drop the record of a stream that ended in both directions."""

        def start_over(self, why: str) -> None:
            """End this session and start a new one on the same link."""


class StreamHandler:
    """
    Serves one stream; subclasses are listed in :data:`~vmservice.guest.operations.HANDLERS` under their ``op``.

    The default methods discard incoming data (acknowledging it, so the host is
    never stuck) and do nothing else.

    :ivar stream: the stream served.
    :ivar header: the stream's OPEN header.
    """

    def __init__(self, stream: "GuestStream", header: Mapping[str, Any]) -> None:
        self.stream = stream
        self.header = header

    def start(self) -> None:
        """
        The stream was opened.  Raising here resets it with INTERNAL_ERROR.
        """

    def data_received(self, data: bytes) -> None:
        """
        The host sent ``data``.  Call :meth:`GuestStream.consumed` once it has been
        taken care of: that is what grants the host more credit.
        """
        self.stream.consumed(len(data))

    def half_closed(self) -> None:
        """
        The host will send no more data.
        """

    def flushed(self) -> None:
        """
        Some of what we wrote went out (see :attr:`GuestStream.sent_total`).
        """

    def reset(self, code: int, reason: str) -> None:
        """
        The stream is gone: the host reset it, the host restarted, or the link
        dropped.  Release whatever the handler holds.
        """


class GuestStream:
    """
    The agent's end of one stream: buffered writes within the host's credit.

    :ivar stream_id: the stream's id.
    :ivar sent_total: bytes of DATA handed to the link so far.
    """

    def __init__(self, session: StreamSession, stream_id: int) -> None:
        self._session = session
        self.stream_id = stream_id
        self.handler: StreamHandler = StreamHandler(self, {})
        self._out = bytearray()
        self._end_requested = False
        self._gone = False
        self._start_over: Optional[str] = None
        self.sent_total = 0

    @property
    def loop(self) -> Loop:
        """
        The agent's event loop, for handlers with descriptors or timers of their own.
        """
        return self._session.loop

    @property
    def context(self) -> "AgentContext":
        """
        Facts about the agent (version, start time).
        """
        return self._session.context

    @property
    def pending(self) -> int:
        """
        Bytes written but still waiting for credit or room on the link; handlers
        that read from a source stop reading while this is large.
        """
        return len(self._out)

    def write(self, data: bytes) -> None:
        """
        Send ``data`` to the host as soon as credit allows.
        """
        if self._gone or self._end_requested or not data:
            return
        if not self._out and len(data) <= 4 * MAX_PAYLOAD:
            # Nothing waits: send it as it is, without copying it into the buffer.
            session = self._session
            if session.has_room and session.conn.send_window(self.stream_id) >= len(data):
                session.send(Data(self.stream_id, bytes(data)))
                self.sent_total += len(data)
                session.call_handler(self, self.handler.flushed)
                session.forget_if_closed(self.stream_id)
                return
        self._out += data
        self.flush()

    def end(self) -> None:
        """
        Half-close after everything written has been sent.
        """
        if self._gone or self._end_requested:
            return
        self._end_requested = True
        self.flush()

    def end_session(self, why: str) -> None:
        """
        Half-close, and once that went out start a new session on the link
        (:meth:`Session.start_over`): what was written reaches the host in the old
        session, everything after in the new one.
        """
        if self._gone or self._end_requested:
            return
        self._start_over = why
        self.end()

    def reset(self, code: int = ResetCode.CANCEL, reason: str = "") -> None:
        """
        Abort the stream in both directions.
        """
        if self._gone:
            return
        self._session.reset_stream(self.stream_id, code, reason)

    def consumed(self, count: int) -> None:
        """
        Give the host back ``count`` bytes of credit: its data was taken care of.
        """
        if not self._gone:
            self._session.acknowledge(self.stream_id, count)

    def flush(self) -> None:
        """
        Move buffered data to the link while there is credit and room.
        """
        if self._gone:
            return
        session = self._session
        conn = session.conn
        sent = 0
        while self._out and session.has_room:
            window = conn.send_window(self.stream_id)
            if window <= 0:
                break
            size = min(window, len(self._out), 4 * MAX_PAYLOAD)
            with memoryview(self._out) as view:
                chunk = view[:size].tobytes()
            del self._out[:size]
            session.send(Data(self.stream_id, chunk))
            sent += size
        ended = False
        if not self._out and self._end_requested and conn.can_send(self.stream_id):
            session.send(HalfClose(self.stream_id))
            ended = True
        if sent:
            self.sent_total += sent
            session.call_handler(self, self.handler.flushed)
        session.forget_if_closed(self.stream_id)
        if ended and self._start_over is not None:
            why, self._start_over = self._start_over, None
            session.start_over(why)

    def _gone_now(self) -> None:
        self._gone = True
        self._out.clear()


__all__ = ["GuestStream", "StreamHandler", "StreamSession"]
