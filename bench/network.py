"""
Network benchmark: TCP throughput out of an isolated VM against the same
client between two plain network namespaces, alternating, several rounds
each, in one run.

(a) A VM of a group in isolated mode (range 10.81.0.0/28, ``allow``
    10.99.0.0/24) sends N MiB to a sink on 10.99.0.1, an address the bench
    puts on a veth pair of its own in the host's namespace (``vmsbnch0`` /
    ``vmsbnch1``; Linux here has no dummy interfaces).  The path is the
    daemon's: guest virtio-net, ``tap0`` and nftables in the VM's namespace,
    its veth to the host.  The client is a ``python3.11 -c`` one-liner run in
    the guest through the buffered exec API.

(b) The same client, run by the host's ``python3`` in namespace
    ``vmsbench-a`` (10.98.0.1/30), sends N MiB to the same sink in namespace
    ``vmsbench-b`` (10.98.0.2/30), the two joined by a plain veth pair.

The client connects, ``sendall``s one 1 MiB ``bytearray`` N times and
closes.  Throughput is measured on the receiving side, by the sink (the same
host ``python3`` script for both): bytes received after its first ``recv``
divided by the seconds from that first ``recv`` to EOF, so neither the
client's interpreter start (slow in a TCG guest) nor the connection set-up
nor the exec API is timed.  One small warm-up transfer each is not counted.

Nothing is routed off this machine: no NAT, no route is added; the only
addresses are the ones above, and every namespace, veth, sink and the daemon
are removed in ``finally``.

Writes medians, samples and the ratio (a)/(b) to
``bench/results/network.json``.  The ratio is what to compare across
machines; under TCG the guest's emulated CPU bounds (a).

    .venv/bin/python bench/network.py [--rounds 5] [--mib 64]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import Daemon, ensure_image  # noqa: E402
from bench.recording import begin, peak_rss, write_result  # noqa: E402

MiB = 1024 * 1024
#: The group's network: its range, and the sink's network as its only allowed destination.
VM_RANGE = "10.81.0.0/28"
SINK_IP = "10.99.0.1"
SINK_NET = "10.99.0.0/24"
#: The bench's veth pair in the host's namespace carrying ``SINK_IP``.
SINK_LINK, SINK_PEER = "vmsbnch0", "vmsbnch1"
#: The two namespaces of (b), their veth ends and addresses.
NS_CLIENT, NS_SINK = "vmsbench-a", "vmsbench-b"
NS_CLIENT_LINK, NS_SINK_LINK = "vmsbncha", "vmsbnchb"
NS_CLIENT_IP, NS_SINK_IP = "10.98.0.1", "10.98.0.2"
#: MiB of the warm-up transfers (not counted).
WARMUP_MIB = 8
#: Seconds any single transfer may take before the run fails.
TIMEOUT = 120.0

#: The sender, the same for the guest's python3.11 and the host's python3: ``HOST PORT MIB``.
CLIENT = (
    "import socket,sys; s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=60);"
    " b=bytearray(1<<20); [s.sendall(b) for _ in range(int(sys.argv[3]))]; s.close()"
)
#: The receiver: ``ADDRESS``; prints its port, then JSON with what it measured after EOF.
SINK = """
import json, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 0))
s.listen(1)
s.settimeout(float(sys.argv[2]))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.settimeout(float(sys.argv[2]))
buf = bytearray(1 << 20)
first = c.recv_into(buf)
started = time.monotonic()
total = first
while True:
    n = c.recv_into(buf)
    if not n:
        break
    total += n
elapsed = time.monotonic() - started
print(json.dumps({"bytes": total, "first_recv_bytes": first, "seconds": elapsed}), flush=True)
"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def host_python() -> tuple[str, str]:
    """The host's ``python3`` as a real path (not a shim), and its version."""
    out = sh("python3", "-c", "import sys, platform; print(sys.executable); print(platform.python_version())").stdout
    path, version = out.split()
    return path, version


# -- network objects ---------------------------------------------------------------


def sink_net_in_use() -> str | None:
    """An interface that already has an address in ``SINK_NET`` or ``10.98.0.0/30`` (someone else's), if any."""
    for entry in json.loads(sh("ip", "-4", "-j", "addr", "show").stdout):
        for info in entry.get("addr_info", []):
            if info.get("local", "").startswith(("10.99.0.", "10.98.0.")):
                return str(entry.get("ifname"))
    return None


def add_sink_link() -> None:
    sh("ip", "link", "add", SINK_LINK, "type", "veth", "peer", "name", SINK_PEER)
    sh("ip", "addr", "add", f"{SINK_IP}/24", "dev", SINK_LINK)
    sh("ip", "link", "set", SINK_LINK, "up")
    sh("ip", "link", "set", SINK_PEER, "up")


def add_namespaces() -> None:
    sh("ip", "netns", "add", NS_CLIENT)
    sh("ip", "netns", "add", NS_SINK)
    sh("ip", "link", "add", NS_CLIENT_LINK, "netns", NS_CLIENT, "type", "veth", "peer", "name", NS_SINK_LINK,
       "netns", NS_SINK)
    for netns, link, ip in ((NS_CLIENT, NS_CLIENT_LINK, NS_CLIENT_IP), (NS_SINK, NS_SINK_LINK, NS_SINK_IP)):
        sh("ip", "-n", netns, "link", "set", "lo", "up")
        sh("ip", "-n", netns, "addr", "add", f"{ip}/30", "dev", link)
        sh("ip", "-n", netns, "link", "set", link, "up")


def remove_network_objects() -> None:
    """Remove the bench's veth pair and namespaces (each may already be gone)."""
    sh("ip", "link", "delete", SINK_LINK, check=False)
    for netns in (NS_CLIENT, NS_SINK):
        sh("ip", "netns", "delete", netns, check=False)


# -- transfers ---------------------------------------------------------------------


class Sink:
    """The receiving script, started before its client; :meth:`result` waits for EOF."""

    def __init__(self, python: str, address: str, netns: str | None = None) -> None:
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.process = subprocess.Popen([*prefix, python, "-c", SINK, address, str(TIMEOUT)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip():
            self.kill()
            raise RuntimeError(f"the sink did not start: {self.process.stderr.read() if self.process.stderr else ''}")
        self.port = int(line)

    def result(self, expected_bytes: int) -> float:
        """MB/s (10^6 bytes per second) the sink measured; checks every byte arrived."""
        assert self.process.stdout is not None
        out, err = self.process.communicate(timeout=TIMEOUT)
        if self.process.returncode != 0:
            raise RuntimeError(f"the sink failed: {err}")
        measured = json.loads(out)
        if measured["bytes"] != expected_bytes:
            raise RuntimeError(f"the sink received {measured['bytes']} bytes, not {expected_bytes}")
        return (measured["bytes"] - measured["first_recv_bytes"]) / measured["seconds"] / 1e6

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` (all its threads) has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_transfer(daemon: Daemon, hostname: str, python: str, mib: int, sinks: list[Sink]) -> tuple[float, float]:
    """
    (a): the guest sends ``mib`` MiB to a sink on the host's ``SINK_IP``.
    MB/s, and the CPU cores QEMU used on average over the whole exec call.
    """
    sink = Sink(python, SINK_IP)
    sinks.append(sink)
    (qemu,) = daemon.vm_pids()
    cpu_before, started = cpu_seconds(qemu), time.monotonic()
    code, out = daemon.run(hostname, f"python3.11 -c \"{CLIENT}\" {SINK_IP} {sink.port} {mib}")
    cores = (cpu_seconds(qemu) - cpu_before) / (time.monotonic() - started)
    if code != 0:
        sink.kill()
        raise RuntimeError(f"the guest client exited with {code}: {out}")
    return sink.result(mib * MiB), cores


def netns_transfer(python: str, mib: int, sinks: list[Sink]) -> float:
    """(b): the host's python in ``NS_CLIENT`` sends ``mib`` MiB to a sink in ``NS_SINK``."""
    sink = Sink(python, NS_SINK_IP, NS_SINK)
    sinks.append(sink)
    client = subprocess.run(["ip", "netns", "exec", NS_CLIENT, python, "-c", CLIENT, NS_SINK_IP, str(sink.port),
                             str(mib)], capture_output=True, text=True, timeout=TIMEOUT)
    if client.returncode != 0:
        sink.kill()
        raise RuntimeError(f"the namespace client exited with {client.returncode}: {client.stderr}")
    return sink.result(mib * MiB)



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "network.json"))
    options = parser.parse_args()
    ensure_image()
    python, python_version = host_python()
    busy = sink_net_in_use()
    if busy is not None:
        raise SystemExit(f"{busy} already has an address in 10.99.0.0/24 or 10.98.0.0/30; not touching it")
    daemon = Daemon(groups=[{
        "name": "net", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
        "network": {"mode": "isolated", "range": VM_RANGE, "allow": [SINK_NET]},
    }])
    sinks: list[Sink] = []
    run = begin()
    started = time.monotonic()
    try:
        remove_network_objects()
        add_sink_link()
        add_namespaces()
        daemon.start()
        created = daemon.json("POST", "/hostgroup/net/nodes?wait=agent&timeout=2m", {}, expect=201)
        hostname, vm_ip = created["hostname"], created["ip"]
        print(f"{hostname} at {vm_ip} booted in {time.monotonic() - started:.1f} s", flush=True)
        warm_vm, _ = vm_transfer(daemon, hostname, python, WARMUP_MIB, sinks)
        warm_netns = netns_transfer(python, WARMUP_MIB, sinks)
        print(f"warm-up ({WARMUP_MIB} MiB): vm {warm_vm:.1f} MB/s, netns {warm_netns:.1f} MB/s", flush=True)
        vm, netns, qemu_cores = [], [], []
        for round_ in range(options.rounds):
            mb_s, cores = vm_transfer(daemon, hostname, python, options.mib, sinks)
            vm.append(mb_s)
            qemu_cores.append(cores)
            netns.append(netns_transfer(python, options.mib, sinks))
            print(f"round {round_ + 1}: vm {vm[-1]:.1f} MB/s (QEMU {cores:.2f} cores), netns {netns[-1]:.1f} MB/s",
                  flush=True)
        accel = re.search(r"accelerator: (\w+)", daemon.log())
        accel_name = accel.group(1) if accel else "tcg"
        daemon_peak_rss = peak_rss(daemon.process.pid) if daemon.process else None
    finally:
        for sink in sinks:
            sink.kill()
        daemon.cleanup()
        remove_network_objects()
    result: dict[str, Any] = {
        "benchmark": "network",
        "accel": accel_name,
        "rounds": options.rounds,
        "bytes_per_transfer": options.mib * MiB,
        "vm_isolated_to_host_mb_s": {"median": statistics.median(vm), "samples": vm},
        "netns_veth_mb_s": {"median": statistics.median(netns), "samples": netns},
        "ratio_vm_over_netns": statistics.median(vm) / statistics.median(netns),
        "vm_qemu_cpu_cores_during_exec": {"median": statistics.median(qemu_cores), "samples": qemu_cores},
        "warmup_mb_s": {"bytes": WARMUP_MIB * MiB, "vm": warm_vm, "netns": warm_netns},
        "guest": {"vcpus": 1, "ram_bytes": 256 * MiB, "ip": vm_ip, "client": "python3.11 in the guest"},
        "host_python": {"path": python, "version": python_version},
        "daemon_peak_rss_bytes": daemon_peak_rss,
        "wall_s": time.monotonic() - started,
        "notes": (
            "MB/s are 10^6 bytes per second, measured by the receiving sink (the host's python3, the same script "
            "for both): bytes after its first recv / seconds from that first recv to EOF; the client's interpreter "
            "start, the connection set-up and the exec API are not timed. The client connects, sendalls one 1 MiB "
            "bytearray N times and closes. vm_isolated_to_host: a VM of an isolated group (range 10.81.0.0/28, "
            "allow 10.99.0.0/24) runs the client under python3.11 in the guest through the buffered exec API and "
            "sends to 10.99.0.1 on a veth pair of the bench's own in the host's namespace: guest virtio-net, tap0 "
            "and the nftables table in the VM's namespace, its veth to the host. netns_veth: the same client run by "
            "the HOST's python3 in namespace vmsbench-a (10.98.0.1/30) sending to the sink in vmsbench-b "
            "(10.98.0.2/30) over a plain veth pair. The senders differ: a TCG-emulated guest CPU in (a), the host's "
            "CPU in (b). Under TCG the guest CPU bounds (a) (the emulated python loop, the guest's TCP stack and "
            "virtio-net driver all run on one emulated vCPU; vm_qemu_cpu_cores_during_exec is QEMU's CPU seconds over "
            "the wall seconds of each exec call, interpreter start included: about 1 means the vCPU thread was "
            "saturated), so the ratio measures mostly emulation, not the "
            "daemon's network path; with KVM it would approach the cost of tap + namespace + nftables + veth. "
            "Rounds alternate (a), (b); one warm-up transfer each is not counted. Nothing is routed off the machine."
        ),
    }
    write_result(options.output, result, run)
    print(f"vm {result['vm_isolated_to_host_mb_s']['median']:.1f} MB/s, netns {result['netns_veth_mb_s']['median']:.1f}"
          f" MB/s, ratio {result['ratio_vm_over_netns']:.3f}")
    print(json.dumps({k: result[k] for k in ("accel", "ratio_vm_over_netns", "daemon_peak_rss_bytes", "wall_s")}))


if __name__ == "__main__":
    main()
