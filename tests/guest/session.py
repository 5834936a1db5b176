# -*- test-case-name: tests.guest.test_agent -*-
"""
A guest agent :class:`~vmservice.guest.agent.Session` driven in memory by a
host-side codec, for the tests of the agent and its operations.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Callable, Mapping, Optional

from tests.wire.pair import drain
from vmservice.guest import agentlog, operations
from vmservice.guest.context import AgentContext
from vmservice.guest.loop import Loop
from vmservice.guest.session import Session
from vmservice.guest.streams import StreamHandler
from vmservice.wire import Connection, Role
from vmservice.wire.events import Data, HalfClose, Reset
from vmservice.wire.payloads import decode_head


def refuse_real_clock(unix_ns: int) -> None:
    """
    The clock setter of test sessions: tests never set this machine's clock (they
    often run as root, where ``clock_settime`` would succeed).
    """
    raise AssertionError(f"a test tried to set the real clock to {unix_ns}")


class FakeClock:
    """
    A wall clock for :class:`AgentContext` (``realtime_ns``, ``set_realtime_ns``)
    that records what it was set to.

    :ivar now: the current time in nanoseconds since the epoch.
    :ivar settings: every value it was set to.
    :ivar error: raised by the next setting instead, when not ``None``.
    """

    def __init__(self, now: int) -> None:
        self.now = now
        self.settings: list[int] = []
        self.error: Optional[BaseException] = None

    def read(self) -> int:
        return self.now

    def set(self, unix_ns: int) -> None:
        if self.error is not None:
            raise self.error
        self.settings.append(unix_ns)
        self.now = unix_ns


class GuestSessionMixin:
    """
    Gives a test case ``self.loop``, ``self.session`` (the agent's side),
    ``self.host`` (a host codec) and ``self.written`` (what the agent sent and
    the host has not read yet), with :meth:`send`, :meth:`receive` and
    :meth:`handshake`.  Mix in before ``SynchronousTestCase``.
    """

    loop: Loop
    session: Session
    host: Connection
    written: bytearray

    def start_session(
        self,
        handlers: Mapping[str, type[StreamHandler]] = {},
        context: Optional[AgentContext] = None,
        room: Callable[[], bool] = lambda: True,
        log: Callable[[str], None] = lambda message: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """
        Make the session (with ``handlers`` beside the agent's own) and the host codec; the loop's
        timers run on ``clock``.
        """
        test: Any = self
        self.loop = Loop(clock)
        test.addCleanup(self.loop.close)
        test.patch(agentlog, "log", log)
        self.written = bytearray()
        self.session = Session(
            self.loop,
            context or AgentContext("t", time.monotonic_ns(), set_realtime_ns=refuse_real_clock),
            self.written.extend,
            room,
            # Without extra handlers the agent's own table, with its lazily imported operations.
            {**operations.HANDLERS, **handlers} if handlers else None,
        )
        self.host = Connection(Role.HOST, nonce=b"HOSTNONC")

    def receive(self) -> list[Any]:
        """What the agent wrote since the last call, as host events."""
        self.host.receive_data(bytes(self.written))
        self.written.clear()
        return drain(self.host)

    def send(self, *events: Any) -> None:
        """Send host events to the agent."""
        self.session.data_received(b"".join(self.host.send(e) for e in events))

    def handshake(self) -> None:
        """Start the session and exchange HELLOs until both sides are established."""
        test: Any = self
        self.session.start()
        self.send(self.host.hello("host"))
        for _ in range(4):
            self.receive()
            if self.host.hello_wanted:
                self.send(self.host.hello("host"))
        test.assertTrue(self.host.established)
        test.assertTrue(self.session.conn.established)


class StreamCollectorMixin(GuestSessionMixin):
    """
    A :class:`GuestSessionMixin` that runs its loop while collecting what one
    stream carries: its DATA (acknowledged, so the agent keeps credit) in
    ``received``, its HALF_CLOSE in ``half_closed``, its RESET in ``reset``.
    """

    received: bytearray
    half_closed: bool
    reset: Optional[Reset]

    def start_collecting(self) -> None:
        """Nothing received yet."""
        self.received = bytearray()
        self.half_closed = False
        self.reset = None

    def pump(self, stream_id: int, until: Callable[[], bool], timeout: float = 10.0) -> None:
        """Run the loop, collecting what stream ``stream_id`` carries, until ``until()``."""
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError("timed out")
            self.loop.run_once(0.01)
            for event in self.receive():
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                if isinstance(event, Data):
                    self.received += event.data
                    self.session.data_received(self.host.acknowledge_received_data(stream_id, len(event.data)))
                elif isinstance(event, HalfClose):
                    self.half_closed = True
                elif isinstance(event, Reset):
                    self.reset = event

    def accept(self, server: socket.socket, stream_id: int, timeout: float = 5.0) -> socket.socket:
        """The connection the agent makes to ``server`` (a listener) for stream ``stream_id``, closed at the end."""
        server.setblocking(False)
        accepted: list[socket.socket] = []

        def ready() -> bool:
            try:
                accepted.append(server.accept()[0])
            except BlockingIOError:
                return False
            return True

        self.pump(stream_id, ready)
        peer = accepted[0]
        test: Any = self
        test.addCleanup(peer.close)
        peer.settimeout(timeout)
        return peer

    def head(self, stream_id: int) -> dict[str, Any]:
        """The head the stream starts with (what follows it stays in ``received``)."""
        self.pump(stream_id, lambda: decode_head(bytes(self.received)) is not None or self.reset is not None)
        decoded = decode_head(bytes(self.received))
        assert decoded is not None, self.reset
        head, used = decoded
        del self.received[:used]
        return head
