# -*- test-case-name: tests.wire.test_provisionheaders -*-
"""
The OPEN header that sets the guest's wall clock (``{"op": "clock", ...}``,
:class:`ClockHeader`), written by the host and read by the guest (documented
in ``docs/agent-protocol.md``).  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from vmservice.wire.openheaders.fields import BadHeader, FlatHeader

#: Largest ``unix_ns``: the kernel keeps time in signed 64-bit nanoseconds.
MAX_CLOCK_NS = 2**63 - 1


@dataclass(frozen=True)
class ClockHeader(FlatHeader):
    """
    Set the guest's wall clock.

    :ivar unix_ns: nanoseconds since the epoch (1 .. :data:`MAX_CLOCK_NS`).
    """

    op: ClassVar[str] = "clock"
    unix_ns: int

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[int]:
        unix_ns = header.get("unix_ns")
        if type(unix_ns) is not int or not 0 < unix_ns <= MAX_CLOCK_NS:
            raise BadHeader(f"unix_ns must be a positive integer (nanoseconds), not {unix_ns!r}")
        return (unix_ns,)


__all__ = ["ClockHeader", "MAX_CLOCK_NS"]
