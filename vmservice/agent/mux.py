# -*- test-case-name: tests.agent.test_mux -*-
"""
The host's end of the agent channel: a thin Twisted protocol around
:mod:`vmservice.wire`, with each stream exposed as a transport.

:class:`AgentProtocol` feeds the codec and dispatches its events, as
``twisted.web._http2`` does for h2.  Each stream is an :class:`AgentStream`: an
``ITransport`` for an ordinary ``IProtocol`` (like magic-wormhole's ``SubChannel``), an
``IPushProducer`` whose :meth:`~AgentStream.pauseProducing` withholds credit from the
guest, and an ``IConsumer`` whose registered producer is paused while the guest's
credit or the socket's buffer is exhausted.  So back-pressure runs end to end: a slow
HTTP client pauses the stream, the guest runs out of credit, the guest process
blocks.
"""

from __future__ import annotations

import collections
import struct
from typing import Any, Callable, Deque, Mapping, Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionAborted, ConnectionDone, ConnectionLost
from twisted.internet.interfaces import (
    IAddress,
    IConsumer,
    IHalfCloseableProtocol,
    IProtocol,
    IPushProducer,
    IReactorTime,
    ITransport,
)
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from vmservice import __version__
from vmservice.wire import (
    NEED_DATA,
    Connection,
    Data,
    HalfClose,
    Hello,
    LocalProtocolError,
    Open,
    Ping,
    Pong,
    RemoteProtocolError,
    Reset,
    ResetCode,
    Role,
    WindowUpdate,
)
from vmservice.wire.events import Event

#: A stream pauses its registered streaming producer when this many bytes wait for
#: credit, and resumes it once they are gone.
STREAM_WRITE_HIGH_WATER = 64 * 1024
#: Most bytes one DATA event carries (the codec splits them into frames).
_CHUNK = 256 * 1024


class ChannelNotReady(Exception):
    """
    The agent has not (or no longer) acknowledged this connection's session, so no
    stream can be opened and no ping sent.
    """


class StreamReset(Exception):
    """
    The stream was reset: by the guest, or because the guest agent restarted
    (``code`` :attr:`ResetCode.PEER_RESTARTED`).  Delivered to the stream's protocol
    in ``connectionLost``.

    :ivar code: the reset code, usually a :class:`ResetCode`.
    :ivar reason: the guest's explanation.
    """

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        try:
            name = ResetCode(self.code).name
        except ValueError:
            name = str(self.code)
        return f"stream reset ({name}): {self.reason}"


@implementer(IAddress)
@frozen
class AgentStreamAddress:
    """
    The address of either end of a stream, for ``getPeer``/``getHost``.

    :ivar stream_id: the stream's id on the channel.
    """

    stream_id: int


@implementer(ITransport, IPushProducer, IConsumer)
class AgentStream:
    """
    One stream of the agent channel, as the transport of an ``IProtocol``.

    - :meth:`write` sends DATA as the guest grants credit, buffering the rest.
    - :meth:`loseConnection` half-closes (after buffered data); the protocol gets
      ``connectionLost(ConnectionDone)`` once the guest has half-closed too.  A
      protocol providing ``IHalfCloseableProtocol`` hears of the guest's
      half-close through ``readConnectionLost`` first.
    - :meth:`abortConnection` resets the stream (``connectionLost(ConnectionAborted)``);
      a reset by the guest arrives as ``connectionLost(StreamReset)``, and losing
      the channel as ``connectionLost(ConnectionLost)``.
    - :meth:`pauseProducing` stops delivery *and* credit: the guest may send at most
      one window more.

    :ivar stream_id: the stream's id.
    :ivar header: the OPEN header.
    :ivar disconnecting: whether :meth:`loseConnection` was called.
    """

    def __init__(
        self,
        mux: "AgentProtocol",
        stream_id: int,
        header: Mapping[str, Any],
        protocol: IProtocol,
    ) -> None:
        self._mux = mux
        self.stream_id = stream_id
        self.header = header
        self._protocol = protocol
        self._out = bytearray()
        self.disconnecting = False
        self._write_closed = False
        self._eof_received = False
        self._eof_delivered = False
        self._ended = False
        self._paused = False
        self._inbox: Deque[bytes] = collections.deque()
        self._producer: Optional[Any] = None
        self._streaming = False
        self._producer_paused = False
        self._pull_scheduled = False

    # -- ITransport --------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """
        Send ``data`` on the stream.  Ignored after :meth:`loseConnection` or once
        the stream ended, as TCP transports do.
        """
        if self._ended or self.disconnecting or not data:
            return
        self._out += data
        self._flush()

    def writeSequence(self, data: Any) -> None:
        """
        Send each of ``data``.
        """
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """
        Half-close: send HALF_CLOSE once the buffered data is out.
        """
        if self._ended or self.disconnecting:
            return
        self.disconnecting = True
        self._flush()

    def abortConnection(self, code: int = ResetCode.CANCEL, reason: str = "") -> None:
        """
        Reset the stream now, dropping buffered data.

        :param code: the reset code the guest sees.
        :param reason: the explanation the guest sees.
        """
        if self._ended:
            return
        self._mux._send_reset(self.stream_id, code, reason)
        self._end(Failure(ConnectionAborted(reason or "stream aborted")))

    abort = abortConnection

    def getPeer(self) -> AgentStreamAddress:
        """
        The guest's end of the stream.
        """
        return AgentStreamAddress(self.stream_id)

    def getHost(self) -> AgentStreamAddress:
        """
        Our end of the stream.
        """
        return AgentStreamAddress(self.stream_id)

    # -- IPushProducer: our consumer controls incoming data and credit ------------------

    def pauseProducing(self) -> None:
        """
        Stop delivering data and stop granting the guest credit.
        """
        self._paused = True

    def resumeProducing(self) -> None:
        """
        Deliver what was held back, granting credit for it, and carry on.
        """
        if not self._paused:
            return
        self._paused = False
        while self._inbox and not self._paused and not self._ended:
            self._deliver(self._inbox.popleft())
        if not self._inbox and self._eof_received and not self._paused:
            self._deliver_eof()

    def stopProducing(self) -> None:
        """
        Our consumer wants nothing more: reset the stream.
        """
        self.abortConnection()

    # -- IConsumer: a producer feeding write() --------------------------------------------

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        """
        Pause ``producer`` while the guest's credit or the socket is exhausted.
        """
        if self._producer is not None:
            raise RuntimeError("a producer is already registered")
        self._producer, self._streaming = producer, streaming
        self._producer_paused = False
        if self._ended:
            producer.stopProducing()
            return
        self._regulate()

    def unregisterProducer(self) -> None:
        """
        Forget the producer.
        """
        self._producer = None

    # -- driven by AgentProtocol -------------------------------------------------------

    @property
    def paused(self) -> bool:
        """
        Whether our consumer paused incoming data.
        """
        return self._paused

    @property
    def buffered(self) -> int:
        """
        Bytes written but not yet sent for want of credit.
        """
        return len(self._out)

    def _flush(self) -> None:
        mux = self._mux
        while self._out and not self._ended and not mux.transport_paused:
            window = mux.send_window(self.stream_id)
            if window <= 0:
                break
            size = min(window, len(self._out), _CHUNK)
            chunk = bytes(self._out[:size])
            del self._out[:size]
            mux._send(Data(self.stream_id, chunk))
        if self._ended:
            return
        if not self._out and self.disconnecting and not self._write_closed:
            self._write_closed = True
            mux._send(HalfClose(self.stream_id))
            self._maybe_finish()
        self._regulate()

    def _regulate(self) -> None:
        producer = self._producer
        if producer is None or self._ended:
            return
        stuck = self._mux.transport_paused
        if not self._streaming:
            if not self._out and not stuck and not self._pull_scheduled:
                self._pull_scheduled = True
                self._mux._clock.callLater(0, self._pull)
            return
        if not self._producer_paused and (stuck or len(self._out) >= STREAM_WRITE_HIGH_WATER):
            self._producer_paused = True
            producer.pauseProducing()
        elif self._producer_paused and not stuck and not self._out:
            self._producer_paused = False
            producer.resumeProducing()

    def _pull(self) -> None:
        self._pull_scheduled = False
        producer = self._producer
        if producer is not None and not self._streaming and not self._ended and not self._out:
            producer.resumeProducing()

    def _data_received(self, data: bytes) -> None:
        if self._ended:
            return
        if self._paused or self._inbox:
            self._inbox.append(data)
        else:
            self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        self._protocol.dataReceived(data)
        self._mux._acknowledge(self.stream_id, len(data))

    def _half_closed(self) -> None:
        self._eof_received = True
        if not self._paused and not self._inbox:
            self._deliver_eof()

    def _deliver_eof(self) -> None:
        if self._eof_delivered or self._ended:
            return
        self._eof_delivered = True
        half_closeable = IHalfCloseableProtocol(self._protocol, None)
        if half_closeable is not None:
            half_closeable.readConnectionLost()
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._write_closed and self._eof_delivered:
            self._end(Failure(ConnectionDone("stream closed")))

    def _end(self, reason: Failure) -> None:
        if self._ended:
            return
        self._ended = True
        self._out.clear()
        self._inbox.clear()
        producer, self._producer = self._producer, None
        self._mux._forget(self.stream_id)
        if producer is not None:
            producer.stopProducing()
        self._protocol.connectionLost(reason)


@implementer(IPushProducer)
class AgentProtocol(Protocol):
    """
    One connection to a guest agent: HELLO exchange, streams, pings.

    :param clock: for the HELLO timeout, ping round trips and pull producers.
    :param on_established: called with this protocol each time the agent
        acknowledges our session (once per connection, again after an agent
        restart).
    :param on_stream: called with the header of a stream the guest opens; returns
        the protocol to serve it, or ``None`` to refuse it.  Default: refuse all.
    :param hello_timeout: seconds to wait for the agent's acknowledgement before
        dropping the connection so that a fresh one is tried.
    :param agent_version: what we announce in our HELLO.
    :param log: where to log.
    """

    def __init__(
        self,
        clock: IReactorTime,
        *,
        on_established: Callable[["AgentProtocol"], None] = lambda p: None,
        on_stream: Optional[Callable[[Mapping[str, Any]], Optional[IProtocol]]] = None,
        hello_timeout: float = 10.0,
        agent_version: str = __version__,
        log: Optional[Logger] = None,
    ) -> None:
        self._clock = clock
        self._on_established = on_established
        self._on_stream = on_stream
        self._hello_timeout = hello_timeout
        self._agent_version = agent_version
        self._log = log if log is not None else Logger()
        self._conn = Connection(Role.HOST)
        self._streams: dict[int, AgentStream] = {}
        self._pings: dict[bytes, tuple[Deferred[float], float]] = {}
        self._ping_counter = 0
        self._hello_timer: Optional[Any] = None
        self._connected = False
        self._peer_nonce: Optional[bytes] = None
        self._ready = False
        self.transport_paused = False

    # -- state ------------------------------------------------------------------------

    @property
    def established(self) -> bool:
        """
        Whether the agent acknowledged our session and streams may be opened.
        """
        return self._connected and self._conn.established

    @property
    def agent_version(self) -> Optional[str]:
        """
        The version the agent announced, once it did.
        """
        hello = self._conn.peer_hello
        return hello.agent_version if hello is not None else None

    def send_window(self, stream_id: int) -> int:
        """
        The guest's credit for our DATA on ``stream_id``.
        """
        return self._conn.send_window(stream_id)

    # -- Protocol ---------------------------------------------------------------------

    def connectionMade(self) -> None:
        self._connected = True
        self.transport.registerProducer(self, True)
        self._send(self._conn.hello(self._agent_version))
        self._start_hello_timer()

    def dataReceived(self, data: bytes) -> None:
        self._conn.receive_data(data)
        while self._connected:
            try:
                event = self._conn.next_event()
            except RemoteProtocolError as e:
                self._log.error("agent protocol error, dropping the connection: {error}", error=str(e))
                self.transport.abortConnection()
                return
            if event is NEED_DATA:
                return
            self._dispatch(event)

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._connected = False
        self._cancel_hello_timer()
        lost = Failure(ConnectionLost(f"agent connection lost: {reason.getErrorMessage()}"))
        for stream in list(self._streams.values()):
            stream._end(lost)
        self._fail_pings(lost)

    # -- IPushProducer: the socket's buffer ----------------------------------------------

    def pauseProducing(self) -> None:
        """
        The socket's buffer is full: streams keep their data and pause their producers.
        """
        self.transport_paused = True
        for stream in list(self._streams.values()):
            stream._regulate()

    def resumeProducing(self) -> None:
        """
        The socket drained: streams send again.

        If the connection is being closed, unregister instead: a transport closes
        only once no paused producer is registered with it.
        """
        self.transport_paused = False
        if self.transport.disconnecting:
            self.transport.unregisterProducer()
            return
        for stream in list(self._streams.values()):
            stream._flush()

    def stopProducing(self) -> None:
        """
        The socket is going away; ``connectionLost`` follows.
        """

    # -- operations ---------------------------------------------------------------------

    def open_stream(self, header: Mapping[str, Any], protocol: IProtocol) -> AgentStream:
        """
        Open a stream for ``header`` and connect ``protocol`` to it.

        :raises ChannelNotReady: if the agent has not acknowledged this connection.
        :raises vmservice.wire.LocalProtocolError: if ``header`` is not a JSON object.
        """
        if not self.established:
            raise ChannelNotReady("agent not connected")
        stream_id = self._conn.next_stream_id()
        self._send(Open(stream_id, header))
        stream = AgentStream(self, stream_id, header, protocol)
        self._streams[stream_id] = stream
        protocol.makeConnection(stream)
        return stream

    def ping(self) -> Deferred[float]:
        """
        Send a PING; the Deferred fires with the round trip in seconds, or fails
        with ``ConnectionLost`` if the connection (or the agent's session) ends first.

        :raises ChannelNotReady: if the agent has not acknowledged this connection.
        """
        if not self.established:
            raise ChannelNotReady("agent not connected")
        self._ping_counter += 1
        opaque = struct.pack(">Q", self._ping_counter)

        def cancel(d: Deferred[float]) -> None:
            self._pings.pop(opaque, None)

        d: Deferred[float] = Deferred(cancel)
        self._pings[opaque] = (d, self._clock.seconds())
        self._send(Ping(opaque))
        return d

    # -- internals -------------------------------------------------------------------------

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, Hello):
            self._received_hello(event)
        elif isinstance(event, Ping):
            self._send(Pong(event.opaque))
        elif isinstance(event, Pong):
            waiting = self._pings.pop(event.opaque, None)
            if waiting is not None:
                d, sent = waiting
                d.callback(self._clock.seconds() - sent)
        elif isinstance(event, Open):
            self._received_open(event)
        else:
            stream = self._streams.get(event.stream_id)
            if stream is None:
                return
            if isinstance(event, Data):
                stream._data_received(event.data)
            elif isinstance(event, WindowUpdate):
                stream._flush()
            elif isinstance(event, HalfClose):
                stream._half_closed()
            elif isinstance(event, Reset):
                stream._end(Failure(StreamReset(event.code, event.reason)))

    def _received_hello(self, hello: Hello) -> None:
        if self._peer_nonce is not None and hello.nonce != self._peer_nonce:
            self._log.warn("guest agent restarted (version {version})", version=hello.agent_version)
            self._fail_pings(Failure(ConnectionLost("agent restarted")))
        self._peer_nonce = hello.nonce
        if self._conn.hello_wanted:
            self._send(self._conn.hello(self._agent_version))
        if self._conn.established and not self._ready:
            self._ready = True
            self._cancel_hello_timer()
            self._log.info("agent ready (version {version})", version=hello.agent_version)
            self._on_established(self)
        elif not self._conn.established:
            self._ready = False
            if self._hello_timer is None:
                self._start_hello_timer()

    def _received_open(self, event: Open) -> None:
        protocol = self._on_stream(event.header) if self._on_stream is not None else None
        if protocol is None:
            self._send(Reset(event.stream_id, ResetCode.REFUSED, "the host serves no streams"))
            return
        stream = AgentStream(self, event.stream_id, event.header, protocol)
        self._streams[event.stream_id] = stream
        protocol.makeConnection(stream)

    def _start_hello_timer(self) -> None:
        self._hello_timer = self._clock.callLater(self._hello_timeout, self._hello_timed_out)

    def _cancel_hello_timer(self) -> None:
        timer, self._hello_timer = self._hello_timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _hello_timed_out(self) -> None:
        self._hello_timer = None
        self._log.info(
            "agent did not answer within {timeout} s; reconnecting", timeout=self._hello_timeout
        )
        self.transport.abortConnection()

    def _fail_pings(self, reason: Failure) -> None:
        pings, self._pings = self._pings, {}
        for d, _ in pings.values():
            d.errback(reason)

    def _send(self, event: Event) -> None:
        if self._connected:
            self.transport.write(self._conn.send(event))

    def _send_reset(self, stream_id: int, code: int, reason: str) -> None:
        if self._connected and self._conn.is_open(stream_id):
            self._send(Reset(stream_id, code, reason))

    def _acknowledge(self, stream_id: int, count: int) -> None:
        if not self._connected:
            return
        try:
            frame = self._conn.acknowledge_received_data(stream_id, count)
        except LocalProtocolError:
            return
        if frame:
            self.transport.write(frame)

    def _forget(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)
