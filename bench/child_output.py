"""
A child whose output is shown as it comes and kept: what ``bench/faults.py``
and ``tests/fuzzing.py`` run (trial, schemathesis) and then read.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any


def run_teed(command: list[str], **popen: Any) -> tuple[int, str]:
    """Run ``command`` (``popen``: ``cwd``, ``env``...), its standard output copied to ours; its status and output."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, **popen)
    assert process.stdout is not None
    lines = []
    for raw in process.stdout:
        line = raw.decode(errors="replace")
        lines.append(line)
        sys.stdout.write(line)
        sys.stdout.flush()
    return process.wait(), "".join(lines)
