# -*- test-case-name: tests.hypervisors.qemu.test_driver,tests.hypervisors.qemu.test_probe -*-
"""
What the QEMU driver needs of its reactor, one interface per user: its
machines (:class:`IMachineReactor`), the KVM probe (:class:`IProbeReactor`)
and the driver with its adopted processes (:class:`IQemuReactor`).
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorFDSet, IReactorProcess, IReactorTime, IReactorUNIX


class IMachineReactor(IReactorTime, IReactorUNIX):
    """
    What a :class:`QemuMachine` needs of its reactor: time (timeouts, polls,
    power-button presses) and UNIX sockets (the QMP monitor).  Every reactor
    that provides both interfaces will do; this combination only names the
    pair for the type checker.
    """


class IProbeReactor(IReactorTime, IReactorProcess):
    """
    What :func:`probe_accel` needs of its reactor: a child process and a
    timeout.
    """


class IQemuReactor(IMachineReactor, IReactorProcess, IReactorFDSet):
    """
    What a :class:`QemuDriver` needs of its reactor: children (QEMU), a file
    descriptor set (the pidfds of adopted VMs) and, for its machines, time
    and UNIX sockets.
    """


__all__ = ["IMachineReactor", "IProbeReactor", "IQemuReactor"]
