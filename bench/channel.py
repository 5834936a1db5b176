"""
Channel benchmark (exec and raw-channel parts): in one run, side by side,

- the raw agent channel of a bare QEMU guest driven in-process by
  :class:`~vmservice.agent.client.AgentClient`: ping round trip, and the
  ``echo`` stream's throughput for N bytes;
- exec ``true`` latency straight on that agent channel (one stream each),
  and of ``/bin/true`` without a shell (the agent's own cost: bash alone takes
  ~100 ms to start under TCG);
- exec ``true`` latency through the daemon's HTTP API
  (``POST /vm/demo-1/exec?cmd=true``, whole NDJSON response read).

- background exec logs through the daemon's HTTP API: ``cat`` of a
  ``--bg-mib`` MiB file (default 64, the largest ring) started with
  ``background=true`` and followed with ``logs?follow=true`` to its exit
  frame, MB/s of output decoded, against a cp download of the same file in
  the same run;

- cp through the daemon's HTTP API: upload (``POST /vm/demo-1/cp``) and
  download (``GET``) of ``--cp-mib`` MiB (default 1024), MB/s each and the
  ratio to the raw echo's MB/s (target >= 0.8), and the twistd process's peak
  RSS during those copies: ``VmRSS`` before, peak reset through
  ``/proc/PID/clear_refs`` (``5``), ``VmHWM`` after (target growth <= 32 MiB).

- watch latency through the daemon's HTTP API: a shell in the guest (an exec
  whose stdin streams from the client, full duplex) makes one file per line it
  reads and echoes the line; for each of ``--watch-writes`` lines (default 50),
  the time from the line leaving the client to the ``create`` event of
  ``GET /vm/demo-1/fs/watch`` reaching the client (``watch_event_s``), beside
  the time to the shell's echo on the exec's own stdout (``watch_exec_echo_s``,
  the same trip without the watch), p50/p95.

- the channel's ceilings in the same run (``bench/limits.py``: a minimal guest
  with busybox ``dd`` on a virtio-serial port at each end, 1 MiB blocks), and
  cp's MB/s as a ratio of the ceiling of its direction (target >= 0.8).

``--parts cp`` measures cp alone beside the channel's ceilings and the node's
disk (``dd`` with ``O_DIRECT`` in the guest), ``--rounds`` rounds of each in
turn, and keeps each round's ratios: MB/s over the ceiling, MB per CPU second
of the node's QEMU over the ceiling's (the work per byte, which the load does
not change), and both over the pipeline limit ``1 / (1/channel + 1/disk)``.
Each direction's summary (``upload``, ``download``) is one round's figures,
the round whose MB/s ratio is the median, with the range of every ratio over
the rounds beside it; every round is kept (``rounds``).

Writes samples, p50/p95 and the ratios ``exec_api_p50 / raw_round_trip_p50``
with ``/bin/bash`` and without a shell (``shell=``; target <= 3) to
``bench/results/channel.json``.  ``--parts watch`` measures the watch latency
alone (one node, no bare guest, no copies), ``--parts background`` the
background exec logs beside their cp download, ``--parts cp`` the copies
against the ceilings: each part writes its own file, ``channel_PART.json``
(a file holds one run, never figures of runs merged).

``--before DIR`` (or ``--before-ref REF``, see ``bench/earlier.py``): a
second daemon runs the earlier checkout's code on its own image, with a node
like this daemon's, and the parts of the API the restructuring touches are
measured on both in turn (this daemon's, then the earlier one's, each
time): exec ``true`` through the API with and without a shell (each round),
the watch latency, cp upload and download, and the background exec logs
(with ``--parts cp``, each round's cp).  The raw channel, the agent's own
exec and the ceilings are no daemon's and are measured once.  The results
get ``before`` (the earlier daemon's figures, under the same keys) and
``ratio_after_over_before`` (this checkout's figure over the earlier one's,
by key) beside the existing keys.

    .venv/bin/python bench/channel.py [--rounds 30] [--echo-mib 32] [--cp-mib 1024] [--bg-mib 64]
                                      [--watch-writes 50] [--parts all|watch|background|cp]
                                      [--before DIR | --before-ref REF] [--before-image-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import reactor  # noqa: E402
from twisted.internet.defer import CancelledError, Deferred  # noqa: E402
from twisted.internet.protocol import Protocol  # noqa: E402
from twisted.internet.threads import deferToThread  # noqa: E402
from twisted.web.iweb import UNKNOWN_LENGTH, IBodyProducer  # noqa: E402
from zope.interface import implementer  # noqa: E402

from tests.integration.daemon import IMAGE_DIR, Daemon, ensure_image, processes_under  # noqa: E402
from bench.earlier import Earlier, add_options, from_options, ratios, start_earlier  # noqa: E402
from bench.limits import channel_ceilings, image_guest, minimal_initramfs  # noqa: E402
from bench.recording import begin, cpu_seconds, status_kib, write_result  # noqa: E402
from vmservice.agent.client import AgentClient  # noqa: E402
from vmservice.agent.execution import run_collected  # noqa: E402
from vmservice.client import Client, ExecRecord  # noqa: E402
from vmservice.guestport.exec import ExecRequest  # noqa: E402
from vmservice.images.store import resolve_image  # noqa: E402

RAM = 256 * 1024 * 1024
#: Each ``--parts``' results file: one run's figures each, never merged.
OUTPUTS = {"all": "channel.json", "cp": "channel_cp.json", "watch": "channel_watch.json",
           "background": "channel_background.json"}
#: The node's disk: room for the 1 GiB copy beside the root file system.
STORAGE = "3G"
#: The figures ``ratio_after_over_before`` compares, by ``--parts`` (the API paths the restructuring touches).
COMPARED = {
    "all": ("exec_true_api_s.p50", "exec_true_no_shell_api_s.p50", "cp.upload_mb_per_s", "cp.download_mb_per_s",
            "cp.daemon_peak_rss_kib", "background_logs.logs_follow_mb_per_s", "watch.watch_event_s.p50",
            "watch.watch_exec_echo_s.p50"),
    "watch": ("watch.watch_event_s.p50", "watch.watch_exec_echo_s.p50"),
    "background": ("background_logs.logs_follow_mb_per_s", "background_logs.cp_download_mb_per_s"),
    "cp": ("upload_mb_per_s.median", "download_mb_per_s.median"),
}


def groups(storage: str) -> list[dict[str, Any]]:
    """The one group of every daemon of this benchmark, its nodes' disk ``storage``."""
    return [{"name": "demo", "vcpu": 1, "ram_mb": RAM >> 20, "storage_size": storage}]


async def started_node(daemon: Daemon) -> None:
    """Start ``daemon`` and create its node ``demo-1``, until its agent answers."""
    if daemon.process is None:
        await deferToThread(daemon.start)
    await deferToThread(daemon.json, "POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)


async def started_earlier(earlier: Earlier | None, storage: str) -> Daemon | None:
    """The earlier checkout's daemon with its node ``demo-1`` (``None`` without ``--before``)."""
    if earlier is None:
        return None
    before = await deferToThread(start_earlier, earlier, groups(storage))
    await started_node(before)
    return before


def compared(earlier: Earlier | None, before: dict[str, Any], after: dict[str, Any], parts: str) -> dict[str, Any]:
    """The ``before`` and ``ratio_after_over_before`` keys of a result (none without ``--before``)."""
    if earlier is None:
        return {}
    return {"before": {**earlier.record(), **before},
            "ratio_after_over_before": ratios(after, before, COMPARED[parts])}


def percentiles(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "samples": samples,
    }


def start_bare_guest(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    """The daemon's QEMU command for one guest, started by hand (TCG here)."""
    argv, agent = image_guest(resolve_image(IMAGE_DIR, "default"), workdir, "bench-channel")
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), agent


def _node_qemu(daemon: Daemon) -> int:
    """The pid of the QEMU of the daemon's only node."""
    for pid in processes_under(daemon.state_dir):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as f:
            if f.read().startswith("qemu-system"):
                return pid
    raise RuntimeError("the node's QEMU is not running")


def measure_cp(daemon: Daemon, size: int) -> dict[str, Any]:
    """
    Upload ``size`` bytes to the node and download them again through the API
    (blocking; run on a thread), with the daemon's peak RSS meanwhile.
    """
    assert daemon.process is not None
    pid = daemon.process.pid
    rss_before = status_kib(pid, "VmRSS")
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    block = os.urandom(1 << 20)

    def body() -> Any:
        for _ in range(size >> 20):
            yield block

    qemu = _node_qemu(daemon)
    cpu = cpu_seconds(qemu), cpu_seconds(pid)
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=600)
    started = time.monotonic()
    conn.request("POST", "/vm/demo-1/cp?path=/root/bench.bin", body=body(),
                 headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"})
    response = conn.getresponse()
    reply = response.read()
    upload = time.monotonic() - started
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"cp upload failed: {response.status} {reply!r}")
    upload_cpu = cpu_seconds(qemu) - cpu[0], cpu_seconds(pid) - cpu[1]
    cpu = cpu_seconds(qemu), cpu_seconds(pid)
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=600)
    started = time.monotonic()
    conn.request("GET", "/vm/demo-1/cp?path=/root/bench.bin")
    response = conn.getresponse()
    received = 0
    while True:
        chunk = response.read(1 << 20)
        if not chunk:
            break
        received += len(chunk)
    download = time.monotonic() - started
    conn.close()
    if response.status != 200 or received != size:
        raise RuntimeError(f"cp download failed: {response.status}, {received} of {size} bytes")
    download_cpu = cpu_seconds(qemu) - cpu[0], cpu_seconds(pid) - cpu[1]
    peak = status_kib(pid, "VmHWM")
    daemon.request("POST", "/vm/demo-1/exec?cmd=rm+-f+/root/bench.bin")
    return {
        "bytes": size,
        "upload_seconds": upload,
        "upload_mb_per_s": size / upload / 1e6,
        "download_seconds": download,
        "download_mb_per_s": size / download / 1e6,
        # CPU seconds per second of copy: the node's QEMU (the guest agent runs in its vCPU) and the daemon.
        "upload_qemu_cores": upload_cpu[0] / upload,
        "upload_daemon_cores": upload_cpu[1] / upload,
        "download_qemu_cores": download_cpu[0] / download,
        "download_daemon_cores": download_cpu[1] / download,
        "daemon_rss_before_kib": rss_before,
        "daemon_peak_rss_kib": peak,
        "daemon_rss_growth_mib": (peak - rss_before) / 1024,
        "target_rss_growth_mib": 32,
    }


def measure_background_logs(daemon: Daemon, size: int) -> dict[str, Any]:
    """
    ``cat`` of a ``size``-byte file as a background exec, followed through its
    log to the end, against a cp download of the same file (blocking; run on a
    thread).
    """
    import base64
    from urllib.parse import urlencode

    path = "/root/bg-bench.bin"
    status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode(
        {"cmd": f"head -c {size} /dev/urandom > {path}", "buffered": "true"}))
    if status != 200 or json.loads(body)["exit_code"] != 0:
        raise RuntimeError(f"making the file failed: {status} {body!r}")
    started = time.monotonic()
    status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode(
        {"background": "true", "cmd": f"cat {path}", "ring_bytes": str(max(size, 1))}))
    if status != 201:
        raise RuntimeError(f"background start failed: {status} {body!r}")
    exec_id = json.loads(body)["exec_id"]
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=600)
    conn.request("GET", f"/vm/demo-1/exec/{exec_id}/logs?follow=true")
    response = conn.getresponse()
    received, last = 0, None
    for line in response:
        frame = json.loads(line)
        if frame["type"] == "stdout":
            received += len(base64.b64decode(frame["data"]))
        last = frame
    logs_seconds = time.monotonic() - started
    conn.close()
    if last is None or last["type"] != "exit" or received != size:
        raise RuntimeError(f"background logs: {received} of {size} bytes, last frame {last!r}")
    daemon.request("DELETE", f"/vm/demo-1/exec/{exec_id}")
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=600)
    started = time.monotonic()
    conn.request("GET", "/vm/demo-1/cp?" + urlencode({"path": path}))
    response = conn.getresponse()
    copied = 0
    while True:
        chunk = response.read(1 << 20)
        if not chunk:
            break
        copied += len(chunk)
    cp_seconds = time.monotonic() - started
    conn.close()
    daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"cmd": f"rm -f {path}"}))
    if copied != size:
        raise RuntimeError(f"cp download: {copied} of {size} bytes")
    return {
        "bytes": size,
        "logs_follow_seconds": logs_seconds,
        "logs_follow_mb_per_s": size / logs_seconds / 1e6,
        "cp_download_seconds": cp_seconds,
        "cp_download_mb_per_s": size / cp_seconds / 1e6,
        "ratio_logs_over_cp_download": cp_seconds / logs_seconds,
    }


@implementer(IBodyProducer)
class _Lines:
    """An exec's stdin that sends lines when told (the shell of the watch measure reads them)."""

    length = UNKNOWN_LENGTH

    def __init__(self) -> None:
        self._consumer: Any = None
        self._ready: Deferred[None] = Deferred()
        self._done: Deferred[None] = Deferred()

    def startProducing(self, consumer: Any) -> Deferred[None]:
        self._consumer = consumer
        self._ready.callback(None)
        return self._done

    async def send(self, line: str) -> None:
        await self._ready
        self._consumer.write(line.encode() + b"\n")

    def finish(self) -> None:
        if not self._done.called:
            self._done.callback(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        self.finish()


async def measure_watch(daemon: Daemon, writes: int) -> dict[str, Any]:
    """
    Watch latency through the API (see the module docstring): one file per
    line, made by a shell in the guest, until its ``create`` event reaches the
    client; and until the shell's echo of the line does.
    """
    client = Client(reactor, f"http://127.0.0.1:{daemon.port}")
    directory = "/root/bench-watch"
    arrived: dict[str, dict[str, float]] = {"event": {}, "echo": {}}
    wake: list[Deferred[None]] = []

    def note(kind: str, name: str) -> None:
        arrived[kind].setdefault(name, time.monotonic())
        waiting, wake[:] = list(wake), []
        for waiter in waiting:
            if not waiter.called:
                waiter.callback(None)

    async def until(predicate: Any, seconds: float = 60.0) -> None:
        deadline = time.monotonic() + seconds
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError("watch measure: nothing arrived in time")
            waiter: Deferred[None] = Deferred()
            wake.append(waiter)
            timer = reactor.callLater(0.5, waiter.callback, None)
            await waiter
            if timer.active():
                timer.cancel()
            if waiter in wake:
                wake.remove(waiter)

    lines = _Lines()
    echoed = bytearray()

    def on_record(record: ExecRecord) -> None:
        if record.type == "stdout":
            echoed.extend(record.data)
            *done, rest = echoed.split(b"\n")
            echoed[:] = rest
            for name in done:
                note("echo", name.decode())

    try:
        await client.exec_buffered("demo-1", f"rm -rf {directory} && mkdir {directory}")
        shell = Deferred.fromCoroutine(client.exec(
            "demo-1", f"cd {directory} && while read -r n; do : > \"$n\"; echo \"$n\"; done",
            on_record=on_record, stdin=lines))
        events = client.watch("demo-1", [directory], events=["create"])

        async def consume() -> None:
            async with contextlib.aclosing(events):
                async for event in events:
                    note("event", os.path.basename(event["path"]))

        watching = Deferred.fromCoroutine(consume())
        watching.addErrback(lambda failure: failure.trap(CancelledError))
        # The watch is in place once its first event arrives: send warm-up lines until one does.
        warm = 0
        while not arrived["event"]:
            warm += 1
            await lines.send(f"warm-{warm}")
            await until(lambda: f"warm-{warm}" in arrived["echo"])
            pause: Deferred[None] = Deferred()
            reactor.callLater(0.2, pause.callback, None)
            await pause
        event_s, echo_s = [], []
        for number in range(writes):
            name = f"w-{number:04}"
            started = time.monotonic()
            await lines.send(name)
            await until(lambda: name in arrived["event"] and name in arrived["echo"])
            event_s.append(arrived["event"][name] - started)
            echo_s.append(arrived["echo"][name] - started)
        lines.finish()
        last = await shell
        if last.exit_code != 0:
            raise RuntimeError(f"watch measure: the shell failed: {last}")
        watching.cancel()
        await client.exec_buffered("demo-1", f"rm -rf {directory}")
    finally:
        lines.finish()
        await client.close()
    return {
        "writes": writes,
        "watch_event_s": percentiles(event_s),
        "watch_exec_echo_s": percentiles(echo_s),
    }


class _Echo(Protocol):
    def __init__(self) -> None:
        self.received = 0
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.received += len(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.done.callback(None)


async def echo_seconds(client: AgentClient, size: int) -> float:
    """Seconds to send ``size`` bytes through ``echo`` and get them all back."""
    protocol = _Echo()
    started = time.monotonic()
    stream = client.open_stream({"op": "echo"}, protocol)
    block = b"\x5a" * (256 * 1024)
    for _ in range(size // len(block)):
        stream.write(block)
    stream.loseConnection()
    await protocol.done
    if protocol.received != size:
        raise RuntimeError(f"echo returned {protocol.received} of {size} bytes")
    return time.monotonic() - started


async def measure(options: argparse.Namespace, workdir: str, earlier: Earlier | None) -> dict[str, Any]:
    daemon = Daemon(groups=groups(STORAGE))
    before: Daemon | None = None
    qemu = None
    client = None
    try:
        before = await started_earlier(earlier, STORAGE)
        await started_node(daemon)
        qemu, socket_path = start_bare_guest(workdir)
        client = AgentClient(reactor, socket_path)
        client.start()
        deadline = reactor.callLater(120, lambda: None)
        await client.when_ready()
        deadline.cancel()
        await client.ping()  # warm-up
        pings = [await client.ping() for _ in range(options.rounds)]
        size = options.echo_mib << 20
        await echo_seconds(client, 1 << 20)  # warm-up
        echo = await echo_seconds(client, size)
        await run_collected(client, ExecRequest(cmd="true"), reactor)  # warm-up: imports the exec handler
        agent_exec = []
        for _ in range(options.rounds):
            started = time.monotonic()
            outcome = await run_collected(client, ExecRequest(cmd="true"), reactor)
            agent_exec.append(time.monotonic() - started)
            if outcome.exit_code != 0:
                raise RuntimeError(f"exec true failed: {outcome}")
        # Without a shell: the agent's own cost, apart from bash's start-up (a
        # dynamically linked program takes ~100 ms to start under TCG; busybox
        # is static).
        agent_exec_direct = []
        for _ in range(options.rounds):
            started = time.monotonic()
            outcome = await run_collected(client, ExecRequest(cmd="/bin/true", shell=""), reactor)
            agent_exec_direct.append(time.monotonic() - started)
            if outcome.exit_code != 0:
                raise RuntimeError(f"exec /bin/true failed: {outcome}")

        def api_exec(daemon: Daemon = daemon) -> float:
            started = time.monotonic()
            status, _, body = daemon.request("POST", "/vm/demo-1/exec?cmd=true")
            if status != 200 or b'"exit"' not in body:
                raise RuntimeError(f"exec through the API failed: {status} {body!r}")
            return time.monotonic() - started

        def api_exec_no_shell(daemon: Daemon = daemon) -> float:
            started = time.monotonic()
            status, _, body = daemon.request("POST", "/vm/demo-1/exec?cmd=/bin/true&shell=")
            if status != 200 or b'"exit_code": 0' not in body.replace(b'"exit_code":0', b'"exit_code": 0'):
                raise RuntimeError(f"exec /bin/true without a shell through the API failed: {status} {body!r}")
            return time.monotonic() - started

        await deferToThread(api_exec)  # warm-up
        daemons = [daemon] if before is None else [daemon, before]
        if before is not None:
            await deferToThread(api_exec, before)  # its warm-up
        # Each round, this daemon's exec then the earlier one's (if any): the load hits both alike.
        api_rounds = [[await deferToThread(api_exec, d) for d in daemons] for _ in range(options.rounds)]
        api_no_shell_rounds = [[await deferToThread(api_exec_no_shell, d) for d in daemons]
                               for _ in range(options.rounds)]
        api = [pair[0] for pair in api_rounds]
        api_no_shell = [pair[0] for pair in api_no_shell_rounds]
        floor_dir = os.path.join(workdir, "ceilings")
        os.mkdir(floor_dir)
        image = resolve_image(IMAGE_DIR, "default")
        initrd = os.path.join(floor_dir, "minimal.cpio")
        minimal_initramfs(image, initrd)
        ceilings = await deferToThread(channel_ceilings, image, floor_dir, initrd, options.ceiling_mib, 50)
        watch = await measure_watch(daemon, options.watch_writes)
        before_watch = await measure_watch(before, options.watch_writes) if before is not None else None
        cp = await deferToThread(measure_cp, daemon, options.cp_mib << 20)
        before_cp = await deferToThread(measure_cp, before, options.cp_mib << 20) if before is not None else None
        background = await deferToThread(measure_background_logs, daemon, options.bg_mib << 20)
        before_background = (await deferToThread(measure_background_logs, before, options.bg_mib << 20)
                             if before is not None else None)
    finally:
        if client is not None:
            await client.stop()
        if qemu is not None:
            qemu.kill()
            qemu.wait()
        await deferToThread(daemon.cleanup)
        if before is not None:
            await deferToThread(before.cleanup)
    raw = percentiles(pings)
    api_p = percentiles(api)
    api_direct = percentiles(api_no_shell)
    earlier_figures = {
        "exec_true_api_s": percentiles([pair[-1] for pair in api_rounds]),
        "exec_true_no_shell_api_s": percentiles([pair[-1] for pair in api_no_shell_rounds]),
        "cp": before_cp,
        "background_logs": before_background,
        "watch": before_watch,
    }
    result = {
        "benchmark": "channel",
        "accel": "tcg",
        "rounds": options.rounds,
        "raw_round_trip_s": raw,
        "raw_echo": {"bytes": size, "seconds": echo, "mb_per_s": size / echo / 1e6},
        "exec_true_agent_s": percentiles(agent_exec),
        "exec_true_no_shell_agent_s": percentiles(agent_exec_direct),
        "exec_true_api_s": api_p,
        "ratio_exec_api_p50_over_raw_round_trip_p50": api_p["p50"] / raw["p50"],
        "exec_true_no_shell_api_s": api_direct,
        "ratio_exec_no_shell_api_p50_over_raw_round_trip_p50": api_direct["p50"] / raw["p50"],
        "target_ratio_exec": 3.0,
        "ceilings": ceilings,
        "ratio_cp_upload_over_ceiling": cp["upload_mb_per_s"] / ceilings["host_to_guest"]["mb_per_s"],
        "ratio_cp_download_over_ceiling": cp["download_mb_per_s"] / ceilings["guest_to_host"]["mb_per_s"],
        "cp": cp,
        "ratio_cp_upload_over_raw_echo": cp["upload_mb_per_s"] / (size / echo / 1e6),
        "ratio_cp_download_over_raw_echo": cp["download_mb_per_s"] / (size / echo / 1e6),
        "target_ratio_cp": 0.8,
        "background_logs": background,
        "watch": watch,
    }
    return {**result, **compared(earlier, earlier_figures, result, "all")}


async def measure_part(options: argparse.Namespace, earlier: Earlier | None) -> dict[str, Any]:
    """
    ``--parts watch`` or ``--parts background``: one node of the daemon and
    that measure alone (the background one beside its cp download); with
    ``--before``, then the same on the earlier daemon's node.
    """
    storage = "1G" if options.parts == "watch" else STORAGE
    daemon = Daemon(groups=groups(storage))
    before: Daemon | None = None
    key = "watch" if options.parts == "watch" else "background_logs"
    parts: list[dict[str, Any]] = []
    try:
        before = await started_earlier(earlier, storage)
        await started_node(daemon)
        for each in [daemon] if before is None else [daemon, before]:
            if options.parts == "watch":
                parts.append(await measure_watch(each, options.watch_writes))
            else:
                parts.append(await deferToThread(measure_background_logs, each, options.bg_mib << 20))
    finally:
        await deferToThread(daemon.cleanup)
        if before is not None:
            await deferToThread(before.cleanup)
    result = {key: parts[0]}
    return {**result, **compared(earlier, {key: parts[-1]}, result, options.parts)}


def measure_node_disk(daemon: Daemon, mib: int) -> dict[str, Any]:
    """
    What the node's disk takes and gives with C tools in the guest (``dd``
    with ``O_DIRECT``, 1 MiB blocks, ``mib`` MiB, then ``sync``), MB/s each
    way and the node's QEMU's CPU seconds: a cp cannot go faster than its
    file's disk (blocking; run on a thread).
    """
    from urllib.parse import urlencode

    qemu = _node_qemu(daemon)

    def timed(command: str) -> tuple[float, float]:
        script = f"s=$(date +%s%N); {command}; e=$(date +%s%N); echo $((e - s))"
        cpu = cpu_seconds(qemu)
        status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"cmd": script, "buffered": "true"}),
                                         timeout=600)
        reply = json.loads(body)
        if status != 200 or reply.get("exit_code") != 0:
            raise RuntimeError(f"dd in the node failed: {status} {body!r}")
        return int(reply["stdout"].split()[-1]) / 1e9, cpu_seconds(qemu) - cpu

    size = mib << 20
    write, write_cpu = timed(f"dd if=/dev/zero of=/root/disk.bin bs=1M count={mib} oflag=direct 2>/dev/null && sync")
    read, read_cpu = timed("echo 3 > /proc/sys/vm/drop_caches; dd if=/root/disk.bin of=/dev/null bs=1M iflag=direct "
                           "2>/dev/null")
    daemon.request("POST", "/vm/demo-1/exec?cmd=rm+-f+/root/disk.bin")
    return {"bytes": size, "write_mb_per_s": size / write / 1e6, "read_mb_per_s": size / read / 1e6,
            "write_qemu_cpu_s": write_cpu, "read_qemu_cpu_s": read_cpu}


def _round_ratios(sample: dict[str, Any]) -> dict[str, float]:
    """
    One round's ratios: cp over the ceiling of its direction, in MB/s and in MB
    per CPU second of the node's QEMU (which runs the guest; under load the
    scheduler decides the MB/s, the work per byte stays), and the same against
    the pipeline limit ``1 / (1/channel + 1/disk)``: the guest's one vCPU and
    QEMU's main loop serve the port and the disk both.
    """
    ceilings, disk, cp = sample["ceilings"], sample["node_disk"], sample["cp"]
    mb = disk["bytes"] / 1e6
    out: dict[str, float] = {}
    for name, way, disk_way in (("upload", "host_to_guest", "write"), ("download", "guest_to_host", "read")):
        channel = ceilings[way]["mb_per_s"]
        channel_eff = ceilings["bytes"] / 1e6 / ceilings[way]["qemu_cpu_s"]
        disk_speed = disk[f"{disk_way}_mb_per_s"]
        disk_eff = mb / max(disk[f"{disk_way}_qemu_cpu_s"], 1e-9)
        cp_speed = cp[f"{name}_mb_per_s"]
        cp_eff = cp_speed / cp[f"{name}_qemu_cores"]
        out[f"{name}_over_ceiling"] = cp_speed / channel
        out[f"{name}_per_qemu_cpu_over_ceiling"] = cp_eff / channel_eff
        out[f"{name}_over_pipeline_limit"] = cp_speed * (1 / channel + 1 / disk_speed)
        out[f"{name}_per_qemu_cpu_over_pipeline_limit"] = cp_eff * (1 / channel_eff + 1 / disk_eff)
    return out


async def measure_cp_part(options: argparse.Namespace, workdir: str, earlier: Earlier | None) -> dict[str, Any]:
    """
    ``--parts cp``: the channel's ceilings, the node's disk and cp each way,
    side by side in one run (``--rounds`` rounds of each in turn; each
    direction's median round, see :func:`cp_summary`, and every round); with
    ``--before``, each round's cp on the earlier daemon's node too.
    """
    daemon = Daemon(groups=groups(STORAGE))
    before: Daemon | None = None
    rounds: list[dict[str, Any]] = []
    before_cps: list[dict[str, Any]] = []
    try:
        before = await started_earlier(earlier, STORAGE)
        await started_node(daemon)
        floor_dir = os.path.join(workdir, "ceilings")
        os.mkdir(floor_dir)
        image = resolve_image(IMAGE_DIR, "default")
        initrd = os.path.join(floor_dir, "minimal.cpio")
        minimal_initramfs(image, initrd)
        for _ in range(options.rounds):
            ceilings = await deferToThread(channel_ceilings, image, floor_dir, initrd, options.ceiling_mib, 10)
            disk = await deferToThread(measure_node_disk, daemon, options.ceiling_mib)
            cp = await deferToThread(measure_cp, daemon, options.cp_mib << 20)
            sample = {"ceilings": ceilings, "node_disk": disk, "cp": cp, "load_average": os.getloadavg()}
            sample["ratios"] = _round_ratios(sample)
            rounds.append(sample)
            if before is not None:
                before_cps.append(await deferToThread(measure_cp, before, options.cp_mib << 20))
    finally:
        await deferToThread(daemon.cleanup)
        if before is not None:
            await deferToThread(before.cleanup)
    # Each direction's MB/s over the rounds, for the comparison with the earlier daemon's copies (with --before).
    after = {f"{way}_mb_per_s": median_of([r["cp"][f"{way}_mb_per_s"] for r in rounds])
             for way in DIRECTIONS} if before_cps else {}
    before_figures = {f"{way}_mb_per_s": median_of([cp[f"{way}_mb_per_s"] for cp in before_cps])
                      for way in DIRECTIONS} | {"rounds": before_cps} if before_cps else {}
    return {**after, **compared(earlier, before_figures, after, "cp"), **{
        "bytes": options.cp_mib << 20,
        "ceiling_bytes": options.ceiling_mib << 20,
        "upload": cp_summary(rounds, "upload"),
        "download": cp_summary(rounds, "download"),
        "target_ratio_cp": 0.8,
        "rounds": rounds,
    }}


def median_of(samples: list[float]) -> dict[str, Any]:
    """The median of ``samples`` (``--parts cp``'s copies side by side), with the samples."""
    return {"median": statistics.median(samples), "samples": samples}


#: For each direction of a copy: the channel's ceiling it is held against and the node disk's side.
DIRECTIONS = {"upload": ("host_to_guest", "write"), "download": ("guest_to_host", "read")}


def cp_summary(rounds: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """
    One direction of ``--parts cp``, every figure from one round: the round
    whose cp MB/s over its ceiling is the median of the rounds' (the lower
    one for an even count), so that a ratio is never set beside MB/s of
    other rounds; and the range of each ratio over all rounds.
    """
    way, disk_way = DIRECTIONS[name]
    order = sorted(range(len(rounds)), key=lambda index: rounds[index]["ratios"][f"{name}_over_ceiling"])
    index = order[(len(order) - 1) // 2]
    sample = rounds[index]
    ratios = {key[len(name) + 1:]: value for key, value in sample["ratios"].items() if key.startswith(name + "_")}
    return {
        "median_round": index,
        "mb_per_s": sample["cp"][f"{name}_mb_per_s"],
        "ceiling": way,
        "ceiling_mb_per_s": sample["ceilings"][way]["mb_per_s"],
        "node_disk_mb_per_s": sample["node_disk"][f"{disk_way}_mb_per_s"],
        "qemu_cores": sample["cp"][f"{name}_qemu_cores"],
        "daemon_cores": sample["cp"][f"{name}_daemon_cores"],
        "load_average": sample["load_average"],
        **{f"ratio_{key}": value for key, value in ratios.items()},
        **{f"ratio_{key}_range": [min(r["ratios"][f"{name}_{key}"] for r in rounds),
                                  max(r["ratios"][f"{name}_{key}"] for r in rounds)] for key in ratios},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--echo-mib", type=int, default=32)
    parser.add_argument("--cp-mib", type=int, default=1024)
    parser.add_argument("--ceiling-mib", type=int, default=256, help="bytes each way for the ceilings")
    parser.add_argument("--bg-mib", type=int, default=64, help="background exec log size (at most 64)")
    parser.add_argument("--watch-writes", type=int, default=50)
    parser.add_argument("--parts", choices=tuple(OUTPUTS), default="all")
    parser.add_argument("--output", help="the results file (default bench/results/channel.json, "
                                         "channel_PART.json with --parts)")
    add_options(parser)
    options = parser.parse_args()
    output = options.output or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                            OUTPUTS[options.parts])
    ensure_image()
    earlier = from_options(options)
    run_ = begin()
    workdir = tempfile.mkdtemp(prefix="vms-bench-", dir="/tmp")
    outcome: dict[str, Any] = {}

    def run() -> Deferred[None]:
        async def go() -> None:
            if options.parts == "cp":
                outcome.update(await measure_cp_part(options, workdir, earlier))
            elif options.parts != "all":
                outcome.update(await measure_part(options, earlier))
            else:
                outcome.update(await measure(options, workdir, earlier))

        d = Deferred.fromCoroutine(go())
        d.addErrback(lambda failure: outcome.update(error=failure))
        d.addBoth(lambda _: reactor.stop())
        return d

    reactor.callWhenRunning(run)
    reactor.run()
    subprocess.run(["rm", "-rf", workdir])
    if "error" in outcome:
        outcome["error"].raiseException()
    write_result(output, {"benchmark": "channel", "parts": options.parts, **outcome}, run_)
    if "ratio_after_over_before" in outcome:
        print(json.dumps({"ratio_after_over_before": outcome["ratio_after_over_before"]}))
    if options.parts == "background":
        print(json.dumps(outcome["background_logs"]))
        return
    if options.parts == "cp":
        print(json.dumps({k: v for k, v in outcome.items() if k not in ("rounds", "before")}))
        return
    watch = {"watch_event_p50": outcome["watch"]["watch_event_s"]["p50"],
             "watch_event_p95": outcome["watch"]["watch_event_s"]["p95"],
             "watch_exec_echo_p50": outcome["watch"]["watch_exec_echo_s"]["p50"]}
    if options.parts == "watch":
        print(json.dumps(watch))
        return
    print(json.dumps({k: outcome[k] for k in ("raw_round_trip_s", "raw_echo", "ratio_exec_api_p50_over_raw_round_trip_p50",
                                              "cp", "ratio_cp_upload_over_raw_echo", "ratio_cp_download_over_raw_echo",
                                              "ratio_cp_upload_over_ceiling", "ratio_cp_download_over_ceiling",
                                              "ratio_exec_no_shell_api_p50_over_raw_round_trip_p50",
                                              "background_logs")}
                     | {"exec_api_p50": outcome["exec_true_api_s"]["p50"], "exec_agent_p50": outcome["exec_true_agent_s"]["p50"],
                        "exec_no_shell_agent_p50": outcome["exec_true_no_shell_agent_s"]["p50"]} | watch,
                     default=str)[:2000])


if __name__ == "__main__":
    main()
