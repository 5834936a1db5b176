# -*- test-case-name: tests.agent.test_protocol,tests.agent.test_restarts -*-
"""
The host's end of the agent channel: a thin Twisted protocol around
:mod:`vmservice.wire`, with each stream exposed as a transport.

:class:`AgentProtocol` feeds the codec and dispatches its events, as
``twisted.web._http2`` does for h2: the HELLO exchange and its timeout, pings, and
the frames of each stream, which it passes to that stream's
:class:`~vmservice.agent.stream.AgentStream`.  It is the socket's
``IPushProducer``; the streams' DATA goes out in fair turns through its
:class:`~vmservice.agent.outbound.Outbound`, which it pauses and resumes with the
socket.  The link's state is :mod:`.link`'s machine; the HELLO exchange's, the codec's.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Protocol as TypingProtocol, cast

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IDelayedCall, IProducer, IProtocol, IPushProducer, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from vmservice import __version__
from vmservice.agent.guard import ChannelGuard, GuestFault
from vmservice.agent.link import LINK_MACHINE, LinkCore
from vmservice.agent.outbound import Outbound
from vmservice.agent.pings import Pings
from vmservice.agent.stream import AgentStream, StreamChannel
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


class ChannelNotReady(Exception):
    """
    The agent has not (or no longer) acknowledged this connection's session, so no
    stream can be opened and no ping sent.
    """


class _Socket(TypingProtocol):
    """What we use of the transport under the protocol (a UNIX socket's)."""

    disconnecting: bool

    def write(self, data: bytes) -> None: ...

    def registerProducer(self, producer: IProducer, streaming: bool) -> None: ...

    def unregisterProducer(self) -> None: ...

    def abortConnection(self) -> None: ...


@implementer(IPushProducer)
class AgentProtocol(Protocol):
    """
    One connection to a guest agent: HELLO exchange, streams, pings.

    :param clock: for the HELLO timeout, ping round trips and pull producers.
    :param on_established: called with this protocol each time the agent
        acknowledges our session (once per connection, again after an agent
        restart).
    :param on_lost: called with this protocol each time an established
        session ends (the connection is lost, or the agent restarted).
    :param on_stream: called with the header of a stream the guest opens; returns
        the protocol to serve it, or ``None`` to refuse it.  Default: refuse all.
    :param on_fault: called with this protocol when it drops the connection because
        the guest broke the protocol or a rule of :mod:`.guard`.
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
        on_lost: Callable[["AgentProtocol"], None] = lambda p: None,
        on_stream: Optional[Callable[[Mapping[str, Any]], Optional[IProtocol]]] = None,
        on_fault: Callable[["AgentProtocol"], None] = lambda p: None,
        hello_timeout: float = 10.0,
        agent_version: str = __version__,
        log: Optional[Logger] = None,
    ) -> None:
        self._clock = clock
        self._on_established = on_established
        self._on_lost = on_lost
        self._on_stream = on_stream
        self._on_fault = on_fault
        self._guard = ChannelGuard(clock)
        self._hello_timeout = hello_timeout
        self._agent_version = agent_version
        self._log = log if log is not None else Logger()
        self._conn = Connection(Role.HOST)
        self._outbound = Outbound(clock, self._send, self._conn.send_window)
        self._channel = StreamChannel(self._outbound, self._acknowledge, self._send_reset, self._forget)
        self._streams: dict[int, AgentStream] = {}
        self._pings = Pings(clock)
        self._hello_timer: Optional[IDelayedCall] = None
        self._link_core = LinkCore(self._ready, lambda: self._on_lost(self), self._await_hello)
        self._link = LINK_MACHINE(self._link_core)
        self._peer_nonce: Optional[bytes] = None
        # A new guest session asked for (adopt): the peer nonce it replaces, and
        # what to fire once the agent acknowledged us in the new one.
        self._switch: Optional[tuple[bytes, Deferred[None]]] = None
        self._cut_off: Optional[Exception] = None  # what cut_off() fails what is under way with

    # -- state ------------------------------------------------------------------------

    @property
    def established(self) -> bool:
        """Whether the agent acknowledged our session and streams may be opened."""
        return self._link_core.socket is not None and self._conn.established

    @property
    def agent_version(self) -> Optional[str]:
        """The version the agent announced, once it did."""
        hello = self._conn.peer_hello
        return hello.agent_version if hello is not None else None

    @property
    def peer_nonce(self) -> Optional[bytes]:
        """The nonce of the agent's current session, once its HELLO arrived."""
        return self._peer_nonce

    def expect_new_session(self) -> Deferred[None]:
        """
        Expect the agent to start a new session on this connection, because we
        asked it to (``adopt``): when its HELLO with a new nonce comes, the switch
        is not an agent restart (no warning, no ``on_lost``/``on_established``),
        and the Deferred fires once the agent acknowledged us in the new session,
        or fails with ``ConnectionLost`` if the connection ends first.  Cancel it
        when the request that asked for the switch failed.

        :raises ChannelNotReady: if the agent has not acknowledged this connection.
        """
        if not self.established or self._peer_nonce is None:
            raise ChannelNotReady("agent not connected")
        if self._switch is not None:
            raise ChannelNotReady("a new agent session is already expected")

        def cancel(d: Deferred[None]) -> None:
            if self._switch is not None and self._switch[1] is d:
                self._switch = None

        switched: Deferred[None] = Deferred(cancel)
        self._switch = (self._peer_nonce, switched)
        return switched

    @property
    def transport_paused(self) -> bool:
        """
        Whether the socket's buffer is full (the socket paused us).
        """
        return self._outbound.paused

    def send_window(self, stream_id: int) -> int:
        """
        The guest's credit for our DATA on ``stream_id``.
        """
        return self._conn.send_window(stream_id)

    @property
    def _socket(self) -> _Socket:
        return cast(_Socket, self.transport)

    # -- Protocol ---------------------------------------------------------------------

    def connectionMade(self) -> None:
        self._link.connected(self._socket)
        self._socket.registerProducer(self, True)
        self._send(self._conn.hello(self._agent_version))
        self._await_hello()

    def dataReceived(self, data: bytes) -> None:
        self._conn.receive_data(data)
        try:
            while self._link_core.socket is not None and (event := self._conn.next_event()) is not NEED_DATA:
                self._dispatch(event)
        except (RemoteProtocolError, GuestFault) as e:
            self._log.error("agent protocol error, dropping the connection: {error}", error=str(e))
            self._on_fault(self)
            self._socket.abortConnection()

    def cut_off(self, error: Exception) -> None:
        """Drop the connection now: every stream, ping and switch under way fails with ``error``, not as a loss."""
        if self._link_core.socket is not None:
            self._cut_off = error
            self._socket.abortConnection()

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._link.lost()
        self._cancel_hello_timer()
        lost = Failure(self._cut_off or ConnectionLost(f"agent connection lost: {reason.getErrorMessage()}"))
        switch, self._switch = self._switch, None
        if switch is not None:
            switch[1].errback(lost)
        for stream in list(self._streams.values()):
            stream.channel_lost(lost)
        self._pings.fail(lost)

    # -- IPushProducer: the socket's buffer ----------------------------------------------

    def pauseProducing(self) -> None:
        """
        The socket's buffer is full: streams keep their data and pause their producers.
        """
        self._outbound.pauseProducing()

    def resumeProducing(self) -> None:
        """
        The socket drained: streams take turns sending again.

        If the connection is being closed, unregister instead: a transport closes
        only once no paused producer is registered with it.  The streams' data
        stays where it is; the connection is going away.
        """
        if self._socket.disconnecting:
            self._socket.unregisterProducer()
            return
        self._guard.drained()
        self._outbound.resumeProducing()

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
        return self._add_stream(stream_id, header, protocol)

    def ping(self) -> Deferred[float]:
        """
        Send a PING; the Deferred fires with the round trip in seconds, or fails
        with ``ConnectionLost`` if the connection (or the agent's session) ends first.

        :raises ChannelNotReady: if the agent has not acknowledged this connection.
        """
        if not self.established:
            raise ChannelNotReady("agent not connected")
        opaque, d = self._pings.sent()
        self._send(Ping(opaque))
        return d

    # -- events -------------------------------------------------------------------------

    def _dispatch(self, event: Event) -> None:
        match event:
            case Hello():
                self._received_hello(event)
            case Ping():
                self._answer(Pong(event.opaque))
            case Pong():
                self._pings.answered(event.opaque)
            case Open():
                self._received_open(event)
            case _:
                self._received_stream_event(event)

    def _received_stream_event(self, event: Data | WindowUpdate | HalfClose | Reset) -> None:
        stream = self._streams.get(event.stream_id)
        if stream is None:
            return
        match event:
            case Data():
                stream.received_data(event.data)
            case WindowUpdate():
                stream.received_credit()
            case HalfClose():
                stream.received_half_close()
            case Reset():
                stream.received_reset(event.code, event.reason)

    def _received_hello(self, hello: Hello) -> None:
        switching = self._switch is not None and hello.nonce != self._switch[0]
        if self._peer_nonce is not None and hello.nonce != self._peer_nonce:
            if switching:
                self._log.info("guest agent started a new session, as asked")
            else:
                self._guard.restarted()
                self._log.warn("guest agent restarted (version {version})", version=hello.agent_version)
            self._pings.fail(Failure(ConnectionLost("agent restarted")))
        self._peer_nonce = hello.nonce
        if self._conn.hello_wanted:
            self._answer(self._conn.hello(self._agent_version))
        if switching:
            # The session we asked for: the agent stays up for our owner.
            assert self._switch is not None
            if self._conn.established:
                switched, self._switch = self._switch[1], None
                self._cancel_hello_timer()
                self._log.info("agent ready in its new session")
                switched.callback(None)
            else:
                self._await_hello()
            return
        if self._conn.established:
            self._link.acknowledged()
        else:
            self._link.unacknowledged()

    def _ready(self) -> None:
        """The agent acknowledged our session: tell the owner."""
        self._cancel_hello_timer()
        self._log.info("agent ready (version {version})", version=self.agent_version)
        self._on_established(self)

    def _received_open(self, event: Open) -> None:
        protocol = self._on_stream(event.header) if self._on_stream is not None else None
        if protocol is None:
            self._answer(Reset(event.stream_id, ResetCode.REFUSED, "the host serves no streams"))
            return
        self._add_stream(event.stream_id, event.header, protocol)

    # -- internals -------------------------------------------------------------------------

    def _add_stream(self, stream_id: int, header: Mapping[str, Any], protocol: IProtocol) -> AgentStream:
        stream = AgentStream(self._channel, stream_id, header, protocol)
        self._streams[stream_id] = stream
        protocol.makeConnection(stream)
        return stream

    def _await_hello(self) -> None:
        """Drop the connection unless the agent acknowledges us in time (the timer runs once)."""
        if self._hello_timer is None:
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
        self._socket.abortConnection()

    def _send(self, event: Event) -> None:
        socket = self._link_core.socket
        if socket is not None:
            socket.write(self._conn.send(event))

    def _answer(self, event: Event) -> None:
        # What the guest's frames make us send: bounded while the guest does not read (.guard).
        self._guard.answering(self._outbound.paused)
        self._send(event)

    def _send_reset(self, stream_id: int, code: int, reason: str) -> None:
        if self._link_core.socket is not None and self._conn.is_open(stream_id):
            self._send(Reset(stream_id, code, reason))

    def _acknowledge(self, stream_id: int, count: int) -> None:
        socket = self._link_core.socket
        if socket is None:
            return
        try:
            frame = self._conn.acknowledge_received_data(stream_id, count)
        except LocalProtocolError:
            return
        if frame:
            socket.write(frame)

    def _forget(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)
