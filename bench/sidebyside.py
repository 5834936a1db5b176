"""
This checkout against an earlier commit, side by side: the boot, channel
and warm benchmarks, each run with ``--before-ref REF`` (both daemons in one
run, this one first in each round; see ``bench/earlier.py``), into results
files of their own, then ``bench/results/sidebyside.json``: by part (those
run now and those run before), its file, the earlier commit and its
``ratio_after_over_before``.

    .venv/bin/python bench/sidebyside.py --ref 9690c00 [--parts boot,channel,cp,warm]

``channel-rerun`` and ``watch`` (not in the default parts) run the channel
benchmark again, with more exec rounds and smaller copies, and with 200
watch events: a second look at figures whose ratio is close to the noise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.recording import begin, write_result  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH, "results")

#: Each part: its results file and the benchmark's arguments.
PARTS = {
    "boot": ("sidebyside-boot.json", ["boot.py", "--rounds", "6"]),
    "channel": ("sidebyside-channel.json", ["channel.py"]),
    "channel-rerun": ("sidebyside-channel-rerun.json",
                      ["channel.py", "--rounds", "60", "--cp-mib", "64", "--bg-mib", "8", "--watch-writes", "20"]),
    "cp": ("sidebyside-channel-cp.json", ["channel.py", "--parts", "cp", "--rounds", "5", "--cp-mib", "256"]),
    "watch": ("sidebyside-channel-watch.json", ["channel.py", "--parts", "watch", "--watch-writes", "200"]),
    "warm": ("sidebyside-warm.json", ["warm.py", "--rounds", "3", "--together", "4", "--together-rounds", "3"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", required=True, help="the earlier commit (e.g. 9690c00)")
    parser.add_argument("--parts", default="boot,channel,cp,warm",
                        help=f"comma-separated, of {', '.join(PARTS)} (default: boot,channel,cp,warm)")
    options = parser.parse_args()
    parts = options.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown parts: {', '.join(unknown)}")
    run = begin()
    for part in parts:
        name, arguments = PARTS[part]
        script, *rest = arguments
        subprocess.run([sys.executable, os.path.join(BENCH, script), *rest,
                        "--before-ref", options.ref, "--output", os.path.join(RESULTS, name)], check=True)
    write_result(os.path.join(RESULTS, "sidebyside.json"),
                 {"benchmark": "sidebyside", "ran": parts, "parts": summary()}, run)


def summary() -> dict[str, dict[str, Any]]:
    """Every part whose results file is there (run now or earlier): its file, earlier commit and ratios."""
    parts = {}
    for part, (name, _) in PARTS.items():
        path = os.path.join(RESULTS, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            written = json.load(f)
        parts[part] = {"file": name, "before_commit": written.get("before", {}).get("commit"),
                       "ratio_after_over_before": written.get("ratio_after_over_before")}
    return parts

if __name__ == "__main__":
    main()
