# -*- test-case-name: tests.wire.test_provisionheaders -*-
"""
The OPEN header that sets the guest's wall clock (``{"op": "clock", ...}``,
:class:`ClockHeader`), written by the host and read by the guest (documented
in ``docs/agent-protocol.md``).  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmservice.wire.openheaders.fields import BadHeader, header_object

#: Largest ``unix_ns``: the kernel keeps time in signed 64-bit nanoseconds.
MAX_CLOCK_NS = 2**63 - 1


@dataclass(frozen=True)
class ClockHeader:
    """
    Set the guest's wall clock.

    :ivar unix_ns: nanoseconds since the epoch (1 .. :data:`MAX_CLOCK_NS`).
    """

    unix_ns: int

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object."""
        return {"op": "clock", "unix_ns": self.unix_ns}

    @classmethod
    def from_json(cls, value: object) -> ClockHeader:
        """
        Read and check a header (its ``op`` is not looked at).

        :raises BadHeader: ``unix_ns`` is not a positive integer below 2^63.
        """
        unix_ns = header_object(value).get("unix_ns")
        if type(unix_ns) is not int or not 0 < unix_ns <= MAX_CLOCK_NS:
            raise BadHeader(f"unix_ns must be a positive integer (nanoseconds), not {unix_ns!r}")
        return cls(unix_ns)


__all__ = ["ClockHeader", "MAX_CLOCK_NS"]
