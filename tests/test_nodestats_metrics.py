"""
Tests for :mod:`vmservice.nodestats_metrics`: the per-node series from the latest round, series of
deleted nodes left out, and the background sampler on a clock (one round at a time).
"""

from __future__ import annotations


from prometheus_client import CollectorRegistry, generate_latest
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.node_stats import FIELDS, record
from vmservice.nodes.stats import NodeStat, snapshot_of
from vmservice.nodestats_metrics import METRIC_NAMES, NodeStatsCollector, SnapshotSampler


class CollectorTests(SynchronousTestCase):
    def render(self, stats: list[NodeStat], present: set[str]) -> str:
        registry = CollectorRegistry()
        registry.register(NodeStatsCollector(lambda: stats, lambda: present))
        return generate_latest(registry).decode()

    def test_series(self) -> None:
        """Every metric of a node that answered, labelled by group and hostname; up 0 for one that did not."""
        stats = [NodeStat(record("demo-1"), snapshot=snapshot_of(FIELDS)), NodeStat(record("demo-2"), error="paused")]
        text = self.render(stats, {"demo-1", "demo-2"})
        for name in METRIC_NAMES:
            self.assertIn(f'{name}{{hostgroup="demo",hostname="demo-1"}}', text)
        self.assertIn('vmservice_node_memory_used_bytes{hostgroup="demo",hostname="demo-1"} 400.0', text)
        self.assertIn('vmservice_node_disk_written_bytes_total{hostgroup="demo",hostname="demo-1"} 1024.0', text)
        self.assertIn('vmservice_node_stats_up{hostgroup="demo",hostname="demo-2"} 0.0', text)
        self.assertNotIn('vmservice_node_load1{hostgroup="demo",hostname="demo-2"}', text)

    def test_deleted_node(self) -> None:
        """A node gone since the round has no series."""
        stats = [NodeStat(record("demo-1"), snapshot=snapshot_of(FIELDS))]
        self.assertNotIn("demo-1", self.render(stats, set()))


class SamplerTests(SynchronousTestCase):
    def test_rounds(self) -> None:
        """A round at start and every interval; a round still running is not doubled; the latest is kept."""
        clock = MemoryReactorClock()
        rounds: list[Deferred[list[NodeStat]]] = []

        def sample() -> Deferred[list[NodeStat]]:
            d: Deferred[list[NodeStat]] = Deferred()
            rounds.append(d)
            return d

        sampler = SnapshotSampler(clock, sample, 15)
        sampler.startService()
        self.assertEqual(len(rounds), 1)
        clock.advance(15)
        self.assertEqual(len(rounds), 1)  # the first is still running
        first = [NodeStat(record("demo-1"), error="x")]
        rounds[0].callback(first)
        self.assertEqual(sampler.latest, first)
        clock.advance(15)
        self.assertEqual(len(rounds), 2)
        rounds[1].errback(RuntimeError("broken"))
        self.assertEqual(sampler.latest, first)
        self.flushLoggedErrors(RuntimeError)
        sampler.stopService()
        self.assertFalse(clock.getDelayedCalls())
