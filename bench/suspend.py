"""
Suspend/restore benchmark: ``POST /vm/{h}/suspend`` and
``POST /vm/{h}/restore?wait=agent`` through the daemon against the same QMP
steps driven by hand on the same QEMU command, alternating, several rounds
each, for guests of 256 MiB and 1 GiB, in one run.

Bare suspend: ``stop``, ``migrate-set-parameters`` (max-bandwidth 64 GiB),
``migrate exec:cat > file``, poll ``query-migrate`` until completed, ``quit``
and wait for QEMU to exit.  Bare restore: the same command line plus
``-incoming 'exec:cat file'``, poll ``query-status`` until it leaves
``inmigrate``, ``cont``, then connect to the agent's socket and wait for its
first byte.  That is what the daemon does, minus the daemon (its fsync of the
state file and its directory, its agent reconnect, health request and clock
sync, its record writes and HTTP).  The fsync of the bare state file is timed
apart (``bare_fsync_s``) so the reader can see what it costs here.

Before the rounds, each guest (API and bare) fills a tmpfs with random bytes
(``head -c N /dev/urandom > /dev/shm/fill``) so its state is not mostly zero
pages: through the buffered exec API for the node, through the agent's wire
protocol (a small blocking client on :class:`vmservice.wire.Connection`) for
the bare guest.

Writes medians, samples, state file sizes and the ratios API / bare to
``bench/results/suspend.json``.  The ratios are what to compare across
machines; absolute seconds depend on the host (TCG here) and its disk.

    .venv/bin/python bench/suspend.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any
from urllib.parse import urlencode

from attrs import evolve

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import IMAGE_DIR, Daemon, ensure_image  # noqa: E402
from bench.recording import begin, peak_rss, write_result  # noqa: E402
from vmservice.guestport.exec import ExecRequest  # noqa: E402
from vmservice.hypervisors.base import MachineSpec  # noqa: E402
from vmservice.hypervisors.qemu import QemuMachine, QemuSettings, host_tsc_khz, qemu_command  # noqa: E402
from vmservice.images.store import resolve_image  # noqa: E402
from vmservice.wire import NEED_DATA, Connection, Data, HalfClose, Hello, Open, Ping, Pong, Reset, Role  # noqa: E402
from vmservice.wire.payloads import EXIT, RecordDecoder  # noqa: E402

MiB = 1024 * 1024
#: Guest sizes: (host group, guest RAM in MiB, MiB of random bytes written to the guest's tmpfs).
SIZES = [("small", 256, 64), ("big", 1024, 256)]
#: Seconds any single wait may take before the run fails.
TIMEOUT = 120.0


def median(samples: list[float]) -> float:
    return statistics.median(samples)


# -- the daemon's side -----------------------------------------------------------


def api_suspend(daemon: Daemon, hostname: str) -> tuple[float, int]:
    """Seconds until the suspend's 200, and the size of the node's state file."""
    started = time.monotonic()
    status, _, body = daemon.request("POST", f"/vm/{hostname}/suspend", timeout=TIMEOUT)
    elapsed = time.monotonic() - started
    if status != 200:
        raise RuntimeError(f"suspend of {hostname}: {status} {body!r}")
    return elapsed, os.path.getsize(os.path.join(daemon.state_dir, "nodes", hostname, "state.bin"))


def api_restore(daemon: Daemon, hostname: str) -> float:
    """Seconds until ``restore?wait=agent`` answers 200."""
    started = time.monotonic()
    status, _, body = daemon.request("POST", f"/vm/{hostname}/restore?wait=agent&timeout=2m", timeout=TIMEOUT)
    elapsed = time.monotonic() - started
    if status != 200:
        raise RuntimeError(f"restore of {hostname}: {status} {body!r}")
    return elapsed


def api_fill(daemon: Daemon, hostname: str, mib: int) -> float:
    started = time.monotonic()
    result = daemon.json("POST", f"/vm/{hostname}/exec?" + urlencode({"cmd": fill_command(mib), "buffered": "true"}),
                         timeout=300)
    if result["exit_code"] != 0:
        raise RuntimeError(f"fill of {hostname} failed: {result}")
    return time.monotonic() - started


def fill_command(mib: int) -> str:
    return f"head -c {mib * MiB} /dev/urandom > /dev/shm/fill"


# -- bare QEMU: a blocking QMP client and a blocking agent client -----------------


def connect_unix(path: str, deadline: float) -> socket.socket:
    """Connect to a UNIX socket QEMU is about to create (or re-create)."""
    while True:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot connect to {path}")
            time.sleep(0.005)


class Qmp:
    """A minimal blocking QMP client over JSON lines."""

    def __init__(self, path: str, deadline: float) -> None:
        self.sock = connect_unix(path, deadline)
        self.sock.settimeout(TIMEOUT)
        self.file = self.sock.makefile("rb")
        self._read()  # the greeting
        self.execute("qmp_capabilities")

    def _read(self) -> dict[str, Any]:
        while True:
            line = self.file.readline()
            if not line:
                raise RuntimeError("QMP connection closed")
            message = json.loads(line)
            if "event" not in message:
                return message  # type: ignore[no-any-return]

    def execute(self, command: str, **arguments: Any) -> Any:
        message: dict[str, Any] = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        self.sock.sendall(json.dumps(message).encode() + b"\n")
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"QMP {command}: {reply['error']}")
        return reply.get("return")

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class Agent:
    """A minimal blocking host side of the agent channel (sans-IO ``Connection``)."""

    def __init__(self, path: str, deadline: float) -> None:
        self.sock = connect_unix(path, deadline)
        self.sock.settimeout(TIMEOUT)
        self.conn = Connection(Role.HOST)
        self.sock.sendall(self.conn.send(self.conn.hello("bench")))

    def first_byte(self) -> None:
        data = self.sock.recv(1)
        if not data:
            raise RuntimeError("the agent channel closed")
        self._feed(data)

    def _feed(self, data: bytes) -> list[Any]:
        """Take bytes in; answer HELLOs and pings; return the other events."""
        self.conn.receive_data(data)
        events = []
        while True:
            event = self.conn.next_event()
            if event is NEED_DATA:
                break
            if isinstance(event, Ping):
                self.sock.sendall(self.conn.send(Pong(event.opaque)))
            elif not isinstance(event, Hello):
                events.append(event)
        if self.conn.hello_wanted:
            self.sock.sendall(self.conn.send(self.conn.hello("bench")))
        return events

    def _receive(self) -> list[Any]:
        data = self.sock.recv(1 << 20)
        if not data:
            raise RuntimeError("the agent channel closed")
        return self._feed(data)

    def established(self) -> None:
        while not self.conn.established or self.conn.hello_wanted:
            self._receive()

    def request(self, header: dict[str, Any]) -> bytes:
        """Open a stream with ``header``, half-close it, return all the guest sends until it half-closes."""
        self.established()
        stream_id = self.conn.next_stream_id()
        self.sock.sendall(self.conn.send(Open(stream_id, header)) + self.conn.send(HalfClose(stream_id)))
        received = []
        while True:
            for event in self._receive():
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                if isinstance(event, Data):
                    received.append(event.data)
                    window = self.conn.acknowledge_received_data(stream_id, len(event.data))
                    if window:
                        self.sock.sendall(window)
                elif isinstance(event, HalfClose):
                    return b"".join(received)
                elif isinstance(event, Reset):
                    raise RuntimeError(f"the agent reset stream {stream_id}: {event.code} {event.reason}")

    def close(self) -> None:
        self.sock.close()


class BareGuest:
    """The daemon's QEMU command for one guest, run and driven by hand."""

    def __init__(self, workdir: str, ram_mib: int) -> None:
        image = resolve_image(IMAGE_DIR, "default")
        self.workdir = workdir
        disk = os.path.join(workdir, "disk.qcow2")
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", image.rootfs.path, disk, str(1 << 30)],
            check=True,
        )
        with open("/proc/cpuinfo") as f:
            self.settings = QemuSettings(accel="tcg", tsc_khz=host_tsc_khz(f.read()))
        self.state = os.path.join(workdir, "state.bin")
        self.spec = MachineSpec(
            name=f"bench-bare-{ram_mib}", vcpus=1, ram_bytes=ram_mib * MiB, kernel=image.kernel.path,
            initrd=image.initrd.path, disk=disk, agent_socket=os.path.join(workdir, "agent.sock"),
            qmp_socket=os.path.join(workdir, "qmp.sock"), console_log=os.path.join(workdir, "console.log"),
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.qmp: Qmp | None = None
        #: Kept connected while the guest runs, as the daemon keeps its agent client.
        self.agent: Agent | None = None

    def _start(self, incoming: str | None) -> None:
        spec = evolve(self.spec, incoming=incoming)
        self.process = subprocess.Popen(qemu_command(spec, self.settings), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)

    def boot(self) -> float:
        """Boot until the agent's first byte; seconds taken."""
        started = time.monotonic()
        self._start(None)
        deadline = started + TIMEOUT
        self.qmp = Qmp(self.spec.qmp_socket, deadline)
        self.agent = Agent(self.spec.agent_socket, deadline)
        self.agent.first_byte()
        elapsed = time.monotonic() - started
        self.agent.established()
        return elapsed

    def fill(self, mib: int) -> float:
        assert self.agent is not None
        started = time.monotonic()
        reply = self.agent.request(ExecRequest(cmd=fill_command(mib)).to_json())
        exits = [record for record in RecordDecoder().feed(reply) if record.kind == EXIT]
        if not exits or exits[0].json()["exit_code"] != 0:
            raise RuntimeError(f"bare fill failed: {exits}")
        return time.monotonic() - started

    def suspend(self) -> tuple[float, int, float]:
        """Seconds of the QMP suspend up to QEMU's exit, the state file's size, and seconds of its fsync."""
        assert self.qmp is not None and self.process is not None
        started = time.monotonic()
        self.qmp.execute("stop")
        self.qmp.execute("migrate-set-parameters", **{"max-bandwidth": QemuMachine.SAVE_BANDWIDTH})
        self.qmp.execute("migrate", uri=f"exec:cat > {self.state}")
        while True:
            info = self.qmp.execute("query-migrate")
            status = info.get("status")
            if status == "completed":
                break
            if status in ("failed", "cancelled"):
                raise RuntimeError(f"bare migration {status}: {info}")
            if time.monotonic() - started > TIMEOUT:
                raise RuntimeError("bare migration did not complete")
            time.sleep(QemuMachine.POLL)
        self.qmp.execute("quit")
        self.process.wait(TIMEOUT)
        elapsed = time.monotonic() - started
        self.qmp.close()
        self.qmp = None
        if self.agent is not None:
            self.agent.close()
            self.agent = None
        self.process = None
        synced = time.monotonic()
        fd = os.open(self.state, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return elapsed, os.path.getsize(self.state), time.monotonic() - synced

    def restore(self) -> tuple[float, float]:
        """
        Seconds from starting QEMU with ``-incoming`` to the agent's first
        byte after ``cont``, and to the answer of a health request (what the
        daemon's ``wait=agent`` waits for).
        """
        started = time.monotonic()
        deadline = started + TIMEOUT
        self._start(self.state)
        self.qmp = Qmp(self.spec.qmp_socket, deadline)
        while True:
            status = self.qmp.execute("query-status")["status"]
            if status in ("paused", "running"):
                break
            if status != "inmigrate":
                raise RuntimeError(f"bare restore left the VM {status!r}")
            if time.monotonic() > deadline:
                raise RuntimeError("bare restore did not finish loading")
            time.sleep(QemuMachine.POLL)
        self.qmp.execute("cont")
        self.agent = Agent(self.spec.agent_socket, deadline)
        self.agent.first_byte()
        first_byte = time.monotonic() - started
        self.agent.request({"op": "health"})
        health = time.monotonic() - started
        os.unlink(self.state)
        return first_byte, health

    def kill(self) -> None:
        if self.agent is not None:
            self.agent.close()
            self.agent = None
        if self.qmp is not None:
            self.qmp.close()
            self.qmp = None
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None



def measure_size(daemon: Daemon, group: str, ram_mib: int, fill_mib: int, rounds: int, workdir: str) -> dict[str, Any]:
    created = daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=2m", {}, expect=201)
    hostname = created["hostname"]
    bare = BareGuest(workdir, ram_mib)
    try:
        api_fill_s = api_fill(daemon, hostname, fill_mib)
        bare_boot_s = bare.boot()
        bare_fill_s = bare.fill(fill_mib)
        print(f"{ram_mib} MiB: filled {fill_mib} MiB (api {api_fill_s:.1f} s, bare {bare_fill_s:.1f} s; "
              f"bare boot {bare_boot_s:.1f} s)", flush=True)
        samples: dict[str, list[Any]] = {k: [] for k in ("api_suspend", "api_restore", "api_size",
                                                          "bare_suspend", "bare_restore", "bare_health", "bare_size",
                                                          "bare_fsync")}
        for round_ in range(rounds):
            seconds, size = api_suspend(daemon, hostname)
            samples["api_suspend"].append(seconds)
            samples["api_size"].append(size)
            samples["api_restore"].append(api_restore(daemon, hostname))
            seconds, size, fsync = bare.suspend()
            samples["bare_suspend"].append(seconds)
            samples["bare_size"].append(size)
            samples["bare_fsync"].append(fsync)
            first_byte, health = bare.restore()
            samples["bare_restore"].append(first_byte)
            samples["bare_health"].append(health)
            print(f"{ram_mib} MiB round {round_ + 1}: suspend api {samples['api_suspend'][-1]:.2f} s / "
                  f"bare {samples['bare_suspend'][-1]:.2f} s (+fsync {fsync:.2f} s), restore api "
                  f"{samples['api_restore'][-1]:.2f} s / bare {samples['bare_restore'][-1]:.2f} s; state "
                  f"{samples['api_size'][-1] / MiB:.0f} / {size / MiB:.0f} MiB", flush=True)
        daemon.json("DELETE", f"/hostgroup/{group}/nodes/{hostname}")
    finally:
        bare.kill()
        subprocess.run(["rm", "-rf", *(os.path.join(workdir, name) for name in os.listdir(workdir))])
    result: dict[str, Any] = {"ram_bytes": ram_mib * MiB, "filled_bytes": fill_mib * MiB}
    for key, name in (("api_suspend", "api_suspend_s"), ("api_restore", "api_restore_wait_agent_s"),
                      ("bare_suspend", "bare_suspend_to_exit_s"), ("bare_restore", "bare_restore_to_agent_first_byte_s"),
                      ("bare_health", "bare_restore_to_agent_health_s"), ("bare_fsync", "bare_fsync_s")):
        result[name] = {"median": median(samples[key]), "samples": samples[key]}
    result["api_state_file_bytes"] = samples["api_size"]
    result["bare_state_file_bytes"] = samples["bare_size"]
    result["ratio_suspend_api_over_bare"] = result["api_suspend_s"]["median"] / result["bare_suspend_to_exit_s"]["median"]
    result["ratio_suspend_api_over_bare_plus_fsync"] = result["api_suspend_s"]["median"] / (
        result["bare_suspend_to_exit_s"]["median"] + result["bare_fsync_s"]["median"])
    result["ratio_restore_api_over_bare"] = (
        result["api_restore_wait_agent_s"]["median"] / result["bare_restore_to_agent_first_byte_s"]["median"])
    result["ratio_restore_api_over_bare_health"] = (
        result["api_restore_wait_agent_s"]["median"] / result["bare_restore_to_agent_health_s"]["median"])
    result["bare_boot_to_agent_first_byte_s"] = bare_boot_s
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "suspend.json"))
    options = parser.parse_args()
    ensure_image()
    run = begin()
    daemon = Daemon(groups=[{"name": name, "vcpu": 1, "ram_mb": ram, "storage_size": "1G"} for name, ram, _ in SIZES])
    workdir = tempfile.mkdtemp(prefix="vms-bench-", dir="/tmp")
    sizes = {}
    try:
        daemon.start()
        for name, ram, fill in SIZES:
            sizes[f"{ram}MiB"] = measure_size(daemon, name, ram, fill, options.rounds, workdir)
        accel = re.search(r"accelerator: (\w+)", daemon.log())
        accel_name = accel.group(1) if accel else "tcg"
        daemon_peak_rss = peak_rss(daemon.process.pid) if daemon.process else None
    finally:
        daemon.cleanup()
        subprocess.run(["rm", "-rf", workdir])
    result = {
        "benchmark": "suspend",
        "accel": accel_name,
        "rounds": options.rounds,
        "sizes": sizes,
        "daemon_peak_rss_bytes": daemon_peak_rss,
        "notes": (
            "api_suspend_s: POST /vm/{h}/suspend until 200 (QMP stop, migrate to exec:cat, fsync of the file and "
            "its directory, agent stop, kill). bare_suspend_to_exit_s: the same QMP steps by hand, then quit and "
            "wait for exit; its fsync is timed apart in bare_fsync_s (not in the ratio; see the _plus_fsync ratio). "
            "api_restore_wait_agent_s: POST /vm/{h}/restore?wait=agent until 200 (QEMU -incoming, wait for "
            "paused, cont, agent reconnect and hello, a health request). bare_restore_to_agent_first_byte_s: "
            "the same QEMU steps by hand until the agent's first byte (bare_restore_to_agent_health_s: on until the "
            "answer of a health request on that connection, as wait=agent does; see the _health ratio). Both guests had their memory filled with "
            "random bytes in a tmpfs first (the bare one through the agent wire protocol)."
        ),
    }
    write_result(options.output, result, run)
    for key, size in sizes.items():
        print(f"{key}: suspend api {size['api_suspend_s']['median']:.2f} s / bare "
              f"{size['bare_suspend_to_exit_s']['median']:.2f} s (x{size['ratio_suspend_api_over_bare']:.2f}); "
              f"restore api {size['api_restore_wait_agent_s']['median']:.2f} s / bare "
              f"{size['bare_restore_to_agent_first_byte_s']['median']:.2f} s (x{size['ratio_restore_api_over_bare']:.2f}); "
              f"state {size['api_state_file_bytes'][-1] / MiB:.0f} / {size['bare_state_file_bytes'][-1] / MiB:.0f} MiB")
    print(json.dumps({"accel": accel_name, "daemon_peak_rss_bytes": daemon_peak_rss}))


if __name__ == "__main__":
    main()
