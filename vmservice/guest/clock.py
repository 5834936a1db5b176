# -*- test-case-name: tests.guest.test_clock -*-
"""
``{"op": "clock", "unix_ns": N}``: the wall clock set after the VM stood still.
"""

from __future__ import annotations

import errno

from vmservice.guest import agentlog
from vmservice.guest.streams import StreamHandler
from vmservice.wire.errors import ResetCode
from vmservice.wire.openheaders.clock import MAX_CLOCK_NS, ClockHeader
from vmservice.wire.openheaders.fields import BadHeader


class ClockHandler(StreamHandler):
    """
    ``{"op": "clock", "unix_ns": N}``: sets the wall clock to ``N`` nanoseconds since
    the epoch, then answers one DATA, ``{"previous_ns": ...}`` (the wall clock just
    before), and HALF_CLOSE.

    The host sends it after the VM was paused, suspended or restored: meanwhile the
    guest's clock stood still.  A ``unix_ns`` that is not a positive integer
    (below 2^63), or a time the kernel refuses, resets the stream with BAD_HEADER;
    any other failure of ``clock_settime`` with INTERNAL_ERROR.
    """

    def start(self) -> None:
        try:
            unix_ns = ClockHeader.from_json(self.header).unix_ns
        except BadHeader as e:
            self.stream.reset(ResetCode.BAD_HEADER, str(e)[:200])
            return
        context = self.stream.context
        previous = context.realtime_ns()
        try:
            context.set_realtime_ns(unix_ns)
        except (OverflowError, ValueError) as e:
            self.stream.reset(ResetCode.BAD_HEADER, f"cannot set the clock to {unix_ns}: {e}"[:200])
            return
        except OSError as e:
            code = ResetCode.BAD_HEADER if e.errno == errno.EINVAL else ResetCode.INTERNAL_ERROR
            self.stream.reset(code, f"cannot set the clock to {unix_ns}: {e.strerror or e}"[:200])
            return
        agentlog.log(f"wall clock set, stepped by {(unix_ns - previous) / 1e9:+.3f} s")
        self.stream.write(b'{"previous_ns":%d}' % previous)
        self.stream.end()


__all__ = ["MAX_CLOCK_NS", "ClockHandler"]
