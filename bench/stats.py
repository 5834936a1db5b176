"""
Statistics benchmark: ``GET /nodes/stats`` latency with 1, 4 and 16 running nodes, the daemon's CPU time
and resident memory per request, the same for a ``GET /metrics`` scrape with every node's series, and the
resident memory of the metrics agent in a guest.

Nodes are created in batches (four boots at a time) with ``--ram-mb`` each (default 192 MiB: 16 nodes
of the tests' 256 MiB are 4 GiB plus QEMU's own memory), and kept from one size to the next.  Before
timing, every node must have answered once (its metrics agent is up).  The background sampling for
``/metrics`` runs every 5 s (``stats_interval: 5``), as in a daemon at work; its rounds fall between the
timed requests now and then.

Writes ``bench/results/stats.json``.

    .venv/bin/python bench/stats.py [--sizes 1,4,16] [--requests 20] [--ram-mb 192]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import Daemon, ensure_image  # noqa: E402
from bench.recording import begin, write_result  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def create(daemon: Daemon) -> str:
    created = daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=10m", {}, expect=201, timeout=660)
    return str(created["hostname"])


def all_answer(daemon: Daemon, count: int) -> bool:
    stats = daemon.json("GET", "/nodes/stats")
    return len(stats) == count and all("snapshot" in stat for stat in stats)


def time_requests(daemon: Daemon, pid: int, requests: int) -> dict[str, Any]:
    latencies = []
    cpu_before = cpu_seconds(pid)
    for _ in range(requests):
        started = time.monotonic()
        stats = daemon.json("GET", "/nodes/stats")
        latencies.append(time.monotonic() - started)
        errors = [stat["error"] for stat in stats if "error" in stat]
        if errors:
            raise AssertionError(f"nodes without a snapshot: {errors}")
    cpu = cpu_seconds(pid) - cpu_before
    latencies.sort()
    return {
        "latency_s": {
            "median": statistics.median(latencies),
            "p95": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))],
            "max": latencies[-1],
        },
        "daemon_cpu_s_per_request": cpu / requests,
        "daemon_rss_bytes": rss_bytes(pid),
    }


def time_scrapes(daemon: Daemon, pid: int, requests: int, nodes: int) -> dict[str, Any]:
    """Latency and daemon CPU of ``GET /metrics`` once every node has its series."""
    def series() -> int:
        _, _, body = daemon.request("GET", "/metrics")
        return body.decode().count("vmservice_node_stats_up{")

    daemon.wait_for(f"the series of {nodes} nodes", lambda: series() == nodes, timeout=60)
    latencies = []
    cpu_before = cpu_seconds(pid)
    for _ in range(requests):
        started = time.monotonic()
        status, _, _ = daemon.request("GET", "/metrics")
        latencies.append(time.monotonic() - started)
        if status != 200:
            raise AssertionError(f"GET /metrics: {status}")
    latencies.sort()
    return {"latency_s": {"median": statistics.median(latencies), "max": latencies[-1]},
            "daemon_cpu_s_per_scrape": (cpu_seconds(pid) - cpu_before) / requests}


def guest_agent_rss(daemon: Daemon, hostname: str) -> dict[str, int]:
    """VmRSS and VmHWM of the metrics agent in ``hostname``'s guest, in bytes."""
    _, text = daemon.run(hostname, "grep -E '^(VmRSS|VmHWM):' /proc/$(cat /run/vmservice-metrics.pid)/status")
    values = dict(re.findall(r"^(\w+):\s+(\d+) kB", text, re.M))
    return {"rss_bytes": int(values["VmRSS"]) * 1024, "peak_rss_bytes": int(values["VmHWM"]) * 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,16", help="node counts, ascending (default 1,4,16)")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per size")
    parser.add_argument("--ram-mb", type=int, default=192, help="memory of each node")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    ensure_image()
    groups = [{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": args.ram_mb, "storage_size": "1G"}]
    run = begin()
    daemon = Daemon(groups=groups, stats_interval=5)
    result: dict[str, Any] = {"benchmark": "stats", "ram_bytes": args.ram_mb << 20, "requests": args.requests,
                              "sizes": {}}
    started = time.monotonic()
    try:
        daemon.start()
        assert daemon.process is not None
        pid = daemon.process.pid
        nodes: list[str] = []
        for size in sizes:
            boot_started = time.monotonic()
            with ThreadPoolExecutor(4) as pool:
                nodes += list(pool.map(lambda _: create(daemon), range(size - len(nodes))))
            boot = time.monotonic() - boot_started
            daemon.wait_for(f"{size} snapshots", lambda: all_answer(daemon, size), timeout=300)
            daemon.json("GET", "/nodes/stats")  # warm-up
            measured = time_requests(daemon, pid, args.requests)
            measured["metrics_scrape"] = time_scrapes(daemon, pid, args.requests, size)
            measured["boot_s"] = boot
            result["sizes"][str(size)] = measured
            print(f"{size} nodes: {measured}", flush=True)
        result["guest_metrics_agent"] = guest_agent_rss(daemon, nodes[0])
        accel = re.search(r"accelerator: (\w+)", daemon.log())
        result["accel"] = accel.group(1) if accel else "unknown"
    finally:
        daemon.cleanup()
    result["total_s"] = time.monotonic() - started
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "stats.json")
    write_result(path, result, run)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
