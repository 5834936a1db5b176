# -*- test-case-name: tests.agent.test_client -*-
"""
The host's client of one guest agent: connects (and reconnects) in the background and
offers the agent's operations as coroutines.

Nothing here waits for a connection on its own: an operation on a client that is not
connected raises :class:`AgentUnavailable` at once, and callers that want to wait use
:meth:`AgentClient.when_ready` with their own timeout (``wait=agent`` in the API).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional, cast

from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IProtocol, IReactorTime, IReactorUNIX, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ..buffer_budget import FREE_REPLY, BufferBudget, Reservation
from ..errors import AgentError, BufferBudgetExhausted, GuestErrorKind
from ..guestport.guest import IGuestConnection
from ..guestport.identity import GuestIdentity, IAdoption
from ..observer import OneShotObserver
from ..wire import ResetCode
from ..wire.adoption import PREPARE
from .bulk import BULK_SOCKET, BulkChannel
from .tunnelports import TunnelPorts
from .adoption import MAX_REPLY as MAX_ADOPT_REPLY, adoption_request, check_prepared, parse_answer
from .errors import AgentRequestFailed, AgentUnavailable, stream_error
from .guard import ReconnectPenalty
from .guest import AgentGuest
from .protocol import AgentProtocol, ChannelNotReady
from .stream import AgentStream
from .transports import MovableSocketEndpoint, reconnecting_channel, retry_policy as default_retry_policy


class ClientReactor(IReactorTime, IReactorUNIX):
    """What an :class:`AgentClient` needs of its reactor: time and UNIX sockets."""


class _Collect(Protocol):
    """
    Collects a stream's whole reply, up to a limit, holding what it collected
    in ``reservation`` (of the daemon's buffer budget) until the reply is
    complete or failed.
    """

    def __init__(self, limit: int, reservation: Optional[Reservation]) -> None:
        self._limit = limit
        self._reservation = reservation
        self._refusal: Optional[BufferBudgetExhausted] = None
        self._chunks: list[bytes] = []
        self._size = 0
        self.done: Deferred[bytes] = Deferred(lambda d: self._cancel())

    def _cancel(self) -> None:
        if self.transport is not None:
            cast(AgentStream, self.transport).abortConnection()

    def dataReceived(self, data: bytes) -> None:
        if self._size > self._limit or self._refusal is not None:
            return
        self._size += len(data)
        if self._size > self._limit:
            self._drop("reply too large")
            return
        if self._reservation is not None:
            try:
                self._reservation.grow(len(data))
            except BufferBudgetExhausted as refusal:
                self._refusal = refusal
                self._drop("no room for the reply in the host's buffer budget")
                return
        self._chunks.append(data)

    def _drop(self, why: str) -> None:
        self._chunks = []
        if self._reservation is not None:
            self._reservation.release()
        cast(AgentStream, self.transport).abortConnection(ResetCode.CANCEL, why)

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        chunks, self._chunks = self._chunks, []
        if self._reservation is not None:
            self._reservation.release()
        if self.done.called:
            return
        if self._refusal is not None:
            self.done.errback(AgentRequestFailed(self._refusal.message, kind=GuestErrorKind.OVER_BUDGET))
        elif reason.check(ConnectionDone):
            self.done.callback(b"".join(chunks))
        elif self._size > self._limit:
            self.done.errback(AgentRequestFailed(f"reply larger than {self._limit} bytes", kind=GuestErrorKind.TOO_LARGE))
        else:
            self.done.errback(reason)


@implementer(IGuestConnection, IAdoption)
class AgentClient(AgentGuest):
    """
    The host's client of one guest agent: its connection, and the guest's
    operations over it (:class:`~.guest.AgentGuest`).

    :param reactor: an ``IReactorUNIX`` and ``IReactorTime`` provider.
    :param socket_path: QEMU's server socket for the agent's virtio-serial port.
    :param log: where to log; a new ``Logger`` by default.
    :param endpoint: connect here instead of ``socket_path`` (AF_VSOCK: :mod:`.vsock`, :mod:`.transport_choice`).
    :param retry_policy: delay before each reconnection attempt (after a fault of
        the guest's, at least the penalty of :class:`~.guard.ReconnectPenalty`).
    :param hello_timeout: seconds a connection may wait for the agent's HELLO before
        it is dropped and tried afresh.
    :param budget: what one-shot replies whose cap is larger than
        :data:`~vmservice.buffer_budget.FREE_REPLY` hold while they are
        collected; ``None``: no bound.
    :param on_stop: called when the client stops (the endpoint's own timers end).
    """

    def __init__(
        self,
        reactor: ClientReactor,
        socket_path: str,
        *,
        log: Optional[Logger] = None,
        endpoint: Optional[IStreamClientEndpoint] = None,
        retry_policy: Optional[Callable[[int], float]] = None,
        hello_timeout: float = 10.0,
        budget: Optional[BufferBudget] = None,
        on_stop: Optional[Callable[[], None]] = None,
    ) -> None:
        self._reactor = self.clock = reactor
        self._on_stop = on_stop or (lambda: None)
        self._budget = budget
        self.socket_path = socket_path
        # QEMU serves the bulk port beside the agent's (vmservice/nodes/paths.py, template_build.py).
        self._bulk = self.bulk_channel = BulkChannel(reactor, os.path.join(os.path.dirname(socket_path), BULK_SOCKET))
        self._tunnels = self.tunnel_ports = TunnelPorts(reactor, os.path.dirname(socket_path))
        self._log = log if log is not None else Logger()
        self._protocol: Optional[AgentProtocol] = None
        self._ready: OneShotObserver[None] = OneShotObserver()
        self._ready_callbacks: list[Callable[[], None]] = []
        self._lost_callbacks: list[Callable[[], None]] = []
        factory = Factory.forProtocol(lambda: self._build_protocol(hello_timeout))
        self._penalty = ReconnectPenalty(reactor)
        self._socket = MovableSocketEndpoint(reactor, socket_path)
        self._service = reconnecting_channel(
            reactor,
            endpoint if endpoint is not None else self._socket,
            factory,
            policy=self._penalty.policy(retry_policy or default_retry_policy()),
        )

    def _build_protocol(self, hello_timeout: float) -> AgentProtocol:
        protocol = AgentProtocol(
            self._reactor,
            on_established=self._established,
            on_lost=self._lost,
            on_fault=self._faulted,
            hello_timeout=hello_timeout,
            log=self._log,
        )
        self._protocol = protocol
        return protocol

    def _established(self, protocol: AgentProtocol) -> None:
        if protocol is self._protocol:
            self._ready.fire(None)
            for callback in list(self._ready_callbacks):
                try:
                    callback()
                except Exception:
                    self._log.failure("a callback of the agent's readiness failed")

    def _faulted(self, protocol: AgentProtocol) -> None:
        if protocol is self._protocol:
            self._log.warn("the next connection to the agent waits {delay:g} s", delay=self._penalty.fault())

    def _lost(self, protocol: AgentProtocol) -> None:
        if protocol is self._protocol:
            for callback in list(self._lost_callbacks):
                try:
                    callback()
                except Exception:
                    self._log.failure("a callback of the agent's loss failed")

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """
        Call ``callback`` every time an agent that answered is lost (its
        connection dropped, or it restarted behind it); returns a function that
        stops it.
        """
        self._lost_callbacks.append(callback)
        return lambda: self._lost_callbacks.remove(callback) if callback in self._lost_callbacks else None

    def on_ready(self, callback: Callable[[], None]) -> Callable[[], None]:
        """
        Call ``callback`` every time the agent answers on a new connection (or
        a restarted agent behind the same one); returns a function that stops it.
        """
        self._ready_callbacks.append(callback)
        return lambda: self._ready_callbacks.remove(callback) if callback in self._ready_callbacks else None

    def moved_to(self, socket_path: str) -> None:
        """
        QEMU's socket (and the bulk and tunnel ports' beside it) was renamed
        to ``socket_path``: the connection stays, later ones go there.
        """
        self.socket_path = self._socket.socket_path = socket_path
        self._bulk.socket_path = os.path.join(os.path.dirname(socket_path), BULK_SOCKET)
        self._tunnels.moved_to(os.path.dirname(socket_path))

    @property
    def connected(self) -> bool:
        """
        Whether the agent is reachable now (its HELLO acknowledged this connection).
        """
        return self._protocol is not None and self._protocol.established

    @property
    def agent_version(self) -> Optional[str]:
        """
        The version the agent announced on the current connection.
        """
        return self._protocol.agent_version if self.connected and self._protocol else None

    @property
    def guest_nonce(self) -> Optional[bytes]:
        """
        The nonce of the agent's session on the current connection, while
        connected: a new one after every agent restart and every :meth:`adopt`.
        """
        return self._protocol.peer_nonce if self.connected and self._protocol else None

    async def prepare_adoption(self) -> None:
        """
        Make the guest load what :meth:`adopt` needs, without adopting anything:
        a template does it before it is frozen, so that its clones' first
        request is not slowed by the import (about half a second under TCG).

        :raises AgentRequestFailed: ``UNSUPPORTED`` (an older agent), ``MALFORMED``.
        :raises AgentUnavailable: not connected.
        """
        check_prepared(await self.request(PREPARE, MAX_ADOPT_REPLY))

    async def adopt(self, identity: GuestIdentity) -> None:
        """
        Make the guest adopt ``identity`` (see
        :meth:`vmservice.guestport.identity.IAdoption.adopt`), and come back once the
        agent acknowledged this connection in the new session the guest starts
        afterwards.  The switch is quiet: neither :meth:`on_lost` nor
        :meth:`on_ready` callbacks run for it.

        :raises ValueError: ``identity`` is not valid.
        :raises AgentRequestFailed: kind ``ADOPTION_FAILED`` (a step failed in
            the guest), ``UNSUPPORTED`` (an older agent), ``MALFORMED``.
        :raises AgentUnavailable: not connected, or lost before the new session.
        """
        header, body = adoption_request(identity)
        protocol = self._ready_protocol()
        try:
            switched = protocol.expect_new_session()
        except ChannelNotReady as e:
            raise AgentUnavailable(str(e)) from None
        try:
            parse_answer(await self.request(header, MAX_ADOPT_REPLY, body))
        except BaseException:
            switched.cancel()
            switched.addErrback(lambda failure: None)
            raise
        try:
            await switched
        except Exception as error:
            raise stream_error(Failure(error), "the adoption") from None

    def start(self) -> None:
        """
        Begin connecting, and reconnecting whenever the connection drops.
        """
        if not self._service.running:
            self._service.startService()

    def stop(self) -> Deferred[None]:
        """
        Stop reconnecting and drop the connection; pending :meth:`when_ready`
        Deferreds fail with :class:`AgentUnavailable`.

        :return: fires when the connection is closed.
        """
        stopped, self._ready = self._ready, OneShotObserver()
        stopped.error(AgentUnavailable("agent client stopped"))
        self._on_stop()
        if not self._service.running:
            return succeed(None)
        return self._service.stopService()

    def interrupt(self, error: AgentError) -> None:
        """
        Cut the current connection off (if any): every operation under way
        fails with ``error``; the client connects again after its usual
        short delay, as after any loss.  See :meth:`IGuestConnection.interrupt`.
        """
        protocol = self._protocol
        if protocol is not None:
            protocol.cut_off(error)

    def reconnect(self) -> None:
        """
        Drop the current connection (if any); the client connects again after its
        usual short delay and a new session starts, e.g. after the VM was restored
        from a snapshot.
        """
        protocol = self._protocol
        if protocol is not None and protocol.transport is not None:
            protocol.transport.loseConnection()

    def when_ready(self) -> Deferred[None]:
        """
        Fire (with ``None``) as soon as the agent's HELLO has arrived on a
        connection: at once if it already has.  Cancel it to stop waiting.

        After the agent started over behind an open connection (the VM rebooted),
        the client is not :attr:`connected` until the new agent acknowledged it;
        this fires then, on the same connection.
        """
        if self.connected:
            return succeed(None)
        if self._ready.fired:
            # Ready once, on a connection that is gone (or an agent that
            # started over): wait for the next time.
            self._ready = OneShotObserver()
        return self._ready.when_fired()

    def _ready_protocol(self) -> AgentProtocol:
        protocol = self._protocol
        if protocol is None or not protocol.established:
            raise AgentUnavailable(f"agent not connected ({self.socket_path})")
        return protocol

    def open_stream(self, header: Mapping[str, Any], protocol: IProtocol) -> AgentStream:
        """
        Open a stream for ``header`` (e.g. ``{"op": "echo"}``) served by
        ``protocol``, which gets the :class:`~vmservice.agent.stream.AgentStream` as its
        transport.

        :raises AgentUnavailable: if not connected.
        """
        try:
            return self._ready_protocol().open_stream(header, protocol)
        except ChannelNotReady as e:
            raise AgentUnavailable(str(e)) from None

    async def request(self, header: Mapping[str, Any], limit: int, body: bytes = b"") -> bytes:
        """
        Open a stream, send ``body`` (nothing by default), half-close, and
        return everything the agent sends until it half-closes.

        :param limit: most bytes accepted; more fails the request.  Above
            :data:`~vmservice.buffer_budget.FREE_REPLY`, the reply is held in
            the buffer budget while it is collected.
        :raises AgentUnavailable: if not connected or lost during the request.
        :raises AgentRequestFailed: if the agent resets the stream; kind
            ``OVER_BUDGET`` when the buffer budget has no room for the reply.
        """
        reservation = None
        if self._budget is not None and limit > FREE_REPLY:
            reservation = self._budget.reservation(f"the guest's reply to {header.get('op')!r}")
        collect = _Collect(limit, reservation)
        stream = self.open_stream(header, collect)
        if body:
            stream.write(body)
        stream.loseConnection()
        try:
            return await collect.done
        except Exception as error:
            raise stream_error(Failure(error), "the request") from None

    async def ping(self) -> float:
        """
        Measure a round trip to the agent, in seconds.

        :raises AgentUnavailable: if not connected, or lost before the answer.
        """
        protocol = self._ready_protocol()
        try:
            waiting = protocol.ping()
        except ChannelNotReady as e:
            raise AgentUnavailable(str(e)) from None
        try:
            return await waiting
        except Exception as error:
            raise stream_error(Failure(error), "the ping") from None


__all__ = ["AgentClient", "ClientReactor"]
