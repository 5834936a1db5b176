# -*- test-case-name: tests.hypervisors.qemu -*-
"""
The driver interface every hypervisor implements, and the records it uses.

The node layer (:mod:`vmservice.nodes`) only speaks to a hypervisor through
:class:`IHypervisor` and :class:`IMachine`, so QEMU today and other VMMs later
plug in behind the same seam.  Capability flags tell the node layer what a
driver can do (e.g. suspend to disk) so the API can answer 501 up front.
"""

from __future__ import annotations

from typing import Callable

from attrs import frozen
from twisted.internet.defer import Deferred
from zope.interface import Attribute, Interface


@frozen
class NetSpec:
    """
    A VM's network interface.

    :ivar tap: the tap device QEMU opens.
    :ivar mac: the guest NIC's MAC address.
    :ivar address: the guest's address with prefix (``10.77.0.6/30``).
    :ivar gateway: the guest's default gateway.
    :ivar netns: the network namespace QEMU runs in (the tap lives there),
        or ``None`` for the host's.
    """

    tap: str
    mac: str
    address: str
    gateway: str
    netns: str | None = None


@frozen
class RamBacking:
    """
    Where a VM's memory lives when it is not QEMU's anonymous memory: a
    memory backend named :data:`RAM_BACKEND_ID` that the machine uses.

    :ivar path: the file the memory is mapped from (a template's RAM file in
        a tmpfs), or ``None`` for anonymous memory under the same name (a
        restore of a clone, whose saved state names that memory block).
    :ivar shared: map the file shared (a template writes its memory into
        it) rather than private copy-on-write (a clone: its writes stay its
        own and the file is never changed).
    """

    path: str | None = None
    shared: bool = False


#: The id of the memory backend of templates, clones and restored clones: the
#: memory block's name in their saved states, which must match on load.
RAM_BACKEND_ID = "mem0"


@frozen
class MachineSpec:
    """
    Everything a driver needs to start one VM.

    :ivar name: the node's hostname (also given to the guest).
    :ivar vcpus: number of virtual CPUs.
    :ivar ram_bytes: guest memory in bytes.
    :ivar kernel: path of the uncompressed kernel (``vmlinux``).
    :ivar initrd: path of the small initramfs that mounts the root disk.
    :ivar disk: path of the node's qcow2 root disk.
    :ivar agent_socket: UNIX socket path the agent channel is served on.
    :ivar qmp_socket: UNIX socket path of the QMP monitor.
    :ivar console_log: file the serial console is written to.
    :ivar incoming: a saved state file (see :meth:`IMachine.save_state`) to
        start from instead of booting; the VM comes up paused.
    :ivar net: its network interface, or ``None`` for none.
    :ivar pci_devices: host PCI devices passed through with VFIO (full addresses).
    :ivar metrics_socket: UNIX socket path the metrics channel is served on, or ``None`` for none.
    :ivar bulk_socket: UNIX socket path the bulk port (copies' bytes) is served on, or ``None`` for none.
    :ivar tunnel_sockets: UNIX socket paths the tunnel ports ``tunnel0``.. (tunnels' bytes) are served on,
        one per port.
    :ivar memory: its memory backend, or ``None`` for QEMU's plain ``-m``.
    :ivar defer_incoming: start waiting for a device state to load
        (:meth:`IMachine.load_device_state`) instead of booting.
    :ivar loose_nic: the MAC of a network interface attached to nothing on
        the host (a template's, without ``net``: its clones have the same
        device on their own tap), or ``None`` for none.
    :ivar aslr: whether the guest kernel randomizes the address space of its
        processes (off: ``norandmaps`` on its command line; see the host
        group's ``guest_aslr``).
    :ivar vsock: the machine has a vhost-vsock device (its CID drawn at each
        start of its QEMU) and its guest loads the vsock modules; the agent
        listens on vsock beside its serial port (see ``docs/vsock.md``).
    """

    name: str
    vcpus: int
    ram_bytes: int
    kernel: str
    initrd: str
    disk: str
    agent_socket: str
    qmp_socket: str
    console_log: str
    incoming: str | None = None
    net: NetSpec | None = None
    pci_devices: tuple[str, ...] = ()
    metrics_socket: str | None = None
    bulk_socket: str | None = None
    tunnel_sockets: tuple[str, ...] = ()
    memory: RamBacking | None = None
    defer_incoming: bool = False
    loose_nic: str | None = None
    aslr: bool = True
    vsock: bool = False


@frozen
class MachineExit:
    """
    How a VM process ended.

    :ivar exit_code: the process exit status, or ``None`` when killed by a
        signal or not known (a VM adopted after a restart is not our child,
        so its exit status cannot be read).
    :ivar signal: the signal number that ended it, or ``None``.
    :ivar stderr: the tail of what the process wrote on stderr (for errors).
    """

    exit_code: int | None
    signal: int | None
    stderr: str


@frozen
class Capabilities:
    """
    What a driver can do beyond start and stop.

    :ivar can_pause: pause/resume of a running VM.
    :ivar can_suspend: save memory and device state to disk and restore it.
    """

    can_pause: bool
    can_suspend: bool


def describe_exit(ended: MachineExit) -> str:
    """Say in one line how a VMM process ended, with the first line of its error output."""
    if ended.signal is not None:
        how = f"was killed by signal {ended.signal}"
    elif ended.exit_code is not None:
        how = f"exited with status {ended.exit_code}"
    else:
        how = "ended"
    lines = [line for line in ended.stderr.splitlines() if line.strip()]
    detail = f": {lines[0].strip()}" if lines else ""
    return f"the VM process {how}{detail}"


class HypervisorError(Exception):
    """A VM could not be started or driven; the message says why."""


class IMachine(Interface):
    """A running VM owned by a driver."""

    pid = Attribute("The process id of the VMM process.")
    ended = Attribute("A Deferred firing with a MachineExit when the process ends.")

    def stop(graceful: bool, grace: float) -> Deferred[MachineExit]:
        """
        Stop the VM: ask the guest to power off when ``graceful``, then kill it
        if it is still running after ``grace`` seconds.
        """

    def kill() -> Deferred[MachineExit]:
        """Kill the VM process at once."""

    def pause() -> Deferred[None]:
        """Freeze the guest's CPUs (its memory and devices stay as they are)."""

    def resume() -> Deferred[None]:
        """Let a paused guest run again."""

    def run_state() -> Deferred[str]:
        """
        The VMM's own word for the VM's state: ``running``, ``paused``, or
        something else (e.g. ``inmigrate``, ``shutdown``, ``io-error``).
        """

    def on_no_room(callback: Callable[[], None]) -> None:
        """
        Call ``callback`` each time the VM stops because the host's file
        system that holds its disk had no room for one of the guest's
        writes (and at once when it is stopped so now).  The guest is frozen
        with the write pending, nothing lost: :meth:`resume` once there is
        room again retries it (and stops the VM again if there is still none).
        """

    def power_button() -> Deferred[None]:
        """Press the ACPI power button once (the guest decides what to do)."""

    def reset() -> Deferred[None]:
        """Reset the VM like a hardware reset button: the guest boots again."""

    def save_state(path: str) -> Deferred[None]:
        """
        Pause the VM and write its memory and device state to the new file
        ``path`` (made 0600, never through a link; nothing may be there);
        fires once the file is complete.  The process keeps running, paused:
        the caller kills it (or resumes it, to give up the suspend).
        """

    def save_device_state(path: str) -> Deferred[None]:
        """
        Without pausing, write the VM's device state to the new file ``path``
        (as :meth:`save_state` makes it), leaving out
        its memory, which lives in a shared file (a template's, or a node's
        with a memory file): fires once the file is complete.  The caller then
        kills the VM, or resumes it (a fork's parent, paused before).
        """

    def load_device_state(path: str, resume: bool = False) -> Deferred[None]:
        """
        For a VM started with ``defer_incoming`` over a template's RAM file
        (or a copy of a fork's parent's memory file): load the device state
        ``path`` saved by :meth:`save_device_state`; fires once the VM runs,
        fails if it cannot be loaded.  A state saved from a paused VM leaves
        it paused, which fails the load unless ``resume`` (a fork's parent,
        paused for its fork: the VM is then let run).
        """

    def snapshot_disk(overlay: str) -> Deferred[None]:
        """
        Make the VM write to ``overlay`` from now on: a qcow2 file that
        already exists, whose backing file is the disk the VM used so far
        (moved elsewhere by the caller); that file is then only read.  For a
        fork: the parent's disk at that instant becomes its children's too.
        """

    def load_state(path: str) -> Deferred[None]:
        """
        For a VM started with ``defer_incoming`` (and anonymous memory): load
        the full state ``path`` saved by :meth:`save_state`; fires once it is
        loaded (the VM is then paused), fails if it cannot be.
        """

    def finish_incoming() -> Deferred[None]:
        """
        For a VM started from a saved state (``MachineSpec.incoming``): fire
        once the state is loaded (the VM is then paused), fail if it cannot be.
        """


class IHypervisor(Interface):
    """A driver that starts VMs."""

    capabilities = Attribute("The Capabilities of this driver.")
    description = Attribute("A short text saying how VMs run, e.g. 'qemu, tcg'.")
    version = Attribute(
        "What identifies the VMM's build (a saved state loads only into the same one), e.g. its version line."
    )
    vsock_unusable = Attribute(
        "None when VMs can have a vhost-vsock device on this host, else a short text saying why not "
        "(see docs/vsock.md)."
    )

    def start(spec: MachineSpec, log_path: str | None) -> Deferred[IMachine]:
        """
        Start a VM from ``spec``; fires once the process runs.

        :param log_path: the file the VMM's output goes to (its tail
            explains a VM that ends at once), or ``None`` for none.
        """


class IVmProcesses(Interface):
    """
    The VMs an earlier run of the daemon left running: found, taken over or
    killed.  Nothing here depends on how new VMs will run (the accelerator),
    so a restarted daemon adopts its nodes before it has decided that.
    """

    def adopt(spec: MachineSpec, pid: int, log_path: str | None, started_qmp: str | None) -> IMachine:
        """
        Take over a VM started for ``spec`` by an earlier run of the daemon.

        :param pid: the VMM's process id, as the earlier run recorded it.
        :param log_path: as for :meth:`IHypervisor.start`.
        :param started_qmp: the QMP socket the VM was started with when it
            is not ``spec.qmp_socket`` (a template's spare VM whose sockets
            were renamed to ``spec``'s); ``None`` when it is.
        :raise HypervisorError: ``pid`` is not (or no longer) that VM.
        """

    def orphans(directory: str, depth: int) -> list[int]:
        """
        Pids of running VMs of this kind whose QMP socket was
        ``<directory>/<one or more (depth) directories>/qmp.sock`` when they started.
        """

    def kill_orphan(pid: int) -> None:
        """Kill the VM of ``pid`` found by :meth:`orphans` (gone already is fine)."""
