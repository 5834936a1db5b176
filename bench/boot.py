"""
Boot benchmark: ``POST /hostgroup/demo/nodes?wait=agent`` through the daemon
against the same QEMU command started by hand until the agent's first byte,
alternating, several rounds each, in one run; and ``wait=userdata`` with a
trivial userdata (``true``) next to them, for what running userdata adds.
Each round also boots the machine's boot floor (``bench/limits.py``: the
same kernel and command line with a minimal initramfs whose ``/init`` writes
one byte to the agent port), and the headline ratio is API / floor (target
<= 1.5, issue 29).

``--before DIR`` (or ``--before-ref REF``, see ``bench/earlier.py``): a
second daemon runs the earlier checkout's code on its own image; each
round's API creates (``wait=agent``, and ``wait=userdata``) go to this
daemon and to that one in turn, so that the load hits both alike.  The
results get ``before`` (its figures) and ``ratio_after_over_before`` (this
checkout's median over the earlier one's) beside the existing keys.

Writes medians, samples and the ratios to ``bench/results/boot.json``.  The
ratios are what to compare across machines; absolute seconds depend on the
host (TCG here) and on its load (recorded).

    .venv/bin/python bench/boot.py [--rounds 5] [--before DIR | --before-ref REF] [--before-image-dir DIR]
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import IMAGE_DIR, Daemon, ensure_image  # noqa: E402
from bench.earlier import add_options, from_options, ratios, start_earlier  # noqa: E402
from bench.recording import begin, peak_rss, write_result  # noqa: E402
from bench.limits import boot_floor_once, minimal_initramfs  # noqa: E402
from vmservice.hypervisors.base import MachineSpec  # noqa: E402
from vmservice.hypervisors.qemu import QemuSettings, host_tsc_khz, qemu_command  # noqa: E402
from vmservice.images.store import resolve_image  # noqa: E402
from vmservice.wire import Connection, Role  # noqa: E402

RAM = 256 * 1024 * 1024


def api_boot(daemon: Daemon, wait: str = "agent", body: dict[str, str] | None = None) -> float:
    """Seconds for one create with ``wait``; the node is deleted afterwards (not timed)."""
    started = time.monotonic()
    created = daemon.json("POST", f"/hostgroup/demo/nodes?wait={wait}&timeout=2m", body or {}, expect=201)
    elapsed = time.monotonic() - started
    daemon.json("DELETE", f"/hostgroup/demo/nodes/{created['hostname']}")
    return elapsed


def bare_boot(accel: str, workdir: str) -> float:
    """Seconds from starting the same QEMU command to the first byte from the agent."""
    image = resolve_image(IMAGE_DIR, "default")
    disk = os.path.join(workdir, "disk.qcow2")
    agent = os.path.join(workdir, "agent.sock")
    for path in (disk, agent, os.path.join(workdir, "qmp.sock")):
        if os.path.exists(path):
            os.unlink(path)
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", image.rootfs.path, disk, str(1 << 30)], check=True
    )
    with open("/proc/cpuinfo") as f:
        tsc = host_tsc_khz(f.read())
    spec = MachineSpec(
        name="bench-bare", vcpus=1, ram_bytes=RAM, kernel=image.kernel.path, initrd=image.initrd.path, disk=disk,
        agent_socket=agent, qmp_socket=os.path.join(workdir, "qmp.sock"),
        console_log=os.path.join(workdir, "console.log"),
    )
    hello = Connection(Role.HOST)
    greeting = hello.send(hello.hello("bench"))
    started = time.monotonic()
    process = subprocess.Popen(qemu_command(spec, QemuSettings(accel=accel, tsc_khz=tsc)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if time.monotonic() - started > 120:
                raise RuntimeError("bare guest did not answer in 120 s")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(agent)
                    s.sendall(greeting)
                    s.settimeout(120)
                    if s.recv(1):
                        return time.monotonic() - started
            except OSError:
                time.sleep(0.01)
    finally:
        process.kill()
        process.wait()



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "boot.json"))
    add_options(parser)
    options = parser.parse_args()
    ensure_image()
    earlier = from_options(options)
    run = begin()
    groups = [{"name": "demo", "vcpu": 1, "ram_mb": RAM >> 20, "storage_size": "1G"}]
    daemon = Daemon(groups=groups)
    before: Daemon | None = None
    workdir = tempfile.mkdtemp(prefix="vms-bench-", dir="/tmp")
    try:
        if earlier is not None:
            before = start_earlier(earlier, groups)
            api_boot(before)  # its warm-up: its own image's page cache
        daemon.start()
        api_boot(daemon)  # warm-up: the accelerator probe and page cache
        accel = re.search(r"accelerator: (\w+)", daemon.log())
        accel_name = accel.group(1) if accel else "tcg"
        image = resolve_image(IMAGE_DIR, "default")
        floor_dir = os.path.join(workdir, "floor")
        os.mkdir(floor_dir)
        initrd = os.path.join(floor_dir, "minimal.cpio")
        minimal_initramfs(image, initrd)
        api, bare, userdata, floor, hung = [], [], [], [], []
        before_api: list[float] = []
        before_userdata: list[float] = []
        for round_ in range(options.rounds):
            api.append(api_boot(daemon))
            if before is not None:
                before_api.append(api_boot(before))
            floor_s = boot_floor_once(image, floor_dir, initrd, hung)
            if floor_s is not None:
                floor.append(floor_s)
            bare.append(bare_boot(accel_name, workdir))
            userdata.append(api_boot(daemon, "userdata", {"userdata": "true"}))
            if before is not None:
                before_userdata.append(api_boot(before, "userdata", {"userdata": "true"}))
            print(f"round {round_ + 1}: api {api[-1]:.2f} s, floor {floor_s or float('nan'):.2f} s, bare {bare[-1]:.2f} s, "
                  f"api to userdata done {userdata[-1]:.2f} s"
                  + (f"; before: api {before_api[-1]:.2f} s, api to userdata done {before_userdata[-1]:.2f} s"
                     if before is not None else ""), flush=True)
        daemon_peak_rss = peak_rss(daemon.process.pid) if daemon.process else None
        before_peak_rss = peak_rss(before.process.pid) if before is not None and before.process else None
    finally:
        daemon.cleanup()
        if before is not None:
            before.cleanup()
        subprocess.run(["rm", "-rf", workdir])
    result = {
        "benchmark": "boot",
        "accel": accel_name,
        "rounds": options.rounds,
        "ram_bytes": RAM,
        "api_create_wait_agent_s": {"median": statistics.median(api), "samples": api},
        "bare_qemu_to_agent_first_byte_s": {"median": statistics.median(bare), "samples": bare},
        "ratio_api_over_bare": statistics.median(api) / statistics.median(bare),
        "boot_floor_s": {"median": statistics.median(floor), "samples": floor, "hung": hung},
        "ratio_api_over_boot_floor": statistics.median(api) / statistics.median(floor),
        "ratio_bare_over_boot_floor": statistics.median(bare) / statistics.median(floor),
        "target_ratio_api_over_boot_floor": 1.5,
        "api_create_wait_userdata_trivial_s": {"median": statistics.median(userdata), "samples": userdata},
        "ratio_userdata_over_agent": statistics.median(userdata) / statistics.median(api),
        "daemon_peak_rss_bytes": daemon_peak_rss,
    }
    if earlier is not None:
        result["before"] = {
            **earlier.record(),
            "api_create_wait_agent_s": {"median": statistics.median(before_api), "samples": before_api},
            "ratio_api_over_boot_floor": statistics.median(before_api) / statistics.median(floor),
            "api_create_wait_userdata_trivial_s": {"median": statistics.median(before_userdata),
                                                   "samples": before_userdata},
            "ratio_userdata_over_agent": statistics.median(before_userdata) / statistics.median(before_api),
            "daemon_peak_rss_bytes": before_peak_rss,
        }
        result["ratio_after_over_before"] = ratios(result, result["before"], (
            "api_create_wait_agent_s.median", "api_create_wait_userdata_trivial_s.median", "daemon_peak_rss_bytes"))
    write_result(options.output, result, run)
    print(json.dumps({k: result[k] for k in ("accel", "ratio_api_over_bare", "ratio_api_over_boot_floor", "ratio_userdata_over_agent",
                                              "daemon_peak_rss_bytes", "ratio_after_over_before") if k in result}))


if __name__ == "__main__":
    main()
