"""
Turn trial's closing line into the plain ``N passed, N failed`` line that
CI reads, e.g. ``FAILED (failures=1, errors=2, successes=40, skips=1)`` ->
``40 passed, 3 failed, 1 skipped``.

    python tests/summary.py TRIAL_OUTPUT_FILE
"""

from __future__ import annotations

import re
import sys


def summary(text: str) -> str | None:
    """The plain summary of the last trial result line in ``text``, if any."""
    found = re.findall(r"^(PASSED|FAILED) \(([^)]*)\)\s*$", text, re.MULTILINE)
    if not found:
        return None
    counts = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", found[-1][1])}
    passed = counts.get("successes", 0) + counts.get("expectedFailures", 0)
    failed = counts.get("failures", 0) + counts.get("errors", 0) + counts.get("unexpectedSuccesses", 0)
    line = f"{passed} passed, {failed} failed"
    if counts.get("skips"):
        line += f", {counts['skips']} skipped"
    return line


def main() -> int:
    with open(sys.argv[1], errors="replace") as f:
        line = summary(f.read())
    print(line or "0 passed, 1 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
