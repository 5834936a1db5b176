# -*- test-case-name: tests.wire.test_connection -*-
"""
What a :class:`~vmservice.wire.connection.Connection` knows of one open
stream: whether each direction is open, and its credit.

*Flow control.*  Each direction of each stream starts with
:data:`INITIAL_WINDOW` bytes of credit.  A connection refuses to send DATA
beyond the peer's credit (:class:`~vmservice.wire.errors.FlowControlError`).
Received DATA uses up the peer's credit; acknowledging it once our consumer
has taken the bytes gives it back (batched into WINDOW frames of at least
:data:`WINDOW_UPDATE_THRESHOLD` bytes), so a consumer that stops
acknowledging stops the sender after at most one window.

Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from vmservice.wire.errors import FlowControlError, LocalProtocolError, RemoteProtocolError
from vmservice.wire.frames import MAX_WINDOW

#: Credit each side has on each new stream, in each direction (256 KiB).  Both sides
#: must agree: it is part of the protocol, not a setting.
INITIAL_WINDOW = 256 * 1024
#: Acknowledged bytes are given back in WINDOW frames of at least this many bytes,
#: so the peer always keeps three quarters of its window while the consumer keeps up.
WINDOW_UPDATE_THRESHOLD = INITIAL_WINDOW // 4


class StreamState:
    """
    One open stream, as one side sees it.

    :ivar stream_id: its id, for the errors.
    :ivar send_open: we may still send DATA.
    :ivar recv_open: the peer may still send DATA.
    :ivar send_window: credit we have for sending.
    :ivar recv_window: credit the peer has for sending to us.
    :ivar outstanding: bytes received that our consumer has not acknowledged yet.
    :ivar unsent_credit: bytes acknowledged but not yet given back in a WINDOW frame.
    """

    __slots__ = ("stream_id", "send_open", "recv_open", "send_window", "recv_window", "outstanding",
                 "unsent_credit")

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id
        self.send_open = True
        self.recv_open = True
        self.send_window = INITIAL_WINDOW
        self.recv_window = INITIAL_WINDOW
        self.outstanding = 0
        self.unsent_credit = 0

    @property
    def done(self) -> bool:
        """Whether both directions have ended (the stream is gone)."""
        return not (self.send_open or self.recv_open)

    # -- what the peer sent ---------------------------------------------------------

    def received_data(self, size: int) -> None:
        """``size`` bytes of DATA arrived: they use up the peer's credit until acknowledged."""
        if not self.recv_open:
            raise RemoteProtocolError(f"DATA after HALF_CLOSE on stream {self.stream_id}")
        if size > self.recv_window:
            raise RemoteProtocolError(f"DATA beyond the window on stream {self.stream_id}")
        self.recv_window -= size
        self.outstanding += size

    def received_credit(self, increment: int) -> None:
        """The peer granted ``increment`` more bytes (a WINDOW frame)."""
        if self.send_window + increment > MAX_WINDOW:
            raise RemoteProtocolError(f"window overflow on stream {self.stream_id}")
        self.send_window += increment

    def received_half_close(self) -> None:
        """The peer ended its direction."""
        if not self.recv_open:
            raise RemoteProtocolError(f"second HALF_CLOSE on stream {self.stream_id}")
        self.recv_open = False

    # -- what we send: each check comes before the frame, each change after it ---------

    def check_data(self, size: int) -> None:
        """Refuse ``size`` bytes of our DATA when our direction ended or the peer's credit is short."""
        if not self.send_open:
            raise LocalProtocolError(f"stream {self.stream_id} is half-closed")
        if size > self.send_window:
            raise FlowControlError(
                f"{size} bytes exceed the window of {self.send_window} on stream {self.stream_id}"
            )

    def check_credit(self, increment: int) -> None:
        """Refuse a WINDOW frame of ours that would grant the peer more than the protocol allows."""
        if self.recv_window + increment > MAX_WINDOW:
            raise LocalProtocolError(f"window overflow on stream {self.stream_id}")

    def check_half_close(self) -> None:
        """Refuse a second HALF_CLOSE of ours."""
        if not self.send_open:
            raise LocalProtocolError(f"stream {self.stream_id} already half-closed")

    def acknowledge(self, count: int) -> int:
        """
        Our consumer took ``count`` received bytes: the credit to give back now
        in a WINDOW frame, or 0 while less than :data:`WINDOW_UPDATE_THRESHOLD`
        is owed (or when the peer cannot send any more anyway).

        :raises LocalProtocolError: ``count`` is negative or exceeds the bytes
            received and not yet acknowledged.
        """
        if not 0 <= count <= self.outstanding:
            raise LocalProtocolError(f"cannot acknowledge {count} bytes; {self.outstanding} outstanding")
        self.outstanding -= count
        if not self.recv_open:
            return 0
        self.unsent_credit += count
        if self.unsent_credit < WINDOW_UPDATE_THRESHOLD:
            return 0
        increment, self.unsent_credit = self.unsent_credit, 0
        return increment


__all__ = ["INITIAL_WINDOW", "WINDOW_UPDATE_THRESHOLD", "StreamState"]
