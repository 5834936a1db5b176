"""
What every benchmark records beside its timings: a process's memory and CPU
time (the daemon's peak memory above all), and the result file under
``bench/results/``.
"""

from __future__ import annotations

import json
import os
from typing import Any


def status_kib(pid: int, field: str) -> int:
    """A KiB figure of process ``pid``'s ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``...)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss(pid: int) -> int | None:
    """The peak resident set size of process ``pid`` in bytes (VmHWM), if readable."""
    try:
        return status_kib(pid, "VmHWM") * 1024
    except (OSError, RuntimeError):
        return None


def write_result(path: str, result: dict[str, Any]) -> None:
    """Write ``result`` as indented JSON to ``path`` (its directory made when missing)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
