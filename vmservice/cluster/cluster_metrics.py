# -*- test-case-name: tests.cluster.test_node_controller -*-
"""
:class:`ClusterMetrics`: what the node controller counts, read at each
scrape of ``/metrics`` (docs/metrics.md):

- ``vmservice_cluster_lease_renewals_total``: Lease renewals (and creations) that went through;
- ``vmservice_cluster_failures_total{call}``: failed calls of the API by what they were
  (``register``, ``lease``, ``status``);
- ``vmservice_cluster_lease_last_renewal_timestamp_seconds``: when the Lease was last renewed (0: never).
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

#: What a failed call was.
CALLS = ("register", "lease", "status")


class ClusterMetrics(Collector):
    """The node controller's counts, as Prometheus series."""

    def __init__(self) -> None:
        self.renewals = 0
        self.failures = dict.fromkeys(CALLS, 0)
        self.last_renewal: float | None = None

    def renewed(self, at: float) -> None:
        """The Lease was renewed at ``at`` (seconds since the epoch)."""
        self.renewals += 1
        self.last_renewal = at

    def failed(self, call: str) -> None:
        """A call (one of :data:`CALLS`) failed."""
        self.failures[call] += 1

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily("vmservice_cluster_lease_renewals", "Renewals of the node's Lease that went through",
                                  value=self.renewals)
        failures = CounterMetricFamily("vmservice_cluster_failures", "Failed calls of the Kubernetes API, by call",
                                       labels=["call"])
        for call in CALLS:
            failures.add_metric([call], self.failures[call])
        yield failures
        yield GaugeMetricFamily("vmservice_cluster_lease_last_renewal_timestamp_seconds",
                                "When the node's Lease was last renewed (0: never)", value=self.last_renewal or 0)


__all__ = ["CALLS", "ClusterMetrics"]
