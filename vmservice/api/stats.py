# -*- test-case-name: tests.api.test_stats -*-
"""
Routes of node statistics: ``GET /nodes/stats`` and ``GET /node/{hostname}/stats`` (singular, as the
contract spells it).
"""

from __future__ import annotations

from attrs import asdict
from twisted.web.iweb import IRequest

from ..nodes.fleet import Fleet
from ..nodes.stats import STATS_DEADLINE, NodeStat as DomainNodeStat, Snapshot as DomainSnapshot
from .models.nodes import Node
from .models.stats import NodeStat, Snapshot
from .nodes import node_json
from .query import NoQuery
from .rendering import json_body
from .routing import Reply, Route


def snapshot_json(snapshot: DomainSnapshot) -> Snapshot:
    """The API shape of a snapshot."""
    s = snapshot
    return Snapshot(
        hostname=s.hostname, arch=s.arch, timestamp=s.timestamp, uptime=s.uptime, totalCpus=s.total_cpus,
        totalMemory=s.total_memory, memoryUsed=s.memory_used, memoryAvailable=s.memory_available,
        memoryUsedPercent=s.memory_used_percent, loadAvg1=s.load_avg1, loadAvg5=s.load_avg5,
        loadAvg15=s.load_avg15, diskReadTotal=s.disk_read_total, diskWriteTotal=s.disk_write_total,
        networkReadTotal=s.network_read_total, networkWriteTotal=s.network_write_total,
        diskIOInflight=s.disk_io_inflight, openConnections=s.open_connections, openFiles=s.open_files,
        entropy=s.entropy, diskSpaceTotal=s.disk_space_total, diskSpaceUsed=s.disk_space_used,
        diskSpaceFree=s.disk_space_free, diskSpaceUsedPercent=s.disk_space_used_percent,
    )


def stat_json(stat: DomainNodeStat) -> NodeStat:
    """The API shape of a node's statistics: its listing entry plus snapshot or error."""
    node: Node = node_json(stat.record)
    return NodeStat(
        **asdict(node, recurse=False),
        snapshot=snapshot_json(stat.snapshot) if stat.snapshot is not None else None,
        error=stat.error,
    )


class StatsApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/nodes/stats", self.list_stats, "Statistics of every node", "nodes",
                  {200: Reply(f"Every node with its snapshot, or an error when its metrics agent did not answer "
                              f"within {STATS_DEADLINE:g} s or cannot (paused, suspended, stopped)",
                              NodeStat, array=True)}),
            Route("GET", "/node/{hostname}/stats", self.node_stats, "Statistics of one node", "nodes",
                  {200: Reply("The node with its snapshot, or an error", NodeStat)}),
        ]

    async def list_stats(self, request: IRequest, query: NoQuery) -> bytes:
        return json_body(request, [stat_json(stat) for stat in await self._fleet.stats.all()])

    async def node_stats(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        return json_body(request, stat_json(await self._fleet.stats.one(hostname)))
