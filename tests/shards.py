"""
Run the integration tests as parallel shards of whole modules.

An integration test spends much of its time waiting for one guest's vCPU
(one host core under TCG) or for a timer, so on a machine of two cores two
trial processes side by side take far less wall time than one.  A module
never spans shards (its classes share booted guests), and the modules are
dealt out by their recorded durations (``tests/integration/durations.json``,
longest first, each to the shard with the least so far; a module not
recorded counts as the median).  Modules that use the same host resource
(a bridge, an address range) must not run at the same time: the tests give
each module its own.

Each shard's lines are shown as they come, tagged ``[shard N]``; its closing
part (failures, ``Ran N tests``, ``PASSED``/``FAILED``) is printed untagged
once it ends, so the summary lines read as trial's own.

    python tests/shards.py COUNT TRIAL_COMMAND...      run; exit 1 if any shard failed
    python tests/shards.py --record LOG                  update the durations from a run's output
"""

from __future__ import annotations

import glob
import json
import os
import re
import statistics
import subprocess
import sys
import threading
from collections import defaultdict
from typing import IO

HERE = os.path.dirname(os.path.abspath(__file__))
DURATIONS = os.path.join(HERE, "integration", "durations.json")
#: The line trial writes before its closing part (failures first, then the counts).
CLOSING = re.compile(r"^(=|-){79}$")


def modules() -> list[str]:
    """The integration test modules (in its packages too), by dotted name."""
    root = os.path.dirname(HERE)
    return sorted(os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                  for path in glob.glob(os.path.join(HERE, "integration", "**", "test_*.py"), recursive=True))


def durations() -> dict[str, float]:
    try:
        with open(DURATIONS) as f:
            recorded: dict[str, float] = json.load(f)
            return recorded
    except FileNotFoundError:
        return {}


def deal(names: list[str], seconds: dict[str, float], count: int) -> list[list[str]]:
    """``names`` dealt into ``count`` shards of about equal recorded time (none empty unless too few names)."""
    known = [seconds[name] for name in names if name in seconds]
    default = statistics.median(known) if known else 1.0
    shards: list[list[str]] = [[] for _ in range(count)]
    totals = [0.0] * count
    for name in sorted(names, key=lambda n: (-seconds.get(n, default), n)):
        index = totals.index(min(totals))
        shards[index].append(name)
        totals[index] += seconds.get(name, default)
    return [shard for shard in shards if shard]


def module_times(text: str) -> dict[str, float]:
    """Seconds per module in the output of trial's ``timing`` reporter (tagged shard lines or not)."""
    times: dict[str, float] = defaultdict(float)
    current: dict[str, str] = {}
    for line in text.splitlines():
        tag, _, rest = line.partition("] ") if line.startswith("[shard ") else ("", "", line)
        test = re.match(r"^(tests\.integration\.(?:[a-z_]+\.)*test_\w+)\.\w+\.\w+ \.\.\. ", rest)
        if test:
            current[tag] = test.group(1)
        timed = re.match(r"^\((\d+\.\d+) secs\)$", rest)
        if timed and tag in current:
            times[current.pop(tag)] += float(timed.group(1))
    return {name: round(value, 1) for name, value in sorted(times.items())}


def _pump(tag: str, stream: IO[str], closing: list[str], lock: threading.Lock) -> None:
    """Show ``stream``'s lines tagged with ``tag`` until trial's closing part, which is kept for the end."""
    in_closing = False
    for line in stream:
        in_closing = in_closing or bool(CLOSING.match(line.rstrip("\n")))
        if in_closing:
            closing.append(line)
            continue
        with lock:
            sys.stdout.write(f"{tag} {line}")
            sys.stdout.flush()


def run(count: int, trial: list[str]) -> int:
    shards = deal(modules(), durations(), count)
    lock = threading.Lock()
    running = []
    for number, shard in enumerate(shards, 1):
        tag = f"[shard {number}]"
        print(f"{tag} {' '.join(name.rsplit('.', 1)[1] for name in shard)}", flush=True)
        process = subprocess.Popen([*trial, f"--temp-directory=_trial_temp_shard{number}", *shard],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert process.stdout is not None
        closing: list[str] = []
        pump = threading.Thread(target=_pump, args=(tag, process.stdout, closing, lock))
        pump.start()
        running.append((tag, process, pump, closing))
    status = 0
    for tag, process, pump, closing in running:
        pump.join()
        if process.wait() != 0:
            status = 1
        print(f"{tag} ended with status {process.returncode}:", flush=True)
        sys.stdout.write("".join(closing))
        sys.stdout.flush()
    return status


def main(argv: list[str]) -> int:
    if argv[:1] == ["--record"]:
        with open(argv[1], errors="replace") as f:
            recorded = {**durations(), **module_times(f.read())}
        with open(DURATIONS, "w") as f:
            json.dump(dict(sorted(recorded.items())), f, indent=1)
            f.write("\n")
        return 0
    return run(int(argv[0]), argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
