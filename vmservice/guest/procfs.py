# -*- test-case-name: tests.guest.test_metrics -*-
"""
Pure parsers of what the metrics agent samples (:mod:`vmservice.guest.metrics`):
the texts of ``/proc`` (memory, load, disks, network, TCP connections, entropy),
the open file descriptors and a ``statvfs``'s space, each into snapshot fields.
Standard library only, no imports from the rest of ``vmservice``.
"""

from __future__ import annotations

import os

SECTOR = 512
_TCP_ESTABLISHED = "01"


def memory(meminfo: str) -> dict[str, object]:
    """
    ``totalMemory``, ``memoryAvailable``, ``memoryUsed`` (bytes) and ``memoryUsedPercent`` from the
    text of ``/proc/meminfo`` (whose values are in KiB).  Kernels without ``MemAvailable`` count
    ``MemFree + Buffers + Cached`` as available.
    """
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            values[key.strip()] = int(words[0]) * (1024 if words[1:2] == ["kB"] else 1)
    total = values.get("MemTotal", 0)
    if "MemAvailable" in values:
        available = values["MemAvailable"]
    else:
        available = values.get("MemFree", 0) + values.get("Buffers", 0) + values.get("Cached", 0)
    available = min(available, total)
    used = total - available
    return {
        "totalMemory": total,
        "memoryAvailable": available,
        "memoryUsed": used,
        "memoryUsedPercent": (100.0 * used / total) if total else 0.0,
    }


def load_average(loadavg: str) -> dict[str, object]:
    """``loadAvg1``, ``loadAvg5`` and ``loadAvg15`` from the text of ``/proc/loadavg``."""
    words = loadavg.split()
    return {"loadAvg1": float(words[0]), "loadAvg5": float(words[1]), "loadAvg15": float(words[2])}


def whole_disks(block_devices: list[str]) -> set[str]:
    """
    The names of ``/sys/block`` worth counting: real disks, not loop, RAM, zram, device-mapper or
    md devices (whose I/O is already counted on the disks below them).
    """
    skipped = ("loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd")
    return {name for name in block_devices if not name.startswith(skipped)}


def disk_totals(diskstats: str, disks: set[str]) -> dict[str, object]:
    """
    ``diskReadTotal`` and ``diskWriteTotal`` (bytes: sectors times 512, the kernel's unit whatever the
    disk's block size) and ``diskIOInflight`` from the text of ``/proc/diskstats``, over ``disks``.
    """
    read = written = inflight = 0
    for line in diskstats.splitlines():
        words = line.split()
        if len(words) < 12 or words[2] not in disks:
            continue
        read += int(words[5])
        written += int(words[9])
        inflight += int(words[11])
    return {
        "diskReadTotal": float(read * SECTOR),
        "diskWriteTotal": float(written * SECTOR),
        "diskIOInflight": inflight,
    }


def network_totals(netdev: str) -> dict[str, object]:
    """``networkReadTotal`` and ``networkWriteTotal`` (bytes) from ``/proc/net/dev``, without ``lo``."""
    received = sent = 0
    for line in netdev.splitlines():
        name, colon, rest = line.partition(":")
        words = rest.split()
        if not colon or len(words) < 9 or name.strip() == "lo" or not words[0].isdigit():
            continue
        received += int(words[0])
        sent += int(words[8])
    return {"networkReadTotal": float(received), "networkWriteTotal": float(sent)}


def established_connections(*tcp_tables: str) -> int:
    """The established TCP connections in the texts of ``/proc/net/tcp`` and ``/proc/net/tcp6``."""
    count = 0
    for table in tcp_tables:
        for line in table.splitlines()[1:]:
            words = line.split()
            if len(words) > 3 and words[3] == _TCP_ESTABLISHED:
                count += 1
    return count


def open_files(proc: str = "/proc") -> int:
    """
    The open file descriptors of every process, counted in ``/proc/PID/fd``.  (The first number of
    ``/proc/sys/fs/file-nr`` is a per-CPU estimate that reads 0 on small guests.)
    """
    count = 0
    for name in os.listdir(proc):
        if name.isdigit():
            try:
                count += len(os.listdir(f"{proc}/{name}/fd"))
            except OSError:  # gone, or a kernel thread
                pass
    return count


def entropy(entropy_avail: str) -> int:
    """The bits of ``/proc/sys/kernel/random/entropy_avail``."""
    return int(entropy_avail.strip())


def space(frsize: int, blocks: int, bfree: int, bavail: int) -> dict[str, object]:
    """
    ``diskSpaceTotal``, ``diskSpaceUsed``, ``diskSpaceFree`` (bytes) and ``diskSpaceUsedPercent`` from
    a ``statvfs`` result, as ``df`` shows them: free is what unprivileged users may use, and the
    percentage is used / (used + free), the blocks reserved for root left out.
    """
    used = (blocks - bfree) * frsize
    free = bavail * frsize
    usable = used + free
    return {
        "diskSpaceTotal": blocks * frsize,
        "diskSpaceUsed": used,
        "diskSpaceFree": free,
        "diskSpaceUsedPercent": (100.0 * used / usable) if usable else 0.0,
    }


__all__ = [
    "disk_totals",
    "entropy",
    "established_connections",
    "load_average",
    "memory",
    "network_totals",
    "open_files",
    "space",
    "whole_disks",
]
