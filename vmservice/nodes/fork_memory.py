# -*- test-case-name: tests.nodes.test_fork_memory -*-
"""
Nodes whose memory is a file, and the fork it makes fast.

A node of a group with ``fork_memory: file`` has its memory in a file of
its own in a tmpfs (``<templates_tmpfs_dir>/vmservice-memory-<digest of
state_dir>/<hostname>.ram``), mapped shared (``share=on``) from its VM's
start: :attr:`NodeRecord.memory_file`.  The file exists while the node's VM
runs: QEMU creates it, and it is deleted once the VM ended (stop, suspend,
delete, relaunch; a suspend's snapshot holds the memory and a restore writes
it into a new file).  Before a VM of such a node starts there must be room
for its whole RAM in the tmpfs, counting what the other memory files of this
daemon may still grow by; else the start is refused (503
``tmpfs_full``) and nothing was made.

A fork of such a node (:class:`MemoryFork`) saves, while the parent is
paused, only its device state (``x-ignore-shared`` leaves the shared file
out, as a template's does) and copies its memory file once, sparse, into a
*frozen copy* (``fork-<parent>.<random>.ram`` in the same directory); then
the parent runs on.  Each child maps the frozen copy privately
(``share=off``, as a clone maps its template's file) and loads the small
device state.  The copy is named first by the parent's record (while the
fork runs) and then by every child's (:attr:`NodeRecord.memory_copies`), and
deleted once no record names it.
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import shutil
from typing import TYPE_CHECKING, Callable, Iterable

from attrs import evolve, frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import InsufficientMemory
from ..hypervisors.base import IMachine, RamBacking
from .model import NodeRecord
from .paths import discard
from .templates import daemon_tag

if TYPE_CHECKING:
    from .adoption import ICloneAdoption
    from .guest import IGuestConnection
    from .runtime import NodeRuntime

log = Logger()

#: How the names of the frozen copies of forks begin in the memory directory.
COPY_PREFIX = "fork-"


def memory_directory(state_dir: str, tmpfs_dir: str) -> str:
    """The directory of this daemon's memory files (in a tmpfs other daemons may share)."""
    return os.path.join(tmpfs_dir, f"vmservice-memory-{daemon_tag(state_dir)}")


def memory_file(state_dir: str, tmpfs_dir: str, hostname: str, kind: str) -> str:
    """The memory file of a new node of a group whose ``fork_memory`` is ``kind``; empty for none."""
    if kind != "file":
        return ""
    return os.path.join(memory_directory(state_dir, tmpfs_dir), f"{hostname}.ram")


def prepare(record: NodeRecord) -> None:
    """
    Before a VM of ``record`` starts: a memory file left by an earlier VM is
    deleted (nothing maps it) and the tmpfs must have room for the new one.

    :raise InsufficientMemory: (``tmpfs_full``) it has not.
    """
    if not record.memory_file:
        return
    directory = os.path.dirname(record.memory_file)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    discard(record.memory_file)
    ensure_room(directory, record.ram_bytes, f"the memory of node {record.hostname!r}")


def release(record: NodeRecord) -> None:
    """``record``'s VM ended: its memory file goes (a snapshot holds the memory, if it was suspended)."""
    if record.memory_file:
        discard(record.memory_file)


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
            info = os.stat(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        found.append((info.st_size, info.st_blocks * 512))
    return found


def used_bytes(path: str) -> int:
    """The bytes a (sparse) file holds, 0 for none."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def reserve(source: str, target: str) -> None:
    """
    Make the new file ``target`` (mode 0600) as large as ``source``, its
    pages allocated where ``source`` has data now (and holes elsewhere): a
    later :func:`copy_sparse` into it then only copies, which takes about
    half as long in a tmpfs as allocating the pages too.
    """
    src = os.open(source, os.O_RDONLY)
    try:
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            size = os.fstat(src).st_size
            os.ftruncate(dst, size)
            for start, end in _extents(src, size):
                os.posix_fallocate(dst, start, end - start)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def copy_sparse(source: str, target: str) -> int:
    """
    Copy the data of the file ``source`` into ``target`` (made as by
    :func:`reserve` unless it exists), at the same offsets, holes left
    holes: the bytes copied.
    """
    if not os.path.exists(target):
        reserve(source, target)
    copied = 0
    src = os.open(source, os.O_RDONLY)
    try:
        dst = os.open(target, os.O_WRONLY)
        try:
            size = os.fstat(src).st_size
            if size:
                with mmap.mmap(src, size, prot=mmap.PROT_READ) as view:
                    for start, end in _extents(src, size):
                        copied += _copy_range(memoryview(view), dst, start, end)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return copied


def _extents(fd: int, size: int) -> Iterable[tuple[int, int]]:
    """The ranges of ``fd`` that hold data (``SEEK_DATA``/``SEEK_HOLE``)."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as error:
            if error.errno == errno.ENXIO:  # no data past offset
                return
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        offset = end


def _copy_range(view: memoryview, dst: int, start: int, end: int) -> int:
    offset = start
    try:
        while offset < end:
            offset += os.pwrite(dst, view[offset:end], offset)
    finally:
        view.release()
    return offset - start


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
    try:
        return [os.path.join(directory, name) for name in os.listdir(directory)]
    except FileNotFoundError:
        return []


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


@frozen
class MemoryFork:
    """
    The memory of one fork.

    :ivar copy: the frozen copy of the parent's memory file its children
        map, or ``None`` for a parent without one (its whole state is saved
        and every child loads it).
    :ivar clock: for the copy's time in the log.
    """

    copy: str | None
    clock: IReactorTime

    @classmethod
    def begin(cls, parent: NodeRuntime, clock: IReactorTime) -> "MemoryFork":
        """
        Before the parent is paused: name the copy in its record (so nothing
        collects it) once the tmpfs has room for it.

        :raise InsufficientMemory: (``tmpfs_full``) it has not; nothing was done.
        """
        source = parent.record.memory_file
        if not source:
            return cls(None, clock)
        directory = os.path.dirname(source)
        ensure_room(directory, used_bytes(source), f"a copy of the memory of node {parent.hostname!r}")
        copy = os.path.join(directory, f"{COPY_PREFIX}{parent.hostname}.{secrets.token_hex(4)}.ram")
        parent.set(parent.record.status, memory_copies=(*parent.record.memory_copies, copy))
        try:
            reserve(source, copy)  # not in the pause
        except OSError:
            discard(copy)
            parent.set(parent.record.status, memory_copies=tuple(c for c in parent.record.memory_copies if c != copy))
            raise
        return cls(copy, clock)

    def save(self, machine: IMachine, record: NodeRecord, state: str) -> Deferred[None]:
        """The paused parent's state into ``state``: all of it, or its devices and the copy of its memory file."""
        if self.copy is None:
            return machine.save_state(state)
        return Deferred.fromCoroutine(self._save(machine, record.memory_file, state, self.copy))

    async def _save(self, machine: IMachine, source: str, state: str, copy: str) -> None:
        await machine.save_device_state(state)
        began = self.clock.seconds()
        copied = copy_sparse(source, copy)
        log.info("copied the memory of {source} ({size:.0f} MB) in {ms:.0f} ms",
                 source=os.path.basename(source), size=copied / 1e6, ms=(self.clock.seconds() - began) * 1000)

    def child(self, record: NodeRecord) -> NodeRecord:
        """A child's record: it names the copy (and, its memory block being named, restores like a clone)."""
        if self.copy is None:
            return record
        return evolve(record, memory_copies=(self.copy,), clone_memory=True)

    def memory(self) -> RamBacking | None:
        """A child's memory backend: the copy mapped privately; ``None`` for the plain path."""
        return None if self.copy is None else RamBacking(self.copy, shared=False)

    async def load(self, machine: IMachine, state: str) -> None:
        """Load ``state`` into a child waiting in ``-incoming defer`` and let it run."""
        if self.copy is None:
            await machine.load_state(state)
            await machine.resume()
        else:
            await machine.load_device_state(state, resume=True)

    def end(self, parent: NodeRuntime, named: Iterable[NodeRecord]) -> None:
        """
        The fork is over: the parent's record no longer names the copy, which
        goes unless another of the records ``named`` (its children's) does.
        """
        if self.copy is None:
            return
        parent.set(parent.record.status, memory_copies=tuple(c for c in parent.record.memory_copies if c != self.copy))
        if not any(self.copy in record.memory_copies for record in named if record.hostname != parent.hostname):
            discard(self.copy)


__all__ = [
    "COPY_PREFIX", "MemoryFork", "close", "collect_copies", "copy_sparse", "ensure_room",
    "kept_files", "memory_directory", "memory_file", "prepare", "release", "sweep", "used_bytes",
]
