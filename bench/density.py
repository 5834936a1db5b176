"""
Density benchmark: ``--nodes`` (default 16) idle nodes at once on this host,
through the daemon, in one run:

- created ``--batch`` at a time (default 2, one per core: more at once only
  queue for the CPU), ``wait=agent``; the wall time of the whole fleet;
- after ``--settle`` seconds of idleness, ``GET /vm/{hostname}/health`` of
  every node at once: how many answered within 1 s (target: all), p50/max;
- the daemon's resident memory per node (its RSS with the fleet minus its RSS
  before the first create, divided by the number of nodes; target <= 1 MiB);
- the idle fleet's host CPU: the QEMU processes' CPU time over ``--idle``
  seconds, in cores and per node (the daemon's own beside it);
- the QEMU processes' resident memory per node, and, side by side in the same
  run, the image's guest started by hand with the project's command line with
  and without ``-accel tcg,tb-size=64`` (RSS ``--settle`` seconds after its
  agent's first byte, median of ``--tb-rounds`` each).

Every node is deleted at the end, and every hand-started QEMU killed, even on
failure.  Writes ``bench/results/density.json``.

    .venv/bin/python bench/density.py [--nodes 16] [--batch 2] [--settle 10] [--idle 20] [--tb-rounds 2]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import IMAGE_DIR, Daemon, ensure_image, processes_under  # noqa: E402
from bench.limits import RAM, TIMEOUT, connect_socket, image_guest, stop_process  # noqa: E402
from bench.recording import begin, cpu_seconds, status_kib, write_result  # noqa: E402
from vmservice.images.store import Image, resolve_image  # noqa: E402
from vmservice.wire import Connection, Role  # noqa: E402


def _qemus(daemon: Daemon) -> list[int]:
    pids = []
    for pid in processes_under(daemon.state_dir):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith("qemu-system"):
                    pids.append(pid)
        except OSError:
            continue
    return pids


def _health(daemon: Daemon, hostname: str) -> float:
    started = time.monotonic()
    status, _, body = daemon.request("GET", f"/vm/{hostname}/health", timeout=30)
    if status != 200:
        raise RuntimeError(f"health of {hostname}: {status} {body!r}")
    return time.monotonic() - started


def fleet(daemon: Daemon, options: argparse.Namespace) -> dict[str, Any]:
    """Create the fleet, measure it idle (see the module docstring); its nodes are left to the caller."""
    assert daemon.process is not None
    pid = daemon.process.pid
    rss_before = status_kib(pid, "VmRSS")
    hostnames: list[str] = []

    def create() -> str:
        created = daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=5m", {}, expect=201)
        return str(created["hostname"])

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(options.batch) as pool:
        for future in [pool.submit(create) for _ in range(options.nodes)]:
            hostnames.append(future.result())
    created_s = time.monotonic() - started
    time.sleep(options.settle)
    with concurrent.futures.ThreadPoolExecutor(len(hostnames)) as pool:
        health = list(pool.map(lambda name: _health(daemon, name), hostnames))
    qemus = _qemus(daemon)
    if len(qemus) != options.nodes:
        raise RuntimeError(f"{len(qemus)} QEMU processes for {options.nodes} nodes")
    cpu_before = {p: cpu_seconds(p) for p in qemus}
    daemon_cpu_before = cpu_seconds(pid)
    began = time.monotonic()
    time.sleep(options.idle)
    window = time.monotonic() - began
    qemu_cpu = sum(cpu_seconds(p) - cpu_before[p] for p in qemus)
    daemon_cpu = cpu_seconds(pid) - daemon_cpu_before
    rss_after = status_kib(pid, "VmRSS")
    qemu_rss = [status_kib(p, "VmRSS") for p in qemus]
    return {
        "nodes": options.nodes,
        "batch": options.batch,
        "create_all_s": created_s,
        "health_s": {"p50": statistics.median(health), "max": max(health),
                     "within_1s": sum(1 for h in health if h <= 1.0)},
        "daemon_rss_before_kib": rss_before,
        "daemon_rss_with_fleet_kib": rss_after,
        "daemon_rss_per_node_kib": (rss_after - rss_before) / options.nodes,
        "target_daemon_rss_per_node_kib": 1024,
        "idle_window_s": window,
        "idle_fleet_qemu_cores": qemu_cpu / window,
        "idle_qemu_core_percent_per_node": 100 * qemu_cpu / window / options.nodes,
        "idle_daemon_cores": daemon_cpu / window,
        "qemu_rss_per_node_kib": {"median": statistics.median(qemu_rss), "max": max(qemu_rss),
                                  "sum": sum(qemu_rss)},
    }


def guest_rss(image: Image, workdir: str, tb_size: int | None, settle: float) -> dict[str, float]:
    """The image's guest started by hand: seconds to its agent's first byte, and its RSS ``settle`` s later."""
    argv, agent = image_guest(image, workdir, "density", tb_size or 0)
    hello = Connection(Role.HOST)
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with connect_socket(agent, started) as s:
            s.sendall(hello.send(hello.hello("density")))
            s.settimeout(TIMEOUT)
            if not s.recv(1):
                raise RuntimeError("the guest's agent closed the channel")
            first = time.monotonic() - started
            time.sleep(settle)
            return {"agent_first_byte_s": first, "rss_kib": status_kib(process.pid, "VmRSS")}
    finally:
        stop_process(process)


def tb_size_side_by_side(workdir: str, rounds: int, settle: float) -> dict[str, Any]:
    """Default translation cache against ``tb-size=64``, alternating."""
    image = resolve_image(IMAGE_DIR, "default")
    default, small = [], []
    for _ in range(rounds):
        default.append(guest_rss(image, workdir, None, settle))
        small.append(guest_rss(image, workdir, 64, settle))
    rss_default = statistics.median(r["rss_kib"] for r in default)
    rss_small = statistics.median(r["rss_kib"] for r in small)
    return {
        "rounds": rounds,
        "default": {"rss_kib": rss_default, "samples": default},
        "tb_size_64": {"rss_kib": rss_small, "samples": small},
        "saved_per_node_mib": (rss_default - rss_small) / 1024,
        "ratio_boot_tb64_over_default": statistics.median(r["agent_first_byte_s"] for r in small)
        / statistics.median(r["agent_first_byte_s"] for r in default),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--tb-rounds", type=int, default=2)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                         "density.json"))
    options = parser.parse_args()
    ensure_image()
    run = begin()
    workdir = tempfile.mkdtemp(prefix="vms-density-", dir="/tmp")
    daemon = Daemon(groups=[{"name": "demo", "vcpu": 1, "ram_mb": RAM >> 20, "storage_size": "1G"}])
    try:
        tb = tb_size_side_by_side(workdir, options.tb_rounds, options.settle)
        daemon.start()
        result = fleet(daemon, options)
    finally:
        daemon.cleanup()
        subprocess.run(["rm", "-rf", workdir])
    result.update({
        "benchmark": "density",
        "accel": "tcg",
        "ram_bytes": RAM,
        "tb_size": tb,
    })
    write_result(options.output, result, run)
    print(json.dumps({k: result[k] for k in ("create_all_s", "health_s", "daemon_rss_per_node_kib",
                                             "idle_fleet_qemu_cores", "qemu_rss_per_node_kib")}
                     | {"tb_saved_per_node_mib": tb["saved_per_node_mib"]}))


if __name__ == "__main__":
    main()
