"""
Tunnel benchmark: in one run, against one node of the default group (no
network interface: every byte goes through the agent channel),

- the channel's ceilings each way (:func:`bench.limits.channel_ceilings`: a
  minimal guest with busybox ``dd`` on a raw virtio-serial port), measured at
  the start of each round and before the concurrent tunnels, so that each
  figure is a ratio of the ceilings taken just before it;
- one tunnel of ``--mib`` MiB (default 256) each way through
  ``GET /vm/demo-1/forward`` as a plain byte pipe, to a TCP and to a UNIX
  upstream: a C server in the guest (``bench/tunnel_upstream.c``, compiled
  here with ``gcc -static -O2`` and uploaded with cp) that sends the bytes
  asked for (download) or reads them and answers their count (upload), so
  that the guest's vCPU spends on the upstream as little as ``dd`` does on the
  ceiling's side; each as MB/s, as a ratio to the ceiling of its direction,
  and the node's QEMU cores meanwhile;
- the **port relay**, side by side with each of those tunnels (the same
  round, right after it): what a tunnel on a dedicated raw virtio-serial port
  would reach at best, the design that would move tunnels off the agent's
  multiplexed stream as cp moved to the bulk port.  A minimal guest (as the
  ceilings') with 10 tunnel ports, each served by ``bench/tunnel_relay.c``
  (splice, or read/write where the port refuses splice, between the port and
  a connection to the same C upstreams, TCP or UNIX), the host end a plain
  socket, no daemon in the path (its share of the host's cost is not in it);
- ``--pairs`` rounds (default 3) of those (ceilings, then each tunnel and
  its relay): each figure is the round whose ratio is the median, every
  round's ratio beside it;
- ``--concurrent`` tunnels (at most 4, the default) at once each way (TCP),
  through the daemon and then through the relay, ``--mib`` / ``--concurrent``
  MiB each: each one's MB/s over its own duration as a share of the ceiling,
  the smallest share, the aggregate;
- cp download and upload of ``--cp-mib`` MiB through the API in the same run;
- tunnel set-up latency: ``--rounds`` times (default 30), from the client's
  connect to the daemon until the ``200`` head has arrived (the guest has
  connected to the upstream), p50/p95.

Writes everything to ``bench/results/tunnel.json``.  The node's group has the
default tunnel ports (``tunnel_ports``), so the tunnels go over them; with
``--stream`` it has none, every tunnel takes the agent's multiplexed stream,
and the results go to ``bench/results/tunnel_stream.json`` (the two paths
side by side).

    .venv/bin/python bench/tunnel.py [--mib 256] [--pairs 3] [--concurrent 4] [--cp-mib 256] [--rounds 30] [--stream]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterator
from urllib.parse import urlencode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import IMAGE_DIR, Daemon, ensure_image  # noqa: E402

from bench.channel import _node_qemu, measure_cp, percentiles  # noqa: E402  (the same cp measure as bench/channel.py)
from bench.limits import (MINIMAL_INIT, TIMEOUT, channel_ceilings, clean_workdir, connect_socket,  # noqa: E402
                          minimal_command, minimal_initramfs, stop_process)
from bench.recording import begin, cpu_seconds, write_result  # noqa: E402
from tests.integration.forwarding import GUEST_SERVER, open_pipe, read_all  # noqa: E402
from vmservice.images.store import Image, resolve_image  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
#: The upstreams in the guest: (direction, kind) -> where the C server listens.
UPSTREAMS = {("download", "tcp"): "9002", ("upload", "tcp"): "9001",
             ("download", "unix"): "/tmp/tunnel-source.sock", ("upload", "unix"): "/tmp/tunnel-sink.sock"}


def compile_static(workdir: str, name: str) -> bytes:
    """``bench/<name>.c`` built as a static executable: its bytes."""
    binary = os.path.join(workdir, name)
    subprocess.run(["gcc", "-static", "-O2", "-pthread", "-o", binary, os.path.join(HERE, f"{name}.c")], check=True)
    with open(binary, "rb") as f:
        return f.read()


#: The relay guest's ``/init``: the minimal guest's start (modules, ``find_port``), then the C
#: upstreams on the loopback and on UNIX sockets, and a relay looping on each tunnel port (``d*`` to the
#: TCP source, ``u*`` to the TCP sink, ``e0`` to the UNIX source, ``v0`` to the UNIX sink); ``R`` on
#: ``ctl`` when they run, power off at the host's byte on ``ctl``.
RELAY_INIT = MINIMAL_INIT.split("mode=floor", 1)[0] + r"""ifconfig lo 127.0.0.1 up
mkdir -p /tmp
/bin/tunnel_upstream source 9002 &
/bin/tunnel_upstream sink 9001 &
/bin/tunnel_upstream source /tmp/source.sock &
/bin/tunnel_upstream sink /tmp/sink.sock &
usleep 200000
for name in d0 d1 d2 d3 u0 u1 u2 u3 e0 v0; do
    find_port $name
    case $name in d*) to=9002 ;; u*) to=9001 ;; e*) to=/tmp/source.sock ;; *) to=/tmp/sink.sock ;; esac
    (while true; do /bin/tunnel_relay "$found" $to || usleep 100000; done) &
done
find_port ctl
exec 3<>"$found"
printf R >&3
dd bs=1 count=1 <&3 >/dev/null 2>&1
poweroff -f
"""
RELAY_PORTS = ("ctl", "d0", "d1", "d2", "d3", "u0", "u1", "u2", "u3", "e0", "v0")


def port_download(sock: socket.socket, size: int) -> float:
    """Seconds for ``size`` bytes from the source through a relayed port."""
    buffer = bytearray(1 << 20)
    started = time.monotonic()
    sock.sendall(b"%d\n" % size)
    received = 0
    while received < size:
        count = sock.recv_into(buffer)
        if not count:
            raise RuntimeError(f"port relay download: {received} of {size} bytes")
        received += count
    return time.monotonic() - started


def port_upload(sock: socket.socket, size: int) -> float:
    """Seconds for ``size`` bytes to the sink through a relayed port, until its count has come back."""
    block = os.urandom(1 << 20)
    started = time.monotonic()
    sock.sendall(b"%d\n" % size)
    for _ in range(size >> 20):
        sock.sendall(block)
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            break
        answer += chunk
    if answer.strip() != b"%d" % size:
        raise RuntimeError(f"port relay upload: the sink counted {answer!r} of {size} bytes")
    return time.monotonic() - started


#: The relay guest's port for one tunnel of each (direction, kind), and for concurrent ones by direction.
RELAY_PORT = {("download", "tcp"): "d0", ("upload", "tcp"): "u0", ("download", "unix"): "e0", ("upload", "unix"): "v0"}
RELAY_CONCURRENT = {"download": ["d0", "d1", "d2", "d3"], "upload": ["u0", "u1", "u2", "u3"]}


@contextlib.contextmanager
def relay_guest(image: Image, upstream: bytes, relay: bytes) -> Iterator[tuple[int, dict[str, socket.socket], str]]:
    """
    The port relay's guest (see the module docstring) running: its QEMU's pid, its tunnel ports'
    connected host ends by name, and its console log's path; stopped and removed at the end.
    """
    workdir = tempfile.mkdtemp(prefix="vms-tunnel-relay-", dir="/tmp")
    process = None
    try:
        clean_workdir(workdir)
        initrd = os.path.join(workdir, "relay.cpio")
        applets = ("sh", "mount", "insmod", "usleep", "dd", "ifconfig", "mkdir", "poweroff")
        minimal_initramfs(image, initrd, RELAY_INIT, applets, (("tunnel_upstream", upstream), ("tunnel_relay", relay)))
        argv = minimal_command(image, workdir, initrd, RELAY_PORTS, "")
        started = time.monotonic()
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ctl = connect_socket(os.path.join(workdir, "ctl.sock"), started)
        ports = {name: connect_socket(os.path.join(workdir, f"{name}.sock"), started) for name in RELAY_PORTS[1:]}
        ctl.settimeout(TIMEOUT)
        if ctl.recv(1) != b"R":
            raise RuntimeError("the relay guest did not start")
        for sock in ports.values():
            sock.settimeout(600)
        yield process.pid, ports, os.path.join(workdir, "console.log")
        ctl.sendall(b"G")
    finally:
        if process is not None:
            stop_process(process)
        shutil.rmtree(workdir, ignore_errors=True)


def relay_paths(console_log: str) -> list[str]:
    """What the relays said of how they moved bytes (``splice`` or ``read/write``, by direction)."""
    with open(console_log, errors="replace") as console:
        return sorted({line.strip() for line in console
                       if re.fullmatch(r"tunnel_relay: .+ by (splice|read/write)", line.strip())})


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


RELAY_MEASURE = {"download": port_download, "upload": port_upload}


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


def with_qemu_cpu(pid: int, measure: Callable[[], Any]) -> tuple[Any, float]:
    """What ``measure()`` returns, and the CPU seconds QEMU process ``pid`` used meanwhile."""
    before = cpu_seconds(pid)
    value = measure()
    return value, cpu_seconds(pid) - before


def concurrently(measure: Callable[[str], float], names: list[str]) -> list[float]:
    """``measure`` of each of ``names`` at once, on a thread each: each one's seconds."""
    seconds: list[float | None] = [None] * len(names)
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            seconds[index] = measure(names[index])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(names))]
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


def ceiling_of(channel: dict[str, Any], direction: str) -> float:
    """The ceiling in MB/s of a tunnel's ``direction`` (download: guest to host) in a ceilings measure."""
    return float(channel["guest_to_host" if direction == "download" else "host_to_guest"]["mb_per_s"])


def ceiling_per_cpu(channel: dict[str, Any], direction: str) -> float:
    """MB per CPU second of the ceilings guest's QEMU in a tunnel's ``direction`` in a ceilings measure."""
    way = channel["guest_to_host" if direction == "download" else "host_to_guest"]
    return float(channel["bytes"] / 1e6 / way["qemu_cpu_s"])


def address(direction: str, kind: str) -> str:
    where = UPSTREAMS[(direction, kind)]
    return f"unix:{where}" if kind == "unix" else f"127.0.0.1:{where}"


def single_summary(measured: dict[str, list[tuple[float, float, dict[str, Any]]]], size: int) -> dict[str, Any]:
    """
    One tunnel's rounds of (seconds, QEMU CPU seconds, that round's ceilings)
    each way: the round whose ratio to its ceiling is the median (its seconds,
    MB/s, ceiling, ratio, the cores the QEMU used meanwhile, and the ratio per
    QEMU CPU second: MB per CPU second of the QEMU over the same of the
    ceiling's, the work per byte, which the load moves less than the speed),
    and every round's ratio.
    """
    summary = {}
    for direction, rounds in measured.items():
        ratios = sorted(((size / s / 1e6 / ceiling_of(channel, direction), s, cpu, channel)
                         for s, cpu, channel in rounds), key=lambda row: row[0])
        ratio, s, cpu, channel = ratios[(len(ratios) - 1) // 2]
        summary[direction] = {"seconds": s, "mb_per_s": size / s / 1e6,
                              "ceiling_mb_per_s": ceiling_of(channel, direction), "ratio_to_ceiling": ratio,
                              "qemu_cores": cpu / s,
                              "ratio_per_qemu_cpu_to_ceiling": size / cpu / 1e6 / ceiling_per_cpu(channel, direction),
                              "ratio_to_ceiling_rounds": [r for r, _, _, _ in ratios]}
    return summary


def concurrent_summary(together: dict[str, tuple[list[float], float]], each: int,
                       ceiling: dict[str, float]) -> dict[str, Any]:
    """
    Concurrent tunnels' (seconds of each, QEMU CPU seconds) each way: each one's
    MB/s and share of the ceiling, the least share, the aggregate and QEMU's cores.
    """
    return {direction: {"tunnels": len(seconds), "bytes_each": each, "seconds": seconds,
                        "ceiling_mb_per_s": ceiling[direction],
                        "mb_per_s": [each / s / 1e6 for s in seconds],
                        "shares_of_ceiling": [each / s / 1e6 / ceiling[direction] for s in seconds],
                        "min_share_of_ceiling": min(each / s / 1e6 / ceiling[direction] for s in seconds),
                        "aggregate_mb_per_s": each * len(seconds) / max(seconds) / 1e6,
                        "aggregate_ratio_to_ceiling": each * len(seconds) / max(seconds) / 1e6 / ceiling[direction],
                        "qemu_cores": cpu / max(seconds)}
            for direction, (seconds, cpu) in together.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--cp-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--stream", action="store_true",
                        help="no tunnel ports: every tunnel on the agent's stream (default output tunnel_stream.json)")
    parser.add_argument("--output")
    options = parser.parse_args()
    output = options.output or os.path.join(HERE, "results", "tunnel_stream.json" if options.stream else "tunnel.json")
    if not 1 <= options.concurrent <= len(RELAY_CONCURRENT["download"]):
        parser.error(f"--concurrent must be from 1 to {len(RELAY_CONCURRENT['download'])} (the relay guest's ports)")
    size = options.mib << 20
    each = (options.mib // options.concurrent) << 20
    ensure_image()
    run = begin()
    workdir = tempfile.mkdtemp(prefix="vms-tunnel-", dir="/tmp")
    daemon = Daemon(groups=[{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 512, "storage_size": "3G",
                             "tunnel_ports": 0 if options.stream else 4}])
    kinds = ("tcp", "unix")
    Rounds = dict[str, dict[str, list[tuple[float, float, dict[str, Any]]]]]
    single: Rounds = {k: {"download": [], "upload": []} for k in kinds}
    relayed: Rounds = {k: {"download": [], "upload": []} for k in kinds}
    channels: list[dict[str, Any]] = []
    together: dict[str, tuple[list[float], float]] = {}
    relayed_together: dict[str, tuple[list[float], float]] = {}
    forward = {"download": tunnel_download, "upload": tunnel_upload}
    try:
        upstream, relay = compile_static(workdir, "tunnel_upstream"), compile_static(workdir, "tunnel_relay")
        with relay_guest(resolve_image(IMAGE_DIR, "default"), upstream, relay) as (relay_qemu, ports, console_log):
            daemon.start()
            daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)
            start_servers(daemon, upstream)
            qemu = _node_qemu(daemon)
            latency = setup_latency(daemon, options.rounds)
            # Side by side: each round, the ceilings, then each kind and direction through the daemon and
            # right after through the relay, each a ratio to its round's ceiling.
            for _ in range(options.pairs):
                channels.append(ceilings(options.mib))
                for kind in kinds:
                    for direction in ("download", "upload"):
                        s, cpu = with_qemu_cpu(qemu, lambda: forward[direction](daemon, address(direction, kind), size))
                        single[kind][direction].append((s, cpu, channels[-1]))
                        s, cpu = with_qemu_cpu(
                            relay_qemu, lambda: RELAY_MEASURE[direction](ports[RELAY_PORT[(direction, kind)]], size))
                        relayed[kind][direction].append((s, cpu, channels[-1]))
            channels.append(ceilings(options.mib))  # the concurrent tunnels' own
            for direction in ("download", "upload"):
                together[direction] = with_qemu_cpu(qemu, lambda: concurrently(
                    lambda where: forward[direction](daemon, where, each),
                    [address(direction, "tcp")] * options.concurrent))
                relayed_together[direction] = with_qemu_cpu(relay_qemu, lambda: concurrently(
                    lambda name: RELAY_MEASURE[direction](ports[name], each),
                    RELAY_CONCURRENT[direction][:options.concurrent]))
            how = relay_paths(console_log)
        cp = measure_cp(daemon, options.cp_mib << 20)
    finally:
        daemon.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    last = {direction: ceiling_of(channels[-1], direction) for direction in ("download", "upload")}
    result: dict[str, Any] = {
        "benchmark": "tunnel",
        "path": "stream" if options.stream else "tunnel ports",
        "bytes": size,
        "upstream": "C (bench/tunnel_upstream.c, gcc -static -O2), one process per connection",
        "ceilings_mb_per_s": {direction: [ceiling_of(c, direction) for c in channels]
                              for direction in ("download", "upload")},
        "channels": channels,
        "single": {kind: single_summary(directions, size) for kind, directions in single.items()},
        "concurrent": concurrent_summary(together, each, last),
        "port_relay": {"single": {kind: single_summary(directions, size) for kind, directions in relayed.items()},
                       "concurrent": concurrent_summary(relayed_together, each, last),
                       "relay_paths": how},
        "cp_download_mb_per_s": cp["download_mb_per_s"],
        "cp_upload_mb_per_s": cp["upload_mb_per_s"],
        "setup_latency_s": percentiles(latency),
        "cp": cp,
    }
    write_result(output, result, run)
    print(json.dumps({k: v for k, v in result.items() if k not in ("cp", "channels", "setup_latency_s")}, indent=2))
    print("setup latency p50/p95 (s):", result["setup_latency_s"]["p50"], result["setup_latency_s"]["p95"])


if __name__ == "__main__":
    main()
