# -*- test-case-name: tests.nodes.warm.test_fork_memory -*-
"""
Nodes whose memory is a file, and the fork it makes fast.

A node of a group with ``fork_memory: file`` has its memory in a file of
its own in a tmpfs (``<templates_tmpfs_dir>/vmservice-memory-<digest of
state_dir>/<hostname>.ram``), mapped shared (``share=on``) from its VM's
start: :attr:`NodeRecord.memory_file`.  The file exists while the node's VM
runs: the daemon creates it empty (0600, never through a link, in a
directory it verified is its own alone: :mod:`vmservice.private_files`),
QEMU sizes and maps it, and it is deleted once the VM ended (stop, suspend,
delete, relaunch; a suspend's snapshot holds the memory and a restore writes
it into a new file).  Before a VM of such a node starts there must be room
for its whole RAM in the tmpfs, counting what the other memory files of this
daemon may still grow by; else the start is refused (503
``tmpfs_full``) and nothing was made.

A fork of such a node (:class:`.memory_fork.MemoryFork`) saves, while the
parent is paused, only its device state (``x-ignore-shared`` leaves the
shared file out, as a template's does) and copies its memory file once, sparse, into a
*frozen copy* (``fork-<parent>.<random>.ram`` in the same directory); then
the parent runs on.  The copy's pages are allocated before the pause and
both the allocation and the copy (the kernel's ``copy_file_range``) run off
the reactor (:class:`~vmservice.nodes.blocking.Blocking`), which serves other requests
meanwhile; a tmpfs that fills up under them fails the fork (503
``tmpfs_full``), the copy deleted.  Each child maps the frozen copy privately
(``share=off``, as a clone maps its template's file) and loads the small
device state.  The copy is named first by the parent's record (while the
fork runs) and then by every child's while the child's VM maps it
(:attr:`NodeRecord.memory_copies`; a child whose VM ended never maps it
again: :func:`release`), and deleted once no record names it.  The state a
fork saves for its children goes to the same directory too
(:func:`fork_state`), deleted once the children loaded it.
"""

from __future__ import annotations

import os
import secrets
import shutil
from typing import TYPE_CHECKING, Callable, Iterable

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from ...errors import InsufficientMemory
from ...private_files import create_private, private_directory
from ..model import NodeRecord
from ..paths import daemon_tag, discard, listing

if TYPE_CHECKING:
    from ...guestport.guest import IGuestConnection
    from .adoption import ICloneAdoption

log = Logger()

#: How the names of the frozen copies of forks begin in the memory directory.
COPY_PREFIX = "fork-"
#: How the names of the state files of forks under way begin in the memory directory.
STATE_PREFIX = "state-"


def memory_directory(state_dir: str, tmpfs_dir: str) -> str:
    """The directory of this daemon's memory files (in a tmpfs other daemons may share)."""
    return os.path.join(tmpfs_dir, f"vmservice-memory-{daemon_tag(state_dir)}")


def fork_state(state_dir: str, tmpfs_dir: str) -> str:
    """
    A new file name for the state a fork saves for its children (guest memory
    too, when the parent has no memory file), in the memory directory, which
    must be :func:`private_directory`: nothing in the tmpfs others see.
    """
    return os.path.join(memory_directory(state_dir, tmpfs_dir), f"{STATE_PREFIX}{secrets.token_hex(8)}")


def memory_file(state_dir: str, tmpfs_dir: str, hostname: str, kind: str) -> str:
    """The memory file of a new node of a group whose ``fork_memory`` is ``kind``; empty for none."""
    if kind != "file":
        return ""
    return os.path.join(memory_directory(state_dir, tmpfs_dir), f"{hostname}.ram")


def prepare(record: NodeRecord) -> None:
    """
    Before a VM of ``record`` starts: a memory file left by an earlier VM is
    deleted (nothing maps it) and the tmpfs must have room for the new one,
    which is made here, empty (QEMU sizes it), in the daemon's own directory.

    :raise InsufficientMemory: (``tmpfs_full``) it has not.
    :raise NotPrivate: the directory is not the daemon's alone.
    """
    if not record.memory_file:
        return
    directory = os.path.dirname(record.memory_file)
    private_directory(directory)
    discard(record.memory_file)
    ensure_room(directory, record.ram_bytes, f"the memory of node {record.hostname!r}")
    os.close(create_private(record.memory_file))  # 0600, not through a link; QEMU maps it


def release(record: NodeRecord) -> bool:
    """
    ``record``'s VM ended: its memory file goes (a snapshot holds the memory,
    if it was suspended).

    :return: whether ``record`` names copies it no longer needs: a child's
        (no memory file of its own) VM mapped its copy, and nothing that
        comes next maps it again (a restore loads the snapshot into memory
        of its own, a relaunch boots), so its record should stop naming it
        (and the copy go once no record does).  A parent's record names a
        copy only while its fork runs, which takes care of it.
    """
    if record.memory_file:
        discard(record.memory_file)
    return bool(record.memory_copies) and not record.memory_file


def ready_for_forks(hostname: str, agent: IGuestConnection, adoption: ICloneAdoption | None) -> None:
    """
    In the background, once its agent answers: have a new node's guest load
    what its children's adoption needs (as a fork does first; a cold-booted
    guest takes about a second for it under TCG), so that its first fork
    does not wait for it.  A failure is only logged (the fork tries again).
    """
    if adoption is None:
        return

    def prepare(_: object) -> Deferred[None]:
        return adoption.prepare(agent)

    def failed(failure: Failure) -> None:
        log.info("node {hostname} could not prepare its forks: {error}", hostname=hostname, error=failure.value)

    agent.when_ready().addCallback(prepare).addErrback(failed)


def ensure_room(directory: str, need: int, what: str,
                statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> None:
    """
    Whether the tmpfs of ``directory`` can take ``need`` more bytes on top of
    what the memory files there may still grow by (each up to its size).

    :param statvfs: how the tmpfs's free space is read.
    :raise InsufficientMemory: (``tmpfs_full``) it cannot.
    """
    stats = statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    growth = sum(max(0, size - used) for size, used in _files(directory))
    if free - growth < need:
        raise InsufficientMemory(
            f"no room for {what} ({need // 2**20} MiB) in the tmpfs of {directory}: "
            f"{free // 2**20} MiB free, of which the running nodes' memory files may still take "
            f"{growth // 2**20} MiB", code="tmpfs_full")


def _files(directory: str) -> list[tuple[int, int]]:
    """The size and the bytes in use of each file in ``directory``."""
    found = []
    for name in os.listdir(directory):
        try:
            info = os.lstat(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        found.append((info.st_size, info.st_blocks * 512))
    return found


def used_bytes(path: str) -> int:
    """The bytes a (sparse) file holds, 0 for none."""
    try:
        return os.lstat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def collect_copies(directory: str, named: set[str]) -> None:
    """Delete the frozen copies of forks in ``directory`` that no record names (``named``)."""
    for path in _listing(directory):
        if os.path.basename(path).startswith(COPY_PREFIX) and path not in named:
            log.info("removing the unused fork memory copy {path}", path=path)
            discard(path)


def sweep(directory: str, keep: set[str]) -> None:
    """At start: delete every memory file in ``directory`` but ``keep`` (running nodes' files, named copies)."""
    for path in _listing(directory):
        if path not in keep:
            log.info("removing the unused memory file {path}", path=path)
            discard(path)


def _listing(directory: str) -> list[str]:
    return [os.path.join(directory, name) for name in listing(directory)]


def kept_files(records: Iterable[tuple[NodeRecord, bool]], forking: bool = True) -> tuple[set[str], set[str]]:
    """
    Of ``(record, its VM runs)`` pairs: the memory files of running VMs, and
    the copies some record names.

    :param forking: whether forks may be under way; at start none is: a
        copy a parent's record names (one with a memory file of its own: a
        child has none) is of a fork that never finished, and only a
        running child maps its copy (a child's restore or relaunch never
        maps it again), so only those are kept.
    """
    running: set[str] = set()
    copies: set[str] = set()
    for record, runs in records:
        if runs and record.memory_file:
            running.add(record.memory_file)
        if forking or (runs and not record.memory_file):
            copies.update(record.memory_copies)
    return running, copies


def close(directory: str) -> None:
    """The daemon stopped every VM: no file of its memory directory is mapped or needed any more."""
    shutil.rmtree(directory, ignore_errors=True)


__all__ = [
    "COPY_PREFIX", "STATE_PREFIX", "close", "collect_copies", "ensure_room", "fork_state", "kept_files",
    "memory_directory", "memory_file", "prepare", "release", "sweep", "used_bytes",
]
