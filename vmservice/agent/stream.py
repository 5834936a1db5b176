# -*- test-case-name: tests.agent.test_stream -*-
"""
One stream of the agent channel, as the transport of an ordinary ``IProtocol``.

An :class:`AgentStream` is an ``ITransport`` (like magic-wormhole's ``SubChannel``),
an ``IPushProducer`` whose :meth:`~AgentStream.pauseProducing` withholds credit from
the guest, and an ``IConsumer`` whose registered producer is paused while the
guest's credit or the socket's buffer is exhausted.  So back-pressure runs end to
end: a slow HTTP client pauses the stream, the guest runs out of credit, the guest
process blocks.

The stream is a thin front: its lifecycle is a state machine
(:mod:`vmservice.agent.lifecycle`), what it sends waits in an
:class:`~vmservice.agent.outbound.Outbox` for fair turns on the socket, and what it
receives waits in an :class:`~vmservice.agent.inbound.Inbox` while paused.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from attrs import frozen
from twisted.internet.interfaces import (
    IAddress,
    IConsumer,
    IProducer,
    IProtocol,
    IPushProducer,
    ITransport,
)
from twisted.python.failure import Failure
from zope.interface import implementer

from vmservice.agent.inbound import Inbox
from vmservice.agent.lifecycle import StreamCore, StreamLifecycle
from vmservice.agent.outbound import Outbound
from vmservice.wire import ResetCode, reset_code_name


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
        return f"stream reset ({reset_code_name(self.code)}): {self.reason}"


@implementer(IAddress)
@frozen
class AgentStreamAddress:
    """
    The address of either end of a stream, for ``getPeer``/``getHost``.

    :ivar stream_id: the stream's id on the channel.
    """

    stream_id: int


@frozen
class StreamChannel:
    """
    What a stream needs of its connection.

    :ivar outbound: sends the streams' DATA and HALF_CLOSE in fair turns.
    :ivar acknowledge: gives the guest credit back for bytes (stream id, count)
        our protocol took.
    :ivar send_reset: sends RESET (stream id, code, reason) if the stream is still
        open in the codec.
    :ivar forget: drops a stream that ended (stream id) from the connection.
    """

    outbound: Outbound
    acknowledge: Callable[[int, int], None]
    send_reset: Callable[[int, int, str], None]
    forget: Callable[[int], None]


@implementer(ITransport, IPushProducer, IConsumer)
class AgentStream:
    """
    One stream of the agent channel, as the transport of an ``IProtocol``.

    - :meth:`write` sends DATA as the guest grants credit and the socket gives the
      stream its turn, buffering the rest.
    - :meth:`loseConnection` half-closes (after buffered data); the protocol gets
      ``connectionLost(ConnectionDone)`` once the guest has half-closed too.  A
      protocol providing ``IHalfCloseableProtocol`` hears of the guest's
      half-close through ``readConnectionLost`` first.
    - :meth:`abortConnection` resets the stream (``connectionLost(ConnectionAborted)``);
      a reset by the guest arrives as ``connectionLost(StreamReset)``, and losing
      the channel as ``connectionLost(ConnectionLost)``.
    - :meth:`pauseProducing` stops delivery *and* credit: the guest may send at most
      one window more.

    Made by :class:`~vmservice.agent.protocol.AgentProtocol`, which passes the
    guest's frames on through the ``received_*`` methods.

    :param channel: the connection's side of the stream.
    :param stream_id: the stream's id.
    :param header: the OPEN header.
    :param protocol: the protocol served by the stream (connected by the caller).
    :ivar stream_id: the stream's id.
    :ivar header: the OPEN header.
    """

    def __init__(
        self,
        channel: StreamChannel,
        stream_id: int,
        header: Mapping[str, Any],
        protocol: IProtocol,
    ) -> None:
        self.stream_id = stream_id
        self.header = header
        self._protocol = protocol
        self._acknowledge = channel.acknowledge
        self._outbound = channel.outbound
        self._outbox = channel.outbound.attach(stream_id, self._half_close_sent)
        self._inbox = Inbox(self._deliver, self._half_close_delivered)
        self._core = StreamCore(
            stream_id,
            protocol,
            channel.outbound,
            self._outbox,
            self._inbox,
            channel.send_reset,
            channel.forget,
        )
        self._lifecycle = StreamLifecycle(self._core)

    # -- ITransport --------------------------------------------------------------------

    @property
    def disconnecting(self) -> bool:
        """
        Whether :meth:`loseConnection` was called (while the stream was open).
        """
        return self._core.disconnecting

    def write(self, data: bytes) -> None:
        """
        Send ``data`` on the stream.  Ignored after :meth:`loseConnection` or once
        the stream ended, as TCP transports do.
        """
        if data:
            self._lifecycle.write(data)
            self._outbound.pump()

    def writeSequence(self, data: Iterable[bytes]) -> None:
        """
        Send each of ``data``.
        """
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """
        Half-close: send HALF_CLOSE once the buffered data is out.
        """
        self._lifecycle.lose_connection()
        self._outbound.pump()

    def abortConnection(self, code: int = ResetCode.CANCEL, reason: str = "") -> None:
        """
        Reset the stream now, dropping buffered data.

        :param code: the reset code the guest sees.
        :param reason: the explanation the guest sees.
        """
        self._lifecycle.abort(code, reason)

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
        self._inbox.pause()

    def resumeProducing(self) -> None:
        """
        Deliver what was held back, granting credit for it, and carry on.
        """
        self._inbox.resume()

    def stopProducing(self) -> None:
        """
        Our consumer wants nothing more: reset the stream.
        """
        self.abortConnection()

    # -- IConsumer: a producer feeding write() --------------------------------------------

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        """
        Pause ``producer`` while the guest's credit or the socket is exhausted; a
        producer registered on a stream that ended is stopped at once.

        :raises RuntimeError: if a producer is registered already.
        """
        if self._outbox.producer is not None:
            raise RuntimeError("a producer is already registered")
        self._lifecycle.register_producer(producer, streaming)
        self._outbound.pump()

    def unregisterProducer(self) -> None:
        """
        Forget the producer.
        """
        self._outbox.unregister()

    # -- state -------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """
        Whether our consumer paused incoming data.
        """
        return self._inbox.paused

    @property
    def buffered(self) -> int:
        """
        Bytes written but not yet sent for want of credit (or of a turn).
        """
        return self._outbox.buffered

    # -- driven by AgentProtocol -------------------------------------------------------

    def received_data(self, data: bytes) -> None:
        """
        The guest sent ``data``.
        """
        self._inbox.received(data)

    def received_credit(self) -> None:
        """
        The guest granted credit.
        """
        self._outbound.credit(self.stream_id)
        self._outbound.pump()

    def received_half_close(self) -> None:
        """
        The guest half-closed.
        """
        self._inbox.half_closed()

    def received_reset(self, code: int, reason: str) -> None:
        """
        The guest reset the stream.
        """
        self._lifecycle.reset_received(Failure(StreamReset(code, reason)))

    def channel_lost(self, reason: Failure) -> None:
        """
        The connection is gone.
        """
        self._lifecycle.channel_lost(reason)

    # -- internals ---------------------------------------------------------------------

    def _deliver(self, data: bytes) -> None:
        self._protocol.dataReceived(data)
        self._acknowledge(self.stream_id, len(data))

    def _half_close_delivered(self) -> None:
        self._lifecycle.half_close_received()
        self._outbound.pump()

    def _half_close_sent(self) -> None:
        self._lifecycle.half_close_sent()
