# -*- test-case-name: tests.agent.test_lifecycle,tests.agent.test_stream -*-
"""
The lifecycle of one stream of the agent channel, as an automat machine.

Theory of operation
-------------------

A stream has two directions, and each ends on its own with a HALF_CLOSE: ours once
our protocol called ``loseConnection`` and every byte it wrote before has been
sent, the guest's once our protocol has taken every byte the guest sent before it.
When both have ended, the stream is done and the protocol gets
``connectionLost(ConnectionDone)``.  A RESET (sent by us on ``abortConnection``, or
by the guest) or the loss of the whole channel ends both directions at once,
whatever they were doing.  The states::

    Open ----lose_connection----> Closing ----half_close_sent----> LocalClosed
      |                             |                                  |
    half_close_received     half_close_received              half_close_received
      v                             v                                  v
    RemoteClosed --lose_connection--> BothClosing --half_close_sent--> Ended

- ``Open``: both directions open.
- ``Closing``: our protocol half-closed; what it wrote still waits for credit or
  its turn, and our HALF_CLOSE follows it.  Writes are ignored from here on, as a
  TCP transport ignores them after ``loseConnection``.
- ``LocalClosed``: our HALF_CLOSE is sent; the guest may still send.
- ``RemoteClosed``: the guest's HALF_CLOSE reached our protocol (as
  ``readConnectionLost``, when it provides ``IHalfCloseableProtocol``); we may
  still write.
- ``BothClosing``: the guest's HALF_CLOSE reached our protocol, ours waits behind
  our data.
- ``Ended``: the stream is gone, cleanly or by ``abort``, ``reset_received`` or
  ``channel_lost`` from any other state: buffered data is dropped, the stream is
  forgotten, its producer stopped, and its protocol hears ``connectionLost`` once.
  Later writes, closes and ends are ignored, and a producer registered now is
  stopped at once.

A HALF_CLOSE cannot be sent or received twice (the outbox sends one, the codec
refuses a second from the guest), nor after the stream ended (its outbox and
inbox are emptied then), so those inputs have no transition where they cannot
happen: automat raises ``NoTransition``, a bug in the caller.

Pausing delivery (our consumer's back-pressure) is not part of the lifecycle: the
guest's HALF_CLOSE waits in the stream's :class:`~vmservice.agent.inbound.Inbox`
behind undelivered data, and ``half_close_received`` comes once it is delivered.
Likewise our HALF_CLOSE waits in the :class:`~vmservice.agent.outbound.Outbox`
behind unsent data, and ``half_close_sent`` comes once it is written.

Re-entrancy: outputs only queue work (into the outbox) and tell the protocol;
they never send the stream's data or HALF_CLOSE themselves, so our own code never
calls back into the machine from its outputs (the stream pumps the connection's
:class:`~vmservice.agent.outbound.Outbound` after each input).  A protocol that
writes or closes from ``readConnectionLost`` or ``connectionLost`` does call
back; automat queues such an input until the current one is done, so the machine
still takes its inputs one at a time and in order.  The diagram is
``docs/state-machines/agent-stream.dot``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.error import ConnectionAborted, ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IProducer, IProtocol
from twisted.python.failure import Failure

from vmservice.agent.inbound import Inbox
from vmservice.agent.outbound import Outbound, Outbox


class StreamInputs(Protocol):
    """
    What can happen to a stream.
    """

    def write(self, data: bytes) -> None:
        """
        Our protocol writes ``data``.
        """

    def lose_connection(self) -> None:
        """
        Our protocol half-closes: HALF_CLOSE after what it wrote.
        """

    def abort(self, code: int, reason: str) -> None:
        """
        Our protocol (or its consumer) gives up: RESET now, data dropped.
        """

    def register_producer(self, producer: IProducer, streaming: bool) -> None:
        """
        A producer is to feed the stream.
        """

    def half_close_sent(self) -> None:
        """
        Our HALF_CLOSE was written, after all our data.
        """

    def half_close_received(self) -> None:
        """
        The guest's HALF_CLOSE reached our protocol, after all its data.
        """

    def reset_received(self, reason: Failure) -> None:
        """
        The guest reset the stream (or the agent restarted).
        """

    def channel_lost(self, reason: Failure) -> None:
        """
        The connection to the agent is gone.
        """


@dataclass
class StreamCore:
    """
    What the machine's outputs act on.

    :ivar stream_id: the stream's id.
    :ivar protocol: the stream's protocol.
    :ivar outbound: the connection's sender, which holds ``outbox``.
    :ivar outbox: what we send on the stream.
    :ivar inbox: what the guest sent and the protocol has not taken.
    :ivar send_reset: sends RESET(stream id, code, reason) if the stream is
        still open in the codec.
    :ivar forget: drops the stream from the connection's table.
    :ivar disconnecting: whether our protocol half-closed (the transport
        attribute of that name).
    """

    stream_id: int
    protocol: IProtocol
    outbound: Outbound
    outbox: Outbox
    inbox: Inbox
    send_reset: Callable[[int, int, str], None]
    forget: Callable[[int], None]
    disconnecting: bool = False


def _end(core: StreamCore, reason: Failure) -> None:
    """
    The stream is gone: drop what waits, forget it, stop its producer, tell the
    protocol.
    """
    producer = core.outbound.detach(core.outbox)
    core.inbox.clear()
    core.forget(core.stream_id)
    if producer is not None:
        producer.stopProducing()
    core.protocol.connectionLost(reason)


def _read_connection_lost(core: StreamCore) -> None:
    half_closeable = IHalfCloseableProtocol(core.protocol, None)
    if half_closeable is not None:
        half_closeable.readConnectionLost()


def _build() -> TypeMachine[StreamInputs, StreamCore]:
    builder = TypeMachineBuilder(StreamInputs, StreamCore)
    Open = builder.state("Open")
    Closing = builder.state("Closing")
    LocalClosed = builder.state("LocalClosed")
    RemoteClosed = builder.state("RemoteClosed")
    BothClosing = builder.state("BothClosing")
    Ended = builder.state("Ended")
    live = (Open, Closing, LocalClosed, RemoteClosed, BothClosing)

    @Open.upon(StreamInputs.write).loop()
    @RemoteClosed.upon(StreamInputs.write).loop()
    def queue(inputs: StreamInputs, core: StreamCore, data: bytes) -> None:
        core.outbox.write(data)

    @Open.upon(StreamInputs.lose_connection).to(Closing)
    @RemoteClosed.upon(StreamInputs.lose_connection).to(BothClosing)
    def half_close(inputs: StreamInputs, core: StreamCore) -> None:
        core.disconnecting = True
        core.outbox.end()

    for state in (Closing, LocalClosed, BothClosing, Ended):
        state.upon(StreamInputs.write).loop().returns(None)
        state.upon(StreamInputs.lose_connection).loop().returns(None)

    Closing.upon(StreamInputs.half_close_sent).to(LocalClosed).returns(None)

    @BothClosing.upon(StreamInputs.half_close_sent).to(Ended)
    def closed_last(inputs: StreamInputs, core: StreamCore) -> None:
        _end(core, Failure(ConnectionDone("stream closed")))

    @Open.upon(StreamInputs.half_close_received).to(RemoteClosed)
    @Closing.upon(StreamInputs.half_close_received).to(BothClosing)
    def read_closed(inputs: StreamInputs, core: StreamCore) -> None:
        _read_connection_lost(core)

    @LocalClosed.upon(StreamInputs.half_close_received).to(Ended)
    def read_closed_last(inputs: StreamInputs, core: StreamCore) -> None:
        _read_connection_lost(core)
        _end(core, Failure(ConnectionDone("stream closed")))

    for state in live:
        state.upon(StreamInputs.register_producer).loop()(_register)
        state.upon(StreamInputs.abort).to(Ended)(_aborted)
        state.upon(StreamInputs.reset_received).to(Ended)(_ended_by)
        state.upon(StreamInputs.channel_lost).to(Ended)(_ended_by)
    Ended.upon(StreamInputs.register_producer).loop()(_refuse_producer)
    Ended.upon(StreamInputs.abort).loop().returns(None)
    Ended.upon(StreamInputs.reset_received).loop().returns(None)
    Ended.upon(StreamInputs.channel_lost).loop().returns(None)
    return builder.build()


def _register(inputs: StreamInputs, core: StreamCore, producer: IProducer, streaming: bool) -> None:
    core.outbox.register(producer, streaming)


def _refuse_producer(inputs: StreamInputs, core: StreamCore, producer: IProducer, streaming: bool) -> None:
    producer.stopProducing()


def _aborted(inputs: StreamInputs, core: StreamCore, code: int, reason: str) -> None:
    core.send_reset(core.stream_id, code, reason)
    _end(core, Failure(ConnectionAborted(reason or "stream aborted")))


def _ended_by(inputs: StreamInputs, core: StreamCore, reason: Failure) -> None:
    _end(core, reason)


#: Makes the machine of one stream (``StreamLifecycle(core)``), in state ``Open``.
StreamLifecycle = _build()
