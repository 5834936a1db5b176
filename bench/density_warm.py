"""
Density of idle warm nodes: how many clones of a template (a ``warm: true``
group with the default spare) this host holds idle while every one of them
still answers an exec within a second, in one run through the daemon.

Nodes are created in steps (8, 16, 24, ... up to ``--max-nodes``),
``--batch`` at a time, ``wait=agent``; after each step the fleet idles ``--settle`` seconds, then:

- ``POST /vm/{hostname}/exec?cmd=/bin/true&shell=`` on every node one at a
  time (each one's seconds: p50, max) and on all of them at once (how many
  answered within 1 s, p50, max);
- each node's QEMU proportional set size (``/proc/PID/smaps_rollup``:
  median, max, sum) and resident set size;
- the idle fleet's QEMU CPU over ``--idle`` seconds, in cores (and per node);
- where one clone's PSS goes (``/proc/PID/smaps`` of the
  median node's QEMU, by kind of mapping: the template's RAM file, TCG's
  translation buffer, anonymous memory (heap and malloc arenas), QEMU's
  binary and libraries, the rest).

Before the fleet (``--parts pss,fleet``), what might bring a clone's PSS
down, side by side in the same run: a daemon per :data:`VARIANTS` (the
project's default beside each change; their group keeps no spare),
``--variant-rounds`` rounds of ``--variant-nodes`` clones each, created one
at a time, the variants
alternating; each variant's PSS per node, create and exec seconds (medians)
and the median node's breakdown, and each change's saving and ratios over the
default (``pss_side_by_side``).

The fleet stops at the first step where an exec (one at a time or at once) took
longer than 1 s, or at ``--max-nodes``, or when the daemon refused a create
(admission), or when the next step would start after ``--deadline``
seconds of run: ``held`` is the last step where every exec
answered within 1 s, ``missed`` the step that did not (if any).  Every node
is deleted at the end, and any QEMU left killed, even on failure.

Writes ``bench/results/density_warm.json`` (``--parts pss`` alone:
``bench/results/density_warm_pss.json``).

    .venv/bin/python bench/density_warm.py [--max-nodes 44] [--batch 2] [--settle 10] [--idle 10] [--deadline 540]
                                           [--variant-nodes 4] [--variant-rounds 3] [--parts pss,fleet]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import Daemon, ensure_image, processes_under  # noqa: E402
from bench.recording import begin, cpu_seconds, write_result  # noqa: E402
from bench.warm import memory, qemu_pid  # noqa: E402

RAM_MB = 256
#: The exec every node answers: no shell, the least an exec can cost.
EXEC = "/vm/{hostname}/exec?cmd=/bin/true&shell="
#: An exec slower than this misses the target.
WITHIN_S = 1.0


def rollup(pid: int) -> dict[str, int]:
    """Resident and proportional set size of ``pid`` in KiB (``/proc/PID/smaps_rollup``)."""
    return {f"{name}_kib": size // 1024 for name, size in memory(pid).items()}


def kind_of(path: str, perms: str, size_kib: int) -> str:
    """What a mapping of a QEMU process holds, from its path, permissions and size."""
    if path.startswith("/memfd:tcg"):
        return "tcg_translation_buffer"
    if path.startswith("/dev/shm/") or path.startswith("/memfd:"):
        return "template_ram"
    if path == "[heap]":
        return "heap"
    if path.startswith("["):
        return "stack_and_kernel"
    if path:
        return "binary_and_libraries"
    if "x" in perms:
        return "tcg_translation_buffer"
    if size_kib >= RAM_MB * 1024:
        return "guest_ram_anonymous"
    return "anonymous_other"


def breakdown(pid: int) -> dict[str, dict[str, int]]:
    """``/proc/PID/smaps`` summed by :func:`kind_of`: KiB of Pss, Rss, Private_Dirty and size per kind."""
    kinds: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$", line)
            if head:
                size_kib = (int(head.group(2), 16) - int(head.group(1), 16)) // 1024
                kind = kind_of(head.group(4).strip(), head.group(3), size_kib)
                current = kinds.setdefault(kind, {"pss_kib": 0, "rss_kib": 0, "private_dirty_kib": 0,
                                                  "size_kib": 0, "mappings": 0})
                current["size_kib"] += size_kib
                current["mappings"] += 1
                continue
            field = re.match(r"^(Pss|Rss|Private_Dirty):\s+(\d+) kB", line)
            if field and current is not None:
                current[field.group(1).lower() + "_kib"] += int(field.group(2))
    return kinds


def exec_true(daemon: Daemon, hostname: str) -> float:
    """Seconds for one exec of ``/bin/true`` through the API, its whole response read."""
    started = time.monotonic()
    status, _, body = daemon.request("POST", EXEC.format(hostname=hostname), timeout=60)
    elapsed = time.monotonic() - started
    if status != 200 or b'"exit_code": 0' not in body.replace(b'"exit_code":0', b'"exit_code": 0'):
        raise RuntimeError(f"exec in {hostname}: {status} {body[-200:]!r}")
    return elapsed


def summary(samples: list[float]) -> dict[str, Any]:
    return {"p50": statistics.median(samples), "max": max(samples),
            "within_1s": sum(1 for s in samples if s <= WITHIN_S), "count": len(samples)}


def measure(daemon: Daemon, hostnames: list[str], options: argparse.Namespace) -> dict[str, Any]:
    """One step: the fleet idles, then its execs, memory and idle CPU (see the module docstring)."""
    time.sleep(options.settle)
    pids = [qemu_pid(daemon, name) for name in hostnames]
    cpu_before = {p: cpu_seconds(p) for p in pids}
    began = time.monotonic()
    time.sleep(options.idle)
    window = time.monotonic() - began
    qemu_cpu = sum(cpu_seconds(p) - cpu_before[p] for p in pids)
    memory = [rollup(p) for p in pids]
    pss = [m["pss_kib"] for m in memory]
    one_at_a_time = [exec_true(daemon, name) for name in hostnames]
    with concurrent.futures.ThreadPoolExecutor(len(hostnames)) as pool:
        at_once = list(pool.map(lambda name: exec_true(daemon, name), hostnames))
    median_pid = pids[sorted(range(len(pids)), key=lambda i: pss[i])[len(pids) // 2]]
    return {
        "nodes": len(hostnames),
        "exec_one_at_a_time_s": summary(one_at_a_time),
        "exec_at_once_s": summary(at_once),
        "held": max(one_at_a_time) <= WITHIN_S and max(at_once) <= WITHIN_S,
        "pss_per_node_kib": {"median": statistics.median(pss), "max": max(pss), "sum": sum(pss)},
        "rss_per_node_kib": {"median": statistics.median(m["rss_kib"] for m in memory)},
        "idle_window_s": window,
        "idle_fleet_qemu_cores": qemu_cpu / window,
        "idle_qemu_core_percent_per_node": 100 * qemu_cpu / window / len(hostnames),
        "median_node_breakdown_kib": breakdown(median_pid),
    }


#: What might shrink a clone's PSS, each tried by a daemon of its own side by side with the project's default:
#: ``thp_off`` runs the daemon (and so its QEMUs, which inherit it) with ``prctl(PR_SET_THP_DISABLE)``: QEMU
#: asks for transparent huge pages on TCG's translation buffer and its small RAM blocks, so every 2 MiB it
#: touches is resident whole; ``split_wx`` gives QEMU ``-accel tcg,...,split-wx=on`` (a wrapper on its PATH:
#: the buffer is then a memfd mapped twice); ``arena_max_1`` runs QEMU with ``MALLOC_ARENA_MAX=1`` (one malloc
#: arena for all its threads).
VARIANTS = ("default", "thp_off", "split_wx", "arena_max_1")

THP_OFF = ("import ctypes, os, sys; "
           "assert ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0) == 0; "  # PR_SET_THP_DISABLE
           "os.execv(sys.argv[1], sys.argv[1:])")

WRAPPERS = {
    "split_wx": """#!/bin/bash
args=()
for word in "$@"; do
    case "$word" in tcg*) word="$word,split-wx=on";; esac
    args+=("$word")
done
exec {qemu} "${{args[@]}}"
""",
    "arena_max_1": """#!/bin/bash
MALLOC_ARENA_MAX=1 exec {qemu} "$@"
""",
}


class VariantDaemon(Daemon):
    """A daemon whose QEMUs run as :data:`VARIANTS` says."""

    def __init__(self, variant: str, wrappers: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.variant = variant
        self.wrappers = wrappers

    def command(self) -> list[str]:
        if self.variant == "thp_off":
            return [sys.executable, "-c", THP_OFF, *super().command()]
        if self.variant in WRAPPERS:
            path = os.path.join(self.wrappers, self.variant)
            return ["env", f"PATH={path}:{os.environ['PATH']}", *super().command()]
        return super().command()


def pss_side_by_side(group: dict[str, Any], options: argparse.Namespace) -> dict[str, Any]:
    """
    ``--variant-nodes`` clones of each variant's daemon created one at a time
    (each create's seconds), idle ``--settle`` s, then their PSS, one exec
    each (seconds) and the median node's breakdown; ``--variant-rounds``
    rounds, the variants alternating.
    """
    wrappers = tempfile.mkdtemp(prefix="vms-density-", dir="/tmp")
    qemu = shutil.which("qemu-system-x86_64")
    assert qemu is not None
    for variant, script in WRAPPERS.items():
        os.mkdir(os.path.join(wrappers, variant), 0o700)
        with open(os.path.join(wrappers, variant, "qemu-system-x86_64"), "w") as f:
            f.write(script.format(qemu=qemu))
        os.chmod(os.path.join(wrappers, variant, "qemu-system-x86_64"), 0o700)
    # Clones without a spare: a node born from a warmed-up spare holds a few MB more than one cloned on demand,
    # and which of the two a create gets depends on the spare's timing, not on the variant.
    daemons = {v: VariantDaemon(v, wrappers, groups=[{**group, "warm_spare": 0}]) for v in VARIANTS}
    figures: dict[str, dict[str, Any]] = {v: {"create_s": [], "exec_s": [], "pss_kib": [], "breakdowns": []}
                                          for v in VARIANTS}
    try:
        for daemon in daemons.values():
            daemon.start()
        for _ in range(2):  # the template build, out of the figures
            for variant, daemon in daemons.items():
                name = daemon.json("POST", "/hostgroup/warm/nodes?wait=agent&timeout=5m", {}, expect=201)["hostname"]
                daemon.request("DELETE", f"/hostgroup/warm/nodes/{name}", timeout=60)
                time.sleep(1.0)
        for _ in range(options.variant_rounds):
            for variant, daemon in daemons.items():
                names = []
                for _ in range(options.variant_nodes):
                    began = time.monotonic()
                    names.append(daemon.json("POST", "/hostgroup/warm/nodes?wait=agent&timeout=5m", {},
                                             expect=201)["hostname"])
                    figures[variant]["create_s"].append(time.monotonic() - began)
                time.sleep(options.settle)
                pids = [qemu_pid(daemon, name) for name in names]
                pss = [rollup(p)["pss_kib"] for p in pids]
                figures[variant]["pss_kib"] += pss
                figures[variant]["breakdowns"].append(breakdown(pids[pss.index(sorted(pss)[len(pss) // 2])]))
                figures[variant]["exec_s"] += [exec_true(daemon, name) for name in names]
                for name in names:
                    daemon.request("DELETE", f"/hostgroup/warm/nodes/{name}", timeout=60)
    finally:
        for daemon in daemons.values():
            daemon.cleanup()
        shutil.rmtree(wrappers, ignore_errors=True)
    result: dict[str, Any] = {"nodes_per_round": options.variant_nodes, "rounds": options.variant_rounds}
    for variant, f in figures.items():
        result[variant] = {"pss_per_node_kib": statistics.median(f["pss_kib"]),
                           "create_s": statistics.median(f["create_s"]),
                           "exec_s": statistics.median(f["exec_s"]),
                           "breakdown_kib": f["breakdowns"][len(f["breakdowns"]) // 2],
                           "samples": {k: f[k] for k in ("create_s", "exec_s", "pss_kib")}}
    for variant in VARIANTS[1:]:
        result[f"{variant}_saved_per_node_kib"] = result["default"]["pss_per_node_kib"] - result[variant]["pss_per_node_kib"]
        result[f"ratio_create_{variant}_over_default"] = result[variant]["create_s"] / result["default"]["create_s"]
        result[f"ratio_exec_{variant}_over_default"] = result[variant]["exec_s"] / result["default"]["exec_s"]
    return result


def steps(maximum: int) -> list[int]:
    """8, 16, 24, 32, ... up to ``maximum`` (which ends the list)."""
    return list(range(8, maximum, 8)) + [maximum]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-nodes", type=int, default=44,
                        help="the last step; the default admission budget of 24 GiB holds 46 nodes of 256 MiB "
                             "(each its RAM plus vm_overhead) beside the spare")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--deadline", type=float, default=540.0,
                        help="seconds of run after which no further step starts")
    parser.add_argument("--variant-nodes", type=int, default=4)
    parser.add_argument("--variant-rounds", type=int, default=3)
    parser.add_argument("--parts", default="pss,fleet", help="pss (the variants side by side), fleet, or both")
    parser.add_argument("--note", default="", help="what to know about the run, e.g. other VMs on the machine")
    parser.add_argument("--output", help="the results file: bench/results/density_warm.json, or with --parts pss "
                                         "alone bench/results/density_warm_pss.json")
    options = parser.parse_args()
    options.output = options.output or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results",
        "density_warm_pss.json" if options.parts == "pss" else "density_warm.json")
    ensure_image()
    run = begin()
    started = time.monotonic()
    group = {"name": "warm", "warm": True, "vcpu": 1, "ram_mb": RAM_MB, "storage_size": "1G"}
    daemon = Daemon(groups=[group])
    results: list[dict[str, Any]] = []
    hostnames: list[str] = []
    create_s: list[float] = []
    stopped = "max_nodes"
    refused = ""

    def create() -> str:
        began = time.monotonic()
        created = daemon.json("POST", "/hostgroup/warm/nodes?wait=agent&timeout=5m", {}, expect=201)
        create_s.append(time.monotonic() - began)
        return str(created["hostname"])

    side_by_side = None
    try:
        side_by_side = pss_side_by_side(group, options) if "pss" in options.parts else None
        if "fleet" in options.parts:
            daemon.start()
        for count in steps(options.max_nodes) if "fleet" in options.parts else []:
            if time.monotonic() - started > options.deadline:
                stopped = "deadline"
                break
            began = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(options.batch) as pool:
                outcomes = [pool.submit(create) for _ in range(count - len(hostnames))]
                for outcome in outcomes:
                    try:
                        hostnames.append(outcome.result())
                    except AssertionError as error:  # refused (admission): the step is not measured
                        refused = str(error)
            if refused:
                stopped = "refused"
                break
            try:
                step = {"create_step_s": time.monotonic() - began, **measure(daemon, hostnames, options)}
            except (RuntimeError, OSError) as error:  # an exec that failed: recorded, the fleet removed
                stopped = f"error: {error}"
                break
            results.append(step)
            print(json.dumps({k: step[k] for k in ("nodes", "exec_one_at_a_time_s", "exec_at_once_s",
                                                   "pss_per_node_kib", "idle_fleet_qemu_cores")}), flush=True)
            if not step["held"]:
                stopped = "missed"
                break
    finally:
        for hostname in hostnames:
            try:
                daemon.request("DELETE", f"/hostgroup/warm/nodes/{hostname}", timeout=60)
            except OSError:
                pass
        daemon.cleanup()
        left = processes_under(daemon.state_dir)
        if left:
            print(f"processes left after cleanup: {left}", file=sys.stderr)
    held = [s for s in results if s["held"]]
    missed = [s for s in results if not s["held"]]
    result = {
        "benchmark": "density_warm",
        "accel": "tcg",
        "ram_mb": RAM_MB,
        "group": group,
        "note": options.note,
        "within_s": WITHIN_S,
        "stopped": stopped,
        "refused": refused,
        "held_nodes": held[-1]["nodes"] if held else 0,
        "missed_nodes": missed[0]["nodes"] if missed else None,
        "held": held[-1] if held else None,
        "missed": missed[0] if missed else None,
        "first": results[0] if results else None,
        "create_s": {"p50": statistics.median(create_s), "max": max(create_s)} if create_s else None,
        "steps": results,
        "pss_side_by_side": side_by_side,
        "target_pss_per_node_kib": 40e6 / 1024,  # the 40 MB
    }
    write_result(options.output, result, run)
    print(json.dumps({k: result[k] for k in ("stopped", "held_nodes", "missed_nodes")}))


if __name__ == "__main__":
    main()
