# -*- test-case-name: tests.e2b.test_rendering -*-
"""
Sandboxes as E2B's JSON (pure): the created sandbox (``Sandbox``), a
listed one (``ListedSandbox``), one described (``SandboxDetail``) and its
metrics (``SandboxMetric``), each with every key the SDKs read as required.
Times are RFC 3339 in UTC with microseconds.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ..nodes.stats import Snapshot
from .sandbox import CLIENT_ID, SandboxView

MiB = 1024 * 1024


def rfc3339(stamp: datetime) -> str:
    """``stamp`` as RFC 3339 text in UTC (``2026-01-02T03:04:05.000006Z``)."""
    return stamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def created(view: SandboxView, envd_version: str) -> dict[str, Any]:
    """The answer to a create or a connect: E2B's ``Sandbox``."""
    sandbox = view.sandbox
    body: dict[str, Any] = {"templateID": sandbox.template_id, "sandboxID": sandbox.sandbox_id,
                            "clientID": CLIENT_ID, "envdVersion": envd_version}
    if sandbox.access_token:
        body["envdAccessToken"] = sandbox.access_token
    return body


def listed(view: SandboxView, envd_version: str) -> dict[str, Any]:
    """One entry of a listing: E2B's ``ListedSandbox``."""
    sandbox = view.sandbox
    return {
        "templateID": sandbox.template_id, "sandboxID": sandbox.sandbox_id, "clientID": CLIENT_ID,
        "startedAt": rfc3339(sandbox.started_at), "endAt": rfc3339(sandbox.end_at), "cpuCount": view.cpu_count,
        "memoryMB": view.memory_mb, "diskSizeMB": view.disk_size_mb, "state": view.state.value,
        "envdVersion": envd_version, "metadata": dict(sandbox.metadata),
    }


def detail(view: SandboxView, envd_version: str) -> dict[str, Any]:
    """One sandbox described: E2B's ``SandboxDetail`` (its access token and what it does at its end)."""
    body = listed(view, envd_version)
    if view.sandbox.access_token:
        body["envdAccessToken"] = view.sandbox.access_token
    body["lifecycle"] = {"autoResume": False, "onTimeout": "pause" if view.sandbox.auto_pause else "kill"}
    return body


def metric(snapshot: Snapshot) -> dict[str, Any]:
    """One sample of a sandbox's guest: E2B's ``SandboxMetric`` (CPU use from the load average)."""
    cpus = max(snapshot.total_cpus, 1)
    return {
        "timestamp": rfc3339(snapshot.timestamp), "timestampUnix": int(snapshot.timestamp.timestamp()),
        "cpuCount": snapshot.total_cpus, "cpuUsedPct": round(min(100.0, snapshot.load_avg1 * 100 / cpus), 2),
        "memUsed": snapshot.memory_used, "memTotal": snapshot.total_memory,
        "memCache": max(0, snapshot.total_memory - snapshot.memory_used - snapshot.memory_available),
        "diskUsed": snapshot.disk_space_used, "diskTotal": snapshot.disk_space_total,
    }


def as_bytes(body: Any) -> bytes:
    """A JSON body."""
    return json.dumps(body, separators=(",", ":")).encode()


__all__ = ["as_bytes", "created", "detail", "listed", "metric", "rfc3339"]
