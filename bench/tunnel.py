"""
Tunnel benchmark: in one run, against one node of the default group (no
network interface: every byte goes through the agent channel),

- tunnel throughput each way through ``GET /vm/demo-1/forward`` as a plain
  byte pipe: ``--mib`` MiB (default 256) from a server in the guest that
  sends them (download), and to one that reads them and answers their sha256
  (upload, checked);
- cp download and upload of the same number of bytes through the API, in the
  same run, and the ratio of each tunnel direction to its cp counterpart;
- tunnel set-up latency: ``--rounds`` times (default 30), from the client's
  connect to the daemon until the ``200`` head has arrived (the guest has
  connected to the upstream), p50/p95.

Writes everything to ``bench/results/tunnel.json``.

    .venv/bin/python bench/tunnel.py [--mib 256] [--rounds 30]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import Daemon, ensure_image  # noqa: E402

from bench.channel import measure_cp, percentiles  # noqa: E402  (the same cp measure as bench/channel.py)
from bench.recording import begin, write_result  # noqa: E402
from tests.integration.forwarding import GUEST_SERVER, open_pipe, read_all  # noqa: E402


def start_servers(daemon: Daemon, size: int) -> None:
    status, _, body = daemon.request("POST", "/vm/demo-1/cp?" + urlencode({"path": "/tmp/server.py"}), GUEST_SERVER,
                                     headers={"Content-Type": "application/octet-stream"})
    if status != 200:
        raise RuntimeError(f"server upload failed: {status} {body!r}")
    for cmd in ("exec python3 /tmp/server.py echo 9000", "exec python3 /tmp/server.py sink 9001",
                f"exec python3 /tmp/server.py source 9002 {size}"):
        status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"background": "true", "cmd": cmd}))
        if status != 201:
            raise RuntimeError(f"server start failed: {status} {body!r}")
    deadline = time.monotonic() + 120
    while daemon.run("demo-1", "python3 -c \"import socket; [socket.create_connection(('127.0.0.1', p)).close() "
                               "for p in (9000, 9001)]\"")[0] != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the guest servers did not start")
        time.sleep(0.5)


def tunnel_download(daemon: Daemon, size: int) -> float:
    started = time.monotonic()
    sock, status = open_pipe(daemon, "127.0.0.1:9002", timeout=600)
    with sock:
        if status != b"HTTP/1.1 200 OK":
            raise RuntimeError(f"tunnel refused: {status!r}")
        received = 0
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            received += len(chunk)
    if received != size:
        raise RuntimeError(f"tunnel download: {received} of {size} bytes")
    return time.monotonic() - started


def tunnel_upload(daemon: Daemon, size: int) -> float:
    block = os.urandom(1 << 20)
    digest = hashlib.sha256()
    started = time.monotonic()
    sock, status = open_pipe(daemon, "127.0.0.1:9001", timeout=600)
    with sock:
        if status != b"HTTP/1.1 200 OK":
            raise RuntimeError(f"tunnel refused: {status!r}")
        sock.sendall(b"%d\n" % size)
        for _ in range(size >> 20):
            digest.update(block)
            sock.sendall(block)
        answer = read_all(sock)
    elapsed = time.monotonic() - started
    if answer.decode() != digest.hexdigest():
        raise RuntimeError("tunnel upload: the guest's sha256 differs")
    return elapsed


def setup_latency(daemon: Daemon, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.monotonic()
        sock, status = open_pipe(daemon, "127.0.0.1:9000")
        samples.append(time.monotonic() - started)
        if status != b"HTTP/1.1 200 OK":
            raise RuntimeError(f"tunnel refused: {status!r}")
        sock.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                         "tunnel.json"))
    options = parser.parse_args()
    size = options.mib << 20
    ensure_image()
    run = begin()
    daemon = Daemon(groups=[{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 512, "storage_size": "3G"}])
    try:
        daemon.start()
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)
        start_servers(daemon, size)
        latency = setup_latency(daemon, options.rounds)
        download = tunnel_download(daemon, size)
        upload = tunnel_upload(daemon, size)
        cp = measure_cp(daemon, size)
    finally:
        daemon.cleanup()
    result: dict[str, Any] = {
        "benchmark": "tunnel",
        "bytes": size,
        "tunnel_download_seconds": download,
        "tunnel_download_mb_per_s": size / download / 1e6,
        "tunnel_upload_seconds": upload,
        "tunnel_upload_mb_per_s": size / upload / 1e6,
        "cp_download_mb_per_s": cp["download_mb_per_s"],
        "cp_upload_mb_per_s": cp["upload_mb_per_s"],
        "ratio_tunnel_over_cp_download": (size / download / 1e6) / cp["download_mb_per_s"],
        "ratio_tunnel_over_cp_upload": (size / upload / 1e6) / cp["upload_mb_per_s"],
        "setup_latency_s": percentiles(latency),
        "cp": cp,
    }
    write_result(options.output, result, run)
    print(json.dumps({k: v for k, v in result.items() if k not in ("cp", "setup_latency_s")}, indent=2))
    print("setup latency p50/p95 (s):", result["setup_latency_s"]["p50"], result["setup_latency_s"]["p95"])


if __name__ == "__main__":
    main()
