"""
A node's statistics as its guest answers them, every field (:data:`FIELDS`), and a record of a node
(:func:`record`), for the tests of the statistics, their metrics, the dashboard and the stats route.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from vmservice.nodes.model import NodeRecord

FIELDS: dict[str, Any] = {
    "hostname": "demo-1", "arch": "x86_64", "timestamp": "2026-11-25T20:00:00.5Z", "uptimeSeconds": 3723.9,
    "totalCpus": 2, "totalMemory": 1000, "memoryUsed": 400, "memoryAvailable": 600, "memoryUsedPercent": 40.0,
    "loadAvg1": 0.5, "loadAvg5": 0.25, "loadAvg15": 0.1, "diskReadTotal": 512.0, "diskWriteTotal": 1024,
    "networkReadTotal": 10.0, "networkWriteTotal": 20.0, "diskIOInflight": 0, "openConnections": 1,
    "openFiles": 30, "entropy": 256, "diskSpaceTotal": 1 << 30, "diskSpaceUsed": 1 << 28,
    "diskSpaceFree": 1 << 29, "diskSpaceUsedPercent": 33.3,
}


def record(hostname: str) -> NodeRecord:
    """A record of node ``hostname`` of the group ``demo``."""
    return NodeRecord(hostname=hostname, hostgroup="demo", ram_bytes=1 << 28, cpus=1,
                      created_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
