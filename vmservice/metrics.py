# -*- test-case-name: tests.test_metrics -*-
"""
Prometheus metrics of the daemon, in a registry of its own.

- ``vmservice_http_requests_total{route,method,status}``
- ``vmservice_http_request_duration_seconds{route,method}``
- ``vmservice_nodes{hostgroup,status}`` (read from the fleet at scrape time)
- ``vmservice_boot_duration_seconds{hostgroup}`` (VM start to the agent's hello)
- ``vmservice_restore_duration_seconds{hostgroup}`` (restore asked to the VM running again)
- ``vmservice_agent_reconnects_total{hostgroup}`` (an agent back after it was lost)
- ``vmservice_node_events_total{type}`` (lifecycle events published)
- ``vmservice_open_streams{kind}`` (streams open now: exec, cp, watch, logs, shell, tunnel, events)
- ``vmservice_admission_*``: the memory budget and its use, the cold boot slots and queue, refusals
- ``vmservice_buffer_budget_*``, ``vmservice_api_connections*``: the buffer budget and its use, the API's
  connections open and refused (docs/security.md)
- ``vmservice_idle_suspend_duration_seconds{hostgroup}``, ``vmservice_idle_wake_duration_seconds{hostgroup}``
  (automatic suspends and wakes: their ``_count`` counts them), ``vmservice_idle_failures_total{hostgroup,kind}``

docs/metrics.md describes each.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Protocol, TypeVar

from attrs import frozen

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .buffer_budget import BufferBudget
from .nodes.admission import AdmissionState
from .nodes.events import EventType, NodeEvent

STATUSES = ("Running", "Paused", "Stopped", "Suspended")

#: The kinds of open streams, each reported (0 when none is open).
STREAM_KINDS = ("exec", "cp", "watch", "logs", "shell", "tunnel", "events")

#: The ``method`` label's values: any other method a client sends is counted as ``OTHER``, so that
#: clients cannot add series by inventing methods.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


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


class _AdmissionCollector(Collector):
    """
    The ``vmservice_admission_*`` series, read at each scrape.

    :param state: gives admission as it is now.
    """

    def __init__(self, state: Callable[[], AdmissionState]) -> None:
        self._state = state

    def collect(self) -> Iterable[Metric]:
        state = self._state()
        gauges = (
            ("memory_budget_bytes", "The memory budget of this daemon's VMs (0: none)", state.budget or 0),
            ("memory_used_bytes", "Memory held by running VMs (RAM plus overhead) and reserved by starts under way",
             state.used),
            ("memory_reserved_bytes", "The part of the memory in use reserved by starts under way", state.reserved),
            ("boot_slots", "Cold boots allowed at once (0: no bound)", state.boot_slots),
            ("boot_slots_in_use", "Cold boots holding a slot now", state.booting),
            ("boot_queue_length", "Cold boots waiting for a slot", state.waiting),
        )
        for name, text, value in gauges:
            yield GaugeMetricFamily(f"vmservice_admission_{name}", text, value=value)
        refusals = CounterMetricFamily("vmservice_admission_refusals", "Starts refused by admission, by reason",
                                       labels=["reason"])
        for reason, count in sorted(state.refusals.items()):
            refusals.add_metric([reason], count)
        yield refusals


class ConnectionCounts(Protocol):
    """What the limits collector reads of the API's connections (:class:`~vmservice.api.connection_limits.ConnectionLimits`)."""

    @property
    def open(self) -> int:
        """Connections open now."""

    @property
    def refused(self) -> Mapping[str, int]:
        """Connections refused so far, by limit."""


class _LimitsCollector(Collector):
    """
    The ``vmservice_buffer_budget_*`` and ``vmservice_api_connections*`` series, read at each scrape.

    :param budget: the daemon's buffer budget.
    :param connections: the API's connections.
    """

    def __init__(self, budget: BufferBudget, connections: ConnectionCounts) -> None:
        self._budget = budget
        self._connections = connections

    def collect(self) -> Iterable[Metric]:
        budget = self._budget
        yield GaugeMetricFamily("vmservice_buffer_budget_bytes", "The buffer budget of buffered results (0: none)",
                                value=budget.size or 0)
        yield GaugeMetricFamily("vmservice_buffer_budget_held_bytes", "Bytes buffered results hold now", value=budget.held)
        yield CounterMetricFamily("vmservice_buffer_budget_refusals", "Buffered results refused for want of room",
                                  value=budget.refusals)
        yield GaugeMetricFamily("vmservice_api_connections", "The API's connections open now",
                                value=self._connections.open)
        refused = CounterMetricFamily("vmservice_api_connections_refused", "Connections refused over a limit, by limit",
                                      labels=["limit"])
        for limit, count in sorted(self._connections.refused.items()):
            refused.add_metric([limit], count)
        yield refused


#: A family with labels made at once.
_Labelled = TypeVar("_Labelled", Counter, Gauge)


@frozen
class _Family:
    """
    One metric family of :class:`Metrics`, declared once in the table below.

    :ivar name: its name (a counter's without ``_total``).
    :ivar documentation: its help text.
    :ivar labels: its label names.
    :ivar buckets: a histogram's buckets; ``None``: prometheus-client's default.
    :ivar preset: the values of its one label made at once, so that each
        series is there (at 0) before anything is counted.
    """

    name: str
    documentation: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] | None = None
    preset: tuple[str, ...] = ()

    def counter(self, registry: CollectorRegistry) -> Counter:
        """The family as a counter in ``registry``."""
        return self._preset(Counter(self.name, self.documentation, self.labels, registry=registry))

    def gauge(self, registry: CollectorRegistry) -> Gauge:
        """The family as a gauge in ``registry``."""
        return self._preset(Gauge(self.name, self.documentation, self.labels, registry=registry))

    def histogram(self, registry: CollectorRegistry) -> Histogram:
        """The family as a histogram in ``registry``."""
        if self.buckets is None:
            return Histogram(self.name, self.documentation, self.labels, registry=registry)
        return Histogram(self.name, self.documentation, self.labels, buckets=self.buckets, registry=registry)

    def _preset(self, metric: _Labelled) -> _Labelled:
        """``metric`` with the series of :attr:`preset` made."""
        for value in self.preset:
            metric.labels(value)
        return metric


_REQUESTS = _Family("vmservice_http_requests", "HTTP requests served", ("route", "method", "status"))
_LATENCY = _Family("vmservice_http_request_duration_seconds", "Time to serve an HTTP request", ("route", "method"))
_BOOT = _Family(
    "vmservice_boot_duration_seconds", "Time from starting a VM to its agent's first hello", ("hostgroup",),
    buckets=(0.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 60, 120, 300),
)
_RESTORE = _Family(
    "vmservice_restore_duration_seconds", "Time from a restore's start to its VM running again", ("hostgroup",),
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 20, 30, 60),
)
_RECONNECTS = _Family(
    "vmservice_agent_reconnects", "Times a node's agent answered again after it was lost", ("hostgroup",),
)
_EVENTS = _Family(
    "vmservice_node_events", "Lifecycle events of the nodes, by type", ("type",),
    preset=tuple(kind.value for kind in EventType),
)
_CLONE = _Family(
    "vmservice_clone_duration_seconds",
    "Time from a clone's start (its disk over the template's) to its VM running with its identity adopted",
    ("hostgroup",), buckets=(0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10),
)
_TEMPLATE_BUILDS = _Family(
    "vmservice_template_builds", "Templates built for warm groups, by result (ok, failed)", ("result",),
    preset=("ok", "failed"),
)
_WARM_FALLBACKS = _Family(
    "vmservice_warm_fallbacks", "Nodes of warm groups booted cold instead of cloned, by host group and reason",
    ("hostgroup", "reason"),
)
_STREAMS = _Family("vmservice_open_streams", "Streams open now, by kind", ("kind",), preset=STREAM_KINDS)
_IDLE_SUSPENDS = _Family(
    "vmservice_idle_suspend_duration_seconds",
    "Automatic suspends of idle nodes: from the idle timer's expiry to the VM ended with its snapshot",
    ("hostgroup",), buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 20, 30, 60),
)
_IDLE_WAKES = _Family(
    "vmservice_idle_wake_duration_seconds",
    "Wakes of nodes the idle timer suspended: from the request that needs the guest to its agent answering",
    ("hostgroup",), buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30),
)
_IDLE_FAILURES = _Family(
    "vmservice_idle_failures", "Automatic suspends and wakes that failed, by host group and kind",
    ("hostgroup", "kind"),
)


class Metrics:
    """
    The daemon's metrics.

    :param registry: the registry to use; a new one by default, so tests and
        several daemons in one process do not share counters.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = _REQUESTS.counter(self.registry)
        self.latency = _LATENCY.histogram(self.registry)
        self.boot = _BOOT.histogram(self.registry)
        self.restore = _RESTORE.histogram(self.registry)
        self.reconnects = _RECONNECTS.counter(self.registry)
        self.events = _EVENTS.counter(self.registry)
        self.clone = _CLONE.histogram(self.registry)
        self.template_builds = _TEMPLATE_BUILDS.counter(self.registry)
        self.warm_fallbacks = _WARM_FALLBACKS.counter(self.registry)
        self.streams = _STREAMS.gauge(self.registry)
        self.idle_suspends = _IDLE_SUSPENDS.histogram(self.registry)
        self.idle_wakes = _IDLE_WAKES.histogram(self.registry)
        self.idle_failures = _IDLE_FAILURES.counter(self.registry)
        self._agent_lost: set[str] = set()

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """
        Count one served request.

        :param route: the route that served it (its pattern, or
            ``unmatched``), so that node names do not multiply the series.
        :param method: the HTTP method; one not in :data:`METHODS` is ``OTHER``.
        :param status: the response status.
        :param seconds: how long it took to serve.
        """
        label = method if method in METHODS else "OTHER"
        self.requests.labels(route, label, str(status)).inc()
        self.latency.labels(route, label).observe(seconds)

    def observe_boot(self, group: str, seconds: float) -> None:
        """
        Record how long a node took to boot.

        :param group: the node's host group.
        :param seconds: from the VM's start to its agent's first hello.
        """
        self.boot.labels(group).observe(seconds)

    def observe_restore(self, group: str, seconds: float) -> None:
        """
        Record how long a restore took.

        :param group: the node's host group.
        :param seconds: from the restore's start to its VM running again.
        """
        self.restore.labels(group).observe(seconds)

    def observe_clone(self, group: str, seconds: float) -> None:
        """Record how long one clone of ``group`` took to run."""
        self.clone.labels(group).observe(seconds)

    def observe_template_build(self, result: str) -> None:
        """Count one template build that ended with ``result`` (``ok`` or ``failed``)."""
        self.template_builds.labels(result).inc()

    def observe_warm_fallback(self, group: str, reason: str) -> None:
        """Count one node of warm ``group`` booted cold for ``reason`` (a short word)."""
        self.warm_fallbacks.labels(group, reason).inc()

    def observe_idle(self, group: str, what: str, seconds: float) -> None:
        """
        Record an automatic suspend or a wake of a node of ``group``.

        :param what: ``suspend`` or ``wake`` (timed), ``suspend_failed`` or
            ``wake_failed`` (counted).
        :param seconds: how long it took.
        """
        if what == "suspend":
            self.idle_suspends.labels(group).observe(seconds)
        elif what == "wake":
            self.idle_wakes.labels(group).observe(seconds)
        else:
            self.idle_failures.labels(group, what.removesuffix("_failed")).inc()

    def observe_event(self, event: NodeEvent) -> None:
        """
        Count a lifecycle event; an ``agent_up`` after an ``agent_down`` of the
        same node is a reconnect.
        """
        self.events.labels(event.type.value).inc()
        if event.type is EventType.AGENT_DOWN:
            self._agent_lost.add(event.hostname)
        elif event.type is EventType.AGENT_UP and event.hostname in self._agent_lost:
            self._agent_lost.discard(event.hostname)
            self.reconnects.labels(event.hostgroup).inc()
        elif event.type is EventType.DELETED:
            self._agent_lost.discard(event.hostname)

    def open_stream(self, kind: str) -> Callable[[], None]:
        """
        Count a stream of ``kind`` open; returns what closes it (once, however
        often it is called).
        """
        gauge = self.streams.labels(kind)
        gauge.inc()
        closed = False

        def close() -> None:
            nonlocal closed
            if not closed:
                closed = True
                gauge.dec()

        return close

    def watch_nodes(self, counts: Callable[[], Iterable[tuple[str, str, int]]]) -> None:
        """
        Report node counts at each scrape.

        :param counts: gives ``(group, status, n)`` for each group and status.
        """
        self.registry.register(_NodesCollector(counts))

    def watch_admission(self, state: Callable[[], AdmissionState]) -> None:
        """Report admission (budget, use, boot slots and queue, refusals) at each scrape."""
        self.registry.register(_AdmissionCollector(state))

    def watch_limits(self, budget: BufferBudget, connections: ConnectionCounts) -> None:
        """Report the buffer budget and the API's connections at each scrape."""
        self.registry.register(_LimitsCollector(budget, connections))

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["METHODS", "Metrics", "STATUSES", "STREAM_KINDS"]
