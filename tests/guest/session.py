# -*- test-case-name: tests.guest.test_agent -*-
"""
A guest agent :class:`~vmservice.guest.agent.Session` driven in memory by a
host-side codec, for the tests of the agent and its operations.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional

from tests.wire.pair import drain
from vmservice.guest import agentlog, operations
from vmservice.guest.context import AgentContext
from vmservice.guest.loop import Loop
from vmservice.guest.session import Session
from vmservice.guest.streams import StreamHandler
from vmservice.wire import Connection, Role


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
