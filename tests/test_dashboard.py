# -*- test-case-name: tests.test_dashboard -*-
"""
The Grafana dashboard in ``docs/grafana-dashboard.json``: every metric name
its PromQL expressions (panels and template variables) use is one the
daemon's registry exports.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Iterator

from twisted.trial.unittest import SynchronousTestCase

from tests.node_stats import FIELDS, record
from vmservice.metrics import Metrics
from vmservice.nodes.events import EventType, NodeEvent
from vmservice.nodes.stats import NodeStat, snapshot_of
from vmservice.nodestats_metrics import NodeStatsCollector

DASHBOARD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                         "grafana-dashboard.json")

#: PromQL words that look like names: aggregations, their modifiers, functions used without parentheses after them.
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                       "offset", "inf", "nan"})


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every PromQL expression of the dashboard: panel targets (rows' too) and query variables."""
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for item in items:
            yield item
            yield from panels(item.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            yield query["query"] if isinstance(query, dict) else query


def metric_names(expr: str) -> set[str]:
    """
    The metric names in one expression: strings, label matchers, ranges and
    grouping clauses taken out, then every name not called as a function and
    not a keyword.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        name = match.group()
        following = text[match.end():].lstrip()
        if following.startswith("(") or name.lower() in _KEYWORDS:
            continue
        if match.start() > 0 and (text[match.start() - 1].isdigit() or text[match.start() - 1] == "."):
            continue  # the exponent or unit of a number (1e3)
        names.add(name)
    return names


def exported() -> set[str]:
    """The sample names the daemon's registry exports once every series has a value."""
    metrics = Metrics()
    metrics.observe_request("/vm/{hostname}", "GET", 200, 0.01)
    metrics.observe_boot("demo", 3.0)
    metrics.observe_restore("demo", 0.2)
    for kind in (EventType.AGENT_DOWN, EventType.AGENT_UP):
        metrics.observe_event(NodeEvent(1, 0.0, kind, "demo-1", "demo", "Running"))
    metrics.watch_nodes(lambda: [("demo", "Running", 1)])
    # The per-node series, as the daemon registers them (service.py), with one node that answered.
    stats = [NodeStat(record("demo-1"), snapshot=snapshot_of(FIELDS))]
    metrics.registry.register(NodeStatsCollector(lambda: stats, lambda: {"demo-1"}))
    return {sample.name for family in metrics.registry.collect() for sample in family.samples}


class DashboardTests(SynchronousTestCase):
    def setUp(self) -> None:
        with open(DASHBOARD, encoding="utf-8") as stream:
            self.dashboard = json.load(stream)

    def test_parser(self) -> None:
        """The name extraction finds names behind functions, matchers, ranges and groupings, and nothing else."""
        self.assertEqual(
            metric_names('histogram_quantile(0.95, sum by (le, route) (rate(a_bucket{route=~"x|y"}[5m]))) / b'),
            {"a_bucket", "b"},
        )
        self.assertEqual(metric_names('label_values(c{hostgroup=~"$hostgroup"}, hostname)'), {"c", "hostname"})
        self.assertEqual(metric_names("topk(10, d) * 1e3 offset 5m"), {"d"})

    def test_every_name_exported(self) -> None:
        """Every metric the dashboard uses is exported (the per-node ones by the node-stats collector)."""
        known = exported()
        used: set[str] = set()
        for expr in expressions(self.dashboard):
            names = metric_names(expr)
            if expr.startswith("label_values("):
                names = {name for name in names if name.startswith("vmservice_")}  # its second argument is a label
            used |= names
            unknown = names - known
            self.assertEqual(unknown, set(), f"not exported: {sorted(unknown)} in {expr!r}")
        # The dashboard covers the daemon's own series and the per-node ones.
        for name in ("vmservice_nodes", "vmservice_open_streams", "vmservice_restore_duration_seconds_bucket",
                     "vmservice_agent_reconnects_total", "vmservice_http_requests_total", "vmservice_node_load1"):
            self.assertIn(name, used)

    def test_unknown_name_fails(self) -> None:
        """A name nobody exports is caught (the check is not vacuous)."""
        known = exported()
        self.assertEqual(metric_names("rate(vmservice_nope_total[5m])") - known, {"vmservice_nope_total"})

    def test_panels_have_targets(self) -> None:
        """Every panel that is not a row queries Prometheus through the dashboard's data source variable."""
        for panel in self.dashboard["panels"]:
            if panel["type"] == "row":
                continue
            self.assertTrue(panel["targets"], panel["title"])
            self.assertEqual(panel["datasource"]["uid"], "${datasource}")
