# -*- test-case-name: tests.nodes.test_stats -*-
"""
Statistics of nodes: what their guests' metrics agents report, fetched concurrently, each in bounded time.

:meth:`NodeStats.all` lists every visible node with its :class:`Snapshot` or with an ``error`` saying
why there is none.  Only a ``Running`` node with a VM is asked, and each one within
:data:`STATS_DEADLINE` seconds (a race against a timer; the loser is cancelled), all at once, so a
node that does not answer (booting, its metrics agent dead or stuck, its guest hung) never stalls the
others.  A paused, suspended or stopped node is not asked at all: nothing is woken, nothing waits on a
dead socket.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Mapping

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred, fail, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

from ..durations import format_go_duration
from .model import NodeRecord, Status, visible
from .readiness import first_of
from .registry import Registry
from .runtime import NodeRuntime

#: Seconds one node's metrics agent may take to answer.
STATS_DEADLINE = 2.0

#: Fetches the fields of one snapshot from a metrics socket within a deadline (seconds).
SnapshotFetch = Callable[[str, float], "Deferred[Mapping[str, Any]]"]


class BadSnapshot(Exception):
    """The metrics agent answered fields that do not make a snapshot."""


@frozen
class Snapshot:
    """
    One sample of a guest.  Sizes and counters are bytes; counters count since the guest booted.

    :ivar uptime_seconds: time since the guest booted (shown as Go duration text).
    :ivar memory_used: total minus available.
    :ivar disk_read_total: bytes read from the guest's disks (sectors times 512).
    :ivar network_read_total: bytes received on every interface but loopback.
    :ivar disk_io_inflight: disk I/Os in progress.
    :ivar open_connections: established TCP connections (IPv4 and IPv6).
    :ivar open_files: file handles allocated in the guest's kernel.
    :ivar entropy: bits in the kernel's entropy pool.
    :ivar disk_space_free: bytes of the root file system unprivileged users may still use.
    :ivar disk_space_used_percent: used / (used + free), as ``df``.
    """

    hostname: str
    arch: str
    timestamp: datetime
    uptime_seconds: float
    total_cpus: int
    total_memory: int
    memory_used: int
    memory_available: int
    memory_used_percent: float
    load_avg1: float
    load_avg5: float
    load_avg15: float
    disk_read_total: float
    disk_write_total: float
    network_read_total: float
    network_write_total: float
    disk_io_inflight: int
    open_connections: int
    open_files: int
    entropy: int
    disk_space_total: int
    disk_space_used: int
    disk_space_free: int
    disk_space_used_percent: float

    @property
    def uptime(self) -> str:
        """The uptime as Go duration text in whole seconds (``1h2m3s``)."""
        return format_go_duration(float(int(self.uptime_seconds)))


#: Snapshot attributes by the guest's camelCase field names, with the type each must have.
_FIELDS: dict[str, tuple[str, type]] = {
    "hostname": ("hostname", str),
    "arch": ("arch", str),
    "uptimeSeconds": ("uptime_seconds", float),
    "totalCpus": ("total_cpus", int),
    "totalMemory": ("total_memory", int),
    "memoryUsed": ("memory_used", int),
    "memoryAvailable": ("memory_available", int),
    "memoryUsedPercent": ("memory_used_percent", float),
    "loadAvg1": ("load_avg1", float),
    "loadAvg5": ("load_avg5", float),
    "loadAvg15": ("load_avg15", float),
    "diskReadTotal": ("disk_read_total", float),
    "diskWriteTotal": ("disk_write_total", float),
    "networkReadTotal": ("network_read_total", float),
    "networkWriteTotal": ("network_write_total", float),
    "diskIOInflight": ("disk_io_inflight", int),
    "openConnections": ("open_connections", int),
    "openFiles": ("open_files", int),
    "entropy": ("entropy", int),
    "diskSpaceTotal": ("disk_space_total", int),
    "diskSpaceUsed": ("disk_space_used", int),
    "diskSpaceFree": ("disk_space_free", int),
    "diskSpaceUsedPercent": ("disk_space_used_percent", float),
}


def snapshot_of(fields: Mapping[str, Any]) -> Snapshot:
    """
    The snapshot the guest's ``fields`` describe.

    :raise BadSnapshot: a field is missing or of the wrong type.
    """
    values: dict[str, Any] = {}
    for name, (attribute, kind) in _FIELDS.items():
        value = fields.get(name)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BadSnapshot(f"the metrics agent's field {name!r} is missing or not a {kind.__name__}")
        values[attribute] = value
    try:
        stamp = datetime.fromisoformat(str(fields.get("timestamp")).replace("Z", "+00:00"))
    except ValueError:
        raise BadSnapshot("the metrics agent's timestamp is not RFC 3339") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return Snapshot(timestamp=stamp, **values)


@frozen
class NodeStat:
    """A node as listed, with its snapshot, or the reason there is none."""

    record: NodeRecord
    snapshot: Snapshot | None = None
    error: str | None = None


_NOT_ASKED = {
    Status.PAUSED: "the node is paused",
    Status.SUSPENDED: "the node is suspended",
    Status.STOPPED: "the node is stopped",
}


def no_snapshots(socket: str, deadline: float) -> Deferred[Mapping[str, Any]]:
    """No metrics channel: every snapshot fails."""
    return fail(LookupError("no metrics channel is configured"))


class NodeStats:
    """
    The statistics of one daemon's nodes.

    :param registry: the nodes.
    :param clock: times the deadlines.
    :param fetch: asks one metrics socket for a snapshot's fields.
    :param deadline: seconds each node may take.
    :param awake: wakes a node the idle timer suspended, before one node's
        statistics are asked (not for every node's: a listing wakes nothing).
    """

    def __init__(self, registry: Registry, clock: IReactorTime, fetch: SnapshotFetch,
                 deadline: float = STATS_DEADLINE,
                 awake: Callable[[str], Awaitable[None]] | None = None) -> None:
        self._registry = registry
        self._awake = awake
        self._clock = clock
        self._fetch = fetch
        self._deadline = deadline

    async def all(self) -> list[NodeStat]:
        """Every visible node, oldest first, each with its snapshot or an error; never longer than the deadline."""
        shown = {record.hostname for record in self._registry.listing()}
        nodes = [node for node in self._registry.all() if node.hostname in shown]
        stats: list[NodeStat] = await gatherResults(
            [Deferred.fromCoroutine(self._stat(node)) for node in nodes]
        )
        order = {record.hostname: index for index, record in enumerate(self._registry.listing())}
        return sorted(stats, key=lambda stat: order.get(stat.record.hostname, len(order)))

    async def one(self, hostname: str) -> NodeStat:
        """
        The node ``hostname`` with its snapshot or an error.

        :raise NotFound: there is no such node.
        """
        if self._awake is not None:
            await self._awake(hostname)
        return await self._stat(self._registry.find(hostname))

    async def _stat(self, node: NodeRuntime) -> NodeStat:
        record = visible(node.record)
        reason = _NOT_ASKED.get(record.status)
        if reason is None and record.status != Status.RUNNING:
            reason = f"the node is {record.status.value.lower()}"
        if reason is None and node.machine is None:
            reason = "the node's VM is not running"
        if reason is not None:
            return NodeStat(record, error=reason)
        try:
            index, fields = await first_of(
                self._fetch(node.paths.metrics, self._deadline),
                deferLater(self._clock, self._deadline, lambda: None),
            )
            if index == 1:
                return NodeStat(record, error=f"the metrics agent did not answer within {self._deadline:g} s")
            return NodeStat(record, snapshot=snapshot_of(fields))
        except CancelledError:
            raise
        except Exception as error:
            return NodeStat(record, error=str(error) or type(error).__name__)


__all__ = ["STATS_DEADLINE", "BadSnapshot", "NodeStat", "NodeStats", "Snapshot", "SnapshotFetch", "no_snapshots", "snapshot_of"]
