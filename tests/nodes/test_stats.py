"""
Tests for :mod:`vmservice.nodes.stats` on fakes and a clock: snapshots, nodes not asked (paused,
suspended, stopped), a node that never answers (the list still comes at the deadline, the fetch is
cancelled), bad fields, unknown nodes.
"""

from __future__ import annotations

from typing import Any, Mapping

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FleetHarness
from tests.node_stats import FIELDS
from vmservice.errors import NotFound
from vmservice.nodes.model import CreateRequest, Status, Wait
from vmservice.nodes.stats import BadSnapshot, NodeStats, snapshot_of


class SnapshotTests(SynchronousTestCase):
    def test_fields(self) -> None:
        """camelCase fields become the record; an integer is accepted for a float; uptime is Go duration text."""
        snapshot = snapshot_of(FIELDS)
        self.assertEqual((snapshot.total_cpus, snapshot.disk_write_total, snapshot.uptime), (2, 1024.0, "1h2m3s"))
        self.assertEqual(snapshot.timestamp.isoformat(), "2026-11-25T20:00:00.500000+00:00")

    def test_bad_fields(self) -> None:
        for name, value in (("totalCpus", None), ("totalCpus", 1.5), ("hostname", 3), ("entropy", True),
                            ("timestamp", "yesterday")):
            with self.assertRaises(BadSnapshot, msg=name):
                snapshot_of({**FIELDS, name: value})


class NodeStatsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.h = FleetHarness(self.mktemp())
        self.h.fleet.startService()
        self.asked: dict[str, Deferred[Mapping[str, Any]]] = {}
        self.stats = NodeStats(self.h.fleet._registry, self.h.reactor, self.fetch, deadline=2.0)
        for _ in range(3):
            self.successResultOf(Deferred.fromCoroutine(self.h.fleet.create("demo", CreateRequest(), Wait.NONE, 60)))

    def fetch(self, socket: str, deadline: float) -> Deferred[Mapping[str, Any]]:
        self.assertEqual(deadline, 2.0)
        hostname = socket.split("/")[-2]
        self.assertEqual(socket, self.h.node(hostname).paths.metrics)
        d: Deferred[Mapping[str, Any]] = Deferred()
        self.asked[hostname] = d
        return d

    def test_all_answer(self) -> None:
        """Every node is asked at once; the list is in listing order."""
        d = Deferred.fromCoroutine(self.stats.all())
        self.assertEqual(sorted(self.asked), ["demo-1", "demo-2", "demo-3"])
        for hostname in ("demo-3", "demo-1", "demo-2"):
            self.asked[hostname].callback({**FIELDS, "hostname": hostname})
        stats = self.successResultOf(d)
        self.assertEqual([s.record.hostname for s in stats], ["demo-1", "demo-2", "demo-3"])
        self.assertEqual([s.snapshot.hostname for s in stats if s.snapshot], ["demo-1", "demo-2", "demo-3"])
        self.assertEqual([s.error for s in stats], [None, None, None])

    def test_stuck_node(self) -> None:
        """One node that never answers: the list comes at the deadline with its error; its fetch is cancelled."""
        d = Deferred.fromCoroutine(self.stats.all())
        self.asked["demo-1"].callback(FIELDS)
        self.asked["demo-3"].errback(OSError("connection refused"))
        self.h.reactor.advance(1.9)
        self.assertNoResult(d)
        self.h.reactor.advance(0.1)
        stats = {s.record.hostname: s for s in self.successResultOf(d)}
        self.assertIsNotNone(stats["demo-1"].snapshot)
        self.assertEqual(stats["demo-2"].error, "the metrics agent did not answer within 2 s")
        self.assertEqual(stats["demo-3"].error, "connection refused")
        self.assertTrue(self.asked["demo-2"].called)  # cancelled
        self.assertFalse(self.h.reactor.getDelayedCalls())

    def test_not_asked(self) -> None:
        """Paused, suspended and stopped nodes are listed with their reason and never asked."""
        for hostname, status in (("demo-1", Status.PAUSED), ("demo-2", Status.SUSPENDED), ("demo-3", Status.STOPPED)):
            self.h.node(hostname).record = self.h.node(hostname).record.with_status(status)
        stats = self.successResultOf(Deferred.fromCoroutine(self.stats.all()))
        self.assertEqual([s.error for s in stats],
                         ["the node is paused", "the node is suspended", "the node is stopped"])
        self.assertEqual([s.record.status for s in stats], [Status.PAUSED, Status.SUSPENDED, Status.STOPPED])
        self.assertEqual(self.asked, {})

    def test_bad_answer(self) -> None:
        d = Deferred.fromCoroutine(self.stats.one("demo-2"))
        self.asked["demo-2"].callback({**FIELDS, "totalMemory": "lots"})
        self.assertIn("totalMemory", self.successResultOf(d).error or "")

    def test_one_unknown(self) -> None:
        self.failureResultOf(Deferred.fromCoroutine(self.stats.one("demo-9")), NotFound)

    def test_boot_has_the_channel(self) -> None:
        """A booted VM gets the metrics channel, and its record says so (for a later restore)."""
        self.assertEqual(self.h.driver.machines[0].spec.metrics_socket, self.h.node("demo-1").paths.metrics)
        self.assertTrue(self.h.node("demo-1").record.metrics_channel)
        self.assertTrue(next(r for r in self.h.store.load_all()[0] if r.hostname == "demo-1").metrics_channel)

    def test_no_channel(self) -> None:
        """Parts without a metrics channel: every running node has an error."""
        stat = self.successResultOf(Deferred.fromCoroutine(self.h.fleet.stats.one("demo-1")))
        self.assertEqual(stat.error, "no metrics channel is configured")


