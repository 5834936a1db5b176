"""
A node's bulk port seen from the host: how many connections QEMU's end of it has
(:func:`bulk_connections`); and from the guest (:data:`BULK_PORT_OPEN`).
"""

from __future__ import annotations

import os

from tests.integration.daemon import Daemon

#: The guest's agent holds the bulk port open once a copy used it (shell: prints how many descriptors hold it).
BULK_PORT_OPEN = (
    "for d in /sys/class/virtio-ports/*; do [ \"$(cat $d/name)\" = bulk ] && b=$(basename $d); done; "
    "ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c \"/dev/$b\\$\""
)


def bulk_connections(daemon: Daemon, hostname: str) -> int:
    """Connected sockets of the node's bulk port (QEMU's end, in ``/proc/net/unix``)."""
    return socket_connections(os.path.join(daemon.state_dir, "nodes", hostname, "bulk.sock"))


def socket_connections(path: str) -> int:
    """
    Connected sockets of the listening UNIX socket bound at ``path`` (``/proc/net/unix`` names the path it
    was bound at, even after a rename: a spare-born node's are its spare's).
    """
    count = 0
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == path and fields[5] == "03":
                count += 1
    return count
