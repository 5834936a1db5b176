"""
What every benchmark records beside its timings: the daemon's peak memory,
and the result file under ``bench/results/``.
"""

from __future__ import annotations

import json
import os
from typing import Any


def peak_rss(pid: int) -> int | None:
    """The peak resident set size of process ``pid`` in bytes (VmHWM), if readable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def write_result(path: str, result: dict[str, Any]) -> None:
    """Write ``result`` as indented JSON to ``path`` (its directory made when missing)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
