# -*- test-case-name: tests.integration.test_load -*-
"""
Load and soak benchmark: N concurrent clients for T minutes against one
daemon, doing a realistic mix, and what it leaves behind.

One daemon (``tests.integration.daemon.Daemon``, loopback only) with three
host groups of 256 MiB guests: ``cold`` (no network, cold boots), ``warm``
(no network, clones of a template, one spare VM) and ``iso`` (an isolated
network whose nftables table lets the guests reach nothing but
192.0.2.1, a documentation address no host has: no route out). Their
``max_nodes`` and the daemon's ``admission.memory_budget`` are set below what
the clients ask for together, so admission refusals (409 ``max_nodes_reached``,
503 ``insufficient_memory``) happen; they are counted apart from errors.

Each client (``bench/loadmix.py``) is a thread holding up to two nodes of its
own: it creates them (warm or cold), runs a weighted mix on them — health,
the node list, exec buffered, streamed and with stdin streamed in, copies up
and down of 1 to 64 MiB (every byte checked), fs mkdir/stat/readdir/remove,
a shell over the WebSocket, tunnels to an HTTP server in the guest (a
background exec), background execs whose logs it follows to the end — and
deletes each node after 4 to 16 actions. Every answer is checked; anything
but the expected answer or an admission refusal is an error.

The daemon's RSS (``VmRSS``) and open descriptors (``/proc/PID/fd``) are
sampled every second. After the warm-up every client deletes its nodes and
the run waits until the daemon is idle (no node's QEMU left, the spare
refilled, nothing changing for 5 s) and takes its RSS and descriptors: the
*idle point after warm-up*. The load then goes on; at the end every client
deletes its nodes and the same idle point is taken again: the two differ by
what the load leaked, whatever the number of nodes was meanwhile. Then
nothing must be lost: every node created was deleted, none is listed, no
node directory, no QEMU of a node, no memory file, no stream open, no
admission reservation; the daemon still answers; and once it is stopped
(SIGTERM, which twistd ends by as it should), no QEMU of its state directory, no file in its tmpfs
directories, no network namespace or interface of its range.

Writes ``bench/results/load.json`` (``load-soak.json`` with ``--soak``): per
operation p50/p99/count/errors/refusals, the RSS and descriptor series
summarised (first, after warm-up, last, max, slope after warm-up, the idle
points) and downsampled, the checks, the daemon's peak RSS, the commit, the
time and the load average before and after, and the console tail of any
create still not answered after two minutes (a create that times out removes
its node, console included); and a plot of both series,
``load.png`` (``load-soak.png``; matplotlib, the ``bench`` extra). Exits 1
when there was an error that is not an admission refusal or something was
lost, and then keeps the daemon's log beside the results (``load-daemon.log``). SIGINT or SIGTERM ends the load early and still checks and cleans up.

    .venv/bin/python bench/load.py [--clients 4] [--minutes 10] [--seed 1]
    .venv/bin/python bench/load.py --soak          # 60 minutes, unattended

Figures depend on the host and on whatever else runs there (TCG here).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from ipaddress import IPv4Network
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.loadmix import Api, Client, Mix, Payload, Recorder, percentile  # noqa: E402
from bench.recording import begin, peak_rss, status_kib, write_result  # noqa: E402
from tests.integration.daemon import Daemon, ensure_image, processes_under  # noqa: E402

RAM_MB = 256
OVERHEAD_MB = 160
#: The isolated group's range for the benchmark; the short test of the suite uses another one.
RANGE = "10.93.0.0/28"
#: The only destination the isolated guests may reach: TEST-NET-1, which no host has.
NOWHERE = "192.0.2.1/32"
#: Seconds a client may need to end its last action and delete its nodes after the load's end.
GRACE = 420.0
#: The most seconds an idle point waits for the daemon to settle.
SETTLE = 90.0


@dataclass
class Options:
    """
    A run's parameters.

    :ivar clients: concurrent clients.
    :ivar seconds: how long clients start new actions (the quiescing after warm-up not counted).
    :ivar warm_up: seconds before the idle point after warm-up.
    :ivar seed: the clients' random sources are seeded from it.
    :ivar network_range: the isolated group's range (runs side by side need different ones).
    """

    clients: int = 4
    seconds: float = 600.0
    warm_up: float = 150.0
    seed: int = 1
    network_range: str = RANGE


def groups(options: Options) -> list[dict[str, Any]]:
    """The host groups, bounded so that the clients' creates are sometimes refused."""
    base = {"count": 0, "vcpu": 1, "ram_mb": RAM_MB, "storage_size": "1G"}
    half = max(1, options.clients // 2)
    return [
        {"name": "cold", **base, "max_nodes": half},
        {"name": "warm", **base, "max_nodes": options.clients, "warm": True},
        {"name": "iso", **base, "max_nodes": half,
         "network": {"mode": "isolated", "range": options.network_range, "allow": [NOWHERE]}},
    ]


def admission(options: Options) -> dict[str, Any]:
    """A memory budget for one VM more than there are clients (they may hold two nodes each)."""
    return {"memory_budget": f"{(options.clients + 1) * (RAM_MB + OVERHEAD_MB)}M", "vm_overhead": f"{OVERHEAD_MB}M"}


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(value) for value in f.read().split()[:3]]


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def files_under(directory: str) -> list[str]:
    """Every file (not directory) under ``directory``, relative to it."""
    found: list[str] = []
    for parent, _, names in os.walk(directory):
        found.extend(os.path.relpath(os.path.join(parent, name), directory) for name in names)
    return sorted(found)


def our_interfaces(network_range: str) -> list[str]:
    """Network namespaces and links on the host named after an address of ``network_range``."""
    from vmservice.network.plans import address_of

    network = IPv4Network(network_range)
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    names += [line.split(":")[1].strip().split("@")[0] for line in links if line.count(":") >= 2]
    return sorted(name for name in names if (address := address_of(name)) is not None and address in network)


class Sampler(threading.Thread):
    """
    The daemon's RSS (KiB), open descriptors, the QEMUs of its state
    directory and the host's load average, every second, until stopped.
    """

    def __init__(self, daemon: Daemon, started: float) -> None:
        super().__init__(name="load-sampler", daemon=True)
        assert daemon.process is not None
        self.pid = daemon.process.pid
        self.state_dir = daemon.state_dir
        self.started = started
        self.samples: list[tuple[float, int, int, int, float]] = []
        self.halt = threading.Event()

    def sample(self) -> tuple[float, int, int, int, float]:
        return (round(time.monotonic() - self.started, 1), status_kib(self.pid, "VmRSS"), fd_count(self.pid),
                len(processes_under(self.state_dir)), loadavg()[0])

    def run(self) -> None:
        while not self.halt.wait(1.0):
            try:
                self.samples.append(self.sample())
            except (OSError, RuntimeError):  # the daemon is gone: the checks will say so
                return


#: Seconds after which a node still being created (listed, not yet answered to its client) is looked at.
SLOW_CREATE = 120.0


class Watchdog(threading.Thread):
    """
    Every 10 s, the nodes listed that no client got yet (their create has not
    answered) and that were created more than :data:`SLOW_CREATE` seconds
    ago: their health and console tail are kept once, since a create that
    times out removes its node, console included.
    """

    def __init__(self, api: Api, recorder: Recorder) -> None:
        super().__init__(name="load-watchdog", daemon=True)
        self.api = api
        self.recorder = recorder
        self.slow: dict[str, dict[str, Any]] = {}
        self.halt = threading.Event()

    def look(self) -> None:
        now = datetime.now(timezone.utc)
        for node in self.api.json("GET", "/nodes", timeout=30):
            hostname = node["hostname"]
            created = datetime.strptime(node["created_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
            if hostname in self.slow or hostname in self.recorder.created or (now - created).total_seconds() < SLOW_CREATE:
                continue
            status, _, health = self.api.request("GET", f"/vm/{hostname}/health")
            _, _, logs = self.api.request("GET", f"/vm/{hostname}/logs?lines=60")
            try:
                console = json.loads(logs)["content"]
            except (ValueError, KeyError):
                console = logs.decode(errors="replace")
            self.slow[hostname] = {"seen_s": round(time.monotonic() - self.recorder.started, 1), "node": node,
                                   "health": f"{status} {health.decode(errors='replace')[:300]}",
                                   "console_tail": console[-6000:]}

    def run(self) -> None:
        while not self.halt.wait(10.0):
            try:
                self.look()
            except Exception as error:  # the daemon busy or gone: the checks say what matters
                self.slow.setdefault("_errors", {"watchdog": []})["watchdog"].append(repr(error)[:200])


def metrics(api: Api) -> dict[str, float]:
    """The daemon's unlabelled series and the open streams' sum, from ``/metrics``."""
    values: dict[str, float] = {"open_streams": 0.0}
    for line in api.call("GET", "/metrics", timeout=30).decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        if name.startswith("vmservice_open_streams{"):
            values["open_streams"] += float(value)
        elif "{" not in name:
            values[name] = float(value)
    return values


@dataclass
class RunState:
    """
    What the clients ask the run: whether to stop, whether to quiesce now
    (the idle point after warm-up, taken once every client has deleted its
    nodes), and that they ended.
    """

    daemon: Daemon
    api: Api
    sampler: Sampler
    clients: int
    quiesce_at: float
    stop_at: float
    stop: threading.Event = field(default_factory=threading.Event)
    notes: list[str] = field(default_factory=list)
    idle_after_warm_up: dict[str, Any] | None = None
    quiesced: set[int] = field(default_factory=set)
    _barrier: threading.Barrier = field(init=False)
    _resumed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._barrier = threading.Barrier(self.clients)

    def stopping(self) -> bool:
        return self.stop.is_set() or time.monotonic() >= self.stop_at

    def quiesce_due(self, client: Client) -> bool:
        return client.index not in self.quiesced and time.monotonic() >= self.quiesce_at

    def quiesce(self, client: Client) -> None:
        self.quiesced.add(client.index)
        try:
            first = self._barrier.wait(timeout=GRACE) == 0
        except threading.BrokenBarrierError:
            self.notes.append(f"client {client.index}: the quiescing after warm-up did not happen (a client ended)")
            return
        if first:
            began = time.monotonic()
            self.idle_after_warm_up = idle_point(self)
            self.stop_at += time.monotonic() - began
            self._resumed.set()
        else:
            self._resumed.wait(timeout=SETTLE + 60)

    def left(self, client: Client) -> None:
        if self.idle_after_warm_up is None and client.index not in self.quiesced:
            self._barrier.abort()


def idle_point(state: RunState) -> dict[str, Any]:
    """
    Wait until the daemon is idle — no node's QEMU, the same QEMUs (the
    spare) for 5 s — and take its RSS and descriptors (medians of three
    readings a second apart), its open streams and admission figures.
    """
    began = time.monotonic()
    nodes_dir = os.path.join(state.daemon.state_dir, "nodes", "")
    last, since = -1, began
    while time.monotonic() - began < SETTLE:
        qemus = len(processes_under(state.daemon.state_dir))
        if processes_under(nodes_dir) or qemus != last:
            last, since = qemus, time.monotonic()
        elif time.monotonic() - since >= 5:
            break
        time.sleep(0.5)
    else:
        state.notes.append(f"the daemon did not settle within {SETTLE:.0f} s for an idle point")
    readings = []
    for _ in range(3):
        readings.append(state.sampler.sample())
        time.sleep(1)
    figures = metrics(state.api)
    return {
        "t": readings[-1][0],
        "rss_kib": int(statistics.median(reading[1] for reading in readings)),
        "fds": int(statistics.median(reading[2] for reading in readings)),
        "qemus": readings[-1][3],
        "nodes_listed": len(state.api.json("GET", "/nodes", timeout=30)),
        "open_streams": figures["open_streams"],
        "admission_memory_used_bytes": figures.get("vmservice_admission_memory_used_bytes"),
        "admission_memory_reserved_bytes": figures.get("vmservice_admission_memory_reserved_bytes"),
        "settle_s": round(time.monotonic() - began, 1),
    }


def series_summary(samples: list[tuple[float, ...]], column: int, warm_t: float | None, end_t: float,
                   idle: tuple[dict[str, Any] | None, dict[str, Any] | None], key: str) -> dict[str, Any]:
    """First, after warm-up, last, max, the least-squares slope (per minute) after warm-up, the idle points."""
    values = [(sample[0], sample[column]) for sample in samples]
    after = [(t, v) for t, v in values if warm_t is not None and warm_t <= t <= end_t]
    slope = None
    if len(after) >= 10:
        mean_t = statistics.fmean(t for t, _ in after)
        mean_v = statistics.fmean(v for _, v in after)
        spread = sum((t - mean_t) ** 2 for t, _ in after)
        slope = round(60 * sum((t - mean_t) * (v - mean_v) for t, v in after) / spread, 2) if spread else None
    return {
        "first": values[0][1] if values else None,
        "after_warm_up": after[0][1] if after else None,
        "last": values[-1][1] if values else None,
        "max": max(v for _, v in values) if values else None,
        "slope_per_min_after_warm_up": slope,
        "idle_after_warm_up": idle[0][key] if idle[0] else None,
        "idle_at_end": idle[1][key] if idle[1] else None,
        "idle_growth": idle[1][key] - idle[0][key] if idle[0] and idle[1] else None,
    }


def op_table(recorder: Recorder) -> dict[str, Any]:
    table = {}
    for op, figures in sorted(recorder.ops.items()):
        row: dict[str, Any] = {
            "count": len(figures.seconds) + figures.errors + figures.refusals,
            "ok": len(figures.seconds),
            "errors": figures.errors,
            "refusals": figures.refusals,
            "p50_s": _round(percentile(figures.seconds, 0.50)),
            "p99_s": _round(percentile(figures.seconds, 0.99)),
            "max_s": _round(max(figures.seconds, default=None)),
        }
        if figures.refusal_codes:
            row["refusal_codes"] = figures.refusal_codes
        if figures.bytes:
            row["mb_per_s_overall"] = round(figures.bytes / 1e6 / sum(figures.seconds), 1)
            row["mib_moved"] = round(figures.bytes / 2**20, 1)
        table[op] = row
    return table


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def leftovers(daemon: Daemon, api: Api, recorder: Recorder) -> dict[str, Any]:
    """What must be gone with the daemon still running, once every client deleted its nodes."""
    from vmservice.nodes.warm.fork_memory import memory_directory
    from vmservice.nodes.warm.template_files import ram_directory

    tmpfs = daemon.config["config"]["templates_tmpfs_dir"]
    nodes_dir = os.path.join(daemon.state_dir, "nodes")
    listed = sorted(node["hostname"] for node in api.json("GET", "/nodes", timeout=30))
    figures = metrics(api)
    return {
        "created": len(recorder.created),
        "deleted": len(recorder.deleted),
        "created_not_deleted": sorted(recorder.created - recorder.deleted),
        "nodes_listed": listed,
        "node_directories": sorted(os.listdir(nodes_dir)) if os.path.isdir(nodes_dir) else [],
        "node_qemus": processes_under(os.path.join(nodes_dir, "")),
        "memory_files": files_under(memory_directory(daemon.state_dir, tmpfs)),
        "template_ram_files": len(files_under(ram_directory(daemon.state_dir, tmpfs))),
        "spare_and_template_qemus": len(processes_under(daemon.state_dir)),
        "open_streams": figures["open_streams"],
        "admission_memory_reserved_bytes": figures.get("vmservice_admission_memory_reserved_bytes"),
        "daemon_answers": api.call("GET", "/healthz", timeout=30) == b"OK",
    }


def after_stop(daemon: Daemon, network_range: str, exit_code: int | None) -> dict[str, Any]:
    """What must be gone once the daemon stopped."""
    tmpfs = daemon.config["config"]["templates_tmpfs_dir"]
    nodes_dir = os.path.join(daemon.state_dir, "nodes")
    return {
        "daemon_exit_code": exit_code,
        "qemus": processes_under(daemon.state_dir),
        "tmpfs_files": files_under(tmpfs),
        "network_interfaces": our_interfaces(network_range),
        "node_directories": sorted(os.listdir(nodes_dir)) if os.path.isdir(nodes_dir) else [],
    }


def nothing_lost(running: dict[str, Any], stopped: dict[str, Any]) -> bool:
    return (not running["created_not_deleted"] and not running["nodes_listed"] and not running["node_directories"]
            and not running["node_qemus"] and not running["memory_files"] and running["open_streams"] == 0
            and not running["admission_memory_reserved_bytes"] and running["daemon_answers"]
            and stopped["daemon_exit_code"] in (0, -signal.SIGTERM) and not stopped["qemus"] and not stopped["tmpfs_files"]
            and not stopped["network_interfaces"] and not stopped["node_directories"])


def downsample(samples: list[tuple[float, ...]], points: int = 400) -> dict[str, list[float]]:
    step = max(1, len(samples) // points)
    kept = samples[::step]
    return {name: [sample[index] for sample in kept]
            for index, name in enumerate(("t", "rss_kib", "fds", "qemus", "load1"))}


def run(options: Options) -> dict[str, Any]:
    """Run the load and the checks with a daemon of its own; the result (nothing written)."""
    ensure_image()
    # The daemon is a child in a directory of its own: it runs this checkout's code whatever the
    # environment's Python path says (a relative entry would name the child's directory instead).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [os.path.abspath(entry) for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry])
    shm = tempfile.mkdtemp(prefix="vms-load-", dir="/dev/shm")
    daemon = Daemon(groups=groups(options), admission=admission(options), templates_tmpfs_dir=shm)
    result: dict[str, Any] = {
        "benchmark": "load", "commit": commit(), "utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "clients": options.clients, "seconds": options.seconds, "warm_up_s": options.warm_up, "seed": options.seed,
        "groups": groups(options), "admission": admission(options), "loadavg_before": loadavg(),
    }
    try:
        daemon.start()
        assert daemon.process is not None
        started = time.monotonic()
        api = Api(daemon.port)
        recorder = Recorder(started)
        sampler = Sampler(daemon, started)
        sampler.start()
        watchdog = Watchdog(api, recorder)
        watchdog.start()
        state = RunState(daemon, api, sampler, options.clients, started + options.warm_up,
                         started + options.seconds)
        _stop_on_signals(state)
        mix = Mix(groups={"warm": 0.6, "cold": 0.2, "iso": 0.2})
        payload = Payload()
        clients = [Client(index, api, recorder, mix, random.Random(options.seed * 1000 + index), payload, state)
                   for index in range(options.clients)]
        for client in clients:
            client.start()
        while any(client.is_alive() for client in clients) and time.monotonic() < state.stop_at + GRACE:
            time.sleep(0.5)
        load_end = round(time.monotonic() - started, 1)
        stuck = [client.index for client in clients if client.is_alive()]
        crashed = {client.index: client.crashed for client in clients if client.crashed}
        idle_at_end = idle_point(state)
        running = leftovers(daemon, api, recorder)
        result["daemon_peak_rss_bytes"] = peak_rss(daemon.process.pid)
        result["accel"] = "tcg" if "accelerator: tcg" in daemon.log() else "kvm"
        sampler.halt.set()
        watchdog.halt.set()
        sampler.join()
        result["slow_creates"] = watchdog.slow
        exit_code = daemon.stop()
        stopped = after_stop(daemon, options.network_range, exit_code)
        samples: list[tuple[float, ...]] = list(sampler.samples)
        warm_t = state.idle_after_warm_up["t"] if state.idle_after_warm_up else None
        idle = (state.idle_after_warm_up, idle_at_end)
        result.update({
            "ops": op_table(recorder),
            "totals": {
                "requests": sum(len(f.seconds) + f.errors + f.refusals for f in recorder.ops.values()),
                "errors": recorder.error_count(),
                "refusals": sum(f.refusals for f in recorder.ops.values()),
            },
            "errors": recorder.details,
            "clients_stuck": stuck,
            "clients_crashed": crashed,
            "notes": state.notes,
            "load_end_s": load_end,
            "idle": {"after_warm_up": state.idle_after_warm_up, "at_end": idle_at_end},
            "daemon_rss_kib": series_summary(samples, 1, warm_t, load_end, idle, "rss_kib"),
            "daemon_fds": series_summary(samples, 2, warm_t, load_end, idle, "fds"),
            "nothing_lost": {"while_running": running, "after_stop": stopped,
                             "ok": nothing_lost(running, stopped)},
            "loadavg_after": loadavg(),
            "series": downsample(samples),
        })
        result["passed"] = (result["totals"]["errors"] == 0 and result["nothing_lost"]["ok"] and not stuck
                            and not crashed and state.idle_after_warm_up is not None)
        result["daemon_log_tail"] = "" if result["passed"] else daemon.log()[-200_000:]
        return result
    finally:
        daemon.cleanup()
        shutil.rmtree(shm, ignore_errors=True)


def _stop_on_signals(state: RunState) -> None:
    """SIGINT and SIGTERM end the load early (the checks and the clean-up still run); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: Any) -> None:
        state.notes.append(f"stopped early by signal {signum}")
        state.stop.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def plot(result: dict[str, Any], path: str) -> bool:
    """The RSS, descriptors and QEMUs over time as a PNG at ``path``; ``False`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    series = result["series"]
    figure, axes = plt.subplots(3, 1, sharex=True, figsize=(10, 8))
    minutes = [t / 60 for t in series["t"]]
    rows = ((axes[0], [kib / 1024 for kib in series["rss_kib"]], "daemon RSS (MiB)"),
            (axes[1], series["fds"], "daemon open fds"),
            (axes[2], series["qemus"], "QEMUs (nodes, spare)"))
    for axis, values, label in rows:
        axis.plot(minutes, values, linewidth=1)
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
        for name, style in (("after_warm_up", "--"), ("at_end", ":")):
            point = result["idle"][name]
            if point:
                axis.axvline(point["t"] / 60, color="grey", linestyle=style, linewidth=1)
    axes[2].set_xlabel("minutes (dashed: idle point after warm-up; dotted: idle point at the end)")
    figure.suptitle(f"bench/load.py: {result['clients']} clients, {result['seconds'] / 60:g} min, "
                    f"{result['totals']['errors']} errors, {result['totals']['refusals']} refusals, "
                    f"commit {result['commit'][:10]}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4, for 2 cores)")
    parser.add_argument("--minutes", type=float, help="minutes of load (default 10; 60 with --soak)")
    parser.add_argument("--warm-up", type=float, help="seconds of warm-up (default a quarter of the load, 30–300)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--soak", action="store_true", help="the soak variant: longer, results in load-soak.*")
    parser.add_argument("--range", default=RANGE, help=f"the isolated group's range (default {RANGE})")
    args = parser.parse_args()
    minutes = args.minutes if args.minutes is not None else (60.0 if args.soak else 10.0)
    warm_up = args.warm_up if args.warm_up is not None else min(300.0, max(30.0, minutes * 15))
    options = Options(clients=args.clients, seconds=minutes * 60, warm_up=warm_up, seed=args.seed,
                      network_range=args.range)
    recorded = begin()
    result = run(options)
    result["variant"] = "soak" if args.soak else "load"
    name = "load-soak" if args.soak else "load"
    results = os.path.join(ROOT, "bench", "results")
    log_tail = result.pop("daemon_log_tail", "")
    if log_tail:  # kept beside the results (not in them) when the run failed, to find out why
        with open(os.path.join(results, f"{name}-daemon.log"), "w") as f:
            f.write(log_tail)
    write_result(os.path.join(results, "load-soak.json" if args.soak else "load.json"), result, recorded)
    plotted = plot(result, os.path.join(results, f"{name}.png"))
    for op, row in result["ops"].items():
        print(f"{op:16} n={row['count']:5} ok={row['ok']:5} errors={row['errors']:3} refusals={row['refusals']:3} "
              f"p50={row['p50_s']} p99={row['p99_s']}")
    print(f"rss KiB: {result['daemon_rss_kib']}")
    print(f"fds: {result['daemon_fds']}")
    print(f"nothing lost: {result['nothing_lost']['ok']}; errors: {result['totals']['errors']}; "
          f"refusals: {result['totals']['refusals']}; passed: {result['passed']}")
    print(f"wrote {os.path.join(results, name + '.json')}" + (f" and {name}.png" if plotted else " (no matplotlib: no plot)"))
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
