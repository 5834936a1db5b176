"""
Turn trial's closing lines into the plain ``N passed, N failed`` line that
CI reads, e.g. ``FAILED (failures=1, errors=2, successes=40, skips=1)`` ->
``40 passed, 3 failed, 1 skipped``.  ``make test`` runs trial twice (unit
tests, then integration tests): the counts of every run are added up.  Steps
named after the file (``mypy`` before the tests, ``fuzz`` after them) failed
and count as one failure each.

    python tests/summary.py TRIAL_OUTPUT_FILE [FAILED_STEP ...]
"""

from __future__ import annotations

import re
import sys
from collections import Counter


def summary(text: str, failed_steps: tuple[str, ...] = ()) -> str | None:
    """The plain summary of every trial result line in ``text``, if any."""
    found = re.findall(r"^(PASSED|FAILED) \(([^)]*)\)\s*$", text, re.MULTILINE)
    if not found:
        return None
    counts: Counter[str] = Counter()
    for _, fields in found:
        for key, value in re.findall(r"(\w+)=(\d+)", fields):
            counts[key] += int(value)
    passed = counts["successes"] + counts["expectedFailures"]
    failed = counts["failures"] + counts["errors"] + counts["unexpectedSuccesses"] + len(failed_steps)
    line = f"{passed} passed, {failed} failed"
    if counts["skips"]:
        line += f", {counts['skips']} skipped"
    if failed_steps:
        line += f" (failed steps: {', '.join(failed_steps)})"
    return line


def main() -> int:
    with open(sys.argv[1], errors="replace") as f:
        line = summary(f.read(), tuple(sys.argv[2:]))
    print(line or "0 passed, 1 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
