# -*- test-case-name: tests.guest.test_agent,tests.guest.test_userdata -*-
"""
``{"op": "health"}``: the agent's uptime, the system's, its version and
whether the node's userdata ran.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

import vmservice.wire.jsontext as jsontext
from vmservice.guest.streams import StreamHandler
from vmservice.guest.userdata_marker import read_userdata_marker, userdata_ran


def system_uptime_ns(path: str = "/proc/uptime") -> int:
    """
    Time since the guest kernel booted, in integer nanoseconds, parsed exactly from
    the decimal text of ``/proc/uptime``.
    """
    with open(path, "rb") as f:
        text = f.read().split()[0].decode("ascii")
    seconds, _, fraction = text.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


class HealthHandler(StreamHandler):
    """
    ``{"op": "health"}``: one DATA with the agent's health as JSON, then HALF_CLOSE.

    The reply has ``agent_uptime`` and ``system_uptime`` (integer nanoseconds),
    ``agent_version`` and ``userdata_ran``, the fields of the API's AgentHealth,
    and ``userdata_exit_code`` once userdata has exited.
    """

    def start(self) -> None:
        context = self.stream.context
        marker = read_userdata_marker(context.userdata_marker)
        report: dict[str, Any] = {
            "agent_uptime": time.monotonic_ns() - context.started_ns,
            "agent_version": context.version,
            "system_uptime": system_uptime_ns(context.proc_uptime),
            "userdata_ran": userdata_ran(marker),
        }
        exit_code = marker.get("exit_code") if marker is not None else None
        if type(exit_code) is int:
            report["userdata_exit_code"] = exit_code
        self.stream.write(jsontext.dumps(report).encode("utf-8"))
        self.stream.end()


__all__ = ["HealthHandler", "system_uptime_ns"]
