# -*- test-case-name: tests.test_nodestats_metrics -*-
"""
Per-node Prometheus series from the nodes' latest statistics snapshots.

:class:`SnapshotSampler` (a Twisted service) samples every node's statistics in the background every
``stats_interval`` seconds and keeps the latest snapshot of each node; :class:`NodeStatsCollector`
turns them into series at scrape time, so a scrape never waits on a guest.  Each series is labelled
``hostgroup`` and ``hostname``.  A node without a snapshot in the last round (paused, suspended,
stopped, its metrics agent silent) has no series until it answers again; a deleted node's series
disappear with the next round.

- ``vmservice_node_load1``, ``vmservice_node_load5``, ``vmservice_node_load15`` (load averages)
- ``vmservice_node_cpus``
- ``vmservice_node_memory_total_bytes``, ``vmservice_node_memory_used_bytes``,
  ``vmservice_node_memory_available_bytes``
- ``vmservice_node_disk_space_total_bytes``, ``vmservice_node_disk_space_used_bytes``,
  ``vmservice_node_disk_space_free_bytes`` (the root file system)
- ``vmservice_node_disk_read_bytes_total``, ``vmservice_node_disk_written_bytes_total``,
  ``vmservice_node_network_received_bytes_total``, ``vmservice_node_network_sent_bytes_total``
  (counters since the guest booted)
- ``vmservice_node_open_connections``, ``vmservice_node_open_files``
- ``vmservice_node_uptime_seconds``
- ``vmservice_node_stats_up`` (1 when the node answered the last round, 0 when not; every node)
"""

from __future__ import annotations

from typing import Awaitable, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from .nodes.stats import NodeStat, Snapshot

log = Logger()

#: Gauges: name, help, and how to read the value off a snapshot.
_GAUGES: tuple[tuple[str, str, Callable[[Snapshot], float]], ...] = (
    ("vmservice_node_load1", "Load average over 1 minute in the guest", lambda s: s.load_avg1),
    ("vmservice_node_load5", "Load average over 5 minutes in the guest", lambda s: s.load_avg5),
    ("vmservice_node_load15", "Load average over 15 minutes in the guest", lambda s: s.load_avg15),
    ("vmservice_node_cpus", "CPUs the guest sees", lambda s: s.total_cpus),
    ("vmservice_node_memory_total_bytes", "Memory of the guest", lambda s: s.total_memory),
    ("vmservice_node_memory_used_bytes", "Memory used in the guest (total minus available)", lambda s: s.memory_used),
    ("vmservice_node_memory_available_bytes", "Memory available in the guest", lambda s: s.memory_available),
    ("vmservice_node_disk_space_total_bytes", "Size of the guest's root file system", lambda s: s.disk_space_total),
    ("vmservice_node_disk_space_used_bytes", "Space used on the guest's root file system", lambda s: s.disk_space_used),
    ("vmservice_node_disk_space_free_bytes", "Space free for users on the guest's root file system",
     lambda s: s.disk_space_free),
    ("vmservice_node_open_connections", "Established TCP connections in the guest", lambda s: s.open_connections),
    ("vmservice_node_open_files", "Open file descriptors in the guest", lambda s: s.open_files),
    ("vmservice_node_uptime_seconds", "Time since the guest booted", lambda s: s.uptime_seconds),
)

#: Counters (the ``_total`` suffix is added by the exposition): name, help, value.
_COUNTERS: tuple[tuple[str, str, Callable[[Snapshot], float]], ...] = (
    ("vmservice_node_disk_read_bytes", "Bytes read from the guest's disks since it booted",
     lambda s: s.disk_read_total),
    ("vmservice_node_disk_written_bytes", "Bytes written to the guest's disks since it booted",
     lambda s: s.disk_write_total),
    ("vmservice_node_network_received_bytes", "Bytes received by the guest since it booted",
     lambda s: s.network_read_total),
    ("vmservice_node_network_sent_bytes", "Bytes sent by the guest since it booted",
     lambda s: s.network_write_total),
)

#: Every metric name this module exports, as scraped (counters with ``_total``).
METRIC_NAMES = (tuple(name for name, _, _ in _GAUGES) + tuple(f"{name}_total" for name, _, _ in _COUNTERS)
                + ("vmservice_node_stats_up",))


class SnapshotSampler(TimerService):
    """
    Samples every node's statistics every ``interval`` seconds and keeps the latest round.

    :param clock: runs the rounds.
    :param sample: one round: every node with its snapshot or an error.
    :param interval: seconds between the starts of two rounds.
    """

    name = "stats-sampler"

    def __init__(self, clock: IReactorTime, sample: Callable[[], Awaitable[list[NodeStat]]], interval: float) -> None:
        super().__init__(interval, self._round)  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
        self.clock = clock
        self._sample = sample
        self._busy = False
        #: The last round.
        self.latest: list[NodeStat] = []

    def _round(self) -> Deferred[None] | None:
        if self._busy:  # the last round is still running (it is bounded by the per-node deadline)
            return None
        self._busy = True
        return Deferred.fromCoroutine(self._take())

    async def _take(self) -> None:
        try:
            self.latest = await self._sample()
        except Exception:
            log.failure("sampling the nodes' statistics failed")
        finally:
            self._busy = False


class NodeStatsCollector(Collector):
    """
    The per-node series, from the latest round at scrape time.

    :param latest: the latest round of statistics.
    :param present: the hostnames of the nodes that exist now (a node deleted since the round has no series).
    """

    def __init__(self, latest: Callable[[], list[NodeStat]], present: Callable[[], set[str]]) -> None:
        self._latest = latest
        self._present = present

    def collect(self) -> Iterable[Metric]:
        labels = ["hostgroup", "hostname"]
        present = self._present()
        stats = [stat for stat in self._latest() if stat.record.hostname in present]
        up = GaugeMetricFamily("vmservice_node_stats_up",
                               "Whether the node's metrics agent answered the last sampling", labels=labels)
        for stat in stats:
            up.add_metric([stat.record.hostgroup, stat.record.hostname], 1 if stat.snapshot is not None else 0)
        yield up
        answered = [(stat.record.hostgroup, stat.record.hostname, stat.snapshot) for stat in stats
                    if stat.snapshot is not None]
        for name, description, value in _GAUGES:
            gauge = GaugeMetricFamily(name, description, labels=labels)
            for group, hostname, snapshot in answered:
                gauge.add_metric([group, hostname], float(value(snapshot)))
            yield gauge
        for name, description, value in _COUNTERS:
            counter = CounterMetricFamily(name, description, labels=labels)
            for group, hostname, snapshot in answered:
                counter.add_metric([group, hostname], float(value(snapshot)))
            yield counter


__all__ = ["METRIC_NAMES", "NodeStatsCollector", "SnapshotSampler"]
