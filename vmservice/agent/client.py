# -*- test-case-name: tests.agent.test_client -*-
"""
The host's client of one guest agent: connects (and reconnects) in the background and
offers the agent's operations as coroutines.

Nothing here waits for a connection on its own: an operation on a client that is not
connected raises :class:`AgentUnavailable` at once, and callers that want to wait use
:meth:`AgentClient.when_ready` with their own timeout (``wait=agent`` in the API).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional

from attrs import frozen
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IProtocol, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from vmservice.agent.protocol import AgentProtocol, ChannelNotReady
from vmservice.agent.stream import AgentStream, StreamReset
from vmservice.agent.transports import reconnecting_channel, virtio_serial_endpoint
from vmservice.wire import ResetCode

#: Largest health reply accepted, in bytes.
MAX_HEALTH_REPLY = 64 * 1024
#: Largest clock reply accepted, in bytes.
MAX_CLOCK_REPLY = 4 * 1024
#: The ``clock`` op accepts positive times below this (signed 64-bit nanoseconds).
_CLOCK_LIMIT = 2**63


class AgentUnavailable(Exception):
    """
    The agent cannot be reached now: not connected yet, the connection or the
    agent's session was lost during the request, or the client was stopped.
    """


class AgentRequestFailed(Exception):
    """
    The agent refused or failed a request (a stream reset by the agent), or answered
    something that does not parse.

    :ivar code: the reset code, or ``None`` for a malformed answer.
    """

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code


@frozen
class AgentHealth:
    """
    The agent's answer to ``{"op": "health"}``; the API's AgentHealth.

    :ivar agent_uptime: nanoseconds since the agent started.
    :ivar agent_version: the vmservice version inside the guest image.
    :ivar system_uptime: nanoseconds since the guest kernel booted.
    :ivar userdata_ran: whether the userdata script has finished.
    """

    agent_uptime: int
    agent_version: str
    system_uptime: int
    userdata_ran: bool

    @classmethod
    def from_json(cls, body: bytes) -> "AgentHealth":
        """
        Parse the agent's reply.

        :raises AgentRequestFailed: if it is not the expected JSON object.
        """
        try:
            record = json.loads(body)
        except ValueError:
            raise AgentRequestFailed("health reply is not JSON") from None
        if not isinstance(record, dict):
            raise AgentRequestFailed("health reply is not a JSON object")
        expected = {
            "agent_uptime": int,
            "agent_version": str,
            "system_uptime": int,
            "userdata_ran": bool,
        }
        for key, kind in expected.items():
            value = record.get(key)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise AgentRequestFailed(f"health reply has no valid {key!r}")
        return cls(
            agent_uptime=record["agent_uptime"],
            agent_version=record["agent_version"],
            system_uptime=record["system_uptime"],
            userdata_ran=record["userdata_ran"],
        )


class _Collect(Protocol):
    """
    Collects a stream's whole reply, up to a limit.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        self.done: Deferred[bytes] = Deferred(lambda d: self._cancel())

    def _cancel(self) -> None:
        transport = self.transport
        if transport is not None:
            transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            self.transport.abortConnection(
                ResetCode.CANCEL, "reply too large"
            )
            return
        self._chunks.append(data)

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if self.done.called:
            return
        if reason.check(ConnectionDone):
            self.done.callback(b"".join(self._chunks))
        elif self._size > self._limit:
            self.done.errback(AgentRequestFailed(f"reply larger than {self._limit} bytes"))
        else:
            self.done.errback(reason)


def _translate(failure: Failure) -> Failure:
    """
    Map what a stream or ping fails with to this module's exceptions.
    """
    reset = failure.check(StreamReset)
    if reset is not None:
        error = failure.value
        assert isinstance(error, StreamReset)
        if error.code == ResetCode.PEER_RESTARTED:
            return Failure(AgentUnavailable("the agent restarted during the request"))
        return Failure(AgentRequestFailed(str(error), error.code))
    if failure.check(ConnectionLost, ChannelNotReady):
        return Failure(AgentUnavailable(failure.getErrorMessage()))
    return failure


class AgentClient:
    """
    The host's client of one guest agent.

    :param reactor: an ``IReactorUNIX`` and ``IReactorTime`` provider.
    :param socket_path: QEMU's server socket for the agent's virtio-serial port.
    :param log: where to log; a new ``Logger`` by default.
    :param endpoint: connect here instead of ``socket_path`` (e.g. AF_VSOCK later).
    :param retry_policy: delay before each reconnection attempt.
    :param hello_timeout: seconds a connection may wait for the agent's HELLO before
        it is dropped and tried afresh.
    """

    def __init__(
        self,
        reactor: Any,
        socket_path: str,
        *,
        log: Optional[Logger] = None,
        endpoint: Optional[IStreamClientEndpoint] = None,
        retry_policy: Optional[Callable[[int], float]] = None,
        hello_timeout: float = 10.0,
    ) -> None:
        self._reactor = reactor
        self.socket_path = socket_path
        self._log = log if log is not None else Logger()
        self._protocol: Optional[AgentProtocol] = None
        self._waiters: list[Deferred[None]] = []
        factory = Factory.forProtocol(lambda: self._build_protocol(hello_timeout))
        self._service = reconnecting_channel(
            reactor,
            endpoint if endpoint is not None else virtio_serial_endpoint(reactor, socket_path),
            factory,
            policy=retry_policy,
        )

    def _build_protocol(self, hello_timeout: float) -> AgentProtocol:
        protocol = AgentProtocol(
            self._reactor,
            on_established=self._established,
            hello_timeout=hello_timeout,
            log=self._log,
        )
        self._protocol = protocol
        return protocol

    def _established(self, protocol: AgentProtocol) -> None:
        if protocol is not self._protocol:
            return
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.callback(None)

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
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.errback(AgentUnavailable("agent client stopped"))
        if not self._service.running:
            return succeed(None)
        return self._service.stopService()

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

        def cancel(d: Deferred[None]) -> None:
            if d in self._waiters:
                self._waiters.remove(d)

        d: Deferred[None] = Deferred(cancel)
        self._waiters.append(d)
        return d

    def _ready_protocol(self) -> AgentProtocol:
        protocol = self._protocol
        if protocol is None or not protocol.established:
            raise AgentUnavailable(f"agent not connected ({self.socket_path})")
        return protocol

    def open_stream(self, header: Mapping[str, Any], protocol: IProtocol) -> AgentStream:
        """
        Open a stream for ``header`` (e.g. ``{"op": "echo"}``) served by
        ``protocol``, which gets the :class:`~vmservice.agent.mux.AgentStream` as its
        transport.

        :raises AgentUnavailable: if not connected.
        """
        try:
            return self._ready_protocol().open_stream(header, protocol)
        except ChannelNotReady as e:
            raise AgentUnavailable(str(e)) from None

    async def request(self, header: Mapping[str, Any], limit: int) -> bytes:
        """
        Open a stream, send nothing (half-close at once) and return everything the
        agent sends until it half-closes.

        :param limit: most bytes accepted; more fails the request.
        :raises AgentUnavailable: if not connected or lost during the request.
        :raises AgentRequestFailed: if the agent resets the stream.
        """
        collect = _Collect(limit)
        stream = self.open_stream(header, collect)
        stream.loseConnection()
        return await collect.done.addErrback(_translate)

    async def health(self) -> AgentHealth:
        """
        Ask the agent for its health.

        :raises AgentUnavailable: if not connected, or lost during the request.
        :raises AgentRequestFailed: if the agent fails the request or answers
            nonsense.
        """
        return AgentHealth.from_json(await self.request({"op": "health"}, MAX_HEALTH_REPLY))

    async def set_clock(self, unix_ns: int) -> int:
        """
        Set the guest's wall clock, e.g. after the VM was paused, suspended or
        restored from a snapshot (the guest's clock stood still meanwhile).

        :param unix_ns: the new time, integer nanoseconds since the Unix epoch
            (``time.time_ns()`` for the host's clock).
        :return: the guest's clock just before it was set, in nanoseconds since
            the epoch.
        :raises ValueError: if ``unix_ns`` is not a positive integer below 2^63
            (checked before anything is sent).
        :raises AgentUnavailable: if not connected, or lost during the request.
        :raises AgentRequestFailed: if the agent refuses (``BAD_HEADER``: a time
            the guest kernel does not accept) or fails (``INTERNAL_ERROR``) the
            request, or answers nonsense.
        """
        if isinstance(unix_ns, bool) or not isinstance(unix_ns, int) or not 0 < unix_ns < _CLOCK_LIMIT:
            raise ValueError(f"unix_ns must be a positive integer below 2**63, not {unix_ns!r}")
        body = await self.request({"op": "clock", "unix_ns": int(unix_ns)}, MAX_CLOCK_REPLY)
        try:
            reply = json.loads(body)
        except ValueError:
            raise AgentRequestFailed("clock reply is not JSON") from None
        previous = reply.get("previous_ns") if isinstance(reply, dict) else None
        if type(previous) is not int:
            raise AgentRequestFailed("clock reply has no valid 'previous_ns'")
        return previous

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
        return await waiting.addErrback(_translate)


__all__ = [
    "AgentClient",
    "AgentHealth",
    "AgentRequestFailed",
    "AgentUnavailable",
]
