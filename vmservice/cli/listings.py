# -*- test-case-name: tests.cli.test_output -*-
"""
What ``vmctl`` prints as aligned ``key  value`` listings: the daemon's
``info``, a node's description and its agent's health.  Pure, like
:mod:`~vmservice.cli.output`, whose cells it uses.
"""

from __future__ import annotations

from typing import Any

from ..durations import format_go_duration
from .output import format_time, human_size, listing, size_cell

__all__ = ["format_description", "format_health", "format_info"]


def format_info(info: dict[str, Any]) -> str:
    """``GET /info`` as aligned ``key  value`` lines, every field the daemon sent."""
    if not info:
        return ""
    return listing([(key, str(value)) for key, value in info.items()])


def _uptime(nanoseconds: object) -> str:
    if not isinstance(nanoseconds, int) or nanoseconds < 0:
        return ""
    return format_go_duration(nanoseconds // 1_000_000_000)


def format_health(health: dict[str, Any]) -> str:
    """
    An AgentHealth as a headline and aligned details; uptimes (integer
    nanoseconds on the wire) become whole-second Go durations.
    """
    ran = health.get("userdata_ran")
    pairs = [
        ("agent version", str(health.get("agent_version", ""))),
        ("agent uptime", _uptime(health.get("agent_uptime"))),
        ("system uptime", _uptime(health.get("system_uptime"))),
        ("userdata ran", "" if ran is None else ("yes" if ran else "no")),
        ("ip", str(health.get("ip") or "")),
    ]
    return f"{health.get('hostname', '')}: healthy\n" + "".join(
        "  " + line for line in listing(pairs).splitlines(keepends=True)
    )


def _yes_no(value: object) -> str:
    return "" if value is None else ("yes" if value else "no")


def _disk(disk: dict[str, Any]) -> str:
    """``/path/disk.qcow2 (qcow2, 1G, 12.5M on the host)``."""
    size, used = disk.get("size_bytes"), disk.get("allocated_bytes")
    details = [str(disk.get("format") or "")]
    if isinstance(size, int):
        details.append(human_size(size))
    if isinstance(used, int):
        details.append(f"{human_size(used)} on the host")
    return f"{disk.get('path', '')} ({', '.join(d for d in details if d)})"


def _policy(network: dict[str, Any], key: str) -> str:
    return ", ".join((network.get("effective") or {}).get(key) or ())


def format_description(node: dict[str, Any]) -> str:
    """
    A node's description (``GET /vm/{hostname}``) as aligned ``key  value``
    lines: identity and state, resources, the host's side (disk, files,
    process) and the network; what the daemon left out shows as ``-``.
    """
    disk = node.get("disk")
    network = node.get("network") or {}
    address = network.get("address") or ""
    if address and network.get("gateway"):
        address += f" via {network['gateway']}"
    agent = node.get("agent_connected")
    pairs = [
        ("hostname", str(node.get("hostname", ""))),
        ("group", str(node.get("hostgroup", ""))),
        ("status", str(node.get("status", ""))),
        ("tags", ", ".join(node.get("tags") or ())),
        ("created", format_time(node.get("created_at"))),
        ("cpus", str(node.get("cpus", ""))),
        ("ram", size_cell(node.get("ram_bytes"))),
        ("arch", str(node.get("arch", ""))),
        ("persistent", _yes_no(node.get("persistent"))),
        ("protected", _yes_no(node.get("protected"))),
        ("agent", "" if agent is None else ("connected" if agent else "not connected")),
        ("pid", str(node.get("pid") or "")),
        ("snapshot", _yes_no(node.get("snapshot"))),
        ("storage", str(node.get("storage") or "")),
        ("image", str(node.get("image") or "")),
        ("disk", _disk(disk) if isinstance(disk, dict) else ""),
        ("backing file", str(disk.get("backing_file") or "") if isinstance(disk, dict) else ""),
        ("kernel", str(node.get("kernel") or "")),
        ("initrd", str(node.get("initrd") or "")),
        ("hypervisor", str(node.get("hypervisor") or "")),
        ("network", str(network.get("mode") or "")),
        ("ip", str(node.get("ip") or "")),
        ("address", address),
        ("mac", str(network.get("mac") or "")),
        ("bridge", str(network.get("bridge") or "")),
        ("allow", _policy(network, "allow")),
        ("drop", _policy(network, "drop")),
    ]
    return listing(pairs)
