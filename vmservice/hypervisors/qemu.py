# -*- test-case-name: tests.hypervisors.test_qemu,tests.hypervisors.test_qemu_network,tests.integration.hypervisors.test_qemu -*-
"""
The QEMU driver: a pure command-line builder, the child process, and the
KVM-or-TCG decision.

VMs run as ``qemu-system-x86_64 -machine microvm`` children of the daemon,
booting an uncompressed kernel through PVH with a small initramfs that mounts
the node's qcow2 disk.  The serial console goes to a file, the agent channel
to a virtio-serial port served on a UNIX socket, the monitor to a QMP socket.
A VM given host PCI devices runs ``microvm,pcie=on`` (a PCIe host bridge
described by ACPI) with one ``vfio-pci`` device each.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import stat
from typing import Callable, Protocol

from attrs import frozen
from twisted.internet.defer import (
    CancelledError, Deferred, FailureGroup, TimeoutError as DeferredTimeout, race, succeed,
)
from twisted.internet.endpoints import UNIXClientEndpoint, connectProtocol
from twisted.internet.error import ConnectError, ProcessDone, ProcessTerminated
from twisted.internet.interfaces import (
    IReactorFDSet,
    IReactorProcess,
    IReactorTime,
    IReactorUNIX,
    IReadDescriptor,
)
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import LoopingCall, deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from .base import (
    Capabilities,
    HypervisorError,
    IHypervisor,
    IVmProcesses,
    IMachine,
    MachineExit,
    MachineSpec,
    NetSpec,
    RAM_BACKEND_ID,
    RamBacking,
    describe_exit,
)
from ..observer import OneShotObserver
from ..private_files import create_private
from .qmp import JSON, JSONObject, QMPError, QMPProtocol

log = Logger()

MiB = 1024 * 1024

#: What the initramfs prints in probe mode before it powers off.
PROBE_MARKER = b"VMSERVICE_PROBE_OK"
#: The ``-name`` of the KVM probe's QEMU (a VM's is ``vmservice-<hostname>``).
PROBE_NAME = "vmservice-probe"
#: The probe's monitor socket, in its directory: the mark :func:`sweep_probes` finds it by.
PROBE_SOCKET = "qmp.sock"


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


@frozen
class QemuSettings:
    """
    How this host runs QEMU.

    :ivar binary: the QEMU system emulator to run.
    :ivar accel: ``kvm`` or ``tcg``.
    :ivar tsc_khz: the host TSC frequency in kHz, given to the guest kernel
        because ``microvm`` has no HPET or PM timer to calibrate against.
    :ivar tb_size_mb: MiB of translation cache per VM under TCG
        (``-accel tcg,tb-size=N``), 0 for QEMU's own default.  Not part of
        a migration's state: a clone may use another size than its template.
    """

    binary: str = "qemu-system-x86_64"
    accel: str = "tcg"
    tsc_khz: int | None = None
    tb_size_mb: int = 0


@frozen
class AccelChoice:
    """
    The outcome of the KVM probe.

    :ivar accel: ``kvm`` or ``tcg``.
    :ivar reason: one sentence saying why, for the log.
    :ivar lasting: a probe guest ran and gave this outcome, which holds as
        long as the host's kernel, its KVM device, QEMU and the guest kernel
        stay the same (:mod:`.probe_memory` remembers it); not for a choice
        set in the configuration or a probe that could not start.
    """

    accel: str
    reason: str
    lasting: bool = False


def host_tsc_khz(cpuinfo: str) -> int | None:
    """
    Read the host's CPU frequency in kHz from the text of ``/proc/cpuinfo``.

    :return: the frequency, or ``None`` when the text has none.
    """
    match = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", cpuinfo, re.MULTILINE)
    if match is None:
        return None
    return int(float(match.group(1)) * 1000)


def kernel_cmdline(
    hostname: str | None, tsc_khz: int | None, *, probe: bool = False, net: NetSpec | None = None,
    nic: bool = False, pci: bool = False, aslr: bool = True, reliable_tsc: bool = False,
) -> str:
    """
    Build the guest kernel command line.

    :param hostname: the node's hostname, handed to our init.
    :param tsc_khz: the TSC frequency to skip calibration with, if known.
    :param probe: boot the initramfs in probe mode (print a marker, power off).
    :param net: the guest's address and gateway, which our init applies
        (``vmservice.ip=``, ``vmservice.gateway=``).
    :param nic: the machine has a virtio-net device (``vmservice.nic=1``: the
        initramfs loads its driver; without it, it does not, which saves boot time).
    :param pci: the machine has a PCI bus (``vmservice.pci=1``: the initramfs
        loads ``virtio_pci`` too).
    :param aslr: false turns the guest's address space randomization off
        (``norandmaps``: ``kernel.randomize_va_space`` reads 0).
    :param reliable_tsc: the guest's TSC is known to tick steadily
        (``tsc=reliable``): under TCG it is the host's (less the time the VM
        stood still), one for every vCPU.  Without it the guest kernel's
        clocksource watchdog checks the TSC against jiffies, which lag
        whenever a busy host keeps the vCPU waiting (``microvm`` has no HPET
        or PM timer to check against); it then declares the TSC unstable and
        falls back to jiffies for good (4 ms steps, no high-resolution timers).
    """
    words = ["console=ttyS0", "quiet", "reboot=t"]
    if tsc_khz:
        words.append(f"tsc_early_khz={tsc_khz}")
    if reliable_tsc:
        words.append("tsc=reliable")
    if probe:
        words.append("vmservice.probe=1")
    else:
        words += ["root=/dev/vda", "rw"]
    if nic:
        words.append("vmservice.nic=1")
    if pci:
        words.append("vmservice.pci=1")
    if hostname:
        words.append(f"vmservice.hostname={hostname}")
    if net is not None:
        words += [f"vmservice.ip={net.address}", f"vmservice.gateway={net.gateway}"]
    if not aslr:
        words.append("norandmaps")
    return " ".join(words)


def _accel_args(accel: str, tb_size_mb: int = 0) -> list[str]:
    if accel == "kvm":
        return ["-accel", "kvm", "-cpu", "host"]
    # A bounded translation cache: QEMU's default lets it grow with all the code a guest ever ran.
    tcg = f"tcg,tb-size={tb_size_mb}" if tb_size_mb else "tcg"
    # Without ERMS/FSRM the guest's memcpy and copy_user avoid "rep movsb",
    # which TCG runs several times slower than the other copy loops.
    return ["-accel", tcg, "-cpu", "max,-erms,-fsrm"]


def _common_args(
    accel: str, vcpus: int, ram_bytes: int, *, pcie: bool = False, memory: RamBacking | None = None,
    tb_size_mb: int = 0,
) -> list[str]:
    machine = "microvm,pcie=on" if pcie else "microvm"
    if memory is not None:
        machine += f",memory-backend={RAM_BACKEND_ID}"
    return [
        "-machine", machine,
        *_accel_args(accel, tb_size_mb),
        "-m", str(max(ram_bytes // MiB, 16)),
        *_memory_args(memory, ram_bytes),
        "-smp", str(vcpus),
        "-nodefaults", "-no-user-config", "-display", "none",
    ]


def qemu_command(spec: MachineSpec, settings: QemuSettings) -> list[str]:
    """
    Build the full argv that starts the VM described by ``spec``.

    Pure: no file is touched, so it is unit-tested as a list of words.

    :param spec: the VM.
    :param settings: the binary, accelerator and TSC frequency of this host.
    """
    return [
        settings.binary,
        "-name", f"vmservice-{spec.name}",
        *_common_args(settings.accel, spec.vcpus, spec.ram_bytes, pcie=bool(spec.pci_devices), memory=spec.memory,
                      tb_size_mb=settings.tb_size_mb),
        "-kernel", spec.kernel,
        "-initrd", spec.initrd,
        "-append", kernel_cmdline(spec.name, settings.tsc_khz, net=spec.net, nic=spec.net is not None or spec.loose_nic is not None,
                                  pci=bool(spec.pci_devices), aslr=spec.aslr, reliable_tsc=settings.accel == "tcg"),
        # QEMU's default aio and cache modes and no I/O thread: measured against the others in
        # docs/performance.md ("The root disk: I/O thread, aio and cache modes").
        "-drive", f"id=root,file={spec.disk},format=qcow2,if=none,discard=unmap",
        "-device", "virtio-blk-device,drive=root",
        "-device", "virtio-serial-device",
        "-chardev", f"socket,id=agent,path={spec.agent_socket},server=on,wait=off",
        "-device", "virtserialport,chardev=agent,name=agent",
        *_metrics_args(spec.metrics_socket),
        *_bulk_args(spec.bulk_socket),
        # O_APPEND: the daemon bounds the file by truncating it (nodes/console_rotation.py), and
        # QEMU's next write then lands at its new end, not at its old offset past a hole.
        "-chardev", f"file,id=console,path={spec.console_log},append=on",
        "-serial", "chardev:console",
        "-qmp", qmp_address(spec.qmp_socket),
        *_net_args(spec.net, spec.loose_nic),
        *_pci_args(spec.pci_devices),
        *_incoming_args(spec),
    ]


def _incoming_args(spec: MachineSpec) -> list[str]:
    if spec.defer_incoming:
        return ["-incoming", "defer"]
    if spec.incoming:
        return ["-incoming", f"exec:cat {shlex.quote(spec.incoming)}"]
    return []


def _memory_args(memory: RamBacking | None, ram_bytes: int) -> list[str]:
    """
    The memory backend of a template (its RAM file mapped shared), a clone
    (the same file mapped private: ``share=off`` is what keeps a clone from
    writing into the template, QEMU 7.2 having no ``readonly``) or a
    restored clone (anonymous memory under the same block name).
    """
    if memory is None:
        return []
    size = f"size={max(ram_bytes // MiB, 16)}M"
    if memory.path is None:
        return ["-object", f"memory-backend-ram,id={RAM_BACKEND_ID},{size}"]
    share = "on" if memory.shared else "off"
    return ["-object", f"memory-backend-file,id={RAM_BACKEND_ID},{size},mem-path={memory.path},share={share}"]


def _bulk_args(socket: str | None) -> list[str]:
    """The bulk port: a third virtio-serial port, ``bulk``, that carries copies' bytes without frames."""
    if socket is None:
        return []
    return [
        "-chardev", f"socket,id=bulk,path={socket},server=on,wait=off",
        "-device", "virtserialport,chardev=bulk,name=bulk",
    ]


def _metrics_args(socket: str | None) -> list[str]:
    """The metrics channel: a second virtio-serial port, ``metrics``, served on its own UNIX socket."""
    if socket is None:
        return []
    return [
        "-chardev", f"socket,id=metrics,path={socket},server=on,wait=off",
        "-device", "virtserialport,chardev=metrics,name=metrics",
    ]


def _net_args(net: NetSpec | None, loose_nic: str | None = None) -> list[str]:
    if net is None and loose_nic is not None:
        # The same device as a node's, on a hub port that reaches nothing.
        return [
            "-netdev", "hubport,id=net0,hubid=0",
            "-device", f"virtio-net-device,netdev=net0,mac={loose_nic}",
        ]
    if net is None:
        return []
    return [
        "-netdev", f"tap,id=net0,ifname={net.tap},script=no,downscript=no",
        "-device", f"virtio-net-device,netdev=net0,mac={net.mac}",
    ]


def _pci_args(addresses: tuple[str, ...]) -> list[str]:
    """
    Host PCI devices passed through with VFIO, each on the root bus of the
    PCIe host bridge that ``microvm,pcie=on`` adds (microvm has no PCI bus
    otherwise; its own devices stay virtio-mmio).
    """
    args: list[str] = []
    for index, address in enumerate(addresses):
        args += ["-device", f"vfio-pci,host={address},id=hostdev{index}"]
    return args


def qmp_address(path: str) -> str:
    """The ``-qmp`` argument of a VM whose monitor listens on ``path``."""
    return f"unix:{path},server=on,wait=off"


def probe_command(
    binary: str, kernel: str, initrd: str, accel: str, tsc_khz: int | None, qmp_socket: str
) -> list[str]:
    """
    Build the argv of the probe guest: kernel and initramfs only, console on
    stdout, which prints :data:`PROBE_MARKER` and powers off.

    Named :data:`PROBE_NAME`, with a monitor on ``qmp_socket``: what finds a
    probe QEMU an earlier run of the daemon left (:func:`sweep_probes`), as
    a node's QMP socket finds its VM.

    :param binary: the QEMU system emulator.
    :param kernel: the guest kernel.
    :param initrd: the initramfs, booted in probe mode.
    :param accel: the accelerator to try (``kvm``).
    :param tsc_khz: the host TSC frequency for the guest kernel, if known.
    :param qmp_socket: the probe's monitor socket, in the probe's directory.
    """
    return [
        binary,
        "-name", PROBE_NAME,
        *_common_args(accel, 1, 128 * MiB),
        "-kernel", kernel,
        "-initrd", initrd,
        "-append", kernel_cmdline(None, tsc_khz, probe=True),
        "-serial", "stdio",
        "-qmp", qmp_address(qmp_socket),
        "-no-reboot",
    ]


class _Watched(Protocol):
    """
    What a :class:`QemuMachine` watches its QEMU process through: a child
    (:class:`_QemuProcess`) or an adopted process (:class:`_PidWatch`).
    """

    @property
    def pid(self) -> int:
        """The process id."""

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires with how the process ended."""

    def kill(self) -> None:
        """Send SIGKILL (a process already gone is fine)."""


class _QemuProcess(ProcessProtocol):
    """
    Watches one QEMU child: keeps the tail of its output and tells when it
    ended.

    :ivar output: the last bytes the child wrote on its output pipes.
    :ivar watch: a marker to look for in the output and the Deferred fired
        once it appears, or ``None``.
    """

    _TAIL = 8192

    def __init__(self) -> None:
        self._ended: OneShotObserver[MachineExit] = OneShotObserver()
        self.output = b""
        self.watch: tuple[bytes, Deferred[None]] | None = None
        self._pid: int | None = None

    def connectionMade(self) -> None:
        # Kept now: a child that ends at once (killed as it starts) is reaped
        # within spawnProcess, and its transport's pid is None from then on.
        self._pid = self.transport.pid if self.transport is not None else None

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires with how the child ended (at once if it has)."""
        return self._ended.when_fired()

    @property
    def finished(self) -> bool:
        """Whether the child has ended."""
        return self._ended.fired

    def _keep(self, data: bytes) -> None:
        self.output = (self.output + data)[-self._TAIL :]
        if self.watch is not None and self.watch[0] in self.output:
            marker, seen = self.watch
            self.watch = None
            seen.callback(None)

    def outReceived(self, data: bytes) -> None:
        self._keep(data)

    def errReceived(self, data: bytes) -> None:
        self._keep(data)

    @property
    def pid(self) -> int:
        """The child's process id (also once it has ended)."""
        if self._pid is None:
            raise AttributeError("the process has not started")
        return int(self._pid)

    def kill(self) -> None:
        """SIGKILL the child; one already gone is fine (processEnded follows)."""
        try:
            if self.transport is None:
                raise AttributeError("the process has not started")
            self.transport.signalProcess("KILL")
        except Exception:  # already gone: processEnded will follow
            pass

    def processEnded(self, reason: Failure) -> None:
        value = reason.value
        exit_code: int | None = None
        sig: int | None = None
        if isinstance(value, ProcessDone):
            exit_code = 0
        elif isinstance(value, ProcessTerminated):
            exit_code = value.exitCode
            sig = value.signal
        self._ended.fire(MachineExit(exit_code, sig, self.output.decode("utf-8", "replace")))


@implementer(IReadDescriptor)
class _PidWatch:
    """
    Watches a QEMU that is not our child (adopted after a daemon restart)
    through a pidfd, which becomes readable when the process ends.  Its exit
    status cannot be known: ``ended`` fires with a :class:`MachineExit` that
    has neither.

    :param reactor: watches the pidfd.
    :param pid: the process id.
    :param pidfd: a pidfd of ``pid``, closed once the process ended.
    """

    def __init__(self, reactor: IReactorFDSet, pid: int, pidfd: int) -> None:
        self._reactor = reactor
        self.pid = pid
        self._fd: int | None = pidfd
        self._ended: OneShotObserver[MachineExit] = OneShotObserver()
        reactor.addReader(self)

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires once the process is gone (at once if it is)."""
        return self._ended.when_fired()

    def fileno(self) -> int:
        return -1 if self._fd is None else self._fd

    def logPrefix(self) -> str:
        return f"pidfd {self.pid}"

    def doRead(self) -> None:
        """The pidfd is readable: the process ended."""
        self._close()
        self._ended.fire(MachineExit(None, None, ""))

    def connectionLost(self, reason: Failure) -> None:
        self.doRead()

    def kill(self) -> None:
        """SIGKILL the process through its pidfd (never a recycled pid)."""
        if self._fd is not None:
            try:
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)
            except OSError:
                pass

    def _close(self) -> None:
        if self._fd is not None:
            self._reactor.removeReader(self)
            os.close(self._fd)
            self._fd = None


@implementer(IMachine)
class QemuMachine:
    """
    A running QEMU: our child, or one adopted after a restart.

    :param reactor: runs timeouts and polls, and connects to the monitor.
    :param process: what watches the process: has ``pid``, ``ended`` (a
        Deferred firing once with a :class:`MachineExit`) and ``kill()``.
    :param qmp_socket: the path of the VM's QMP socket.
    :param log_path: the file QEMU writes its output to, whose tail the
        :class:`MachineExit` carries; ``None`` for none.
    :ivar pid: the QEMU process id.
    :ivar ended: fires with a :class:`MachineExit` when the process is gone
        (a new Deferred each time it is read, so many may wait).
    """

    #: Seconds between ACPI power-button presses while a graceful stop waits.
    POWER_BUTTON_REPEAT = 2.0
    #: Seconds a QMP command may take before QEMU is deemed stuck.
    QMP_TIMEOUT = 30.0
    #: Seconds between polls of a migration (save or load) in progress.
    POLL = 0.02
    #: Migration bandwidth limit while saving state (QEMU's default throttles
    #: a stopped VM's save to a crawl).
    SAVE_BANDWIDTH = 64 << 30
    #: Seconds a state may take to load into a VM waiting in ``-incoming defer``.
    LOAD_TIMEOUT = 60.0
    #: Seconds QEMU may take to exit after it reported a failed load (QEMU 7.2 exits at once).
    FAILED_LOAD_EXIT = 5.0
    #: The name a state file's descriptor is handed to QEMU under (``getfd``, then ``fd:NAME``).
    STATE_FD = "state"
    #: The name the descriptor of a state file being saved is handed to QEMU under.
    SAVE_FD = "saving"

    def __init__(
        self, reactor: IMachineReactor, process: _Watched, qmp_socket: str, log_path: str | None = None
    ) -> None:
        self._reactor = reactor
        self._log_path = log_path
        self._process = process
        self._qmp_socket = qmp_socket
        self._qmp: QMPProtocol | None = None
        #: The connection being made to the monitor, which callers meanwhile wait for.
        self._connecting: OneShotObserver[QMPProtocol] | None = None
        self._exit: MachineExit | None = None
        self._exited: OneShotObserver[MachineExit] = OneShotObserver()
        #: Called with each QMP event QEMU sends, on whichever session.
        self._event_watchers: list[Callable[[JSONObject], None]] = []
        #: Called each time the VM stops for lack of room on the host (see :meth:`on_no_room`).
        self._no_room_watchers: list[Callable[[], None]] = []
        self.pid: int = process.pid
        process.ended.addCallback(self._ended)

    def _ended(self, result: MachineExit) -> MachineExit:
        if self._log_path is not None:
            result = _with_log_tail(result, self._log_path)
        self._exit = result
        self._exited.fire(result)
        if self._qmp is not None and self._qmp.transport is not None:
            self._qmp.transport.loseConnection()
        return result

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires with how QEMU ended (at once if it has)."""
        return self._exited.when_fired()

    @property
    def running(self) -> bool:
        """Whether QEMU is still running."""
        return self._exit is None

    async def qmp(self, command: str, **arguments: JSON) -> JSON:
        """
        Run one QMP command, connecting to the monitor on first use (QEMU
        creates its socket a moment after it starts: a missing socket is
        tried again for a few seconds).

        :raise QMPError: when QEMU refuses the command or is gone.
        """
        return await self._execute(None, command, arguments)

    async def qmp_passing(self, fd: int, command: str, **arguments: JSON) -> JSON:
        """
        Run one QMP command with the open file descriptor ``fd`` passed along
        (``SCM_RIGHTS``), for ``getfd``: the caller closes ``fd`` afterwards.

        :raise QMPError: when QEMU refuses the command or is gone.
        """
        return await self._execute(fd, command, arguments)

    async def _execute(self, fd: int | None, command: str, arguments: dict[str, JSON]) -> JSON:
        if self._exit is not None:
            raise QMPError("the VM is not running")
        if self._qmp is None or self._qmp.transport is None or self._qmp.lost:
            self._qmp = await self._session()
        protocol = self._qmp
        if fd is not None:
            # Sent with the next bytes written, which are this command's (or a command before it,
            # which QEMU reads first): QEMU holds the descriptor until getfd takes it.
            protocol.send_fd(fd)
        answer = protocol.execute(command, **arguments)
        answer.addTimeout(self.QMP_TIMEOUT, self._reactor)
        try:
            return await answer
        except (CancelledError, DeferredTimeout):
            # A QEMU that does not answer: drop the session, so that a late
            # answer is never taken for the next command's.
            if protocol.transport is not None:
                protocol.transport.loseConnection()
            raise QMPError(f"{command}: no answer from QEMU within {self.QMP_TIMEOUT:g} s") from None

    async def _session(self) -> QMPProtocol:
        """
        One connection for every caller: QEMU serves one QMP client at a time
        (a second one is accepted by the kernel but never greeted), so
        callers that arrive while a connection is being made wait for it.
        """
        connecting = self._connecting
        if connecting is None:
            connecting = self._connecting = OneShotObserver()

            def settle(result: QMPProtocol | Failure, connected: OneShotObserver[QMPProtocol]) -> None:
                # The next caller after this one makes a new connection.
                self._connecting = None
                if isinstance(result, Failure):
                    connected.error(result)
                else:
                    connected.fire(result)

            Deferred.fromCoroutine(self._connect()).addBoth(settle, connecting)
        return await connecting.when_fired()

    async def _connect(self, attempts: int = 250) -> QMPProtocol:
        for attempt in range(attempts):
            endpoint = UNIXClientEndpoint(self._reactor, self._qmp_socket, timeout=5)
            protocol = QMPProtocol(self._event)
            try:
                await connectProtocol(endpoint, protocol)
            except ConnectError as error:
                # Missing, or still the socket file of an earlier QEMU (refused).
                if self._exit is None and attempt + 1 < attempts:
                    await deferLater(self._reactor, self.POLL, lambda: None)
                    continue
                raise QMPError(f"cannot reach QMP: {error}") from error
            ready = protocol.ready
            ready.addTimeout(self.QMP_TIMEOUT, self._reactor)
            try:
                await ready
            except (CancelledError, DeferredTimeout):
                if protocol.transport is not None:
                    protocol.transport.loseConnection()
                raise QMPError(f"QEMU did not greet on QMP within {self.QMP_TIMEOUT:g} s") from None
            return protocol
        raise QMPError("cannot reach QMP")

    def _event(self, event: JSONObject) -> None:
        for watcher in list(self._event_watchers):
            watcher(event)

    def on_no_room(self, callback: Callable[[], None]) -> None:
        """
        Call ``callback`` each time QEMU stops the VM on a write to its disk
        that the host's file system had no room for: QEMU's default
        ``werror=enospc`` for the root drive, told by a ``BLOCK_IO_ERROR``
        event with ``nospace`` (events come on the QMP session, which is
        opened now and kept); and at once when ``query-status`` says
        ``io-error`` now (a VM adopted in that state).  See
        :meth:`IMachine.on_no_room`.
        """
        self._no_room_watchers.append(callback)
        if len(self._no_room_watchers) == 1:
            self._event_watchers.append(self._io_error)
            Deferred.fromCoroutine(self._stopped_now()).addErrback(lambda failure: None)

    def _io_error(self, event: JSONObject) -> None:
        data = event.get("data")
        if event.get("event") == "BLOCK_IO_ERROR" and isinstance(data, dict) and data.get("nospace") is True \
                and data.get("action") == "stop":
            self._no_room()

    async def _stopped_now(self) -> None:
        """Open the QMP session (for the events); tell the watchers if the VM is stopped on an I/O error now."""
        if await self._run_state() == "io-error":
            self._no_room()

    def _no_room(self) -> None:
        for watcher in list(self._no_room_watchers):
            try:
                watcher()
            except Exception:
                log.failure("a watcher of a VM stopped for lack of room failed")

    def kill(self) -> Deferred[MachineExit]:
        """Kill QEMU with SIGKILL and fire when it is gone."""
        if self._exit is None:
            self._process.kill()
        return self.ended

    def pause(self) -> Deferred[None]:
        """QMP ``stop``; see :meth:`IMachine.pause`."""
        return Deferred.fromCoroutine(self._command("stop"))

    def resume(self) -> Deferred[None]:
        """
        QMP ``cont``, after cancelling a migration still under way (a state
        save that an earlier run of the daemon began before it died: once it
        completed, QEMU would stop the VM again, for good); see
        :meth:`IMachine.resume`.
        """
        return Deferred.fromCoroutine(self._resume())

    async def _resume(self) -> None:
        if await self._migrating():
            await self._command("migrate_cancel")
            while await self._migrating():
                await deferLater(self._reactor, self.POLL, lambda: None)
        await self._command("cont")

    async def _migrating(self) -> bool:
        """Whether a migration is under way (not yet completed, failed or cancelled)."""
        try:
            info = await self.qmp("query-migrate")
        except QMPError as error:
            raise HypervisorError(f"query-migrate: {error}") from error
        return isinstance(info, dict) and info.get("status") not in (None, "none", "completed", "failed", "cancelled")

    def reset(self) -> Deferred[None]:
        """QMP ``system_reset``; see :meth:`IMachine.reset`."""
        return Deferred.fromCoroutine(self._command("system_reset"))

    def power_button(self) -> Deferred[None]:
        """QMP ``system_powerdown``; see :meth:`IMachine.power_button`."""
        return Deferred.fromCoroutine(self._command("system_powerdown"))

    async def _command(self, command: str, **arguments: JSON) -> None:
        try:
            await self.qmp(command, **arguments)
        except QMPError as error:
            raise HypervisorError(f"{command}: {error}") from error

    def run_state(self) -> Deferred[str]:
        """The ``status`` of QMP ``query-status``; see :meth:`IMachine.run_state`."""
        return Deferred.fromCoroutine(self._run_state())

    async def _run_state(self) -> str:
        try:
            return str(_member(await self.qmp("query-status"), "status"))
        except (QMPError, KeyError, TypeError) as error:
            raise HypervisorError(f"query-status: {error}") from error

    def save_state(self, path: str) -> Deferred[None]:
        """
        Stop the VM and migrate its state into the new file ``path`` (see
        :meth:`_migrate_to`); fires once QEMU reports the migration completed.
        """
        return Deferred.fromCoroutine(self._save_state(path))

    async def _save_state(self, path: str) -> None:
        await self._command("stop")
        # A clone loaded its state with x-ignore-shared on: its snapshot holds all of its memory.
        await self._ignore_shared(False)
        await self._command("migrate-set-parameters", **{"max-bandwidth": self.SAVE_BANDWIDTH})
        await self._migrate_to(path)
        await self._migration_done("saving the VM state")

    async def _migrate_to(self, path: str) -> None:
        """
        Start a migration into the new file ``path``: the daemon creates it
        (0600 whatever QEMU's umask, never through a link, never over a file
        that exists) and hands QEMU its descriptor (``getfd``, ``fd:``);
        QEMU 7.2 has no ``file:`` migration, and ``exec:cat > path`` would
        have a shell create it with QEMU's umask, following links.

        :raise HypervisorError: the file cannot be made, or QEMU refused.
        """
        try:
            fd = create_private(path)
        except OSError as error:
            raise HypervisorError(f"cannot create the state file: {error}") from error
        await self._pass_descriptor(fd, self.SAVE_FD)
        await self._command("migrate", uri=f"fd:{self.SAVE_FD}")

    async def _migration_done(self, what: str) -> None:
        """Poll ``query-migrate`` until the migration under way completed; raise if it failed."""
        while True:
            try:
                info = await self.qmp("query-migrate")
            except QMPError as error:
                raise HypervisorError(f"{what}: {error}") from error
            if not isinstance(info, dict):
                raise HypervisorError(f"{what}: query-migrate answered {info!r}")
            status = info.get("status")
            if status == "completed":
                return
            if status in ("failed", "cancelled"):
                raise HypervisorError(f"{what} {status}: {info.get('error-desc', 'no reason given')}")
            await deferLater(self._reactor, self.POLL, lambda: None)

    async def _ignore_shared(self, on: bool) -> None:
        """Whether migrations leave out memory mapped from a shared file (QMP only on QEMU 7.2)."""
        await self._command(
            "migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": on}]
        )

    def save_device_state(self, path: str) -> Deferred[None]:
        """
        Write the device state of a running template to ``path`` without
        ``stop`` (``x-ignore-shared``: its memory is its RAM file); see
        :meth:`IMachine.save_device_state`.
        """
        return Deferred.fromCoroutine(self._save_device_state(path))

    async def _save_device_state(self, path: str) -> None:
        await self._ignore_shared(True)
        await self._command("migrate-set-parameters", **{"max-bandwidth": self.SAVE_BANDWIDTH})
        await self._migrate_to(path)
        await self._migration_done("saving the device state")

    def load_device_state(self, path: str, resume: bool = False) -> Deferred[None]:
        """
        Load a template's device state into a clone waiting in ``-incoming
        defer``, and fire once it runs; see :meth:`IMachine.load_device_state`.
        """
        return Deferred.fromCoroutine(self._load_device_state(path, resume))

    async def _load_device_state(self, path: str, resume: bool) -> None:
        status = await self._incoming(path, ignore_shared=True)
        if status == "paused" and resume:
            await self._command("cont")
            status = "running"
        if status != "running":
            raise HypervisorError(f"loading the device state left the VM {status!r}")

    def snapshot_disk(self, overlay: str) -> Deferred[None]:
        """
        Switch the root drive to the existing qcow2 ``overlay`` (its header
        names the old disk's new place; QEMU does not rewrite it); see
        :meth:`IMachine.snapshot_disk`.
        """
        return Deferred.fromCoroutine(
            self._command("blockdev-snapshot-sync", device="root", **{"snapshot-file": overlay},
                          format="qcow2", mode="existing")
        )

    def load_state(self, path: str) -> Deferred[None]:
        """Load a full saved state into a VM waiting in ``-incoming defer``; see :meth:`IMachine.load_state`."""
        return Deferred.fromCoroutine(self._load_state(path))

    async def _load_state(self, path: str) -> None:
        await self._incoming(path, ignore_shared=False)

    async def _incoming(self, path: str, ignore_shared: bool) -> str:
        """
        Load the state file ``path`` into a VM waiting in ``-incoming defer``:
        QEMU reads it from a descriptor handed over QMP (no shell, no ``cat``
        forked off the big QEMU process), and tells the load's end by its
        events (no polling).

        :param ignore_shared: load with ``x-ignore-shared`` (a clone's device
            state; QEMU 7.2 knows no ``-global`` for it, so it is set here).
        :return: the run state the VM was left in, ``running`` or ``paused``.
        :raise HypervisorError: the state did not load (QEMU exits on a state
            it cannot load: the error says how it ended), or not in time.
        """
        capabilities: list[JSON] = [{"capability": "events", "state": True}]
        if ignore_shared:
            capabilities.append({"capability": "x-ignore-shared", "state": True})
        await self._command("migrate-set-capabilities", capabilities=capabilities)
        outcome: Deferred[str] = Deferred()

        def settle(status: str) -> None:
            if not outcome.called:
                outcome.callback(status)

        def watch(event: JSONObject) -> None:
            data = event.get("data")
            status = data.get("status") if isinstance(data, dict) else None
            if event.get("event") == "RESUME":
                settle("running")
            elif event.get("event") == "MIGRATION" and status in ("completed", "failed", "cancelled"):
                settle(str(status))

        self._event_watchers.append(watch)
        exited = self.ended
        exited.addCallback(lambda _: settle("exited")).addErrback(lambda _: None)
        try:
            await self._hand_over(path)
            await self._command("migrate-incoming", uri=f"fd:{self.STATE_FD}")
            status = await outcome.addTimeout(self.LOAD_TIMEOUT, self._reactor)
        except DeferredTimeout:
            raise HypervisorError(f"loading the VM state: not done within {self.LOAD_TIMEOUT:g} s") from None
        except HypervisorError as error:
            if self._exit is not None:
                raise HypervisorError(f"loading the VM state: {describe_exit(self._exit)}") from None
            raise HypervisorError(f"loading the VM state: {error}") from error
        finally:
            self._event_watchers.remove(watch)
            exited.cancel()
        return await self._loaded(status)

    async def _hand_over(self, path: str) -> None:
        """Hand QEMU an open descriptor of ``path`` as :attr:`STATE_FD` (``getfd``)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            raise HypervisorError(f"cannot open the state file: {error}") from error
        await self._pass_descriptor(fd, self.STATE_FD)

    async def _pass_descriptor(self, fd: int, name: str) -> None:
        """Hand QEMU the descriptor ``fd`` as ``name`` (``getfd``) and close ours, whatever QEMU says."""
        try:
            await self.qmp_passing(fd, "getfd", fdname=name)
        except QMPError as error:
            raise HypervisorError(f"getfd: {error}") from error
        finally:
            os.close(fd)

    async def _loaded(self, status: str) -> str:
        """The run state after the load ended with ``status`` (an event's, or ``exited``)."""
        if status == "running":
            return status
        if status == "completed":
            # Loaded, but no RESUME: a state saved stopped, which QEMU leaves paused.
            status = await self._run_state()
            if status not in ("paused", "running"):
                raise HypervisorError(f"loading the VM state left it {status!r}")
            return status
        if status != "exited":
            # QEMU 7.2 exits right after a failed load: report how, as for an exit seen first.
            ended = self.ended
            ended.addTimeout(self.FAILED_LOAD_EXIT, self._reactor)
            try:
                await ended
            except (CancelledError, DeferredTimeout):
                raise HypervisorError(f"loading the VM state {status}") from None
        assert self._exit is not None
        raise HypervisorError(f"loading the VM state: {describe_exit(self._exit)}")

    def finish_incoming(self) -> Deferred[None]:
        """Poll ``query-status`` until QEMU leaves ``inmigrate``; see :meth:`IMachine.finish_incoming`."""
        return Deferred.fromCoroutine(self._finish_incoming())

    async def _finish_incoming(self) -> None:
        while True:
            try:
                status = await self._run_state()
            except HypervisorError as error:
                if self._exit is not None:
                    raise HypervisorError(f"loading the VM state: {describe_exit(self._exit)}") from None
                raise HypervisorError(f"loading the VM state: {error}") from error
            if status in ("paused", "running"):
                return
            if status != "inmigrate":
                raise HypervisorError(f"loading the VM state left it {status!r}")
            await deferLater(self._reactor, self.POLL, lambda: None)

    def stop(self, graceful: bool, grace: float) -> Deferred[MachineExit]:
        """
        Stop the VM: ACPI power-down through QMP when ``graceful``, then
        SIGKILL once ``grace`` seconds have passed without the process ending.
        """
        return Deferred.fromCoroutine(self._stop(graceful, grace))

    async def _stop(self, graceful: bool, grace: float) -> MachineExit:
        if self._exit is not None:
            return self._exit
        if graceful:
            try:
                await self.qmp("system_powerdown")
            except QMPError as error:
                log.info("graceful stop of pid {pid} failed: {error}", pid=self.pid, error=error)
            else:
                ended = self.ended
                timer = self._reactor.callLater(grace, self.kill)
                # A press the guest sends before its power-button watcher
                # opened the input device is lost: press again now and then.
                again = LoopingCall(self._press_power_button)
                again.clock = self._reactor
                again.start(self.POWER_BUTTON_REPEAT, now=False)
                result = await ended
                again.stop()
                if timer.active():
                    timer.cancel()
                return result
        return await self.kill()

    def _press_power_button(self) -> None:
        Deferred.fromCoroutine(self.qmp("system_powerdown")).addErrback(lambda failure: None)


@implementer(IHypervisor)
class QemuDriver:
    """
    Starts VMs as QEMU children.

    :param reactor: starts QEMU children and runs the machines (an ``IReactorProcess``, ``IReactorFDSet``,
        ``IReactorTime`` and ``IReactorUNIX`` provider).
    :param settings: the binary, accelerator and TSC frequency to use.
    """

    capabilities = Capabilities(can_pause=True, can_suspend=True)

    def __init__(self, reactor: IQemuReactor, settings: QemuSettings) -> None:
        self._reactor = reactor
        self.settings = settings
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
        argv = [*self._prefix, *netns, *qemu_command(spec, self.settings)]
        process = _QemuProcess()
        output_fd = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            self._reactor.spawnProcess(
                process, argv[0], argv, env=_child_env(), childFDs={0: "w", 1: output_fd, 2: output_fd}
            )
        except OSError as error:
            raise HypervisorError(f"cannot start {argv[0]}: {error}") from error
        finally:
            os.close(output_fd)
        return succeed(QemuMachine(self._reactor, process, spec.qmp_socket, log_path))


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
        return QemuMachine(self._reactor, _PidWatch(self._reactor, pid, pidfd), spec.qmp_socket, log_path)

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
    directory, :func:`probe_accel`'s): left by an earlier run of the daemon
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


def binary_identity(binary: str) -> str:
    """
    What identifies the build of the program ``binary`` (found on ``PATH``):
    its real path, size and modification time; only the name when it is
    not found.
    """
    found = shutil.which(binary)
    if found is None:
        return binary
    path = os.path.realpath(found)
    info = os.stat(path)
    return f"{path} {info.st_size} {info.st_mtime_ns}"


def _cmdline(proc: str, pid: int) -> list[str]:
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


def _member(answer: JSON, key: str) -> JSON:
    """``answer[key]`` of a QMP answer: KeyError when absent, TypeError when it is no object."""
    if not isinstance(answer, dict):
        raise TypeError(f"{answer!r} is not a JSON object")
    return answer[key]


def _contains(argv: list[str], words: list[str]) -> bool:
    return any(argv[i : i + len(words)] == words for i in range(len(argv)))


def _with_log_tail(ended: MachineExit, log_path: str) -> MachineExit:
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ended
    return MachineExit(ended.exit_code, ended.signal, tail)


def _child_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LC_ALL": "C"}


def kvm_usable(path: str = "/dev/kvm") -> bool:
    """
    Whether the KVM device exists and can be opened for reading and writing.

    :param path: the KVM device.
    """
    return os.access(path, os.R_OK | os.W_OK)


def _probe_directory(path: str) -> None:
    """Make the probe's directory (0700), or check the one there is a directory and no link."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise NotADirectoryError(f"{path} is not a directory") from None


def _parent_death_prefix() -> list[str]:
    """
    ``setpriv --pdeathsig KILL`` (util-linux), which execs its program in
    place (the pid spawned stays QEMU's) with the kernel told to SIGKILL it
    when its parent, the daemon, dies: even by ``kill -9``.  Nothing when
    ``setpriv`` is missing (the next start's :func:`sweep_probes` is then
    the only net).
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


async def probe_accel(
    reactor: IProbeReactor,
    binary: str,
    kernel: str,
    initrd: str,
    requested: str,
    tsc_khz: int | None,
    *,
    directory: str,
    kvm_path: str = "/dev/kvm",
    timeout: float = 15.0,
) -> AccelChoice:
    """
    Decide between KVM and TCG.

    ``requested`` is the configuration's ``accel``: ``tcg`` and ``kvm`` are
    obeyed as they are; ``auto`` uses KVM only when the device is usable and a
    probe guest really boots under it within ``timeout`` seconds (a nested
    KVM may crash QEMU at once or run a guest that never gets anywhere), and
    TCG otherwise.

    The probe QEMU never outlives the probe: it is killed and reaped once
    the decision is made, and also when the returned coroutine is cancelled
    (the daemon stops during the probe), which then ends only once the
    QEMU is gone.  It dies with the daemon (a parent-death signal), and it
    is marked as this state directory's probe (its monitor in ``directory``)
    so that :func:`sweep_probes` finds one that survived anyway.

    :param reactor: runs the probe QEMU and its timeout.
    :param binary: the QEMU system emulator.
    :param kernel: the guest kernel the probe boots.
    :param initrd: the initramfs, which has a probe mode.
    :param requested: ``kvm``, ``tcg`` or ``auto``.
    :param tsc_khz: the host TSC frequency for the guest kernel, if known.
    :param directory: the probe's directory (made 0700 if missing), where
        its monitor socket is.
    :param kvm_path: the KVM device.
    :param timeout: seconds the probe guest has to show a sign of life.
    """
    if requested in ("kvm", "tcg"):
        return AccelChoice(requested, "set in the configuration")
    if not kvm_usable(kvm_path):
        return AccelChoice("tcg", f"{kvm_path} is missing or not accessible")
    argv = [*_parent_death_prefix(),
            *probe_command(binary, kernel, initrd, "kvm", tsc_khz, os.path.join(directory, PROBE_SOCKET))]
    process = _QemuProcess()
    seen: Deferred[None] = Deferred()
    process.watch = (PROBE_MARKER, seen)
    try:
        _probe_directory(directory)
        transport = reactor.spawnProcess(
            process, argv[0], argv, env=_child_env(), childFDs={0: "w", 1: "r", 2: "r"}
        )
    except OSError as error:
        return AccelChoice("tcg", f"the KVM probe could not start: {error}")
    try:
        # The first of: the marker, the end of the probe QEMU, the timeout (the
        # others are cancelled).  None of them fails: all do only when this
        # coroutine is cancelled, which cancels the race.
        try:
            _, result = await race(
                [
                    seen.addCallback(lambda _: "ok"),
                    process.ended.addCallback(describe_exit),
                    deferLater(reactor, timeout, lambda: f"no sign of life from the probe guest in {timeout:g} s"),
                ]
            )
        except FailureGroup:
            raise CancelledError("the KVM probe was stopped") from None
    finally:
        if not process.finished:
            try:
                transport.signalProcess("KILL")
            except Exception:
                pass
            await process.ended
    if result == "ok":
        return AccelChoice("kvm", "a probe guest booted under KVM", lasting=True)
    return AccelChoice("tcg", f"the KVM probe failed ({result})", lasting=True)


__all__ = [
    "AccelChoice",
    "IMachineReactor",
    "IProbeReactor",
    "IQemuReactor",
    "PROBE_MARKER",
    "PROBE_NAME",
    "PROBE_SOCKET",
    "QemuDriver",
    "QemuMachine",
    "QemuProcesses",
    "QemuSettings",
    "binary_identity",
    "describe_exit",
    "host_tsc_khz",
    "kernel_cmdline",
    "kvm_usable",
    "probe_accel",
    "probe_command",
    "qemu_command",
    "qmp_address",
    "sweep_probes",
]
