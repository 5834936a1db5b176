"""
What the tests of :mod:`vmservice.e2b` share: :class:`FakeHost`, nodes
in memory (a :class:`~vmservice.e2b.host.SandboxHost`) whose operations
wait on Deferreds the test fires when it wants them done, and
:func:`make_sandboxes`, the registry over it on a
:class:`~twisted.internet.task.Clock`, its store in a temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timezone
from typing import Callable

from attrs import evolve
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vmservice.config import E2bConfig
from vmservice.e2b.sandboxes import Sandboxes
from vmservice.e2b.store import SandboxStore
from vmservice.errors import AgentError, GuestErrorKind, NotFound
from vmservice.guestport.guest import IGuest
from vmservice.nodes.model import NodeRecord, Status
from vmservice.nodes.stats import Snapshot

MiB = 1024 * 1024
#: The clock's start: 2026-01-01T00:00:00Z.
EPOCH = 1767225600.0
CONFIG = E2bConfig(templates=(("base", "small"), ("big", "large")), default_timeout_seconds=300,
                   max_timeout_seconds=3600)


def snapshot(hostname: str) -> Snapshot:
    """A sample of a guest."""
    return Snapshot(
        hostname=hostname, arch="x86_64", timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc), uptime_seconds=5.0,
        total_cpus=2, total_memory=256 * MiB, memory_used=64 * MiB, memory_available=160 * MiB,
        memory_used_percent=25.0, load_avg1=0.5, load_avg5=0.2, load_avg15=0.1, disk_read_total=0.0,
        disk_write_total=0.0, network_read_total=0.0, network_write_total=0.0, disk_io_inflight=0,
        open_connections=0, open_files=10, entropy=256, disk_space_total=2048 * MiB, disk_space_used=100 * MiB,
        disk_space_free=1948 * MiB, disk_space_used_percent=5.0,
    )


class FakeHost:
    """
    Nodes in memory.  Operations finish at once unless ``waiting`` names them
    (``create``, ``delete``, ``suspend``, ``restore``): then they wait on a
    Deferred in ``held``; ``fail`` names operations that raise.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, NodeRecord] = {}
        self.waiting: set[str] = set()
        self.guests: dict[str, IGuest] = {}
        self.holds: dict[str, int] = {}
        self.fail: dict[str, Exception] = {}
        self.held: dict[str, Deferred[None]] = {}
        self.calls: list[tuple[str, str]] = []
        self.listeners: list[Callable[[str], None]] = []
        self.done: Deferred[None] = succeed(None)

    def recovered(self) -> Deferred[None]:
        return self.done

    def node(self, hostname: str) -> NodeRecord:
        if hostname not in self.nodes:
            raise NotFound(f"node {hostname!r} not found")
        return self.nodes[hostname]

    def disk_bytes(self, group: str) -> int:
        return 2048 * MiB

    async def _step(self, name: str, hostname: str) -> None:
        self.calls.append((name, hostname))
        if name in self.waiting:
            self.held[name] = Deferred()
            await self.held[name]
        if name in self.fail:
            raise self.fail[name]

    def add(self, hostname: str, group: str = "small", status: Status = Status.RUNNING) -> NodeRecord:
        record = NodeRecord(hostname, group, 256 * MiB, 1, datetime(2026, 1, 1, tzinfo=timezone.utc), status=status)
        self.nodes[hostname] = record
        return record

    async def create(self, group: str, hostname: str) -> NodeRecord:
        await self._step("create", hostname)
        return self.add(hostname, group)

    async def delete(self, group: str, hostname: str) -> None:
        await self._step("delete", hostname)
        self.node(hostname)
        self.remove(hostname)

    def remove(self, hostname: str) -> None:
        """The node gone, and the listeners told."""
        del self.nodes[hostname]
        for listener in list(self.listeners):
            listener(hostname)

    async def suspend(self, hostname: str) -> None:
        await self._step("suspend", hostname)
        self.nodes[hostname] = evolve(self.node(hostname), status=Status.SUSPENDED)

    async def restore(self, hostname: str) -> None:
        await self._step("restore", hostname)
        self.nodes[hostname] = evolve(self.node(hostname), status=Status.RUNNING)

    async def snapshot(self, hostname: str) -> Snapshot | None:
        self.node(hostname)
        return snapshot(hostname)

    async def guest(self, hostname: str) -> IGuest:
        self.node(hostname)
        if hostname not in self.guests:
            raise AgentError(GuestErrorKind.UNAVAILABLE, f"no agent answers on {hostname}")
        return self.guests[hostname]

    def hold(self, hostname: str) -> Callable[[], None]:
        """Count the holds of each node (``holds``)."""
        self.holds[hostname] = self.holds.get(hostname, 0) + 1

        def release() -> None:
            self.holds[hostname] -= 1
        return release

    def on_deleted(self, listener: Callable[[str], None]) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)


def temporary_directory(case: SynchronousTestCase) -> str:
    """A private directory for one test, removed after it."""
    path = tempfile.mkdtemp(prefix="e2b-test-")
    case.addCleanup(lambda: _remove_tree(path))
    return path


def _remove_tree(path: str) -> None:
    for top, directories, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(top, name))
        for name in directories:
            os.rmdir(os.path.join(top, name))
    os.rmdir(path)


def ids() -> Callable[[], str]:
    """Sandbox ids in order: ``isandbox00000000001``, ..."""
    counter = iter(range(1, 10**6))
    return lambda: f"isandbox{next(counter):012d}"


def make_sandboxes(case: SynchronousTestCase, host: FakeHost | None = None, config: E2bConfig = CONFIG,
                   directory: str | None = None, start: bool = True) -> tuple[Sandboxes, FakeHost, Clock, SandboxStore]:
    """The registry over ``host`` (a new one by default) on a clock at :data:`EPOCH`, started unless not ``start``."""
    host = FakeHost() if host is None else host
    clock = Clock()
    clock.advance(EPOCH)
    store = SandboxStore(os.path.join(directory or temporary_directory(case), "e2b"))
    sandboxes = Sandboxes(clock, host, store, config, new_id=ids())
    if start:
        sandboxes.startService()
        case.addCleanup(lambda: sandboxes.stopService() if sandboxes.running else None)
    return sandboxes, host, clock, store
