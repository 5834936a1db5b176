# -*- test-case-name: tests.integration.guest.test_vsock_listener,tests.integration.guest.test_agent -*-
"""
The listening sockets of the guest's agents: a UNIX socket standing in for
QEMU's server socket in tests on the host (:func:`unix_listener`, the agent's
and the metrics agent's ``--listen-unix``), and the agent's AF_VSOCK listener
(:func:`vsock_listener`).  Standard library only; :mod:`socket` is imported
only here, when a listener is made (its import costs under TCG, and a guest
without vsock never makes one).
"""

from __future__ import annotations

import os
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

#: The AF_VSOCK port the agent listens on (``--listen-vsock``, ``vmservice.vsock=1``); the host's
#: :data:`vmservice.agent.vsock.AGENT_VSOCK_PORT` is the same number.
VSOCK_PORT = 700
#: Connections the vsock listener's backlog holds while the agent's session slot is taken.
VSOCK_BACKLOG = 4


def unix_listener(path: str) -> "socket.socket":
    """A stream socket listening at ``path`` (a file left there is replaced)."""
    import socket

    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    return listener


def vsock_listener(port: int = VSOCK_PORT) -> "socket.socket":
    """
    A socket listening on AF_VSOCK ``port`` of any CID the guest has: bound to
    ``VMADDR_CID_ANY``, it keeps listening when a restore or a clone's transport
    reset gives the guest another CID.  Raises ``OSError`` when the guest has no
    vsock (the modules not loaded: the kernel command line lacked ``vmservice.vsock=1``).
    """
    import socket

    listener = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        listener.bind((socket.VMADDR_CID_ANY, port))
        listener.listen(VSOCK_BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


__all__ = ["VSOCK_BACKLOG", "VSOCK_PORT", "unix_listener", "vsock_listener"]
