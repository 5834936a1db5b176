"""
A node's bulk port seen from the host: how many connections QEMU's end of it has
(:func:`bulk_connections`).
"""

from __future__ import annotations

import os

from tests.integration.daemon import Daemon


def bulk_connections(daemon: Daemon, hostname: str) -> int:
    """Connected sockets of the node's bulk port (QEMU's end, in ``/proc/net/unix``)."""
    path = os.path.join(daemon.state_dir, "nodes", hostname, "bulk.sock")
    count = 0
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == path and fields[5] == "03":
                count += 1
    return count
