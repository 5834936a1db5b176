# -*- test-case-name: tests.test_metrics -*-
"""
Tests for :mod:`vmservice.metrics`: what each observation adds to the text
exposition, node gauges read at scrape time, and registries kept apart.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from twisted.trial.unittest import SynchronousTestCase

from datetime import datetime, timezone

from twisted.internet.testing import MemoryReactorClock

from vmservice.errors import InsufficientMemory
from vmservice.metrics import STREAM_KINDS, Metrics
from vmservice.nodes.admission import Admission, Holder, Limits
from vmservice.nodes.events import EventType, NodeEvent


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the rendered exposition, by name and sorted labels."""
    text, _ = metrics.render()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


class MetricsTests(SynchronousTestCase):
    def test_requests(self) -> None:
        """Each request counts once by route, method and status, and its time goes to the latency histogram."""
        metrics = Metrics()
        metrics.observe_request("/nodes/<name>", "GET", 200, 0.004)
        metrics.observe_request("/nodes/<name>", "GET", 200, 0.2)
        metrics.observe_request("/nodes/<name>", "GET", 404, 0.001)
        found = samples(metrics)
        labels = (("method", "GET"), ("route", "/nodes/<name>"))
        self.assertEqual(found[("vmservice_http_requests_total", (*labels, ("status", "200")))], 2)
        self.assertEqual(found[("vmservice_http_requests_total", (*labels, ("status", "404")))], 1)
        self.assertEqual(found[("vmservice_http_request_duration_seconds_count", labels)], 3)
        self.assertAlmostEqual(found[("vmservice_http_request_duration_seconds_sum", labels)], 0.205)

    def test_boot(self) -> None:
        """Boot times go to a histogram per host group whose buckets reach minutes."""
        metrics = Metrics()
        metrics.observe_boot("small", 3.5)
        metrics.observe_boot("small", 250)
        found = samples(metrics)
        self.assertEqual(found[("vmservice_boot_duration_seconds_count", (("hostgroup", "small"),))], 2)
        self.assertEqual(found[("vmservice_boot_duration_seconds_bucket", (("hostgroup", "small"), ("le", "4.0")))], 1)
        self.assertEqual(found[("vmservice_boot_duration_seconds_bucket", (("hostgroup", "small"), ("le", "300.0")))], 2)

    def test_warm_start(self) -> None:
        """Template builds by result (both shown at 0 first), warm fallbacks by group and reason, clone times."""
        metrics = Metrics()
        found = samples(metrics)
        self.assertEqual(found[("vmservice_template_builds_total", (("result", "ok"),))], 0)
        self.assertEqual(found[("vmservice_template_builds_total", (("result", "failed"),))], 0)
        metrics.observe_template_build("ok")
        metrics.observe_warm_fallback("small", "missing")
        metrics.observe_clone("small", 0.15)
        found = samples(metrics)
        self.assertEqual(found[("vmservice_template_builds_total", (("result", "ok"),))], 1)
        self.assertEqual(found[("vmservice_warm_fallbacks_total", (("hostgroup", "small"), ("reason", "missing")))], 1)
        self.assertEqual(found[("vmservice_clone_duration_seconds_bucket", (("hostgroup", "small"), ("le", "0.2")))], 1)
        self.assertEqual(found[("vmservice_clone_duration_seconds_bucket", (("hostgroup", "small"), ("le", "0.1")))], 0)

    def test_nodes_read_at_scrape(self) -> None:
        """Node gauges come from the counts function at each scrape, so they follow the fleet."""
        metrics = Metrics()
        counts = [("small", "Running", 2)]
        metrics.watch_nodes(lambda: counts)
        self.assertEqual(samples(metrics)[("vmservice_nodes", (("hostgroup", "small"), ("status", "Running")))], 2)
        counts[:] = [("small", "Running", 1), ("small", "Stopped", 1)]
        found = samples(metrics)
        self.assertEqual(found[("vmservice_nodes", (("hostgroup", "small"), ("status", "Running")))], 1)
        self.assertEqual(found[("vmservice_nodes", (("hostgroup", "small"), ("status", "Stopped")))], 1)

    def test_render(self) -> None:
        """The exposition is Prometheus text with its content type; a new registry starts empty of samples."""
        text, content_type = Metrics().render()
        self.assertEqual(content_type, CONTENT_TYPE_LATEST)
        self.assertIn(b"# TYPE vmservice_http_requests_total counter", text)
        self.assertNotIn(b"vmservice_http_requests_total{", text)

    def test_registries_apart(self) -> None:
        """Two Metrics do not share counters; a registry given is the one used."""
        registry = CollectorRegistry()
        first, second = Metrics(registry), Metrics()
        self.assertIs(first.registry, registry)
        first.observe_request("/healthz", "GET", 200, 0.001)
        self.assertNotIn(("vmservice_http_requests_total", (("method", "GET"), ("route", "/healthz"), ("status", "200"))),
                         samples(second))
        self.assertEqual(registry.get_sample_value(
            "vmservice_http_requests_total", {"route": "/healthz", "method": "GET", "status": "200"}), 1)


def event(kind: EventType, hostname: str = "demo-1", group: str = "demo") -> NodeEvent:
    return NodeEvent(1, 0.0, kind, hostname, group, "Running")


class LifecycleMetricsTests(SynchronousTestCase):
    def test_restore(self) -> None:
        """Each restore's duration goes to the restore histogram of its host group."""
        metrics = Metrics()
        metrics.observe_restore("demo", 0.3)
        metrics.observe_restore("demo", 1.5)
        found = samples(metrics)
        self.assertEqual(found[("vmservice_restore_duration_seconds_count", (("hostgroup", "demo"),))], 2)
        self.assertEqual(found[("vmservice_restore_duration_seconds_bucket", (("hostgroup", "demo"), ("le", "0.5")))], 1)

    def test_events_and_reconnects(self) -> None:
        """Events count by type (every type shown, 0 at first); an agent back after it was lost is a reconnect."""
        metrics = Metrics()
        self.assertEqual(samples(metrics)[("vmservice_node_events_total", (("type", "rebooted"),))], 0)
        for kind in (EventType.AGENT_UP, EventType.AGENT_DOWN, EventType.AGENT_UP, EventType.AGENT_UP):
            metrics.observe_event(event(kind))
        metrics.observe_event(event(EventType.AGENT_DOWN, "other-1", "other"))
        metrics.observe_event(event(EventType.DELETED, "other-1", "other"))
        metrics.observe_event(event(EventType.AGENT_UP, "other-1", "other"))  # a new node of the same name
        found = samples(metrics)
        self.assertEqual(found[("vmservice_node_events_total", (("type", "agent_up"),))], 4)
        self.assertEqual(found[("vmservice_agent_reconnects_total", (("hostgroup", "demo"),))], 1)
        self.assertNotIn(("vmservice_agent_reconnects_total", (("hostgroup", "other"),)), found)

    def test_open_streams(self) -> None:
        """Every kind is shown (0 when none is open); a stream counts until closed, closing twice counts once."""
        metrics = Metrics()
        self.assertEqual({samples(metrics)[("vmservice_open_streams", (("kind", k),))] for k in STREAM_KINDS}, {0})
        first, second = metrics.open_stream("exec"), metrics.open_stream("exec")
        shell = metrics.open_stream("shell")
        self.assertEqual(samples(metrics)[("vmservice_open_streams", (("kind", "exec"),))], 2)
        first()
        first()
        shell()
        found = samples(metrics)
        self.assertEqual(found[("vmservice_open_streams", (("kind", "exec"),))], 1)
        self.assertEqual(found[("vmservice_open_streams", (("kind", "shell"),))], 0)
        second()


class AdmissionMetricsTests(SynchronousTestCase):
    def test_admission_read_at_scrape(self) -> None:
        """The budget, its use, the boot slots and queue and the refusals are read from admission at each scrape."""
        admission = Admission(MemoryReactorClock(), Limits(budget=1000, overhead=10, boot_concurrency=1))
        admission.watch(lambda: [Holder("a", "g", 90, True)])
        metrics = Metrics()
        metrics.watch_admission(admission.state)
        admission.admit(100, group="g")
        admission.boots.take(60)
        admission.boots.take(60)
        found = samples(metrics)
        self.assertEqual(found[("vmservice_admission_memory_budget_bytes", ())], 1000)
        self.assertEqual(found[("vmservice_admission_memory_used_bytes", ())], 210)
        self.assertEqual(found[("vmservice_admission_memory_reserved_bytes", ())], 110)
        self.assertEqual(found[("vmservice_admission_boot_slots", ())], 1)
        self.assertEqual(found[("vmservice_admission_boot_slots_in_use", ())], 1)
        self.assertEqual(found[("vmservice_admission_boot_queue_length", ())], 1)
        self.assertEqual(found[("vmservice_admission_refusals_total", (("reason", "memory"),))], 0)
        self.assertRaises(InsufficientMemory, admission.admit, 1000, group="g")
        self.assertEqual(samples(metrics)[("vmservice_admission_refusals_total", (("reason", "memory"),))], 1)
class IdleMetricsTests(SynchronousTestCase):
    def test_idle(self) -> None:
        """Automatic suspends and wakes are timed by group (their counts in _count); failures counted by kind."""
        metrics = Metrics()
        metrics.observe_idle("demo", "suspend", 0.4)
        metrics.observe_idle("demo", "wake", 0.3)
        metrics.observe_idle("demo", "wake", 0.5)
        metrics.observe_idle("demo", "wake_failed", 0.0)
        value = metrics.registry.get_sample_value
        self.assertEqual(value("vmservice_idle_suspend_duration_seconds_count", {"hostgroup": "demo"}), 1)
        self.assertEqual(value("vmservice_idle_wake_duration_seconds_count", {"hostgroup": "demo"}), 2)
        self.assertAlmostEqual(value("vmservice_idle_wake_duration_seconds_sum", {"hostgroup": "demo"}), 0.8)
        self.assertEqual(value("vmservice_idle_failures_total", {"hostgroup": "demo", "kind": "wake"}), 1)
        self.assertIsNone(value("vmservice_idle_failures_total", {"hostgroup": "demo", "kind": "suspend"}))
