# -*- test-case-name: tests.guest.test_clock -*-
"""
The guest's ``clock`` operation (:class:`~vmservice.guest.agent.ClockHandler`)
through a real :class:`~vmservice.guest.agent.Session`, with a fake wall clock:
these tests never set the clock of the machine they run on.
"""

from __future__ import annotations

import errno
import json
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import FakeClock, GuestSessionMixin, refuse_real_clock
from vmservice.guest import operations
from vmservice.guest.clock import ClockHandler
from vmservice.guest.context import AgentContext, set_realtime_ns
from vmservice.wire import ResetCode
from vmservice.wire.events import Data, HalfClose, Open, Reset

#: 2023-11-14T22:13:20Z
BEFORE = 1_700_000_000_000_000_000
#: An hour and a bit later.
AFTER = BEFORE + 3_723_456_789_012


class ClockTests(GuestSessionMixin, SynchronousTestCase):
    """``{"op": "clock", "unix_ns": N}``."""

    def setUp(self) -> None:
        self.clock = FakeClock(BEFORE)
        self.logged: list[str] = []
        context = AgentContext("t", time.monotonic_ns(), realtime_ns=self.clock.read, set_realtime_ns=self.clock.set)
        self.start_session(context=context, log=self.logged.append)
        self.handshake()

    def request(self, header: dict[str, Any]) -> list[Any]:
        """Open a stream with ``header``, half-close it, and return the agent's answer."""
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, header), HalfClose(stream_id))
        return self.receive()

    def test_lazy(self) -> None:
        """
        The operation is imported on first use (a cold boot does not pay for its header's
        :mod:`dataclasses`), and found there.
        """
        self.assertEqual(operations.LAZY_HANDLERS["clock"], "vmservice.guest.clock:ClockHandler")
        self.patch(operations, "HANDLERS", {**operations.HANDLERS})
        operations.HANDLERS.pop("clock", None)
        self.assertIs(operations.find_handler("clock", operations.HANDLERS), ClockHandler)

    def test_sets_the_clock(self) -> None:
        """The clock is set to ``unix_ns``; the answer is the clock before, then HALF_CLOSE."""
        data, end = self.request({"op": "clock", "unix_ns": AFTER})
        self.assertEqual(self.clock.settings, [AFTER])
        assert isinstance(data, Data)
        self.assertEqual(json.loads(data.data), {"previous_ns": BEFORE})
        self.assertEqual(data.data, b'{"previous_ns":%d}' % BEFORE)
        self.assertEqual(end, HalfClose(1))
        self.assertEqual(self.session.streams, {})
        self.assertEqual(self.logged, ["wall clock set, stepped by +3723.457 s"])

    def test_backwards(self) -> None:
        """A clock that ran ahead is set back as well."""
        data, _ = self.request({"op": "clock", "unix_ns": BEFORE - 5_000_000_000})
        self.assertEqual(self.clock.settings, [BEFORE - 5_000_000_000])
        assert isinstance(data, Data)
        self.assertEqual(json.loads(data.data), {"previous_ns": BEFORE})

    def test_bad_header(self) -> None:
        """
        A missing, non-integer (float, string, bool), zero, negative or too large
        ``unix_ns`` resets the stream with BAD_HEADER and leaves the clock alone;
        the session carries on.
        """
        bad = [None, 1.7e18, "1700000000000000000", True, 0, -1, 2**63, [AFTER]]
        for value in bad:
            header = {"op": "clock"} if value is None else {"op": "clock", "unix_ns": value}
            [reset] = self.request(header)
            assert isinstance(reset, Reset)
            self.assertEqual(reset.code, ResetCode.BAD_HEADER, value)
            self.assertEqual(reset.reason, f"unix_ns must be a positive integer (nanoseconds), not {value!r}")
        self.assertEqual(self.clock.settings, [])
        self.assertEqual(self.session.streams, {})
        [data, _] = self.request({"op": "clock", "unix_ns": 1})
        self.assertEqual(self.clock.settings, [1])

    def test_kernel_refuses_time(self) -> None:
        """A time the kernel refuses (EINVAL) is a BAD_HEADER too."""
        self.clock.error = OSError(errno.EINVAL, "Invalid argument")
        [reset] = self.request({"op": "clock", "unix_ns": 2**63 - 1})
        assert isinstance(reset, Reset)
        self.assertEqual((reset.code, reset.reason), (
            ResetCode.BAD_HEADER, f"cannot set the clock to {2**63 - 1}: Invalid argument"))

    def test_not_permitted(self) -> None:
        """Any other failure to set the clock (no CAP_SYS_TIME) is an INTERNAL_ERROR."""
        self.clock.error = PermissionError(errno.EPERM, "Operation not permitted")
        [reset] = self.request({"op": "clock", "unix_ns": AFTER})
        assert isinstance(reset, Reset)
        self.assertEqual((reset.code, reset.reason), (
            ResetCode.INTERNAL_ERROR, f"cannot set the clock to {AFTER}: Operation not permitted"))
        self.assertEqual(self.logged, [])


class DefaultsTests(SynchronousTestCase):
    """The clocks an :class:`AgentContext` uses, without setting any."""

    def test_real_clocks(self) -> None:
        """By default the context reads ``time.time_ns`` and sets ``CLOCK_REALTIME``."""
        context = AgentContext("t")
        self.assertIs(context.realtime_ns, time.time_ns)
        self.assertIs(context.set_realtime_ns, set_realtime_ns)
        calls: list[tuple[int, int]] = []
        self.patch(time, "clock_settime_ns", lambda clock, ns: calls.append((clock, ns)))
        set_realtime_ns(AFTER)
        self.assertEqual(calls, [(time.CLOCK_REALTIME, AFTER)])

    def test_test_sessions_refuse(self) -> None:
        """The default context of test sessions refuses to set the real clock."""
        self.assertRaises(AssertionError, refuse_real_clock, AFTER)


class MixinDefaultTests(GuestSessionMixin, SynchronousTestCase):
    """A test session without its own context cannot set the real clock."""

    def test_refused(self) -> None:
        """The clock op fails its stream (INTERNAL_ERROR) instead of setting the clock."""
        self.start_session()
        self.handshake()
        self.send(Open(1, {"op": "clock", "unix_ns": AFTER}), HalfClose(1))
        [reset] = self.receive()
        assert isinstance(reset, Reset)
        self.assertEqual(reset.code, ResetCode.INTERNAL_ERROR)
