# -*- test-case-name: tests.service -*-
"""What the daemon needs of its reactor, named once for the type checker."""

from __future__ import annotations

from twisted.internet.interfaces import IReactorSSL, IReactorTCP

from ..agent.client import ClientReactor
from ..auth import IWatchReactor
from ..hypervisors.qemu import IProbeReactor, IQemuReactor


class IDaemonReactor(IQemuReactor, IProbeReactor, ClientReactor, IReactorTCP, IReactorSSL, IWatchReactor):
    """
    What the daemon needs of its reactor: QEMU children and their sockets and
    pidfds (:class:`~vmservice.hypervisors.qemu.IQemuReactor`), TCP and UNIX
    listeners (and a TLS one, the kubelet port), threads for file reads off the loop.  Twisted's reactors
    provide each part; this combination only names them for the type checker.
    """
