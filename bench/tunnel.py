"""
Tunnel benchmark: in one run, against one node of the default group (no
network interface: every byte goes through the agent channel),

- the channel's ceilings each way (:func:`bench.limits.channel_ceilings`: a
  minimal guest with busybox ``dd`` on a raw virtio-serial port), measured in
  the same run as the tunnels so that each figure is a ratio of them;
- one tunnel of ``--mib`` MiB (default 256) each way through
  ``GET /vm/demo-1/forward`` as a plain byte pipe, to a TCP and to a UNIX
  upstream: a C server in the guest (``bench/tunnel_upstream.c``, compiled
  here with ``gcc -static -O2`` and uploaded with cp) that sends the bytes
  asked for (download) or reads them and answers their count (upload), so
  that the guest's vCPU spends on the upstream as little as ``dd`` does on the
  ceiling's side; each as MB/s and as a ratio to the ceiling of its direction;
- ``--concurrent`` tunnels (default 4) at once each way (TCP), ``--mib`` /
  ``--concurrent`` MiB each: each one's MB/s over its own duration as a share
  of the ceiling, the smallest share, and the aggregate;
- cp download and upload of ``--cp-mib`` MiB through the API in the same run;
- tunnel set-up latency: ``--rounds`` times (default 30), from the client's
  connect to the daemon until the ``200`` head has arrived (the guest has
  connected to the upstream), p50/p95.

Writes everything to ``bench/results/tunnel.json``.

    .venv/bin/python bench/tunnel.py [--mib 256] [--concurrent 4] [--cp-mib 256] [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable
from urllib.parse import urlencode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import IMAGE_DIR, Daemon, ensure_image  # noqa: E402

from bench.channel import measure_cp, percentiles  # noqa: E402  (the same cp measure as bench/channel.py)
from bench.limits import channel_ceilings, minimal_initramfs  # noqa: E402
from bench.recording import begin, write_result  # noqa: E402
from tests.integration.forwarding import GUEST_SERVER, open_pipe, read_all  # noqa: E402
from vmservice.images.store import resolve_image  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
#: The upstreams in the guest: (direction, kind) -> where the C server listens.
UPSTREAMS = {("download", "tcp"): "9002", ("upload", "tcp"): "9001",
             ("download", "unix"): "/tmp/tunnel-source.sock", ("upload", "unix"): "/tmp/tunnel-sink.sock"}


def compile_upstream(workdir: str) -> bytes:
    """``bench/tunnel_upstream.c`` built as a static executable: its bytes."""
    binary = os.path.join(workdir, "tunnel_upstream")
    subprocess.run(["gcc", "-static", "-O2", "-o", binary, os.path.join(HERE, "tunnel_upstream.c")], check=True)
    with open(binary, "rb") as f:
        return f.read()


def background(daemon: Daemon, cmd: str) -> None:
    status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"background": "true", "cmd": cmd}))
    if status != 201:
        raise RuntimeError(f"server start failed: {status} {body!r}")


def upload_file(daemon: Daemon, path: str, data: bytes) -> None:
    status, _, body = daemon.request("POST", "/vm/demo-1/cp?" + urlencode({"path": path}), data,
                                     headers={"Content-Type": "application/octet-stream"})
    if status != 200:
        raise RuntimeError(f"upload of {path} failed: {status} {body!r}")


def start_servers(daemon: Daemon, upstream: bytes) -> None:
    """The Python echo server (for the set-up latency) and the C upstreams, running in the guest."""
    upload_file(daemon, "/tmp/server.py", GUEST_SERVER)
    upload_file(daemon, "/tmp/tunnel_upstream", upstream)
    code, out = daemon.run("demo-1", "chmod 0755 /tmp/tunnel_upstream")
    if code != 0:
        raise RuntimeError(f"chmod failed: {out}")
    background(daemon, "exec python3 /tmp/server.py echo 9000")
    for (direction, _), where in UPSTREAMS.items():
        background(daemon, f"exec /tmp/tunnel_upstream {'source' if direction == 'download' else 'sink'} {where}")
    deadline = time.monotonic() + 120
    probe = ("python3 -c \"import socket; [socket.create_connection(('127.0.0.1', p)).close() for p in (9000, 9001, "
             "9002)]; [socket.socket(socket.AF_UNIX).connect(p) for p in ('/tmp/tunnel-source.sock', "
             "'/tmp/tunnel-sink.sock')]\"")
    while daemon.run("demo-1", probe)[0] != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the guest servers did not start")
        time.sleep(0.5)


def tunnel_download(daemon: Daemon, upstream: str, size: int) -> float:
    """Seconds from the client's connect to the last of ``size`` bytes from the guest's source."""
    buffer = bytearray(1 << 20)
    started = time.monotonic()
    sock, status = open_pipe(daemon, upstream, timeout=600)
    with sock:
        if status != b"HTTP/1.1 200 OK":
            raise RuntimeError(f"tunnel refused: {status!r}")
        sock.sendall(b"%d\n" % size)
        received = 0
        while received < size:
            count = sock.recv_into(buffer)
            if not count:
                break
            received += count
    if received != size:
        raise RuntimeError(f"tunnel download: {received} of {size} bytes")
    return time.monotonic() - started


def tunnel_upload(daemon: Daemon, upstream: str, size: int) -> float:
    """Seconds from the client's connect to the guest's sink answering that it has all ``size`` bytes."""
    block = os.urandom(1 << 20)
    started = time.monotonic()
    sock, status = open_pipe(daemon, upstream, timeout=600)
    with sock:
        if status != b"HTTP/1.1 200 OK":
            raise RuntimeError(f"tunnel refused: {status!r}")
        sock.sendall(b"%d\n" % size)
        for _ in range(size >> 20):
            sock.sendall(block)
        answer = read_all(sock)
    elapsed = time.monotonic() - started
    if answer.strip() != b"%d" % size:
        raise RuntimeError(f"tunnel upload: the guest's sink counted {answer!r} of {size} bytes")
    return elapsed


def concurrently(measure: Callable[[Daemon, str, int], float], daemon: Daemon, upstream: str, size: int,
                 count: int) -> list[float]:
    """``count`` tunnels measured by ``measure`` at once, each of ``size`` bytes: each one's seconds."""
    seconds: list[float | None] = [None] * count
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            seconds[index] = measure(daemon, upstream, size)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [s for s in seconds if s is not None]


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


def ceilings(mib: int) -> dict[str, Any]:
    """The channel's ceilings each way (a minimal guest, see bench/limits.py), measured now."""
    workdir = tempfile.mkdtemp(prefix="vms-tunnel-ceilings-", dir="/tmp")
    try:
        image = resolve_image(IMAGE_DIR, "default")
        initrd = os.path.join(workdir, "minimal.cpio")
        minimal_initramfs(image, initrd)
        return channel_ceilings(image, workdir, initrd, mib, 20)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def address(direction: str, kind: str) -> str:
    where = UPSTREAMS[(direction, kind)]
    return f"unix:{where}" if kind == "unix" else f"127.0.0.1:{where}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--cp-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "tunnel.json"))
    options = parser.parse_args()
    size = options.mib << 20
    each = (options.mib // options.concurrent) << 20
    ensure_image()
    run = begin()
    workdir = tempfile.mkdtemp(prefix="vms-tunnel-", dir="/tmp")
    daemon = Daemon(groups=[{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 512, "storage_size": "3G"}])
    single: dict[str, dict[str, float]] = {}
    together: dict[str, list[float]] = {}
    try:
        upstream = compile_upstream(workdir)
        channel = ceilings(options.mib)
        daemon.start()
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)
        start_servers(daemon, upstream)
        latency = setup_latency(daemon, options.rounds)
        for kind in ("tcp", "unix"):
            single[kind] = {"download": tunnel_download(daemon, address("download", kind), size),
                            "upload": tunnel_upload(daemon, address("upload", kind), size)}
        together["download"] = concurrently(tunnel_download, daemon, address("download", "tcp"), each,
                                            options.concurrent)
        together["upload"] = concurrently(tunnel_upload, daemon, address("upload", "tcp"), each, options.concurrent)
        cp = measure_cp(daemon, options.cp_mib << 20)
    finally:
        daemon.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    ceiling = {"download": channel["guest_to_host"]["mb_per_s"], "upload": channel["host_to_guest"]["mb_per_s"]}
    result: dict[str, Any] = {
        "benchmark": "tunnel",
        "bytes": size,
        "upstream": "C (bench/tunnel_upstream.c, gcc -static -O2), one process per connection",
        "ceiling_mb_per_s": ceiling,
        "channel": channel,
        "single": {kind: {direction: {"seconds": seconds, "mb_per_s": size / seconds / 1e6,
                                      "ratio_to_ceiling": size / seconds / 1e6 / ceiling[direction]}
                          for direction, seconds in directions.items()}
                   for kind, directions in single.items()},
        "concurrent": {direction: {"tunnels": options.concurrent, "bytes_each": each, "seconds": seconds,
                                   "mb_per_s": [each / s / 1e6 for s in seconds],
                                   "shares_of_ceiling": [each / s / 1e6 / ceiling[direction] for s in seconds],
                                   "min_share_of_ceiling": min(each / s / 1e6 / ceiling[direction]
                                                               for s in seconds),
                                   "aggregate_mb_per_s": each * len(seconds) / max(seconds) / 1e6}
                       for direction, seconds in together.items()},
        "cp_download_mb_per_s": cp["download_mb_per_s"],
        "cp_upload_mb_per_s": cp["upload_mb_per_s"],
        "setup_latency_s": percentiles(latency),
        "cp": cp,
    }
    write_result(options.output, result, run)
    print(json.dumps({k: v for k, v in result.items() if k not in ("cp", "channel", "setup_latency_s")}, indent=2))
    print("setup latency p50/p95 (s):", result["setup_latency_s"]["p50"], result["setup_latency_s"]["p95"])


if __name__ == "__main__":
    main()
