# -*- test-case-name: tests.wire.test_connection -*-
"""
The agent wire protocol as a sans-IO connection: bytes in, events out; events in,
bytes out.

Shaped like h11's ``Connection``: :meth:`Connection.receive_data` only buffers,
:meth:`Connection.next_event` returns one event or :data:`NEED_DATA`, and
:meth:`Connection.send` returns the bytes for an event or raises
:class:`LocalProtocolError` if the event is illegal now.  Nothing here does I/O or
knows about time, so the guest agent (epoll) and the host (Twisted) share it.

Theory of operation
-------------------

*Sessions* (:mod:`vmservice.wire.handshake`): a connection is one session of
one side; both sides send a HELLO first, and streams and pings flow once the
peer's current session has acknowledged ours.  A HELLO with a new nonce after
that means the peer restarted: every stream is gone, reported as
:class:`Reset` events with :attr:`ResetCode.PEER_RESTARTED`.

*Hunting* (:mod:`vmservice.wire.input_buffer`): until the peer's first HELLO
arrives, everything before it is skipped.  After that, every byte must parse,
or :class:`RemoteProtocolError`.

*Streams.*  The host opens odd ids, the guest even ids, each side in increasing
order, never reused within a session.  Each direction of a stream ends with
HALF_CLOSE; when both have, the stream is gone.  RESET ends both at once.  Frames
for a stream that existed but is gone are ignored (they crossed a RESET on the
wire); frames for a stream that never existed are a protocol error.

*Flow control* (:mod:`vmservice.wire.flow`): each direction of each stream has
credit; DATA beyond the peer's credit is refused, and received DATA is given
back as credit once our consumer acknowledged it.

Stdlib only: the guest imports this module.
"""

from __future__ import annotations


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Deque, Optional, Union
if TYPE_CHECKING:
    from collections import deque
else:  # collections' own deque, without importing collections (a cold guest's start: see errors.py)
    from _collections import deque

from vmservice.wire.errors import LocalProtocolError, RemoteProtocolError, ResetCode
from vmservice.wire.events import (
    NEED_DATA,
    Data,
    Event,
    HalfClose,
    Hello,
    Open,
    Ping,
    Pong,
    Reset,
    Sentinel,
    WindowUpdate,
)
from vmservice.wire.flow import INITIAL_WINDOW, WINDOW_UPDATE_THRESHOLD, StreamState
from vmservice.wire.frames import HEADER_SIZE, MAX_PAYLOAD, MAX_STREAM_ID, decode_frame, encode_event, parse_header
from vmservice.wire.handshake import Handshake, new_nonce
from vmservice.wire.input_buffer import InputBuffer


class Role:
    """Which end of the channel a :class:`Connection` is (plain strings, no ``enum``: see errors.py)."""

    #: The daemon; opens odd stream ids.
    HOST = "host"
    #: The agent inside the VM; opens even stream ids.
    GUEST = "guest"


class Connection:
    """
    One session of one side of the agent channel.

    :param role: which side we are.
    """

    def __init__(self, role: str, *, nonce: Optional[bytes] = None, peer_nonce: Optional[bytes] = None) -> None:
        """
        :param nonce: this session's 8-byte nonce; drawn now (``os.urandom``) unless a test fixes it.
        :param peer_nonce: the nonce of the peer's session when this session
            replaces one of ours on a link whose peer is known (the guest after
            ``adopt``): our first HELLO echoes it, so the peer is acknowledged in
            one HELLO and the exchange needs no second one from us.
        """
        self._handshake = Handshake(new_nonce() if nonce is None else nonce, peer_nonce)
        self.role = role
        self.nonce = self._handshake.nonce
        self._input = InputBuffer()
        self._pending: Deque[Event] = deque()
        self._hunting = True
        self._error: Optional[str] = None
        self._streams: dict[int, StreamState] = {}
        self._next_local_id = 1 if role is Role.HOST else 2
        self._last_peer_id = 0

    # -- state, for the I/O layer --------------------------------------------------

    @property
    def established(self) -> bool:
        """Whether the peer's current session has acknowledged ours: streams and pings may flow."""
        return self._handshake.established

    @property
    def hello_wanted(self) -> bool:
        """
        Whether we owe the peer a HELLO (:meth:`hello`).  True at first; set again by
        a peer HELLO that starts a session or does not echo our nonce.  Nothing but
        a HELLO can be sent while this is true.
        """
        return self._handshake.hello_wanted

    @property
    def peer_hello(self) -> Optional[Hello]:
        """The latest HELLO the peer sent, e.g. for its ``agent_version``; ``None`` before the first."""
        return self._handshake.peer_hello

    @property
    def dead(self) -> bool:
        """Whether a :class:`RemoteProtocolError` ended this connection."""
        return self._error is not None

    @property
    def trailing_data(self) -> bytes:
        """
        Input received but not consumed.  After a :class:`RemoteProtocolError` it
        starts with the offending frame; a guest that resynchronises feeds it (minus
        its first byte) to a fresh connection, which hunts for the next HELLO.
        """
        return self._input.slice(0, self._input.size)

    @property
    def open_streams(self) -> frozenset[int]:
        """The ids of the streams open in at least one direction."""
        return frozenset(self._streams)

    def is_open(self, stream_id: int) -> bool:
        """Whether ``stream_id`` is open in at least one direction (cheaper than :attr:`open_streams`)."""
        return stream_id in self._streams

    def send_window(self, stream_id: int) -> int:
        """
        How many bytes of DATA we may send on ``stream_id`` now; 0 if we cannot send
        on it at all.
        """
        stream = self._streams.get(stream_id)
        if stream is None or not stream.send_open:
            return 0
        return stream.send_window

    def can_send(self, stream_id: int) -> bool:
        """Whether ``stream_id`` is open for our DATA (not half-closed by us, not reset)."""
        stream = self._streams.get(stream_id)
        return stream is not None and stream.send_open

    def next_stream_id(self) -> int:
        """The id the next stream we open should use (not reserved until sent)."""
        if self._next_local_id > MAX_STREAM_ID:
            raise LocalProtocolError("stream ids exhausted; start a new connection")
        return self._next_local_id

    def hello(self, agent_version: str) -> Hello:
        """
        The HELLO to send now: our nonce, echoing the peer's if we know it.

        :param agent_version: our software version, shown to the peer.
        """
        return self._handshake.hello(agent_version)

    # -- input ------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """
        Buffer bytes received from the peer; parse them with :meth:`next_event`.

        Only buffers: it never raises for bad input.  End of input is the
        transport's business (the host drops the connection, the guest starts a new
        :class:`Connection`), so ``b""`` is simply nothing.
        """
        if self._error is None and data:
            self._input.append(data)

    def next_event(self) -> Union[Event, Sentinel]:
        """
        Parse and return the next event, or :data:`NEED_DATA`.

        Call it until it returns :data:`NEED_DATA`.  Events of a session the link
        left behind are dropped here and never returned.

        :raises RemoteProtocolError: if the peer broke the protocol; every later
            call raises it again.
        """
        if self._error is not None:
            raise RemoteProtocolError(self._error)
        try:
            return self._next_event()
        except RemoteProtocolError as e:
            self._error = str(e)
            raise

    def _next_event(self) -> Union[Event, Sentinel]:
        received = self._input
        while True:
            if self._pending:
                return self._pending.popleft()
            if self._hunting and not received.hunt_hello():
                return NEED_DATA
            if received.size < HEADER_SIZE:
                return NEED_DATA
            length, frame_type, flags, stream_id = parse_header(received.slice(0, HEADER_SIZE))
            end = HEADER_SIZE + length
            if received.size < end:
                return NEED_DATA
            payload = received.slice(HEADER_SIZE, end)
            if self._hunting:
                try:
                    event = decode_frame(frame_type, flags, stream_id, payload)
                except RemoteProtocolError:
                    # Garbage that happens to contain the signature: keep looking.
                    received.discard(1)
                    continue
            else:
                event = decode_frame(frame_type, flags, stream_id, payload)
            self._handle_received(event)
            received.discard(end)
            self._hunting = False

    def _handle_received(self, event: Event) -> None:
        """Apply a decoded event to the connection's state and queue it (or drop it)."""
        if isinstance(event, Hello):
            self._received_hello(event)
            return
        if not self._handshake.established:
            # A frame of a session that has not (yet) acknowledged ours: stale.
            return
        if isinstance(event, (Ping, Pong)):
            self._pending.append(event)
            return
        if isinstance(event, Open):
            self._received_open(event)
            return
        stream = self._streams.get(event.stream_id)
        if stream is None:
            if self._was_used(event.stream_id):
                return
            raise RemoteProtocolError(f"frame for unknown stream {event.stream_id}")
        if isinstance(event, Data):
            stream.received_data(len(event.data))
        elif isinstance(event, WindowUpdate):
            stream.received_credit(event.increment)
        elif isinstance(event, HalfClose):
            stream.received_half_close()
            self._forget_if_done(stream)
        elif isinstance(event, Reset):
            del self._streams[event.stream_id]
        self._pending.append(event)

    def _received_hello(self, hello: Hello) -> None:
        if self._handshake.received(hello):
            # The peer started a session: everything of its old one is gone.
            for stream_id in sorted(self._streams):
                self._pending.append(Reset(stream_id, ResetCode.PEER_RESTARTED, "peer restarted"))
            self._streams.clear()
            self._last_peer_id = 0
        self._pending.append(hello)

    def _received_open(self, event: Open) -> None:
        stream_id = event.stream_id
        if self._is_local_id(stream_id):
            raise RemoteProtocolError(f"peer opened stream {stream_id} of our parity")
        if stream_id <= self._last_peer_id:
            raise RemoteProtocolError(f"stream id {stream_id} reused or out of order")
        self._last_peer_id = stream_id
        self._streams[stream_id] = StreamState(stream_id)
        self._pending.append(event)

    def _is_local_id(self, stream_id: int) -> bool:
        return (stream_id % 2 == 1) == (self.role is Role.HOST)

    def _was_used(self, stream_id: int) -> bool:
        if self._is_local_id(stream_id):
            return stream_id < self._next_local_id
        return stream_id <= self._last_peer_id

    def _forget_if_done(self, stream: StreamState) -> None:
        if stream.done:
            del self._streams[stream.stream_id]

    # -- output -----------------------------------------------------------------------

    def send(self, event: Event) -> bytes:
        """
        Return the bytes that carry ``event`` to the peer and update our state.

        DATA larger than :data:`~vmservice.wire.frames.MAX_PAYLOAD` becomes several
        frames.  Use :meth:`acknowledge_received_data` rather than sending
        :class:`WindowUpdate` by hand; both work.

        :raises FlowControlError: for DATA beyond the peer's credit.
        :raises LocalProtocolError: if the event is not allowed now (no HELLO yet,
            unknown or closed stream, wrong stream id parity, dead connection...);
            nothing was sent and the state is unchanged.
        """
        if self._error is not None:
            raise LocalProtocolError(f"connection is dead: {self._error}")
        if isinstance(event, Hello):
            return self._send_hello(event)
        if self._handshake.hello_wanted:
            raise LocalProtocolError("send a HELLO first (hello_wanted)")
        if not self._handshake.established:
            raise LocalProtocolError("the peer has not acknowledged this session yet")
        if isinstance(event, (Ping, Pong)):
            return encode_event(event)
        if isinstance(event, Open):
            return self._send_open(event)
        stream = self._streams.get(event.stream_id)
        if stream is None:
            raise LocalProtocolError(f"stream {event.stream_id} is not open")
        if isinstance(event, Data):
            return self._send_data(event, stream)
        if isinstance(event, (WindowUpdate, HalfClose, Reset)):
            return self._send_stream_frame(event, stream)
        raise LocalProtocolError(f"not an event: {event!r}")

    def _send_stream_frame(self, event: Union[WindowUpdate, HalfClose, Reset], stream: StreamState) -> bytes:
        """A WINDOW, HALF_CLOSE or RESET of ours: checked, encoded, then applied."""
        if isinstance(event, WindowUpdate):
            stream.check_credit(event.increment)
        elif isinstance(event, HalfClose):
            stream.check_half_close()
        frame = encode_event(event)
        if isinstance(event, WindowUpdate):
            stream.recv_window += event.increment
        elif isinstance(event, HalfClose):
            stream.send_open = False
            self._forget_if_done(stream)
        else:
            del self._streams[event.stream_id]
        return frame

    def _send_hello(self, hello: Hello) -> bytes:
        self._handshake.check_outgoing(hello)
        frame = encode_event(hello)
        self._handshake.sent()
        return frame

    def _send_open(self, event: Open) -> bytes:
        stream_id = event.stream_id
        if not self._is_local_id(stream_id):
            raise LocalProtocolError(f"stream id {stream_id} has the peer's parity")
        if stream_id < self._next_local_id:
            raise LocalProtocolError(f"stream id {stream_id} reused or out of order")
        frame = encode_event(event)
        self._next_local_id = stream_id + 2
        self._streams[stream_id] = StreamState(stream_id)
        return frame

    def _send_data(self, event: Data, stream: StreamState) -> bytes:
        data = event.data
        stream.check_data(len(data))
        if len(data) <= MAX_PAYLOAD:
            frame = encode_event(event)
        else:
            with memoryview(data) as view:
                frame = b"".join(
                    encode_event(Data(event.stream_id, bytes(view[i : i + MAX_PAYLOAD])))
                    for i in range(0, len(data), MAX_PAYLOAD)
                )
        stream.send_window -= len(data)
        return frame

    def acknowledge_received_data(self, stream_id: int, count: int) -> bytes:
        """
        Say our consumer has taken ``count`` received bytes of ``stream_id``, and
        return the WINDOW frame that gives the credit back (or ``b""`` while less
        than :data:`WINDOW_UPDATE_THRESHOLD` is owed, or when the peer cannot send
        any more anyway).

        A stream that is gone is not an error: the credit simply does not matter.

        :raises LocalProtocolError: if ``count`` is negative or exceeds the bytes
            received and not yet acknowledged.
        """
        if self._error is not None:
            raise LocalProtocolError(f"connection is dead: {self._error}")
        stream = self._streams.get(stream_id)
        if stream is None:
            return b""
        increment = stream.acknowledge(count)
        return self.send(WindowUpdate(stream_id, increment)) if increment else b""


__all__ = ["INITIAL_WINDOW", "WINDOW_UPDATE_THRESHOLD", "Connection", "Role"]
