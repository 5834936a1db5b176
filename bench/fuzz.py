"""
Fuzzing pass: what ``make fuzz`` runs (``tests/fuzzing.py``: schemathesis,
every phase and check, against a real daemon with auth on and a real guest,
then the check that nothing was left behind), with its counts recorded.

Runs ``tests/fuzzing.py`` with the options of ``make fuzz`` (25 examples per
operation and phase, seed 1, no time bound) unless told otherwise, shows its
output as it comes, and writes ``bench/results/fuzz.json``: the cases
schemathesis generated, the unique failures it found (and the operations and
checks that failed), its exit status, what the run left behind (each thing,
and how many), the options, and the seconds the pass took.  Exits 1 when schemathesis failed or something was
left behind (the results file is written all the same); 2, writing nothing,
when the pass ended without its counts (it crashed before its closing line).

    .venv/bin/python bench/fuzz.py [--max-examples 25] [--seed 1] [--max-time 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.integration.daemon import ensure_image  # noqa: E402
from bench.recording import begin, write_result  # noqa: E402

FUZZING = os.path.join(ROOT, "tests", "fuzzing.py")
RESULTS = os.path.join(ROOT, "bench", "results", "fuzz.json")


def fuzz(max_examples: int, seed: int, max_time: int, counts_path: str) -> int:
    """Run ``tests/fuzzing.py`` (its output shown as it comes): its exit status; its counts go to ``counts_path``."""
    command = [sys.executable, FUZZING, "--max-examples", str(max_examples), "--seed", str(seed),
               "--counts", counts_path]
    if max_time:
        command += ["--max-time", str(max_time)]
    return subprocess.run(command, cwd=ROOT).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # The defaults of `make fuzz` (FUZZ_EXAMPLES, FUZZ_SEED; no --max-time).
    parser.add_argument("--max-examples", type=int, default=25, help="test cases per operation and phase")
    parser.add_argument("--seed", type=int, default=1, help="schemathesis' random seed")
    parser.add_argument("--max-time", type=int, default=0, help="seconds of schemathesis at most (0: no bound)")
    args = parser.parse_args()
    ensure_image()
    with tempfile.TemporaryDirectory(prefix="vmservice-fuzz-") as directory:
        counts_path = os.path.join(directory, "counts.json")
        run = begin()
        started = time.monotonic()
        status = fuzz(args.max_examples, args.seed, args.max_time, counts_path)
        elapsed = time.monotonic() - started
        try:
            with open(counts_path) as f:
                counts = json.load(f)
        except (OSError, ValueError):
            print(f"bench/fuzz.py: tests/fuzzing.py exited {status} without its counts; nothing written",
                  file=sys.stderr)
            return 2
    left: list[str] = counts["left_behind"]
    result: dict[str, Any] = {
        "benchmark": "fuzz",
        "max_examples": args.max_examples,
        "seed": args.seed,
        "max_time_s": args.max_time or None,
        "cases": counts["cases"],
        "unique_failures": counts["unique_failures"],
        "failures": counts.get("failures", []),
        "schemathesis_exit": counts["schemathesis_exit"],
        "left_behind": left,
        "left_behind_count": len(left),
        "fuzzing_exit": status,
        "elapsed_s": round(elapsed, 1),
        "passed": status == 0 and counts["unique_failures"] == 0 and not left,
    }
    write_result(RESULTS, result, run)
    print(f"bench/fuzz.py: {result['cases']} cases, {result['unique_failures']} unique failures, "
          f"schemathesis exit {result['schemathesis_exit']}, {len(left)} things left behind, "
          f"{result['elapsed_s']:.0f} s; wrote {os.path.relpath(RESULTS, ROOT)}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
