# -*- test-case-name: tests.agent.test_outbound -*-
"""
What the host sends on the streams of one agent connection, and in which order.

Theory of operation
-------------------

One socket carries every stream.  Twisted's ``transport.write`` never refuses: it
buffers, and once its buffer is over its limit it calls ``pauseProducing`` on the
registered producer, synchronously, from inside that ``write``; ``resumeProducing``
follows once the buffer has drained.  If each stream wrote everything its credit
allowed whenever it could, the first stream with a big buffer (a long download, a
flood of shell output) would fill the socket's buffer, and every other stream would
wait behind all of it.

So streams do not write to the socket.  Each has an :class:`Outbox` (the bytes it
was given and has not sent, the HALF_CLOSE that follows them, the producer that
feeds them) and :class:`Outbound`, one per connection, sends for all of them, as
magic-wormhole's dilation ``Outbound`` rotates its subchannels' producers:

- An outbox with bytes and credit is *ready*, and waits in line.  A *turn* sends
  one DATA of at most :data:`TURN_SIZE` bytes from the outbox at the head of the
  line, which then goes to the back if it still has bytes and credit.  An outbox
  that runs out of credit leaves the line until a WINDOW brings it back.
- :meth:`Outbound.pump` takes turns until the line is empty or the socket pauses
  us (which happens inside a turn's ``write``; the loop stops after that turn).
  :meth:`Outbound.resumeProducing` pumps again from where the line stands, so the
  outbox after the one that filled the buffer goes first next time.
- While the socket is paused, every registered streaming producer is paused too;
  one is also paused while :data:`STREAM_WRITE_HIGH_WATER` bytes wait in its
  outbox, and resumed once its outbox is empty and the socket takes data.  A pull
  producer is asked for more on the next turn of the reactor whenever its outbox
  is empty and the socket takes data.
- HALF_CLOSE goes out as soon as the bytes before it are sent, paused or not: it
  takes no credit and no turn (a frame header alone).  Control frames (HELLO,
  WINDOW, PING, RESET ...) do not come through here at all.

Writing to an outbox only queues; nothing is sent until somebody pumps.  Streams
pump after each input to their state machine (:mod:`vmservice.agent.lifecycle`),
never from inside one, so the one call back into a machine that happens here (an
outbox's ``on_half_close_sent``, from :meth:`Outbound.pump`) never re-enters it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional, cast

from twisted.internet.interfaces import (
    IDelayedCall,
    IProducer,
    IPullProducer,
    IPushProducer,
    IReactorTime,
)
from zope.interface import implementer

from vmservice.wire import Data, HalfClose
from vmservice.wire.events import Event

#: A stream pauses its registered streaming producer when this many bytes wait for
#: credit, and resumes it once they are gone.
STREAM_WRITE_HIGH_WATER = 64 * 1024
#: Most bytes one stream sends in one turn: one DATA frame.
TURN_SIZE = 64 * 1024


class Outbox:
    """
    The bytes one stream was given and has not sent yet, the HALF_CLOSE that
    follows them, and the producer feeding them.  Made by :meth:`Outbound.attach`;
    :class:`Outbound` reads and empties it.

    :ivar stream_id: the stream's id.
    """

    def __init__(
        self,
        outbound: Outbound,
        clock: IReactorTime,
        stream_id: int,
        on_half_close_sent: Callable[[], None],
    ) -> None:
        self._outbound = outbound
        self._clock = clock
        self.stream_id = stream_id
        self._on_half_close_sent = on_half_close_sent
        self._data = bytearray()
        #: HALF_CLOSE is to follow the bytes in ``_data``.
        self._ending = False
        self._producer: Optional[IProducer] = None
        self._streaming = False
        self._producer_paused = False
        self._pull: Optional[IDelayedCall] = None

    @property
    def buffered(self) -> int:
        """
        Bytes written and not sent yet.
        """
        return len(self._data)

    @property
    def producer(self) -> Optional[IProducer]:
        """
        The registered producer, if any.
        """
        return self._producer

    def write(self, data: bytes) -> None:
        """
        Queue ``data``; it is sent when the stream's turn comes.
        """
        self._data += data
        self._outbound._queue(self)

    def end(self) -> None:
        """
        Queue a HALF_CLOSE after the bytes written so far.
        """
        self._ending = True
        self._outbound._queue(self)

    def register(self, producer: IProducer, streaming: bool) -> None:
        """
        Feed from ``producer``: paused (or not pulled) while the socket is paused or
        too much waits here.  It is regulated at the next pump.

        :param streaming: whether ``producer`` is an ``IPushProducer`` (else an
            ``IPullProducer``).
        :raises RuntimeError: if a producer is registered already.
        """
        if self._producer is not None:
            raise RuntimeError("a producer is already registered")
        self._producer, self._streaming, self._producer_paused = producer, streaming, False
        self._outbound._queue(self)

    def unregister(self) -> None:
        """
        Forget the producer.
        """
        self._producer = None
        self._cancel_pull()

    def regulate(self, stuck: bool) -> None:
        """
        Pause, resume or pull the producer according to what waits here.

        :param stuck: whether the socket is paused.
        """
        producer = self._producer
        if producer is None:
            return
        if not self._streaming:
            if not self._data and not stuck and self._pull is None:
                self._pull = self._clock.callLater(0, self._pull_more)
            return
        if not self._producer_paused and (stuck or len(self._data) >= STREAM_WRITE_HIGH_WATER):
            self._producer_paused = True
            cast(IPushProducer, producer).pauseProducing()
        elif self._producer_paused and not stuck and not self._data:
            self._producer_paused = False
            cast(IPushProducer, producer).resumeProducing()

    def _pull_more(self) -> None:
        self._pull = None
        producer = self._producer
        if producer is not None and not self._streaming and not self._data:
            cast(IPullProducer, producer).resumeProducing()

    def _cancel_pull(self) -> None:
        pull, self._pull = self._pull, None
        if pull is not None and pull.active():
            pull.cancel()

    def _discard(self) -> Optional[IProducer]:
        self._data.clear()
        self._ending = False
        producer, self._producer = self._producer, None
        self._cancel_pull()
        return producer


@implementer(IPushProducer)
class Outbound:
    """
    The DATA and HALF_CLOSE of every stream of one connection, sent in fair turns.
    The connection relays the socket's ``pauseProducing`` and ``resumeProducing``
    here.

    :param clock: for pulling pull producers on the next turn of the reactor.
    :param send: encodes an event and writes it to the socket (which may call
        :meth:`pauseProducing` before it returns).
    :param window: the peer's credit for our DATA on a stream.
    """

    def __init__(
        self,
        clock: IReactorTime,
        send: Callable[[Event], None],
        window: Callable[[int], int],
    ) -> None:
        self._clock = clock
        self._send = send
        self._window = window
        self._boxes: dict[int, Outbox] = {}
        #: The line of outboxes with bytes and credit: the first takes the next turn.
        self._ready: OrderedDict[int, Outbox] = OrderedDict()
        #: Outboxes with nothing left but their HALF_CLOSE.
        self._closing: dict[int, Outbox] = {}
        #: Outboxes whose producer may need pausing or resuming.
        self._changed: dict[int, Outbox] = {}
        self._paused = False
        self._pumping = False

    @property
    def paused(self) -> bool:
        """
        Whether the socket paused us.
        """
        return self._paused

    def attach(self, stream_id: int, on_half_close_sent: Callable[[], None]) -> Outbox:
        """
        The outbox of a new stream.

        :param on_half_close_sent: called (from :meth:`pump`) once the stream's
            HALF_CLOSE is written.
        """
        box = Outbox(self, self._clock, stream_id, on_half_close_sent)
        self._boxes[stream_id] = box
        return box

    def detach(self, box: Outbox) -> Optional[IProducer]:
        """
        Forget a stream that ended: drop its bytes and its HALF_CLOSE.

        :return: its producer, which the caller stops.
        """
        stream_id = box.stream_id
        if self._boxes.get(stream_id) is box:
            del self._boxes[stream_id]
        for line in (self._ready, self._closing, self._changed):
            line.pop(stream_id, None)
        return box._discard()

    def credit(self, stream_id: int) -> None:
        """
        The peer granted credit on ``stream_id``: its outbox may take turns again
        (at the next pump).
        """
        box = self._boxes.get(stream_id)
        if box is not None:
            self._queue(box)

    def pump(self) -> None:
        """
        Send HALF_CLOSEs that are due and take turns until the line is empty or the
        socket pauses us; then pause, resume or pull the producers of the outboxes
        that changed, and go on while that brings more to send.

        Called again from inside (by a producer that writes when resumed), it
        returns at once: the running pump sends what was queued.
        """
        if self._pumping:
            return
        self._pumping = True
        try:
            while True:
                self._send_half_closes()
                while self._ready and not self._paused:
                    _, box = self._ready.popitem(last=False)
                    self._turn(box)
                if not self._changed:
                    return
                changed, self._changed = self._changed, {}
                for box in changed.values():
                    box.regulate(self._paused)
        finally:
            self._pumping = False

    # -- IPushProducer, relayed from the socket -------------------------------------------

    def pauseProducing(self) -> None:
        """
        The socket's buffer is full: stop taking turns, pause every producer.
        """
        self._paused = True
        for box in list(self._boxes.values()):
            box.regulate(True)

    def resumeProducing(self) -> None:
        """
        The socket drained: take turns again and resume the producers whose
        outboxes are empty.
        """
        self._paused = False
        self._changed.update(self._boxes)
        self.pump()

    def stopProducing(self) -> None:
        """
        The socket is going away; the connection ends every stream.
        """

    # -- internals ------------------------------------------------------------------------

    def _queue(self, box: Outbox) -> None:
        stream_id = box.stream_id
        if self._boxes.get(stream_id) is not box:
            return
        if box._data:
            if stream_id not in self._ready and self._window(stream_id) > 0:
                self._ready[stream_id] = box
        elif box._ending:
            self._closing[stream_id] = box
        self._changed[stream_id] = box

    def _turn(self, box: Outbox) -> None:
        stream_id = box.stream_id
        size = min(self._window(stream_id), len(box._data), TURN_SIZE)
        if size > 0:
            chunk = bytes(box._data[:size])
            del box._data[:size]
            self._changed[stream_id] = box
            self._send(Data(stream_id, chunk))
        if self._boxes.get(stream_id) is not box:
            return
        if box._data:
            if self._window(stream_id) > 0:
                self._ready[stream_id] = box
        elif box._ending:
            self._send_half_close(box)

    def _send_half_closes(self) -> None:
        while self._closing:
            stream_id = next(iter(self._closing))
            self._send_half_close(self._closing.pop(stream_id))

    def _send_half_close(self, box: Outbox) -> None:
        box._ending = False
        self._send(HalfClose(box.stream_id))
        box._on_half_close_sent()
