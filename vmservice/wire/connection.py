# -*- test-case-name: tests.wire.test_connection -*-
"""
The agent wire protocol as a sans-IO connection: bytes in, events out; events in,
bytes out.

Shaped like h11's ``Connection``: :meth:`Connection.receive_data` only buffers,
:meth:`Connection.next_event` returns one event or :data:`NEED_DATA`, and
:meth:`Connection.send` returns the bytes for an event or raises
:class:`LocalProtocolError` if the event is illegal now.  Nothing here does I/O or
knows about time, so the guest agent (selectors) and the host (Twisted) share it.

Theory of operation
-------------------

*Sessions.*  A :class:`Connection` is one session of one side, identified by a random
nonce.  Both sides send a :class:`Hello` first (the host as soon as it connects, the
guest when its port opens).  A side answers every HELLO that brings a nonce it has not
seen (the peer started a session) or that does not echo its own nonce (the peer has
not heard of this session): :attr:`Connection.hello_wanted` says so.  The link is
*established* once a HELLO from the peer's current session echoes our nonce; only
then may streams be opened or pings sent, and stream frames received before that are
dropped, since they belong to an older session.  A HELLO with a new nonce after that
means the peer restarted: every stream is gone (reported as :class:`Reset` events with
:attr:`ResetCode.PEER_RESTARTED`) and the exchange starts over.  The exchange always
ends: a side answers only a HELLO that does not show that the peer knows both nonces,
and its answer shows exactly that (two HELLOs each way in the usual cases).

*Hunting.*  Until the peer's first HELLO arrives, input is scanned for
:data:`~vmservice.wire.frames.HELLO_SIGNATURE` and everything before it is skipped:
a virtio-serial port may hand a new connection the tail of what was written for the
previous one.  After that, every byte must parse, or :class:`RemoteProtocolError`.

*Streams.*  The host opens odd ids, the guest even ids, each side in increasing
order, never reused within a session.  Each direction of a stream ends with
HALF_CLOSE; when both have, the stream is gone.  RESET ends both at once.  Frames
for a stream that existed but is gone are ignored (they crossed a RESET on the
wire); frames for a stream that never existed are a protocol error.

*Flow control.*  Each direction of each stream starts with
:data:`INITIAL_WINDOW` bytes of credit.  :meth:`Connection.send` refuses DATA beyond
the peer's credit (:class:`FlowControlError`).  Received DATA uses up the peer's
credit; :meth:`Connection.acknowledge_received_data` gives it back once our consumer
has taken the bytes (batched into WINDOW frames of at least
:data:`WINDOW_UPDATE_THRESHOLD` bytes), so a consumer that stops acknowledging stops
the sender after at most one window.

Stdlib only: the guest imports this module.
"""

from __future__ import annotations

import collections
import enum
import os
from typing import Deque, Optional, Union

from vmservice.wire.errors import (
    FlowControlError,
    LocalProtocolError,
    RemoteProtocolError,
    ResetCode,
)
from vmservice.wire.events import (
    NEED_DATA,
    NO_NONCE,
    NONCE_SIZE,
    PROTOCOL_VERSION,
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
from vmservice.wire.frames import (
    HEADER_SIZE,
    HELLO_SIGNATURE,
    HELLO_SIGNATURE_OFFSET,
    MAX_PAYLOAD,
    MAX_STREAM_ID,
    MAX_WINDOW,
    decode_frame,
    encode_event,
    parse_header,
)

#: Credit each side has on each new stream, in each direction (256 KiB).  Both sides
#: must agree: it is part of the protocol, not a setting.
INITIAL_WINDOW = 256 * 1024
#: Acknowledged bytes are given back in WINDOW frames of at least this many bytes,
#: so the peer always keeps three quarters of its window while the consumer keeps up.
WINDOW_UPDATE_THRESHOLD = INITIAL_WINDOW // 4


class Role(enum.Enum):
    """
    Which end of the channel a :class:`Connection` is.
    """

    #: The daemon; opens odd stream ids.
    HOST = "host"
    #: The agent inside the VM; opens even stream ids.
    GUEST = "guest"


class _Stream:
    """
    What a connection knows about one open stream.

    :ivar send_open: we may still send DATA.
    :ivar recv_open: the peer may still send DATA.
    :ivar send_window: credit we have for sending.
    :ivar recv_window: credit the peer has for sending to us.
    :ivar outstanding: bytes received that our consumer has not acknowledged yet.
    :ivar unsent_credit: bytes acknowledged but not yet given back in a WINDOW frame.
    """

    __slots__ = ("send_open", "recv_open", "send_window", "recv_window", "outstanding", "unsent_credit")

    def __init__(self) -> None:
        self.send_open = True
        self.recv_open = True
        self.send_window = INITIAL_WINDOW
        self.recv_window = INITIAL_WINDOW
        self.outstanding = 0
        self.unsent_credit = 0


class Connection:
    """
    One session of one side of the agent channel.

    :param role: which side we are.
    :param nonce: this session's 8-byte nonce; random unless a test fixes it.
    """

    def __init__(self, role: Role, *, nonce: Optional[bytes] = None, peer_nonce: Optional[bytes] = None) -> None:
        """
        :param nonce: this session's nonce; drawn now (``os.urandom``) by default.
        :param peer_nonce: the nonce of the peer's session when this session
            replaces one of ours on a link whose peer is known (the guest after
            ``adopt``): our first HELLO echoes it, so the peer is acknowledged in
            one HELLO and the exchange needs no second one from us.
        """
        if peer_nonce is not None and (len(peer_nonce) != NONCE_SIZE or peer_nonce == NO_NONCE):
            raise ValueError(f"peer_nonce must be {NONCE_SIZE} bytes, not all zero")
        if nonce is None:
            nonce = os.urandom(NONCE_SIZE)
            while nonce == NO_NONCE:
                nonce = os.urandom(NONCE_SIZE)
        if len(nonce) != NONCE_SIZE or nonce == NO_NONCE:
            raise ValueError(f"nonce must be {NONCE_SIZE} bytes, not all zero")
        self.role = role
        self.nonce = nonce
        # Input not parsed yet: the chunks as received (never copied together
        # except around a frame that spans two), the bytes of the first already
        # consumed, and the unconsumed total.
        self._chunks: Deque[bytes] = collections.deque()
        self._offset = 0
        self._size = 0
        self._pending: Deque[Event] = collections.deque()
        self._hunting = True
        self._error: Optional[str] = None
        self._peer_nonce: Optional[bytes] = peer_nonce
        self._peer_hello: Optional[Hello] = None
        self._established = False
        self._hello_wanted = True
        self._streams: dict[int, _Stream] = {}
        self._next_local_id = 1 if role is Role.HOST else 2
        self._last_peer_id = 0

    # -- state, for the I/O layer --------------------------------------------------

    @property
    def established(self) -> bool:
        """
        Whether the peer's current session has acknowledged ours: streams and pings
        may flow.
        """
        return self._established

    @property
    def hello_wanted(self) -> bool:
        """
        Whether we owe the peer a HELLO (:meth:`hello`).  True at first; set again by
        a peer HELLO that starts a session or does not echo our nonce.  Nothing but
        a HELLO can be sent while this is true.
        """
        return self._hello_wanted

    @property
    def peer_hello(self) -> Optional[Hello]:
        """
        The latest HELLO the peer sent, e.g. for its ``agent_version``; ``None``
        before the first.
        """
        return self._peer_hello

    @property
    def dead(self) -> bool:
        """
        Whether a :class:`RemoteProtocolError` ended this connection.
        """
        return self._error is not None

    @property
    def trailing_data(self) -> bytes:
        """
        Input received but not consumed.  After a :class:`RemoteProtocolError` it
        starts with the offending frame; a guest that resynchronises feeds it (minus
        its first byte) to a fresh connection, which hunts for the next HELLO.
        """
        return self._slice(0, self._size)

    @property
    def open_streams(self) -> frozenset[int]:
        """
        The ids of the streams open in at least one direction.
        """
        return frozenset(self._streams)

    def is_open(self, stream_id: int) -> bool:
        """
        Whether ``stream_id`` is open in at least one direction (cheaper than
        :attr:`open_streams` for one id).
        """
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
        """
        Whether ``stream_id`` is open for our DATA (not half-closed by us, not reset).
        """
        stream = self._streams.get(stream_id)
        return stream is not None and stream.send_open

    def next_stream_id(self) -> int:
        """
        The id the next stream we open should use (not reserved until sent).
        """
        if self._next_local_id > MAX_STREAM_ID:
            raise LocalProtocolError("stream ids exhausted; start a new connection")
        return self._next_local_id

    def hello(self, agent_version: str) -> Hello:
        """
        The HELLO to send now: our nonce, echoing the peer's if we know it.

        :param agent_version: our software version, shown to the peer.
        """
        return Hello(self.nonce, self._peer_nonce or NO_NONCE, agent_version)

    # -- input ------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """
        Buffer bytes received from the peer; parse them with :meth:`next_event`.

        Only buffers: it never raises for bad input.  End of input is the
        transport's business (the host drops the connection, the guest starts a new
        :class:`Connection`), so ``b""`` is simply nothing.
        """
        if self._error is None and data:
            self._chunks.append(bytes(data))
            self._size += len(data)

    def _slice(self, start: int, end: int) -> bytes:
        """
        Unconsumed input from ``start`` to ``end`` (``end <= self._size``), not
        consumed: one copy, or none when it is a whole received chunk.
        """
        chunks = self._chunks
        if start == end:
            return b""
        first = chunks[0]
        begin, finish = self._offset + start, self._offset + end
        if finish <= len(first):
            return first if begin == 0 and finish == len(first) else first[begin:finish]
        parts = []
        for chunk in chunks:
            if begin < len(chunk):
                parts.append(chunk[begin:finish])
            begin = max(0, begin - len(chunk))
            finish -= len(chunk)
            if finish <= 0:
                break
        return b"".join(parts)

    def _discard(self, count: int) -> None:
        """
        Consume ``count`` bytes of input (at most ``self._size``).
        """
        self._size -= count
        chunks = self._chunks
        offset = self._offset + count
        while chunks and offset >= len(chunks[0]):
            offset -= len(chunks.popleft())
        self._offset = offset

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
        while True:
            if self._pending:
                return self._pending.popleft()
            if self._hunting and not self._hunt():
                return NEED_DATA
            if self._size < HEADER_SIZE:
                return NEED_DATA
            length, frame_type, flags, stream_id = parse_header(self._slice(0, HEADER_SIZE))
            end = HEADER_SIZE + length
            if self._size < end:
                return NEED_DATA
            payload = self._slice(HEADER_SIZE, end)
            if self._hunting:
                try:
                    event = decode_frame(frame_type, flags, stream_id, payload)
                except RemoteProtocolError:
                    # Garbage that happens to contain the signature: keep looking.
                    self._discard(1)
                    continue
            else:
                event = decode_frame(frame_type, flags, stream_id, payload)
            self._handle_received(event)
            self._discard(end)
            self._hunting = False

    def _hunt(self) -> bool:
        """
        Skip input up to the next HELLO frame; return whether one starts the buffer.
        """
        # Rare (until the first HELLO): look at all the input as one piece.
        data = self._slice(0, self._size)
        self._chunks.clear()
        self._offset = 0
        if data:
            self._chunks.append(data)
        start = 0
        while True:
            at = data.find(HELLO_SIGNATURE, start + HELLO_SIGNATURE_OFFSET)
            if at < 0:
                keep = len(HELLO_SIGNATURE) + HELLO_SIGNATURE_OFFSET - 1
                self._discard(max(0, self._size - keep))
                return False
            start = at - HELLO_SIGNATURE_OFFSET
            if int.from_bytes(data[start : start + 4], "big") <= MAX_PAYLOAD:
                self._discard(start)
                return True
            start += 1

    def _handle_received(self, event: Event) -> None:
        """
        Apply a decoded event to the connection's state and queue it (or drop it).
        """
        if isinstance(event, Hello):
            self._received_hello(event)
            return
        if not self._established:
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
            if not stream.recv_open:
                raise RemoteProtocolError(f"DATA after HALF_CLOSE on stream {event.stream_id}")
            if len(event.data) > stream.recv_window:
                raise RemoteProtocolError(
                    f"DATA beyond the window on stream {event.stream_id}"
                )
            stream.recv_window -= len(event.data)
            stream.outstanding += len(event.data)
        elif isinstance(event, WindowUpdate):
            if stream.send_window + event.increment > MAX_WINDOW:
                raise RemoteProtocolError(f"window overflow on stream {event.stream_id}")
            stream.send_window += event.increment
        elif isinstance(event, HalfClose):
            if not stream.recv_open:
                raise RemoteProtocolError(f"second HALF_CLOSE on stream {event.stream_id}")
            stream.recv_open = False
            self._forget_if_done(event.stream_id, stream)
        elif isinstance(event, Reset):
            del self._streams[event.stream_id]
        self._pending.append(event)

    def _received_hello(self, hello: Hello) -> None:
        if hello.protocol_version != PROTOCOL_VERSION:
            raise RemoteProtocolError(
                f"peer speaks protocol version {hello.protocol_version}, "
                f"not {PROTOCOL_VERSION}"
            )
        if hello.nonce != self._peer_nonce:
            # The peer started a session: everything of its old one is gone.
            for stream_id in sorted(self._streams):
                self._pending.append(
                    Reset(stream_id, ResetCode.PEER_RESTARTED, "peer restarted")
                )
            self._streams.clear()
            self._last_peer_id = 0
            self._peer_nonce = hello.nonce
            self._established = hello.echo == self.nonce
            self._hello_wanted = True
        elif hello.echo == self.nonce:
            self._established = True
        else:
            self._hello_wanted = True
        self._peer_hello = hello
        self._pending.append(hello)

    def _received_open(self, event: Open) -> None:
        stream_id = event.stream_id
        if self._is_local_id(stream_id):
            raise RemoteProtocolError(f"peer opened stream {stream_id} of our parity")
        if stream_id <= self._last_peer_id:
            raise RemoteProtocolError(f"stream id {stream_id} reused or out of order")
        self._last_peer_id = stream_id
        self._streams[stream_id] = _Stream()
        self._pending.append(event)

    def _is_local_id(self, stream_id: int) -> bool:
        return (stream_id % 2 == 1) == (self.role is Role.HOST)

    def _was_used(self, stream_id: int) -> bool:
        if self._is_local_id(stream_id):
            return stream_id < self._next_local_id
        return stream_id <= self._last_peer_id

    def _forget_if_done(self, stream_id: int, stream: _Stream) -> None:
        if not (stream.send_open or stream.recv_open):
            del self._streams[stream_id]

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
        if self._hello_wanted:
            raise LocalProtocolError("send a HELLO first (hello_wanted)")
        if not self._established:
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
        if isinstance(event, WindowUpdate):
            if stream.recv_window + event.increment > MAX_WINDOW:
                raise LocalProtocolError(f"window overflow on stream {event.stream_id}")
            frame = encode_event(event)
            stream.recv_window += event.increment
            return frame
        if isinstance(event, HalfClose):
            if not stream.send_open:
                raise LocalProtocolError(f"stream {event.stream_id} already half-closed")
            frame = encode_event(event)
            stream.send_open = False
            self._forget_if_done(event.stream_id, stream)
            return frame
        if isinstance(event, Reset):
            frame = encode_event(event)
            del self._streams[event.stream_id]
            return frame
        raise LocalProtocolError(f"not an event: {event!r}")

    def _send_hello(self, hello: Hello) -> bytes:
        expected = self.hello(hello.agent_version)
        if hello.nonce != expected.nonce or hello.echo != expected.echo:
            raise LocalProtocolError("HELLO must carry our nonce and echo the peer's")
        if hello.protocol_version != PROTOCOL_VERSION:
            raise LocalProtocolError(f"we speak protocol version {PROTOCOL_VERSION}")
        frame = encode_event(hello)
        self._hello_wanted = False
        return frame

    def _send_open(self, event: Open) -> bytes:
        stream_id = event.stream_id
        if not self._is_local_id(stream_id):
            raise LocalProtocolError(f"stream id {stream_id} has the peer's parity")
        if stream_id < self._next_local_id:
            raise LocalProtocolError(f"stream id {stream_id} reused or out of order")
        frame = encode_event(event)
        self._next_local_id = stream_id + 2
        self._streams[stream_id] = _Stream()
        return frame

    def _send_data(self, event: Data, stream: _Stream) -> bytes:
        if not stream.send_open:
            raise LocalProtocolError(f"stream {event.stream_id} is half-closed")
        data = event.data
        if len(data) > stream.send_window:
            raise FlowControlError(
                f"{len(data)} bytes exceed the window of {stream.send_window} "
                f"on stream {event.stream_id}"
            )
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
        if not 0 <= count <= stream.outstanding:
            raise LocalProtocolError(
                f"cannot acknowledge {count} bytes; {stream.outstanding} outstanding"
            )
        stream.outstanding -= count
        if not stream.recv_open:
            return b""
        stream.unsent_credit += count
        if stream.unsent_credit < WINDOW_UPDATE_THRESHOLD:
            return b""
        increment, stream.unsent_credit = stream.unsent_credit, 0
        return self.send(WindowUpdate(stream_id, increment))
