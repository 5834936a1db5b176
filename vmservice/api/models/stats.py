# -*- test-case-name: tests.api.test_openapi,tests.api.test_stats -*-
"""
A guest's metrics: one sample of it, and a node as listed with its sample.
"""

from __future__ import annotations

from datetime import datetime

from attrs import frozen

from .nodes import Node


@frozen
class Snapshot:
    """
    One sample of a node's guest by its metrics agent (camelCase, as clients read it).  Sizes and
    counters are bytes; counters count since the guest booted; ``uptime`` is Go duration text.
    """

    hostname: str
    arch: str
    timestamp: datetime
    uptime: str
    totalCpus: int
    totalMemory: int
    memoryUsed: int
    memoryAvailable: int
    memoryUsedPercent: float
    loadAvg1: float
    loadAvg5: float
    loadAvg15: float
    diskReadTotal: float
    diskWriteTotal: float
    networkReadTotal: float
    networkWriteTotal: float
    diskIOInflight: int
    openConnections: int
    openFiles: int
    entropy: int
    diskSpaceTotal: int
    diskSpaceUsed: int
    diskSpaceFree: int
    diskSpaceUsedPercent: float


@frozen
class NodeStat(Node):
    """A node as listed, with its guest's snapshot, or ``error`` saying why there is none."""

    snapshot: Snapshot | None = None
    error: str | None = None
