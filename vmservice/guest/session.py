# -*- test-case-name: tests.guest.test_agent -*-
"""
One session over one host connection: the codec and the streams
(:class:`Session`).  It knows nothing of descriptors, so tests drive it
directly.
"""

from __future__ import annotations

from vmservice.guest import agentlog, operations
from vmservice.guest.context import AgentContext
from vmservice.guest.loop import Loop
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.wire.connection import Connection, Role
from vmservice.wire.errors import LocalProtocolError, RemoteProtocolError, ResetCode
from vmservice.wire.events import NEED_DATA, Data, Event, HalfClose, Hello, Open, Ping, Pong, Reset, WindowUpdate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Mapping, Optional, TypeVarTuple, Unpack

    #: The arguments of a handler callback run by :meth:`Session.call_handler`.
    _HandlerArguments = TypeVarTuple("_HandlerArguments")

#: Most streams open at once; more are refused.
MAX_STREAMS = 512


class Session:
    """
    The codec and the streams of one host connection.

    Knows nothing of descriptors: bytes come in through :meth:`data_received` and go
    out through ``write``, so tests drive it directly.

    :param loop: handed to handlers through :attr:`GuestStream.loop`.
    :param context: agent facts for the handlers.
    :param write: sends bytes to the host.
    :param has_room: whether the link takes more output now.
    :param handlers: the operation table.
    """

    def __init__(
        self,
        loop: Loop,
        context: AgentContext,
        write: Callable[[bytes], None],
        has_room: Callable[[], bool] = lambda: True,
        handlers: Optional[Mapping[str, type[StreamHandler]]] = None,
    ) -> None:
        self.loop = loop
        self.context = context
        self._write = write
        self._has_room = has_room
        self._handlers = operations.HANDLERS if handlers is None else handlers
        self.conn = Connection(Role.GUEST)
        self.streams: dict[int, GuestStream] = {}
        self._closed = False

    @property
    def has_room(self) -> bool:
        """
        Whether streams may move more data to the link.
        """
        return self._has_room()

    def start(self) -> None:
        """
        Announce this session to the host.
        """
        self._send_hello()

    def _send_hello(self) -> None:
        self._write(self.conn.send(self.conn.hello(self.context.version)))

    def send(self, event: Event) -> None:
        """
        Encode ``event`` and write it.
        """
        self._write(self.conn.send(event))

    def data_received(self, data: bytes) -> None:
        """
        Bytes from the host.  A protocol error drops every stream and starts a
        fresh session that hunts for the host's next HELLO in what follows.
        """
        if self._closed:
            return
        self.conn.receive_data(data)
        while not self._closed:
            try:
                event = self.conn.next_event()
            except RemoteProtocolError as e:
                agentlog.log(f"protocol error from host, starting over: {e}")
                trailing = self.conn.trailing_data[1:]
                self._drop_streams(ResetCode.PROTOCOL_ERROR, "protocol error")
                self.conn = Connection(Role.GUEST)
                self._send_hello()
                self.conn.receive_data(trailing)
                continue
            if event is NEED_DATA:
                return
            self._dispatch(event)

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, Hello):
            if self.conn.hello_wanted:
                self._send_hello()
        elif isinstance(event, Ping):
            self.send(Pong(event.opaque))
        elif isinstance(event, Pong):
            pass
        elif isinstance(event, Open):
            self._open(event)
        else:
            stream = self.streams.get(event.stream_id)
            if stream is None:
                return
            if isinstance(event, Data):
                self.call_handler(stream, stream.handler.data_received, event.data)
            elif isinstance(event, WindowUpdate):
                stream.flush()
            elif isinstance(event, HalfClose):
                self.call_handler(stream, stream.handler.half_closed)
            elif isinstance(event, Reset):
                self.streams.pop(event.stream_id, None)
                stream._gone_now()
                self.call_handler(stream, stream.handler.reset, event.code, event.reason)
            self.forget_if_closed(event.stream_id)

    def _open(self, event: Open) -> None:
        op = event.header.get("op")
        handler_class = operations.find_handler(op, self._handlers)
        if handler_class is None:
            self.send(Reset(event.stream_id, ResetCode.UNKNOWN_OP, f"unknown op {op!r}"))
            return
        if len(self.streams) >= MAX_STREAMS:
            self.send(Reset(event.stream_id, ResetCode.REFUSED, "too many streams"))
            return
        stream = GuestStream(self, event.stream_id)
        self.streams[event.stream_id] = stream
        try:
            stream.handler = handler_class(stream, event.header)
        except Exception as e:  # a handler that cannot start fails its stream only
            agentlog.log(f"op {op!r} failed to start: {e!r}")
            self.reset_stream(event.stream_id, ResetCode.INTERNAL_ERROR, str(e)[:200])
            return
        self.call_handler(stream, stream.handler.start)

    def call_handler(
        self, stream: GuestStream, method: Callable[[Unpack[_HandlerArguments]], None], *args: Unpack[_HandlerArguments]
    ) -> None:
        """
        Run a handler callback; if it raises, reset its stream with INTERNAL_ERROR
        and keep serving the others.
        """
        try:
            method(*args)
        except Exception as e:
            agentlog.log(f"stream {stream.stream_id} failed: {e!r}")
            if not stream._gone:
                self.reset_stream(stream.stream_id, ResetCode.INTERNAL_ERROR, repr(e)[:200])

    def reset_stream(self, stream_id: int, code: int, reason: str) -> None:
        """
        Send RESET for ``stream_id`` and forget it (its handler's :meth:`reset` is
        not called: the handler asked for it, or failed).
        """
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            stream._gone_now()
        if self.conn.is_open(stream_id):
            self.send(Reset(stream_id, code, reason))

    def acknowledge(self, stream_id: int, count: int) -> None:
        """
        Give back ``count`` bytes of credit on ``stream_id``.
        """
        try:
            frame = self.conn.acknowledge_received_data(stream_id, count)
        except LocalProtocolError as e:
            agentlog.log(f"bad acknowledgement on stream {stream_id}: {e}")
            return
        self._write(frame)

    def forget_if_closed(self, stream_id: int) -> None:
        """
        Drop our record of a stream that ended in both directions.
        """
        if stream_id in self.streams and not self.conn.is_open(stream_id):
            self.streams.pop(stream_id)._gone_now()

    def output_drained(self) -> None:
        """
        The link has room again: let streams move data.
        """
        for stream in list(self.streams.values()):
            stream.flush()

    def _drop_streams(self, code: int, reason: str) -> None:
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            stream._gone_now()
            self.call_handler(stream, stream.handler.reset, code, reason)

    def start_over(self, why: str) -> None:
        """
        End this session and start a new one on the same link, with a new nonce
        drawn now: every stream is dropped (PEER_RESTARTED) and a HELLO that
        echoes the host's nonce goes out after what was written so far.  The
        host sees an agent that started over, and what it sent for the old
        session is skipped until its next HELLO.
        The ``adopt`` operation does it once it answered, so that clones of one
        template never share a session nonce.
        """
        if self._closed:
            return
        self._drop_streams(ResetCode.PEER_RESTARTED, why)
        # The new session's HELLO echoes the host's nonce: the host is acknowledged
        # at once, and its answer completes the exchange (no second HELLO from us).
        peer = self.conn.peer_hello
        self.conn = Connection(Role.GUEST, peer_nonce=peer.nonce if peer is not None else None)
        self._send_hello()
        agentlog.log(f"starting a new session: {why}")

    def connection_lost(self) -> None:
        """
        The host went away: every stream is gone.
        """
        self._closed = True
        self._drop_streams(ResetCode.PEER_RESTARTED, "host disconnected")


__all__ = ["MAX_STREAMS", "Session"]
