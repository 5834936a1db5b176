# -*- test-case-name: tests.hypervisors.qemu.test_driver,tests.hypervisors.qemu.test_network -*-
"""
The QEMU driver (:class:`QemuDriver`): starts each VM as a QEMU child of the
daemon, in a session of its own and in the VM's network namespace, and
hands back its :class:`~.machine.QemuMachine`.  A VM with a vsock device gets a
CID of its own at each start (:mod:`.cids`), recorded beside its agent socket
and released when its QEMU exits.
"""

from __future__ import annotations

import os
import shutil

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from ..base import Capabilities, HypervisorError, IHypervisor, IMachine, MachineSpec
from ..file_identity import binary_identity
from ..cid_file import read_cid, write_cid
from .cids import CidAllocator
from .command_line import QemuSettings, qemu_command
from .machine import QemuMachine
from .process import QemuProcess, child_env
from .reactors import IQemuReactor


@implementer(IHypervisor)
class QemuDriver:
    """
    Starts VMs as QEMU children.

    :param reactor: starts QEMU children and runs the machines (an ``IReactorProcess``, ``IReactorFDSet``,
        ``IReactorTime`` and ``IReactorUNIX`` provider).
    :param settings: the binary, accelerator and TSC frequency to use.
    :param cids: the CIDs of VMs with a vsock device (a new allocator by default).
    :param vsock_unusable: ``None`` when VMs can have a vhost-vsock device here
        (:func:`.vsock_probe.probe_vsock`), else why not.
    """

    capabilities = Capabilities(can_pause=True, can_suspend=True)

    def __init__(self, reactor: IQemuReactor, settings: QemuSettings, cids: CidAllocator | None = None,
                 vsock_unusable: str | None = "not probed") -> None:
        self._reactor = reactor
        self.settings = settings
        self.cids = cids if cids is not None else CidAllocator()
        self.vsock_unusable = vsock_unusable
        # QEMU runs in a session of its own: a Ctrl-C meant for the daemon
        # (sent to its whole process group) must not kill the VMs before the
        # daemon stops them its own way.
        setsid = shutil.which("setsid")
        self._prefix = [setsid] if setsid else []
        self._version: str | None = None

    @property
    def description(self) -> str:
        """How VMs run: ``qemu microvm, kvm`` or ``qemu microvm, tcg``."""
        return f"qemu microvm, {self.settings.accel}"

    @property
    def version(self) -> str:
        """
        The QEMU build: its binary's real path, size and modification time
        (a package upgrade changes them), read once.
        """
        if self._version is None:
            self._version = binary_identity(self.settings.binary)
        return self._version

    def start(self, spec: MachineSpec, log_path: str | None = None) -> Deferred[IMachine]:
        """
        Spawn QEMU for ``spec``.  Its stdout and stderr go to ``log_path``
        (a file beside the node's other files) so QEMU does not depend on the
        daemon's pipes staying open.
        """
        # In the VM's network namespace when it has one: "ip netns exec" and
        # setsid both exec in place, so the pid spawned is QEMU's.
        netns = ["ip", "netns", "exec", spec.net.netns] if spec.net is not None and spec.net.netns else []
        # Where the host has no vhost-vsock the guest still gets the vsock modules (its loopback works)
        # but no device: its agent is reached over the serial port.
        cid = self.cids.allocate() if spec.vsock and self.vsock_unusable is None else None
        argv = [*self._prefix, *netns, *qemu_command(spec, self.settings, cid)]
        process = QemuProcess()
        try:
            write_cid(spec.agent_socket, cid)
            output_fd = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            try:
                self._reactor.spawnProcess(
                    process, argv[0], argv, env=child_env(), childFDs={0: "w", 1: output_fd, 2: output_fd}
                )
            finally:
                os.close(output_fd)
        except OSError as error:
            if cid is not None:
                self.cids.release(cid)
            raise HypervisorError(f"cannot start {argv[0]}: {error}") from error
        machine = QemuMachine(self._reactor, process, spec.qmp_socket, log_path)
        if cid is not None:
            machine.ended.addBoth(lambda result: self._ended(spec.agent_socket, cid))
        return succeed(machine)

    def _ended(self, agent_socket: str, cid: int) -> None:
        """A QEMU with CID ``cid`` exited: the CID is free, and its file, unless a later start rewrote it, goes."""
        self.cids.release(cid)
        if read_cid(agent_socket) == cid:
            write_cid(agent_socket, None)


__all__ = ["QemuDriver"]
