# -*- test-case-name: tests.test_metrics -*-
"""
Prometheus metrics of the daemon, in a registry of its own.

- ``vmservice_http_requests_total{route,method,status}``
- ``vmservice_http_request_duration_seconds{route,method}``
- ``vmservice_nodes{hostgroup,status}`` (read from the fleet at scrape time)
- ``vmservice_boot_duration_seconds{hostgroup}`` (VM start to the agent's hello)
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

STATUSES = ("Running", "Paused", "Stopped", "Suspended")


class _NodesCollector(Collector):
    """
    The ``vmservice_nodes`` gauges, read at each scrape.

    :param counts: gives ``(group, status, n)`` for each group and status.
    """

    def __init__(self, counts: Callable[[], Iterable[tuple[str, str, int]]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("vmservice_nodes", "Nodes by host group and status", labels=["hostgroup", "status"])
        for group, status, count in self._counts():
            family.add_metric([group, status], count)
        yield family


class Metrics:
    """
    The daemon's metrics.

    :param registry: the registry to use; a new one by default, so tests and
        several daemons in one process do not share counters.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "vmservice_http_requests", "HTTP requests served", ["route", "method", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "vmservice_http_request_duration_seconds",
            "Time to serve an HTTP request",
            ["route", "method"],
            registry=self.registry,
        )
        self.boot = Histogram(
            "vmservice_boot_duration_seconds",
            "Time from starting a VM to its agent's first hello",
            ["hostgroup"],
            buckets=(0.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 60, 120, 300),
            registry=self.registry,
        )

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """
        Count one served request.

        :param route: the route that served it (its pattern, or
            ``unmatched``), so that node names do not multiply the series.
        :param method: the HTTP method.
        :param status: the response status.
        :param seconds: how long it took to serve.
        """
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def observe_boot(self, group: str, seconds: float) -> None:
        """
        Record how long a node took to boot.

        :param group: the node's host group.
        :param seconds: from the VM's start to its agent's first hello.
        """
        self.boot.labels(group).observe(seconds)

    def watch_nodes(self, counts: Callable[[], Iterable[tuple[str, str, int]]]) -> None:
        """
        Report node counts at each scrape.

        :param counts: gives ``(group, status, n)`` for each group and status.
        """
        self.registry.register(_NodesCollector(counts))

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["Metrics", "STATUSES"]
