# -*- test-case-name: tests.hypervisors.qemu.test_command_line,tests.hypervisors.qemu.test_network -*-
"""
QEMU's command lines, built as lists of words (pure: no file is touched).

VMs run as ``qemu-system-x86_64 -machine microvm``, booting an uncompressed
kernel through PVH with a small initramfs that mounts the node's qcow2 disk.
The serial console goes to a file, the agent channel to a virtio-serial port
served on a UNIX socket, the monitor to a QMP socket.  A VM given host PCI
devices runs ``microvm,pcie=on`` (a PCIe host bridge described by ACPI) with
one ``vfio-pci`` device each.  The KVM probe's guest has a command line of
its own (:func:`probe_command`).
"""

from __future__ import annotations

import re
import shlex

from attrs import frozen

from ...wire.tunnelport import port_name
from ..base import MachineSpec, NetSpec, RAM_BACKEND_ID, RamBacking

MiB = 1024 * 1024

#: The ``-name`` of the KVM probe's QEMU (a VM's is ``vmservice-<hostname>``).
PROBE_NAME = "vmservice-probe"


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
    nic: bool = False, pci: bool = False, aslr: bool = True, reliable_tsc: bool = False, vsock: bool = False,
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
    :param vsock: the machine has a vhost-vsock device (``vmservice.vsock=1``: the
        initramfs loads the vsock modules and the agent listens on vsock).
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
    if vsock:
        words.append("vmservice.vsock=1")
    if hostname:
        words.append(f"vmservice.hostname={hostname}")
    if net is not None:
        words += [f"vmservice.ip={net.address}", f"vmservice.gateway={net.gateway}"]
    if not aslr:
        words.append("norandmaps")
    return " ".join(words)


def _accel_args(accel: str, tb_size_mb: int = 0) -> list[str]:
    """The accelerator and CPU model: the host's CPU under KVM, ``max`` less the slow string copies under TCG."""
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
    """The words every QEMU of ours has: the machine, accelerator, memory, vCPUs and no default devices."""
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


def qemu_command(spec: MachineSpec, settings: QemuSettings, cid: int | None = None) -> list[str]:
    """
    Build the full argv that starts the VM described by ``spec``.

    Pure: no file is touched, so it is unit-tested as a list of words.

    :param spec: the VM.
    :param settings: the binary, accelerator and TSC frequency of this host.
    :param cid: the guest's vsock CID when ``spec.vsock`` (its vhost-vsock device);
        without one the guest still loads the vsock modules (and reaches its own
        agent over the loopback, CID 1) but the host cannot reach it.
    """
    return [
        settings.binary,
        "-name", f"vmservice-{spec.name}",
        *_common_args(settings.accel, spec.vcpus, spec.ram_bytes, pcie=bool(spec.pci_devices), memory=spec.memory,
                      tb_size_mb=settings.tb_size_mb),
        "-kernel", spec.kernel,
        "-initrd", spec.initrd,
        "-append", kernel_cmdline(spec.name, settings.tsc_khz, net=spec.net, nic=spec.net is not None or spec.loose_nic is not None,
                                  pci=bool(spec.pci_devices), aslr=spec.aslr, reliable_tsc=settings.accel == "tcg",
                                  vsock=spec.vsock),
        # QEMU's default aio and cache modes and no I/O thread: measured against the others in
        # docs/performance.md ("The root disk: I/O thread, aio and cache modes").
        "-drive", f"id=root,file={spec.disk},format=qcow2,if=none,discard=unmap",
        "-device", "virtio-blk-device,drive=root",
        "-device", "virtio-serial-device",
        "-chardev", f"socket,id=agent,path={spec.agent_socket},server=on,wait=off",
        "-device", "virtserialport,chardev=agent,name=agent",
        *_metrics_args(spec.metrics_socket),
        *_bulk_args(spec.bulk_socket),
        *_tunnel_args(spec.tunnel_sockets),
        *_vsock_args(cid if spec.vsock else None),
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
    """Where a VM's state comes from: later over QMP (``defer``), a saved state file, or nowhere (a boot)."""
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
    return _port_args("bulk", socket)


def _port_args(name: str, socket: str) -> list[str]:
    """A virtio-serial port called ``name`` whose host end is QEMU's server socket ``socket``."""
    return [
        "-chardev", f"socket,id={name},path={socket},server=on,wait=off",
        "-device", f"virtserialport,chardev={name},name={name}",
    ]


def _tunnel_args(sockets: tuple[str, ...]) -> list[str]:
    """The tunnel ports ``tunnel0``..: more virtio-serial ports, each carrying one tunnel's bytes without frames."""
    return [argument for index, socket in enumerate(sockets) for argument in _port_args(port_name(index), socket)]


def _vsock_args(cid: int | None) -> list[str]:
    """
    The vhost-vsock device of CID ``cid``: ``vhost-vsock-device`` on virtio-mmio
    (microvm has no PCI bus for ``vhost-vsock-pci``).
    """
    if cid is None:
        return []
    return ["-device", f"vhost-vsock-device,id=vsock0,guest-cid={cid}"]


def _metrics_args(socket: str | None) -> list[str]:
    """The metrics channel: a second virtio-serial port, ``metrics``, served on its own UNIX socket."""
    if socket is None:
        return []
    return [
        "-chardev", f"socket,id=metrics,path={socket},server=on,wait=off",
        "-device", "virtserialport,chardev=metrics,name=metrics",
    ]


def _net_args(net: NetSpec | None, loose_nic: str | None = None) -> list[str]:
    """The VM's NIC on its tap, or a template's on a hub port that reaches nothing, or none."""
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
    stdout, which prints :data:`.probe.PROBE_MARKER` and powers off.

    Named :data:`PROBE_NAME`, with a monitor on ``qmp_socket``: what finds a
    probe QEMU an earlier run of the daemon left (:func:`.processes.sweep_probes`), as
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


__all__ = [
    "MiB",
    "PROBE_NAME",
    "QemuSettings",
    "host_tsc_khz",
    "kernel_cmdline",
    "probe_command",
    "qemu_command",
    "qmp_address",
]
