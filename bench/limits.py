"""
Physical limits of this machine, measured in one run: what a cold boot, the
agent channel and an agent round trip can do at best here, so that the other
benchmarks can report our figures as ratios of them.

- **Boot floor**: QEMU with the project's command line (machine, accelerator,
  CPU, RAM, kernel, kernel command line, virtio-serial port), but instead of
  the image's initramfs and root disk, a minimal initramfs built now from the
  image's own static busybox and kernel modules, whose ``/init`` loads
  ``virtio_mmio`` and ``virtio_console`` (with their dependencies), finds the
  ``agent`` port and writes one byte to it.  Seconds from starting QEMU to that
  byte on the host's socket.
- **Channel ceilings**: the same minimal guest with four virtio-serial ports;
  its ``/init`` runs busybox ``dd`` from the ``up`` port to ``/dev/null``
  (host to guest) and from ``/dev/zero`` to the ``down`` port (guest to
  host), 1 MiB blocks, and ``cat`` from the ``echo`` port back to itself; a
  ``ctl`` port sequences the steps.  The host end is a plain socket loop with
  1 MiB buffers (one system call per MiB, its CPU time recorded beside the
  QEMU process's).  MB/s each way, and the one-byte round trip.
- **Raw agent round trip**: the image's real guest (its initramfs, root disk
  and agent) started by hand with the same command line, and the agent
  protocol's PING/PONG (the least an exec can cost), p50 of ``--rounds``.
  The same guest's boot to the agent's first byte is recorded too, with the
  time each ``vmservice-init:`` console line arrived (see docs/performance.md).

Writes ``bench/results/limits.json``.  The other benchmarks import
:func:`measure_limits` (or the single measures) and divide by these.

    .venv/bin/python bench/limits.py [--rounds 5] [--channel-mib 256] [--pings 200]

With ``--pairs-against IMAGE_DIR`` it only boots the default image of ``IMAGE_DIR`` (an older build)
and this tree's in alternating pairs, each round with a floor beside it (:func:`image_pairs`), and
writes ``bench/results/boot_pairs.json`` (or another of :data:`PAIRS_RESULTS`, ``--pairs-output``): how
a change to the image moved the boot, on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import IMAGE_DIR, ensure_image  # noqa: E402
from bench.recording import begin, cpu_seconds, write_result  # noqa: E402
from vmservice.hypervisors.base import MachineSpec  # noqa: E402
from vmservice.hypervisors.qemu import QemuSettings, host_tsc_khz, kernel_cmdline, qemu_command  # noqa: E402
from vmservice.images.cpio import encode_newc, regular_file  # noqa: E402
from vmservice.images.initramfs import initramfs_entries  # noqa: E402
from vmservice.images.store import Image, resolve_image  # noqa: E402
from vmservice.wire import NEED_DATA, Connection, Ping, Pong, Role  # noqa: E402

RAM = 256 * 1024 * 1024
MiB = 1 << 20
#: What the minimal guest loads (and what they depend on): the virtio-mmio bus and the console driver.
FLOOR_MODULES = ("virtio_ring.ko", "virtio.ko", "virtio_mmio.ko", "virtio_console.ko")
TIMEOUT = 120.0
#: The files ``--pairs-against`` writes (``--pairs-output``), one per change measured that way: the boot
#: scripts' (docs/performance.md, "Where a cold boot's time goes"), the agent's imports' ("The agent's
#: imports") and the start without ``enum``, ``re`` and ``json`` ("The imports left").
PAIRS_RESULTS = ("boot_pairs.json", "coldboot_pairs.json", "coldboot2_pairs.json")
#: The console step of the image's ``/init`` starting (its first line).
INIT_STEP = "vmservice-init: loading modules"
#: A minimal guest answers in a few seconds; one that has not in this long is counted as hung.
FLOOR_TIMEOUT = 40.0

#: ``/init`` of the minimal guest (busybox ash; shell builtins wherever a fork can be avoided).
MINIMAL_INIT = r"""#!/bin/sh
export PATH=/bin
mount -t devtmpfs devtmpfs /dev
mount -t sysfs sysfs /sys
mount -t proc proc /proc
while read -r module; do insmod "/lib/modules/$module"; done < /etc/vmservice/modules
found=""
find_port() {
    found=""
    while [ -z "$found" ]; do
        for p in /sys/class/virtio-ports/*; do
            [ -r "$p/name" ] || continue
            read -r n < "$p/name"
            [ "$n" = "$1" ] && [ -e "/dev/${p##*/}" ] && found="/dev/${p##*/}"
        done
        [ -n "$found" ] || usleep 1000
    done
}
mode=floor
mib=64
read -r cmdline < /proc/cmdline
for arg in $cmdline; do
    case "$arg" in
        limits.mode=*) mode="${arg#limits.mode=}" ;;
        limits.mib=*) mib="${arg#limits.mib=}" ;;
    esac
done
if [ "$mode" = floor ]; then
    find_port agent
    printf x > "$found"
else
    find_port ctl; ctl=$found
    find_port up; up=$found
    find_port down; down=$found
    find_port echo; echo_port=$found
    exec 3<>"$ctl"
    printf R >&3
    dd bs=1 count=1 <&3 >/dev/null 2>&1
    dd if="$up" of=/dev/null bs=1M 2>/dev/null
    printf U >&3
    dd if=/dev/zero of="$down" bs=1M count="$mib" 2>/dev/null
    dd bs=1 count=1 <&3 >/dev/null 2>&1
    exec 4<>"$echo_port"
    printf E >&3
    cat <&4 >&4
fi
poweroff -f
"""


def read_newc(data: bytes) -> dict[str, bytes]:
    """The regular files (and symbolic links, as their targets) of a ``newc`` cpio archive, by name."""
    files: dict[str, bytes] = {}
    offset = 0
    while offset + 110 <= len(data):
        header = data[offset:offset + 110]
        if header[:6] != b"070701":
            raise ValueError(f"not a newc member at {offset}")
        fields = [int(header[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        size, name_size = fields[6], fields[11]
        name_start = offset + 110
        name = data[name_start:name_start + name_size - 1].decode()
        data_start = (name_start + name_size + 3) & ~3
        if name == "TRAILER!!!":
            break
        files[name] = data[data_start:data_start + size]
        offset = (data_start + size + 3) & ~3
    return files


def minimal_initramfs(image: Image, path: str, init: str = MINIMAL_INIT,
                      applets: Sequence[str] = ("sh", "mount", "insmod", "usleep", "dd", "cat", "poweroff"),
                      programs: Sequence[tuple[str, bytes]] = ()) -> None:
    """
    Write the minimal guest's initramfs to ``path``, from the image's own busybox and modules:
    ``init`` as its ``/init``, these busybox ``applets``, and ``programs`` (name, executable) in ``/bin``.
    """
    with open(image.initrd.path, "rb") as stream:
        files = read_newc(stream.read())
    order = files["etc/vmservice/modules"].decode().split()
    modules = [(module, files[f"lib/modules/{module}"]) for module in order
               if module.rsplit("/", 1)[-1] in FLOOR_MODULES]
    entries = initramfs_entries(init.encode(), files["bin/busybox"], applets, modules)
    entries += [regular_file(f"bin/{name}", program, 0o755) for name, program in programs]
    with open(path, "wb") as stream:
        stream.write(encode_newc(entries))


def _tsc_khz() -> int | None:
    with open("/proc/cpuinfo") as f:
        return host_tsc_khz(f.read())


def qemu_settings(tb_size_mb: int = 0) -> QemuSettings:
    return QemuSettings(accel="tcg", tsc_khz=_tsc_khz(), tb_size_mb=tb_size_mb)


def _without(argv: list[str], *prefixes: str) -> list[str]:
    """``argv`` without each option whose value starts with one of ``prefixes`` (with its option word)."""
    out: list[str] = []
    skip = False
    for index, word in enumerate(argv):
        if skip:
            skip = False
            continue
        value = argv[index + 1] if index + 1 < len(argv) else ""
        if word.startswith("-") and any(value.startswith(prefix) for prefix in prefixes):
            skip = True
            continue
        out.append(word)
    return out


def minimal_command(image: Image, workdir: str, initrd: str, ports: Sequence[str], append: str) -> list[str]:
    """
    The project's QEMU command line for a node (:func:`qemu_command`), with the
    minimal initramfs, no disk, and one virtio-serial port per name in
    ``ports``, each served on ``<workdir>/<name>.sock``.
    """
    spec = MachineSpec(
        name="limits", vcpus=1, ram_bytes=RAM, kernel=image.kernel.path, initrd=initrd,
        disk=os.path.join(workdir, "none.qcow2"), agent_socket=os.path.join(workdir, "agent.sock"),
        qmp_socket=os.path.join(workdir, "qmp.sock"), console_log=os.path.join(workdir, "console.log"),
    )
    argv = qemu_command(spec, qemu_settings())
    argv = _without(argv, "id=root,", "virtio-blk-device", "socket,id=agent,", "virtserialport,chardev=agent")
    argv[argv.index("-append") + 1] = kernel_cmdline(None, qemu_settings().tsc_khz) + " " + append
    for name in ports:
        argv += ["-chardev", f"socket,id={name},path={os.path.join(workdir, name)}.sock,server=on,wait=off",
                 "-device", f"virtserialport,chardev={name},name={name}"]
    return argv


def connect_socket(path: str, started: float) -> socket.socket:
    while True:
        if time.monotonic() - started > TIMEOUT:
            raise RuntimeError(f"{path} did not accept a connection in {TIMEOUT} s")
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            time.sleep(0.005)


def clean_workdir(workdir: str) -> None:
    for name in os.listdir(workdir):
        if name.endswith(".sock") or name.endswith(".log"):
            os.unlink(os.path.join(workdir, name))


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def boot_floor_once(image: Image, workdir: str, initrd: str, hung: list[str] | None = None) -> float | None:
    """
    Seconds from starting QEMU to the minimal guest's byte on the ``agent``
    socket; ``None`` if it did not come within :data:`FLOOR_TIMEOUT` (the
    console's last line is appended to ``hung``).
    """
    clean_workdir(workdir)
    argv = minimal_command(image, workdir, initrd, ["agent"], "limits.mode=floor")
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with connect_socket(os.path.join(workdir, "agent.sock"), started) as s:
            s.settimeout(FLOOR_TIMEOUT)
            try:
                byte = s.recv(1)
            except TimeoutError:
                with open(os.path.join(workdir, "console.log"), errors="replace") as console:
                    lines = console.read().strip().splitlines()
                if hung is not None:
                    hung.append(lines[-1] if lines else "")
                return None
            if byte != b"x":
                raise RuntimeError("the minimal guest closed the port without its byte")
            return time.monotonic() - started
    finally:
        stop_process(process)


def _expect(ctl: socket.socket, byte: bytes) -> None:
    got = ctl.recv(1)
    if got != byte:
        raise RuntimeError(f"the channel guest said {got!r}, not {byte!r}")


def channel_ceilings(image: Image, workdir: str, initrd: str, mib: int, pings: int) -> dict[str, Any]:
    """
    MB/s host to guest and guest to host through one virtio-serial port each,
    C tools in the guest, and the one-byte round trip (see the module docstring).
    """
    clean_workdir(workdir)
    argv = minimal_command(image, workdir, initrd, ["ctl", "up", "down", "echo"],
                           f"limits.mode=channel limits.mib={mib}")
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    size = mib * MiB
    try:
        ctl = connect_socket(os.path.join(workdir, "ctl.sock"), started)
        ctl.settimeout(TIMEOUT * 5)
        _expect(ctl, b"R")
        up = connect_socket(os.path.join(workdir, "up.sock"), started)
        block = b"\xa5" * MiB
        ctl.sendall(b"G")
        qemu_cpu, own_cpu, began = cpu_seconds(process.pid), _own_cpu(), time.monotonic()
        for _ in range(mib):
            up.sendall(block)
        up.close()
        _expect(ctl, b"U")
        upload = time.monotonic() - began
        upload_cpu = (cpu_seconds(process.pid) - qemu_cpu, _own_cpu() - own_cpu)
        down = connect_socket(os.path.join(workdir, "down.sock"), started)
        buffer = bytearray(MiB)
        received = 0
        qemu_cpu, own_cpu, began = cpu_seconds(process.pid), _own_cpu(), time.monotonic()
        while received < size:
            count = down.recv_into(buffer)
            if not count:
                raise RuntimeError(f"the channel guest sent {received} of {size} bytes")
            received += count
        download = time.monotonic() - began
        download_cpu = (cpu_seconds(process.pid) - qemu_cpu, _own_cpu() - own_cpu)
        down.close()
        echo = connect_socket(os.path.join(workdir, "echo.sock"), started)
        ctl.sendall(b"G")
        _expect(ctl, b"E")
        echo.settimeout(TIMEOUT)
        trips = []
        for _ in range(pings + 5):
            began = time.monotonic()
            echo.sendall(b"p")
            if echo.recv(1) != b"p":
                raise RuntimeError("the echo port answered something else")
            trips.append(time.monotonic() - began)
        echo.close()
        ctl.close()
    finally:
        stop_process(process)
    trips = trips[5:]
    return {
        "bytes": size,
        "host_to_guest": {"seconds": upload, "mb_per_s": size / upload / 1e6, "qemu_cpu_s": upload_cpu[0],
                          "host_end_cpu_s": upload_cpu[1]},
        "guest_to_host": {"seconds": download, "mb_per_s": size / download / 1e6, "qemu_cpu_s": download_cpu[0],
                          "host_end_cpu_s": download_cpu[1]},
        "byte_round_trip_s": {"p50": statistics.median(trips), "samples": len(trips)},
    }


def _wire_read(s: socket.socket, connection: Connection, want: type) -> Any:
    while True:
        event = connection.next_event()
        if isinstance(event, want):
            return event
        if event is NEED_DATA:
            data = s.recv(65536)
            if not data:
                raise RuntimeError("the agent closed the channel")
            connection.receive_data(data)


def image_guest(image: Image, workdir: str, name: str, tb_size_mb: int = 0) -> tuple[list[str], str]:
    """
    The command line of the image's guest started by hand in ``workdir`` (a
    fresh overlay disk over its root file system), and its agent socket's path.
    """
    clean_workdir(workdir)
    disk = os.path.join(workdir, "disk.qcow2")
    if os.path.exists(disk):
        os.unlink(disk)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", image.rootfs.path, disk,
                    str(1 << 30)], check=True)
    agent = os.path.join(workdir, "agent.sock")
    spec = MachineSpec(
        name=name, vcpus=1, ram_bytes=RAM, kernel=image.kernel.path, initrd=image.initrd.path, disk=disk,
        agent_socket=agent, qmp_socket=os.path.join(workdir, "qmp.sock"),
        console_log=os.path.join(workdir, "console.log"),
    )
    return qemu_command(spec, qemu_settings(tb_size_mb)), agent


def real_guest(image: Image, workdir: str, pings: int) -> dict[str, Any]:
    """
    The image's real guest, started by hand: seconds to the agent's first byte,
    when each ``vmservice-init:`` console line arrived, and the agent's
    PING/PONG round trip.
    """
    argv, agent = image_guest(image, workdir, "limits-real")
    # The console on QEMU's standard output, so that each line is stamped as it arrives.
    at = argv.index("-serial")
    argv[at + 1] = "stdio"
    argv = _without(argv, "file,id=console,")
    connection = Connection(Role.HOST)
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    console: list[tuple[float, str]] = []
    pending = b""
    try:
        s = connect_socket(agent, started)
        s.sendall(connection.send(connection.hello("limits")))
        first = None
        while first is None:
            if time.monotonic() - started > TIMEOUT:
                raise RuntimeError("the real guest's agent did not answer")
            ready, _, _ = select.select([s, process.stdout], [], [], 1.0)
            if process.stdout in ready:
                chunk = os.read(process.stdout.fileno(), 65536)
                now = time.monotonic() - started
                pending += chunk
                *lines, pending = pending.split(b"\n")
                console += [(now, line.decode(errors="replace").strip()) for line in lines]
            if s in ready:
                data = s.recv(65536)
                first = time.monotonic() - started
                if not data:
                    raise RuntimeError("the agent closed the channel")
                connection.receive_data(data)
        while not connection.established:
            if connection.hello_wanted:
                s.sendall(connection.send(connection.hello("limits")))
            if connection.next_event() is NEED_DATA:
                connection.receive_data(s.recv(65536))
        if connection.hello_wanted:
            s.sendall(connection.send(connection.hello("limits")))
        trips = []
        for number in range(pings + 5):
            opaque = number.to_bytes(8, "big")
            began = time.monotonic()
            s.sendall(connection.send(Ping(opaque)))
            while True:
                pong = _wire_read(s, connection, Pong)
                if pong.opaque == opaque:
                    break
            trips.append(time.monotonic() - began)
        s.close()
    finally:
        stop_process(process)
    trips = trips[5:]
    return {
        "agent_first_byte_s": first,
        "console": [{"at_s": round(at_s, 3), "line": line} for at_s, line in console if line],
        "agent_round_trip_s": {"p50": statistics.median(trips), "p95": sorted(trips)[int(0.95 * (len(trips) - 1))],
                               "samples": len(trips)},
    }


def measure_limits(rounds: int = 5, channel_mib: int = 256, pings: int = 200,
                   workdir: str | None = None) -> dict[str, Any]:
    """Every limit (see the module docstring), as the dictionary written to ``limits.json``."""
    image = resolve_image(IMAGE_DIR, "default")
    own = workdir is None
    work = workdir or tempfile.mkdtemp(prefix="vms-limits-", dir="/tmp")
    try:
        initrd = os.path.join(work, "minimal.cpio")
        minimal_initramfs(image, initrd)
        boot_floor_once(image, work, initrd)  # warm-up: page cache
        floors: list[float] = []
        hung: list[str] = []
        bare = []
        real: dict[str, Any] = {}
        for _ in range(rounds):
            floor = boot_floor_once(image, work, initrd, hung)
            if floor is not None:
                floors.append(floor)
            real = real_guest(image, work, pings if not real else 20)
            bare.append(real["agent_first_byte_s"])
        channel = channel_ceilings(image, work, initrd, channel_mib, pings)
        real = real_guest(image, work, pings)
    finally:
        if own:
            subprocess.run(["rm", "-rf", work])
    return {
        "benchmark": "limits",
        "accel": "tcg",
        "ram_bytes": RAM,
        "boot_floor_s": {"median": statistics.median(floors), "samples": floors, "hung": hung},
        "real_guest_agent_first_byte_s": {"median": statistics.median(bare), "samples": bare},
        "ratio_real_guest_over_floor": statistics.median(bare) / statistics.median(floors),
        "channel": channel,
        "agent_round_trip_s": real["agent_round_trip_s"],
        "real_guest_console": real["console"],
        "real_guest_steps": step_times(_steps(real["console"])),
    }


def _steps(console: list[dict[str, Any]]) -> dict[str, float]:
    """The arrival of each ``vmservice-init:``/``vmservice-agent:`` step of a console, by its words (first 4)."""
    steps: dict[str, float] = {}
    for entry in console:
        line = str(entry["line"])
        if line.startswith(("vmservice-init:", "vmservice-agent:")):
            steps.setdefault(" ".join(line.split()[:4]), float(entry["at_s"]))
    return steps


def step_times(steps: dict[str, float]) -> dict[str, dict[str, float]]:
    """
    Each console step of one boot (:func:`_steps`) with when it arrived
    (``at_s``, from QEMU's start) and how long it took since the step
    before (``took_s``).
    """
    out: dict[str, dict[str, float]] = {}
    previous = 0.0
    for step, at in sorted(steps.items(), key=lambda item: item[1]):
        out[step] = {"at_s": at, "took_s": at - previous}
        previous = at
    return out


def image_pairs(before_dir: str, rounds: int, workdir: str | None = None) -> dict[str, Any]:
    """
    The real guest of the default image in ``before_dir`` and of this tree's (``IMAGE_DIR``), booted
    by hand in alternating order (before, after; then after, before; ...), each round followed by a
    boot floor: seconds to the agent's first byte of each, their medians as ratios of the floor's,
    the seconds from ``/init``'s first line to that byte (the image's part of the boot), and each
    boot's console steps (see docs/performance.md, "Where a cold boot's time goes").
    """
    images = {"before": resolve_image(before_dir, "default"), "after": resolve_image(IMAGE_DIR, "default")}
    work = workdir or tempfile.mkdtemp(prefix="vms-pairs-", dir="/tmp")
    samples: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    floors: list[float] = []
    try:
        initrd = os.path.join(work, "minimal.cpio")
        minimal_initramfs(images["after"], initrd)
        boot_floor_once(images["after"], work, initrd)  # warm-up: page cache
        for number in range(rounds):
            for label in ("before", "after") if number % 2 == 0 else ("after", "before"):
                booted = real_guest(images[label], work, 5)
                samples[label].append({"agent_first_byte_s": booted["agent_first_byte_s"],
                                       "steps": _steps(booted["console"])})
            floor = boot_floor_once(images["after"], work, initrd)
            if floor is not None:
                floors.append(floor)
    finally:
        if workdir is None:
            subprocess.run(["rm", "-rf", work])
    floor_median = statistics.median(floors)
    result: dict[str, Any] = {"benchmark": "boot_pairs", "images": {k: v.path.path for k, v in images.items()},
                              "boot_floor_s": {"median": floor_median, "samples": floors}}
    for label, boots in samples.items():
        first = [float(sample["agent_first_byte_s"]) for sample in boots]
        took: dict[str, list[float]] = {}
        for sample in boots:
            for step, times in step_times(sample["steps"]).items():
                took.setdefault(step, []).append(times["took_s"])
        # From /init on: what the image decides, without the kernel's start (the same kernel and command
        # line for both, and the noisiest part of a boot on a busy machine).
        userland = [float(sample["agent_first_byte_s"]) - float(sample["steps"][INIT_STEP]) for sample in boots
                    if INIT_STEP in sample["steps"]]
        result[label] = {"agent_first_byte_s": {"median": statistics.median(first), "samples": first},
                         "ratio_over_floor": statistics.median(first) / floor_median,
                         "init_to_agent_first_byte_s": {"median": statistics.median(userland), "samples": userland},
                         "step_took_s": {step: statistics.median(values) for step, values in took.items()},
                         "boots": boots}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs-against", metavar="IMAGE_DIR",
                        help="instead: boot the default image of IMAGE_DIR and this tree's in alternating pairs "
                             "against the floor (writes bench/results/boot_pairs.json)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--channel-mib", type=int, default=256)
    parser.add_argument("--pings", type=int, default=200)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                         "limits.json"))
    parser.add_argument("--pairs-output", choices=PAIRS_RESULTS, default=PAIRS_RESULTS[0],
                        help="with --pairs-against: the results file, beside --output (default: %(default)s)")
    options = parser.parse_args()
    ensure_image()
    run = begin()
    if options.pairs_against:
        pairs = image_pairs(options.pairs_against, options.rounds)
        write_result(os.path.join(os.path.dirname(options.output), options.pairs_output), pairs, run)
        print(json.dumps({label: pairs[label]["ratio_over_floor"] for label in ("before", "after")}))
        return
    result = measure_limits(options.rounds, options.channel_mib, options.pings)
    write_result(options.output, result, run)
    print(json.dumps({"boot_floor_s": result["boot_floor_s"]["median"],
                      "real_guest_agent_first_byte_s": result["real_guest_agent_first_byte_s"]["median"],
                      "host_to_guest_mb_per_s": result["channel"]["host_to_guest"]["mb_per_s"],
                      "guest_to_host_mb_per_s": result["channel"]["guest_to_host"]["mb_per_s"],
                      "byte_round_trip_s": result["channel"]["byte_round_trip_s"]["p50"],
                      "agent_round_trip_s": result["agent_round_trip_s"]["p50"]}))


if __name__ == "__main__":
    main()
