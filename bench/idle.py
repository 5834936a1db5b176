"""
Idle suspend benchmark: how much slower a request is when it has to wake a
node its group's ``idle_suspend`` put to sleep, side by side in one run, for a
cold-booted node and a warm clone.

Each round, for each node: ``GET /vm/{h}/health`` and ``POST /vm/{h}/exec``
(``true``, no shell) on the awake node; then, once the node suspended itself,
the same health request (which wakes it); then, once it slept again, the same
exec; then an explicit ``POST /vm/{h}/suspend`` and ``POST /vm/{h}/restore?
wait=agent`` (the restore path alone, the floor of a wake through the API).
The daemon's own wake times come from ``vmservice_idle_wake_duration_seconds``.

Writes medians, samples and the ratios (woken request / awake request, wake /
explicit restore) to ``bench/results/idle.json``.  Absolute seconds depend on
the host (TCG here) and its load: other VMs may run at the same time.

    .venv/bin/python bench/idle.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable
from urllib.parse import urlencode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import Daemon, ensure_image  # noqa: E402
from bench.recording import begin, peak_rss, write_result  # noqa: E402

#: The idle time of the benchmark's groups.
IDLE = "2s"
GROUPS: list[dict[str, Any]] = [
    {"name": "cold", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "idle_suspend": IDLE},
    {"name": "warm", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "idle_suspend": IDLE,
     "warm": True},
]
#: Seconds any single wait may take before the run fails.
TIMEOUT = 180.0


def timed(call: Callable[[], Any]) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def expect(daemon: Daemon, method: str, path: str, status: int = 200) -> Callable[[], None]:
    def call() -> None:
        got, _, body = daemon.request(method, path, timeout=TIMEOUT)
        if got != status:
            raise RuntimeError(f"{method} {path}: {got} {body!r}")

    return call


def asleep(daemon: Daemon, hostname: str) -> None:
    """Wait until the node suspended itself (the listing wakes nothing)."""
    daemon.wait_status(hostname, "Suspended", timeout=TIMEOUT)


def wake_metric(daemon: Daemon, group: str) -> tuple[float, int]:
    """The sum and count of the daemon's wake durations of ``group``."""
    _, _, body = daemon.request("GET", "/metrics")
    values = {}
    for line in body.decode().splitlines():
        for suffix in ("sum", "count"):
            name = f'vmservice_idle_wake_duration_seconds_{suffix}{{hostgroup="{group}"}}'
            if line.startswith(name + " "):
                values[suffix] = float(line.split()[1])
    return values.get("sum", 0.0), int(values.get("count", 0))


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(samples), "samples": samples}


def one_node(daemon: Daemon, group: str, rounds: int) -> dict[str, Any]:
    hostname = daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=5m", {}, expect=201)["hostname"]
    health = expect(daemon, "GET", f"/vm/{hostname}/health")
    exec_true = expect(daemon, "POST", f"/vm/{hostname}/exec?" + urlencode({"cmd": "true", "shell": "",
                                                                              "buffered": "true"}))
    samples: dict[str, list[float]] = {k: [] for k in (
        "awake_health_s", "awake_exec_s", "woken_health_s", "woken_exec_s", "explicit_restore_wait_agent_s")}
    before_sum, before_count = wake_metric(daemon, group)
    for _ in range(rounds):
        samples["awake_health_s"].append(timed(health))
        samples["awake_exec_s"].append(timed(exec_true))
        asleep(daemon, hostname)
        samples["woken_health_s"].append(timed(health))
        asleep(daemon, hostname)
        samples["woken_exec_s"].append(timed(exec_true))
        expect(daemon, "POST", f"/vm/{hostname}/suspend")()
        samples["explicit_restore_wait_agent_s"].append(
            timed(expect(daemon, "POST", f"/vm/{hostname}/restore?wait=agent")))
    after_sum, after_count = wake_metric(daemon, group)
    result: dict[str, Any] = {name: summary(values) for name, values in samples.items()}
    result["daemon_wake_mean_s"] = (after_sum - before_sum) / max(1, after_count - before_count)
    result["wakes_counted"] = after_count - before_count
    median = {name: result[name]["median"] for name in samples}
    result["ratio_woken_health_over_awake"] = median["woken_health_s"] / median["awake_health_s"]
    result["ratio_woken_exec_over_awake"] = median["woken_exec_s"] / median["awake_exec_s"]
    result["ratio_woken_health_over_explicit_restore"] = (
        median["woken_health_s"] / median["explicit_restore_wait_agent_s"])
    daemon.json("DELETE", f"/hostgroup/{group}/nodes/{hostname}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--note", default="", help="what to know about the run, e.g. other VMs on the machine")
    args = parser.parse_args()
    ensure_image()
    run = begin()
    daemon = Daemon(groups=GROUPS)
    try:
        daemon.start()
        nodes = {group["name"]: one_node(daemon, group["name"], args.rounds) for group in GROUPS}
        accel = "tcg" if "accelerator: tcg" in daemon.log() else "kvm"
        assert daemon.process is not None
        result = {
            "benchmark": "idle",
            "accel": accel,
            "idle_suspend": IDLE,
            "rounds": args.rounds,
            "note": args.note,
            "nodes": nodes,
            "daemon_peak_rss_bytes": peak_rss(daemon.process.pid),
        }
    finally:
        daemon.cleanup()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "idle.json")
    write_result(path, result, run)
    for group, figures in nodes.items():
        print(f"{group}: woken health {figures['woken_health_s']['median']:.3f} s "
              f"(awake {figures['awake_health_s']['median']:.3f} s), woken exec "
              f"{figures['woken_exec_s']['median']:.3f} s (awake {figures['awake_exec_s']['median']:.3f} s), "
              f"explicit restore {figures['explicit_restore_wait_agent_s']['median']:.3f} s, "
              f"daemon's wake {figures['daemon_wake_mean_s']:.3f} s")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
