# -*- test-case-name: tests.hypervisors.qemu.test_processes,tests.integration.hypervisors.test_qemu -*-
"""
The QEMUs an earlier run of the daemon left, found by their command line in
the process file system (``-name vmservice-...`` and their QMP socket):
taken over (:meth:`QemuProcesses.adopt`) or killed through a pidfd, so never
a recycled pid; and the KVM probe's (:func:`sweep_probes`).
"""

from __future__ import annotations

import os
import signal

from zope.interface import implementer

from ..base import HypervisorError, IVmProcesses, MachineSpec
from .command_line import qmp_address
from .machine import QemuMachine
from .process import PidWatch
from .reactors import IQemuReactor


@implementer(IVmProcesses)
class QemuProcesses:
    """
    The QEMUs an earlier run of the daemon left: found by their command
    line (``-name vmservice-...`` and their QMP socket), taken over or
    killed through a pidfd.

    :param reactor: watches adopted QEMUs and runs their machines.
    :param proc: where the process file system is mounted (tests give a
        fake one).
    """

    def __init__(self, reactor: IQemuReactor, proc: str = "/proc") -> None:
        self._reactor = reactor
        self._proc = proc

    def adopt(
        self, spec: MachineSpec, pid: int, log_path: str | None = None, started_qmp: str | None = None
    ) -> QemuMachine:
        """
        Take over the QEMU of ``spec`` that an earlier run started: ``pid``
        must still be a QEMU whose monitor was ``started_qmp`` (when it was
        started under other names, those of a template's spare VM) or else
        ``spec.qmp_socket``; its monitor is reached at ``spec.qmp_socket``.
        The pidfd is opened before the command line is checked, so a
        recycled pid cannot slip in between.

        :param spec: the VM as it runs now.
        :param pid: the process id recorded for it.
        :param log_path: the file the earlier run sent QEMU's output to.
        :param started_qmp: the QMP socket its command line names, when not ``spec``'s.
        :raise HypervisorError: ``pid`` is gone or is not that VM.
        """
        pidfd = _open_vm(self._proc, pid, started_qmp or spec.qmp_socket)
        return QemuMachine(self._reactor, PidWatch(self._reactor, pid, pidfd), spec.qmp_socket, log_path)

    def orphans(self, directory: str, depth: int = 1) -> list[int]:
        """
        Pids of our QEMUs (``-name vmservice-...``) whose QMP socket is
        ``<directory>/<node>/qmp.sock`` (``depth`` 1; 2 for
        ``<directory>/<template>/<spare>/qmp.sock``): exactly that
        directory, never one that merely contains its name (another daemon's).
        """
        return _vms_under(self._proc, directory, depth)

    def kill_orphan(self, pid: int) -> None:
        """SIGKILL an orphan found by :meth:`orphans`, through a pidfd (so never a recycled pid)."""
        _kill_vm(self._proc, pid)


def _open_vm(proc: str, pid: int, qmp_socket: str | None) -> int:
    """A pidfd of ``pid`` if it is one of our QEMUs (with its monitor on ``qmp_socket`` when given)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as error:
        raise HypervisorError(f"process {pid} is gone: {error.strerror}") from None
    argv = _cmdline(proc, pid)
    wanted = ["-qmp", qmp_address(qmp_socket)] if qmp_socket else None
    if not _is_vm(argv) or (wanted is not None and not _contains(argv, wanted)):
        os.close(pidfd)
        raise HypervisorError(f"process {pid} is not the VM of {qmp_socket}")
    return pidfd


def _vms_under(proc: str, directory: str, depth: int) -> list[int]:
    """Pids of our QEMUs whose QMP socket lies ``depth`` directories under ``directory`` (0: in it)."""
    wanted = os.path.abspath(directory)
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        argv = _cmdline(proc, int(entry))
        socket = _qmp_socket(argv) if _is_vm(argv) else None
        if socket is None:
            continue
        parent = os.path.abspath(socket)
        for _ in range(depth + 1):
            parent = os.path.dirname(parent)
        if parent == wanted:
            found.append(int(entry))
    return sorted(found)


def _kill_vm(proc: str, pid: int) -> None:
    """SIGKILL ``pid`` through a pidfd if it is one of our QEMUs (so never a recycled pid)."""
    try:
        pidfd = _open_vm(proc, pid, None)
    except HypervisorError:
        return
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def sweep_probes(directory: str, proc: str = "/proc") -> list[int]:
    """
    Kill the probe QEMUs whose monitor is in ``directory`` (a probe's
    directory, :func:`.probe.probe_accel`'s): left by an earlier run of the daemon
    on the same state directory that ended without stopping its probe (a
    ``kill -9`` before the probe QEMU's parent-death signal was set, for
    one).  Call it with the state directory locked, before a new probe
    starts there.

    :param directory: the probe's directory.
    :param proc: where the process file system is mounted (tests give a fake one).
    :return: the pids killed.
    """
    found = _vms_under(proc, directory, 0)
    for pid in found:
        _kill_vm(proc, pid)
    return found


def _cmdline(proc: str, pid: int) -> list[str]:
    """The command line of ``pid`` as its words (none when it is gone or cannot be read)."""
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            return f.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def _is_vm(argv: list[str]) -> bool:
    """Whether ``argv`` is a QEMU this program starts (named ``vmservice-<hostname>``)."""
    return (
        bool(argv)
        and os.path.basename(argv[0]).startswith("qemu-system")
        and any(word.startswith("vmservice-") for word in argv[1:])
    )


def _qmp_socket(argv: list[str]) -> str | None:
    """The QMP socket path of a QEMU command line (``-qmp unix:PATH,...``), or ``None``."""
    for flag, value in zip(argv, argv[1:]):
        if flag == "-qmp" and value.startswith("unix:"):
            return value[len("unix:"):].split(",", 1)[0]
    return None


def _contains(argv: list[str], words: list[str]) -> bool:
    """Whether ``words`` appear in ``argv`` one after another."""
    return any(argv[i : i + len(words)] == words for i in range(len(argv)))


__all__ = ["QemuProcesses", "sweep_probes"]
