# -*- test-case-name: tests.nodes.test_store -*-
"""
The node record (what the daemon knows and persists about each VM it owns),
its statuses, and the requests and results of the node operations.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import Enum
from typing import Iterable

from attrs import evolve, frozen


#: Most secrets one node holds (the guest takes no more).
MAX_NODE_SECRETS = 64
#: Most SSH keys of a node, and most characters of one.
MAX_SSH_KEYS = 100
MAX_SSH_KEY_LENGTH = 16 * 1024
#: Secret names: no path separators, no dot-files, at most 128 characters.
SECRET_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
#: Login user names: what Debian's ``adduser`` accepts by default, without upper case.
LOGIN_USER_PATTERN = "[a-z_][a-z0-9_-]{0,31}"


class Status(str, Enum):
    """
    A node's lifecycle status.

    ``Running`` and ``Paused`` are the contract's; ``Stopped`` (a persistent
    node whose VM is not running) and ``Suspended`` (its memory and device
    state saved to a file, no VM process) are this daemon's extensions.

    The others are internal: written *before* an operation acts, so that a
    crash half-way leaves a record saying what to finish or undo at the next
    start (see ``docs/lifecycle.md``).  The API never returns them.
    """

    CREATING = "Creating"
    RUNNING = "Running"
    PAUSED = "Paused"
    STOPPED = "Stopped"
    SUSPENDED = "Suspended"
    SUSPENDING = "Suspending"
    RESTORING = "Restoring"
    STOPPING = "Stopping"
    DELETING = "Deleting"


#: The most children one fork makes (``POST /vm/{hostname}/fork``).
MAX_FORK_COUNT = 8


@frozen
class NodeRecord:
    """
    One node as persisted in ``<state_dir>/nodes/<hostname>/node.json``.

    :ivar hostname: unique within this daemon, ``<group>-<n>`` unless given.
    :ivar hostgroup: the host group it belongs to.
    :ivar ip: its address, or the empty string when it has no network.
    :ivar ram_bytes: guest memory.
    :ivar cpus: virtual CPUs.
    :ivar created_at: when it was created (UTC).
    :ivar tags: the caller's tags, in the order given.
    :ivar status: a :class:`Status` value.
    :ivar persistent: kept (stopped) when its VM ends, instead of removed.
    :ivar protected: cannot be deleted through the API.
    :ivar arch: the guest architecture.
    :ivar pid: the VMM process id while it runs.
    :ivar kernel: the kernel the VM was started with (a restore must use the
        same one: the saved state holds its memory, not its file).
    :ivar initrd: the initramfs the VM was started with.
    :ivar hypervisor: how the VM was last started (the driver's description,
        ``qemu microvm, tcg``); empty in records written before it was kept.
    :ivar secrets: the names of the secrets placed in its guest.
    :ivar login_user: the user made in its guest for SSH logins; empty for none.
    :ivar ssh_keys: that user's authorized keys.
    :ivar userdata: whether it has userdata (kept in its directory, see
        :attr:`~.paths.NodePaths.userdata`).
    :ivar image: the name of the image it was made from (its disk is an
        overlay on that image's build); empty in records written before it
        was kept, whose image is their group's.
    :ivar pci_devices: the host's PCI devices passed through to its VM
        (full addresses), held for it until it is removed.
    :ivar metrics_channel: whether its VM was started with the metrics
        channel (a restore must give it the same devices as the saved state).
    :ivar bulk_channel: whether its VM was started with the bulk port
        (copies' bytes; likewise for a restore).
    :ivar vsock_channel: whether its VM was started with a vhost-vsock
        device (likewise for a restore; ``docs/vsock.md``).
    :ivar tunnel_ports: how many tunnel ports its VM was started with
        (likewise for a restore; none in records written before they existed).
    :ivar frozen_disk: the frozen disk of the template it was cloned from,
        which its own disk is an overlay over (kept while a record names it);
        empty for a node whose disk lies over its image's root file system.
    :ivar clone_memory: its VM (running, or saved while suspended) is a
        clone's, whose memory block carries the template's backend name: a
        restore must start with the same name.  A relaunch clears it.
    :ivar forked_disks: the frozen disks of the forks in its disk's backing
        chain (its own forks' as a parent, its parent's as a child), each
        kept while a record names it.
    :ivar started_qmp: the QMP socket its running VM was started with when
        that is not its own (a clone handed over from a template's spare VM,
        whose sockets were renamed into the node's directory): start-up
        recovery knows that VM by it.  Empty otherwise; its directory (the
        spare's) is removed with the node or when another VM replaces it.
    :ivar memory_file: the file in a tmpfs its memory lives in, mapped
        shared (a group with ``fork_memory: file``), or empty for QEMU's own
        memory; the file exists while its VM runs (see :mod:`.warm.fork_memory`).
    :ivar memory_copies: the frozen copies of a parent's memory file its VM
        maps privately (a fork's child), or that a fork under way makes
        (its parent), each kept while a record names it.
    :ivar idle_suspended: its snapshot (``Suspending``, ``Suspended``,
        ``Restoring``) was made by the idle timer, not asked for: the next
        request that needs its guest restores it (see :mod:`.idle`).  Cleared
        whenever the node takes any other status.
    :ivar forking: its VM is (or is about to be) frozen for a fork of it,
        which lets it run again once its state is saved: a start that finds
        the record saying so lets the VM run (:mod:`.recovery`), whatever
        the fork had done.
    """

    hostname: str
    hostgroup: str
    ram_bytes: int
    cpus: int
    created_at: datetime
    status: Status = Status.CREATING
    ip: str = ""
    tags: tuple[str, ...] = ()
    persistent: bool = False
    protected: bool = False
    arch: str = "x86_64"
    pid: int | None = None
    kernel: str = ""
    initrd: str = ""
    hypervisor: str = ""
    secrets: tuple[str, ...] = ()
    login_user: str = ""
    ssh_keys: tuple[str, ...] = ()
    userdata: bool = False
    image: str = ""
    pci_devices: tuple[str, ...] = ()
    metrics_channel: bool = False
    bulk_channel: bool = False
    vsock_channel: bool = False
    tunnel_ports: int = 0
    frozen_disk: str = ""
    clone_memory: bool = False
    forked_disks: tuple[str, ...] = ()
    idle_suspended: bool = False
    started_qmp: str = ""
    memory_file: str = ""
    memory_copies: tuple[str, ...] = ()
    forking: bool = False

    def with_status(self, status: Status, pid: int | None = None) -> "NodeRecord":
        """A copy with another status (and pid)."""
        return evolve(self, status=status, pid=pid)


#: The statuses in which a node's snapshot may be the idle timer's (:attr:`NodeRecord.idle_suspended`).
ASLEEP_STATUSES = frozenset({Status.SUSPENDING, Status.SUSPENDED, Status.RESTORING})

#: Internal statuses and the one a client sees instead.
_SHOWN_AS = {
    Status.SUSPENDING: Status.RUNNING,
    Status.RESTORING: Status.SUSPENDED,
    Status.STOPPING: Status.RUNNING,
}


def visible(record: NodeRecord) -> NodeRecord:
    """The record as clients see it: an internal status shows as the one it comes from."""
    shown = _SHOWN_AS.get(record.status)
    return record if shown is None else record.with_status(shown, record.pid)


class Wait(Enum):
    """What an operation that starts a VM waits for before it answers."""

    #: Nothing: answer once the VM process runs.
    NONE = "none"
    #: The guest agent's first health reply, and its secrets and login in place.
    AGENT = "agent"
    #: All of that, and the node's userdata over.
    USERDATA = "userdata"


@frozen
class CreateRequest:
    """
    A validated request for a new node (the API's CreateNodeRequest without
    what this daemon does not support).

    :ivar hostname: a hostname to use instead of the next ``<group>-<n>``.
    :ivar ram_bytes: memory, at most the group's; ``None`` for the group's.
    :ivar cpus: vCPUs, at most the group's; ``None`` for the group's.
    :ivar persistent: kept when its VM ends; ``None`` for the group's default.
    :ivar protected: cannot be deleted through the API.
    :ivar tags: the caller's tags (valid, see :func:`tag_problem`; duplicates
        collapse).
    :ivar ip: a requested address in the group's range.
    :ivar userdata: a shell script run once at the first boot; empty for none.
    :ivar secrets: names of stored secrets placed in the guest.
    :ivar ssh_keys: OpenSSH public keys of the login user.
    :ivar import_user: the login user; ``None`` for the default.
    :ivar codehost_user: take the login user's keys from this user of the
        code host instead of ``ssh_keys``.
    :ivar disk_image: the image to make the node from; ``None`` for its
        group's.
    :ivar pci_devices: host PCI devices to pass through (full addresses).
    :ivar gpu_count: how many of the group's GPUs to pass through.
    """

    hostname: str | None = None
    ram_bytes: int | None = None
    cpus: int | None = None
    persistent: bool | None = None
    protected: bool = False
    tags: tuple[str, ...] = ()
    ip: str | None = None
    userdata: str = ""
    secrets: tuple[str, ...] = ()
    ssh_keys: tuple[str, ...] = ()
    import_user: str | None = None
    codehost_user: str | None = None
    disk_image: str | None = None
    pci_devices: tuple[str, ...] = ()
    gpu_count: int = 0


@frozen
class DeleteResult:
    """What a delete did: ``disk_removed`` tells whether the disk is gone."""

    hostname: str
    disk_removed: bool


#: A hostname: a lowercase RFC 1123 host label.
HOSTNAME_PATTERN = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(HOSTNAME_PATTERN)


def valid_hostname(name: str) -> bool:
    """Whether ``name`` is a lowercase RFC 1123 host label (at most 63 characters)."""
    return _HOSTNAME.fullmatch(name) is not None


#: At most this many tags per node.
MAX_TAGS = 64
#: At most this many characters per tag.
MAX_TAG_LENGTH = 256
#: What a tag may hold: anything but control characters (NUL cannot even be
#: asked for by a listing's ``tag`` filter; the others break every display).
#: A JSON-schema pattern as much as a Python one.
TAG_PATTERN = r"[^\u0000-\u001f\u007f]*"
_TAG = re.compile(TAG_PATTERN)


def tag_problem(tag: str) -> str | None:
    """
    What is wrong with ``tag``, or ``None`` when it is a valid tag: 1 to
    :data:`MAX_TAG_LENGTH` characters, none of them a control character.
    The one rule of tags, for create and for tag changes alike.
    """
    if not tag:
        return "tags must not be empty strings"
    if len(tag) > MAX_TAG_LENGTH:
        return f"a tag has at most {MAX_TAG_LENGTH} characters"
    if _TAG.fullmatch(tag) is None:
        return "tags must not contain control characters"
    return None


def unique(tags: Iterable[str]) -> tuple[str, ...]:
    """``tags`` in their order, each only once (its first place kept)."""
    return tuple(dict.fromkeys(tags))


__all__ = [
    "ASLEEP_STATUSES",
    "HOSTNAME_PATTERN",
    "MAX_FORK_COUNT",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "TAG_PATTERN",
    "CreateRequest",
    "DeleteResult",
    "NodeRecord",
    "Status",
    "Wait",
    "tag_problem",
    "unique",
    "valid_hostname",
    "visible",
]
