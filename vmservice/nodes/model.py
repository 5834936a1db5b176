# -*- test-case-name: tests.nodes.test_store -*-
"""
The node record: what the daemon knows and persists about each VM it owns.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import Enum

from attrs import evolve, frozen


class Status(str, Enum):
    """
    A node's lifecycle status as the API reports it.

    ``Creating`` is internal (a record written before the VM exists, so a
    crash half-way leaves a trace to clean up); it is listed as ``Running``'s
    predecessor and never returned by the API.
    """

    CREATING = "Creating"
    RUNNING = "Running"
    PAUSED = "Paused"
    STOPPED = "Stopped"


@frozen
class NodeRecord:
    """
    One node as persisted in ``<state_dir>/nodes/<hostname>/node.json``.

    :ivar hostname: unique within this daemon, ``<group>-<n>`` unless given.
    :ivar hostgroup: the host group it belongs to.
    :ivar ip: its address, or the empty string when it has no network.
    :ivar ram_bytes: guest memory.
    :ivar cpus: virtual CPUs.
    :ivar created_at: when it was created (UTC).
    :ivar tags: the caller's tags, in the order given.
    :ivar status: a :class:`Status` value.
    :ivar persistent: kept (stopped) when its VM ends, instead of removed.
    :ivar protected: cannot be deleted through the API.
    :ivar arch: the guest architecture.
    :ivar pid: the VMM process id while it runs.
    """

    hostname: str
    hostgroup: str
    ram_bytes: int
    cpus: int
    created_at: datetime
    status: Status = Status.CREATING
    ip: str = ""
    tags: tuple[str, ...] = ()
    persistent: bool = False
    protected: bool = False
    arch: str = "x86_64"
    pid: int | None = None

    def with_status(self, status: Status, pid: int | None = None) -> "NodeRecord":
        """A copy with another status (and pid)."""
        return evolve(self, status=status, pid=pid)


_HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def valid_hostname(name: str) -> bool:
    """Whether ``name`` is a lowercase RFC 1123 host label (at most 63 characters)."""
    return bool(_HOSTNAME.match(name))
