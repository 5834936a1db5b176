# -*- test-case-name: tests.nodes.test_paths -*-
"""
Where a node's files live, and the machine spec built from them.

Everything of node ``h`` is in ``<state_dir>/nodes/h/``: its record
(``node.json``, see :mod:`.store`), its disk, console and QEMU logs, the
agent's, metrics channel's and QMP's UNIX sockets and, while it is suspended, its snapshot.
What the daemon keeps in a tmpfs other daemons may share (templates' RAM
files, memory files, forks' states) is named after :func:`daemon_tag`.
"""

from __future__ import annotations

import hashlib
import os

from attrs import frozen

from ..errors import Internal
from ..hypervisors.base import MachineSpec, NetSpec, RamBacking
from ..wire.tunnelport import MAX_TUNNEL_PORTS, socket_name
from .model import NodeRecord

#: UNIX socket paths must fit in sun_path (108 bytes with the NUL).
MAX_SOCKET_PATH = 107


def discard(path: str) -> None:
    """Delete the file ``path``; gone already is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def listing(directory: str) -> list[str]:
    """The names in ``directory``, sorted; none when it does not exist."""
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def daemon_tag(state_dir: str) -> str:
    """What names this daemon's files in a tmpfs other daemons may share: a digest of its state directory."""
    return hashlib.sha256(os.path.abspath(state_dir).encode()).hexdigest()[:12]


def backing(record: NodeRecord, incoming: str | None) -> RamBacking | None:
    """
    The memory backend of ``record``'s VM: its memory file mapped shared; for
    a clone's (or a fork child's) snapshot, anonymous memory under the memory
    block name the snapshot has; else none (QEMU's plain memory).
    """
    if record.memory_file:
        return RamBacking(record.memory_file, shared=True)
    if incoming is not None and record.clone_memory:
        return RamBacking(None)
    return None


@frozen
class NodePaths:
    """
    The files of one node.

    :ivar directory: the node's directory.
    :ivar disk: its qcow2 root disk.
    :ivar console: the serial console's log.
    :ivar qemu_log: what QEMU writes on stderr.
    :ivar agent: the agent channel's UNIX socket.
    :ivar metrics: the metrics channel's UNIX socket.
    :ivar bulk: the bulk port's UNIX socket (copies' bytes).
    :ivar qmp: the QMP monitor's UNIX socket.
    :ivar state: its snapshot (memory and device state) while suspended.
    :ivar userdata: its userdata script (mode 0600), when it has one.
    """

    directory: str
    disk: str
    console: str
    qemu_log: str
    agent: str
    qmp: str
    state: str
    userdata: str
    metrics: str
    bulk: str

    @property
    def tunnels(self) -> tuple[str, ...]:
        """The sockets of every tunnel port the node's VM may have, ``tun0.sock`` first."""
        return tuple(os.path.join(self.directory, socket_name(index)) for index in range(MAX_TUNNEL_PORTS))

    @property
    def partial_state(self) -> str:
        """Where a snapshot is written until it is complete."""
        return self.state + ".partial"

    def has_snapshot(self) -> bool:
        """Whether a complete snapshot is there."""
        return os.path.exists(self.state)

    def discard_snapshot(self) -> None:
        """Remove the snapshot (and any partial one); a missing one is fine."""
        for path in (self.state, self.partial_state):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def discard_partial_snapshot(self) -> None:
        """Remove a snapshot that was not completed; a missing one is fine."""
        try:
            os.unlink(self.partial_state)
        except FileNotFoundError:
            pass

    @classmethod
    def of(cls, directory: str) -> "NodePaths":
        """
        The files of the node whose directory is ``directory``.

        :raise Internal: the socket paths would not fit in a UNIX socket
            address (the state directory's path is too long).
        """
        paths = cls(
            directory=directory,
            disk=os.path.join(directory, "disk.qcow2"),
            console=os.path.join(directory, "console.log"),
            qemu_log=os.path.join(directory, "qemu.log"),
            agent=os.path.join(directory, "agent.sock"),
            qmp=os.path.join(directory, "qmp.sock"),
            state=os.path.join(directory, "state.bin"),
            userdata=os.path.join(directory, "userdata.sh"),
            metrics=os.path.join(directory, "stats.sock"),
            bulk=os.path.join(directory, "bulk.sock"),
        )
        if max(len(paths.agent), len(paths.qmp), len(paths.metrics), len(paths.bulk),
               *map(len, paths.tunnels)) > MAX_SOCKET_PATH:
            state_dir = os.path.dirname(os.path.dirname(directory))
            raise Internal(
                f"state_dir {state_dir!r} is too long for UNIX socket paths", code="state_dir_too_long"
            )
        return paths

    def spec(
        self,
        record: NodeRecord,
        kernel: str,
        initrd: str,
        incoming: str | None = None,
        net: NetSpec | None = None,
    ) -> MachineSpec:
        """
        The machine spec of ``record``'s VM.

        :param incoming: a snapshot to start from instead of booting (with the
            metrics channel only if ``record`` says its VM had it).
        :param net: its network interface, if its group has a network.
        """
        return MachineSpec(
            name=record.hostname,
            vcpus=record.cpus,
            ram_bytes=record.ram_bytes,
            kernel=kernel,
            initrd=initrd,
            disk=self.disk,
            agent_socket=self.agent,
            qmp_socket=self.qmp,
            console_log=self.console,
            incoming=incoming,
            net=net,
            pci_devices=record.pci_devices,
            # A saved state holds the devices it was taken with: one saved before the metrics
            # channel existed is restored without it.
            metrics_socket=self.metrics if incoming is None or record.metrics_channel else None,
            bulk_socket=self.bulk if incoming is None or record.bulk_channel else None,
            tunnel_sockets=self.tunnels[:record.tunnel_ports],
            # A memory file (``fork_memory: file``); a clone's snapshot names the template's memory block.
            memory=backing(record, incoming),
        )


__all__ = ["MAX_SOCKET_PATH", "NodePaths", "backing", "daemon_tag", "discard", "listing"]
