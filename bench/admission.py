"""
Admission benchmark: N creates at once (``POST /hostgroup/demo/nodes?wait=agent``), with the cold boots
bounded (``admission.boot_concurrency``: by default one boot per core, ``bound-C``, and two per core, the
daemon's default, ``bound-2C``) and unbounded (0), side by side in one run (one daemon each), against
what this machine can do at best: one create alone, and the ideal for N boots on C cores, one boot per
core at a time (ceil(N / C) x one boot).

For each mode: the wall time until every create answered, each create's time (median, max), the first
answer, and how many answered. Ratios: each mode's wall time over the unbounded one's and over the
ideal. Other VMs running on the host (other daemons) are counted and the load average recorded, since
the figures move with them.

Writes ``bench/results/admission.json``.

    .venv/bin/python bench/admission.py [--count 8 --count 20] [--bound 2 --bound 4] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import Daemon, ensure_image  # noqa: E402
from bench.recording import begin, write_result  # noqa: E402

RAM_MB = 256
GROUPS = [{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": RAM_MB, "storage_size": "1G"}]


def other_vms() -> int:
    """QEMU processes on the host (none of ours run between measurements)."""
    found = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found += b"qemu-system" in f.read().split(b"\0")[0]
            except OSError:
                pass
    return found


def create(daemon: Daemon) -> tuple[int, float, str]:
    """One create with wait=agent: status, seconds, hostname."""
    began = time.monotonic()
    status, _, body = daemon.request("POST", "/hostgroup/demo/nodes?wait=agent&timeout=10m", {}, timeout=900)
    seconds = time.monotonic() - began
    hostname = ""
    if status == 201:
        hostname = json.loads(body)["hostname"]
    return status, seconds, hostname


def delete_all(daemon: Daemon) -> None:
    for hostname, node in daemon.nodes().items():
        daemon.json("DELETE", f"/hostgroup/{node['hostgroup']}/nodes/{hostname}")


def together(daemon: Daemon, count: int) -> dict[str, Any]:
    """``count`` creates at once; every node deleted afterwards."""
    results: list[tuple[int, float, str]] = []
    lock = threading.Lock()
    began = time.monotonic()

    def one() -> None:
        outcome = create(daemon)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - began
    delete_all(daemon)
    times = sorted(seconds for status, seconds, _ in results if status == 201)
    return {
        "wall_s": wall,
        "answered_201": len(times),
        "statuses": sorted(status for status, _, _ in results),
        "first_s": times[0] if times else None,
        "median_s": statistics.median(times) if times else None,
        "max_s": times[-1] if times else None,
        "samples": times,
    }


def single(daemon: Daemon, rounds: int) -> float:
    """The median of ``rounds`` creates one at a time: one boot with the machine to itself (or as busy as it is)."""
    times = []
    for _ in range(rounds):
        status, seconds, hostname = create(daemon)
        if status != 201:
            raise RuntimeError(f"a single create answered {status}")
        daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")
        times.append(seconds)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, action="append", help="creates at once (repeatable; default 8 and 20)")
    parser.add_argument("--bound", type=int, action="append",
                        help="boot_concurrency of a bounded daemon (repeatable; default: cores and 2 x cores)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each mode, alternating")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "admission.json"))
    args = parser.parse_args()
    counts = args.count or [8, 20]
    ensure_image()
    cores = os.cpu_count() or 1
    bounds = args.bound or [cores, 2 * cores]
    daemons = {f"bound-{bound}": Daemon(groups=GROUPS, admission={"boot_concurrency": bound}) for bound in bounds}
    daemons["unbounded"] = Daemon(groups=GROUPS, admission={"boot_concurrency": 0})
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {count: {mode: [] for mode in daemons} for count in counts}
    run = begin()
    busy = {"other_vms_at_start": other_vms()}
    try:
        for daemon in daemons.values():
            daemon.start()
        alone = single(daemons["unbounded"], 3)
        for count in counts:
            for round_ in range(args.rounds):
                order = list(daemons) if round_ % 2 == 0 else list(reversed(daemons))
                for mode in order:
                    print(f"round {round_ + 1}: {count} at once, {mode}", file=sys.stderr)
                    runs[count][mode].append(together(daemons[mode], count))
    finally:
        for daemon in daemons.values():
            daemon.cleanup()
    result: dict[str, Any] = {
        "benchmark": "admission",
        "bounds": bounds,
        "cores": cores,
        "ram_bytes": RAM_MB * 2**20,
        "rounds": args.rounds,
        "single_create_wait_agent_s": alone,
        "together": {str(count): summary(runs[count], count, cores, alone) for count in counts},
        "machine": busy,
        "note": (
            "ideal = ceil(count / cores) x one create alone: one boot per core at a time. Taken on a busy "
            "machine when other_vms_at_start > 0 (other daemons' VMs run beside ours)."
        ),
    }
    write_result(args.out, result, run)
    for count, figures in result["together"].items():
        wall = figures["wall_s"]
        print(f"{count} at once, last answer: " + ", ".join(f"{mode} {seconds:.1f} s" for mode, seconds in wall.items())
              + f"; ideal {figures['ideal_wall_s']:.1f} s")


def summary(runs: dict[str, list[dict[str, Any]]], count: int, cores: int, alone: float) -> dict[str, Any]:
    """The runs of ``count`` creates at once in each mode, their median wall times and the ratios."""
    ideal = math.ceil(count / cores) * alone
    wall = {mode: statistics.median(run["wall_s"] for run in runs[mode]) for mode in runs}
    return {
        "ideal_wall_s": ideal,
        "wall_s": wall,
        "first_s": {mode: statistics.median(run["first_s"] for run in runs[mode]) for mode in runs},
        "median_s": {mode: statistics.median(run["median_s"] for run in runs[mode]) for mode in runs},
        "ratio_wall_over_unbounded": {mode: wall[mode] / wall["unbounded"] for mode in runs},
        "ratio_wall_over_ideal": {mode: wall[mode] / ideal for mode in runs},
        "runs": runs,
    }


if __name__ == "__main__":
    main()
