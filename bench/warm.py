"""
Warm start benchmark: ``POST /hostgroup/G/nodes?wait=agent`` for a group
that cold-boots (``warm: false``), one that clones its template without
spare VMs (``warm: true, warm_spare: 0``), one that keeps a spare VM of it
(``warm_spare: 1``) and one that keeps a pool of N spares (``warm_spare:
N``, a template of its own: a pool is per template), side by side in one
run with one daemon:

- one after another (``--rounds`` of each, alternating), and N at once
  (``--together-rounds`` of each, alternating, each spare group's spares
  ready before its round, as the time between bursts lets them be), with
  each group's clone steps in those rounds;
- each node's QEMU resident and proportional memory (RSS, PSS) one second
  after it answered, alone and with N of its kind running (a clone's PSS
  shares the template's pages with the other clones);
- the first create of the warm group, which waits for the template build;
- a fork of N children from a running clone: the wall time until all of
  them answered, and the parent's pause; side by side (alternating) with a
  fork of a node of a ``fork_memory: file`` group (its memory a tmpfs file:
  the fork saves the device state and copies that file once), with the
  copy's size and time.

Writes medians, samples and the ratios (cold / clone) to
``bench/results/warm.json``.  Seconds depend on the host (TCG here); the
ratios are what to compare across machines.

    .venv/bin/python bench/warm.py [--rounds 5] [--together 4] [--together-rounds 3]
                                   [--before DIR | --before-ref REF] [--before-image-dir DIR]

``--before DIR``: a second daemon runs the code of an earlier checkout
(``git archive <commit> | tar -x -C DIR``; or ``--before-ref REF``, see
``bench/earlier.py``) on its own image (``--before-image-dir``) with a group
without spares and one with ``warm_spare: true``; its N at once alternate
with this daemon's in each round (``before`` in the results, and
``ratio_after_over_before``: this daemon's median over the earlier one's);
in each round of creates one at a time, its clone and clone from a spare
follow this daemon's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import Daemon, ensure_image  # noqa: E402
from bench.earlier import add_options, from_options, ratios, ready_spares, start_earlier  # noqa: E402
from bench.recording import begin, peak_rss, write_result  # noqa: E402

RAM_MB = 256

#: Seconds a fork's parent runs before it is forked: its guest starts its power-button watcher and metrics
#: agent up to 5 s after its agent answered, and a fork is of a node that runs (a clone's template was).
FORK_SETTLE = 8.0


def qemu_pid(daemon: Daemon, hostname: str) -> int:
    """The pid of the QEMU process running ``hostname``, as its record says (a spare-born node's QEMU has the spare's name)."""
    with open(os.path.join(daemon.state_dir, "nodes", hostname, "node.json")) as f:
        return int(json.load(f)["pid"])


def memory(pid: int) -> dict[str, int]:
    """Resident and proportional set size of ``pid`` in bytes."""
    figures = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            match = re.match(r"(Rss|Pss):\s+(\d+) kB", line)
            if match:
                figures[match.group(1).lower()] = int(match.group(2)) * 1024
    return figures


def create(daemon: Daemon, group: str) -> tuple[float, str]:
    """Seconds for one create with ``wait=agent``, and the new node's hostname."""
    started = time.monotonic()
    created = daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=3m", {}, expect=201)
    return time.monotonic() - started, created["hostname"]


def delete(daemon: Daemon, group: str, hostname: str) -> None:
    daemon.json("DELETE", f"/hostgroup/{group}/nodes/{hostname}")


def one_at_a_time(daemon: Daemon, group: str) -> tuple[float, dict[str, int]]:
    """One create, its node's memory a second after it answered, then its removal."""
    elapsed, hostname = create(daemon, group)
    time.sleep(1.0)
    figures = memory(qemu_pid(daemon, hostname))
    delete(daemon, group, hostname)
    return elapsed, figures


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def together(daemon: Daemon, group: str, count: int) -> tuple[list[float], list[dict[str, int]], float]:
    """
    ``count`` creates started at once: each one's seconds, each node's
    memory one second after the last answered, while all of them run (a
    clone's PSS shares the template's pages with the others), and the CPU
    seconds the daemon's process used until the last answered; the nodes are
    removed afterwards.
    """
    assert daemon.process is not None
    cpu_before = cpu_seconds(daemon.process.pid)
    results: list[tuple[float, str] | BaseException] = [RuntimeError("not run")] * count

    def run(index: int) -> None:
        try:
            results[index] = create(daemon, group)
        except BaseException as error:  # reported below, after every thread ended
            results[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    daemon_cpu = cpu_seconds(daemon.process.pid) - cpu_before
    for result in results:
        if isinstance(result, BaseException):
            raise result
    created = [result for result in results if not isinstance(result, BaseException)]
    time.sleep(1.0)
    figures = [memory(qemu_pid(daemon, hostname)) for _, hostname in created]
    for _, hostname in created:
        delete(daemon, group, hostname)
    return [seconds for seconds, _ in created], figures, daemon_cpu


def fork(daemon: Daemon, group: str, count: int) -> tuple[float, float]:
    """
    Seconds of one ``POST /vm/{h}/fork`` of ``count`` children from a node of
    ``group`` running for :data:`FORK_SETTLE` s, until all of them answered,
    and the parent's pause the daemon logged; every node is removed afterwards.
    """
    _, parent = create(daemon, group)
    time.sleep(FORK_SETTLE)  # a running node: its guest's start-up (power button, metrics agent) is over
    started = time.monotonic()
    children = daemon.json("POST", f"/vm/{parent}/fork", {"count": count}, expect=201)
    elapsed = time.monotonic() - started
    pauses = re.findall(rf"forked node {parent} into .* after a pause of ([0-9.]+) s", daemon.log())
    for child in children:
        delete(daemon, group, child["hostname"])
    delete(daemon, group, parent)
    return elapsed, float(pauses[-1])


def steps(log: str, verb: str, group: str = "") -> dict[str, dict[str, Any]]:
    """
    The daemon's step timings of every ``node … cloned: disk 15 ms, …`` (or
    ``forked:``) line of ``log`` (of nodes of ``group`` only, if given): each
    step's median and samples, in ms.
    """
    found: dict[str, list[float]] = {}
    named = rf"{group}-\d+" if group else r"\S+"
    for line in re.findall(rf"node {named} {verb}: (.*)", log):
        for step, ms in re.findall(r"([a-z ]+?) (\d+) ms", line):
            found.setdefault(step.strip(), []).append(float(ms))
    return {step: {"median": statistics.median(values), "samples": values} for step, values in found.items()}


def wait_spares(daemon: Daemon, storage_size: int, count: int, timeout: float = 120.0) -> bool:
    """
    Wait until the template of nodes with ``storage_size`` has ``count``
    ready spares none took (by the daemon's log); whether it got them.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = daemon.log()
        digests = set(re.findall(rf"building template (\w+) \(.*storage_size={storage_size}\b", log))
        ready = [name for name, digest in ready_spares(log).items() if digest in digests]
        if len(ready) >= count:
            return True
        time.sleep(0.2)
    return False


def seconds_of(samples: list[float], round_: int, count: int) -> list[float]:
    """The samples of round ``round_`` of ``count`` at once."""
    return samples[round_ * count:(round_ + 1) * count]


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(samples), "max": max(samples), "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--together", type=int, default=4)
    parser.add_argument("--together-rounds", type=int, default=3)
    add_options(parser)  # the earlier checkout: its daemon's N at once (without spares, with warm_spare: true)
    parser.add_argument("--before-pool", action="store_true",
                        help="the earlier checkout takes warm_spare: N too: its pool's N at once as well")
    parser.add_argument("--output", default=None,
                        help="the results file: bench/results/warm.json, or with an earlier checkout beside this "
                             "one bench/results/warm-against-earlier.json")
    parser.add_argument("--note", default="", help="what to know about the run, e.g. other VMs on the machine")
    options = parser.parse_args()
    ensure_image()
    earlier = from_options(options)
    output = options.output or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                            "warm.json" if earlier is None else "warm-against-earlier.json")
    run = begin()
    group = {"vcpu": 1, "ram_mb": RAM_MB, "storage_size": "1G"}
    # The pool's own template (a pool is per template): its disk 8 MiB larger, nothing else differs.
    pool_size = (1 << 30) + (8 << 20)
    daemon = Daemon(groups=[{"name": "cold", "warm": False, **group},
                            {"name": "warm", "warm": True, "warm_spare": 0, **group},
                            {"name": "spare", "warm": True, "warm_spare": 1, **group},
                            {"name": "pool", "warm": True, "warm_spare": options.together, **group,
                             "storage_size": pool_size},
                            {"name": "fmem", "fork_memory": "file", **group}])
    before: Daemon | None = None
    try:
        if earlier is not None:
            before = start_earlier(earlier, [{"name": "warm", "warm": True, "warm_spare": False, **group},
                                   {"name": "spare", "warm": True, "warm_spare": True, **group}]
                                  + ([{"name": "pool", "warm": True, "warm_spare": options.together, **group,
                                       "storage_size": pool_size}] if options.before_pool else []))
        daemon.start()
        first_warm, _ = one_at_a_time(daemon, "warm")  # includes the template build
        one_at_a_time(daemon, "cold")  # the page cache, like the template's boot did for the warm group
        cold, clone, spared, cold_memory, clone_memory = [], [], [], [], []
        before_one_clone: list[float] = []
        before_one_spared: list[float] = []
        one_spares_missing = 0
        for round_ in range(options.rounds):
            seconds, figures = one_at_a_time(daemon, "cold")
            cold.append(seconds)
            cold_memory.append(figures)
            # Clones without and with a spare VM alternate (same template; the cold boot between lets the
            # replacement spare get ready, as the time between creates does in use).
            seconds, figures = one_at_a_time(daemon, "warm")
            clone.append(seconds)
            clone_memory.append(figures)
            one_spares_missing += not wait_spares(daemon, 1 << 30, 1)
            spared.append(one_at_a_time(daemon, "spare")[0])
            if before is not None:
                # The earlier daemon's clone and clone from a spare right after this one's: the same load.
                before_one_clone.append(one_at_a_time(before, "warm")[0])
                one_spares_missing += not wait_spares(before, 1 << 30, 1)
                before_one_spared.append(one_at_a_time(before, "spare")[0])
            print(f"round {round_ + 1}: cold {cold[-1]:.3f} s, clone {clone[-1]:.3f} s, "
                  f"clone from a spare {spared[-1]:.3f} s"
                  + (f"; before: clone {before_one_clone[-1]:.3f} s, clone from a spare {before_one_spared[-1]:.3f} s"
                     if before is not None else ""), flush=True)
        cold_together, cold_together_memory, _ = together(daemon, "cold", options.together)
        # N at once: without spares, with one, with a pool of N, alternating; each spare group's spares ready first.
        clone_together: list[float] = []
        spare_together: list[float] = []
        pool_together: list[float] = []
        clone_together_memory: list[dict[str, int]] = []
        burst_cpu: dict[str, list[float]] = {"warm": [], "spare": [], "pool": []}
        pool_together_memory: list[dict[str, int]] = []
        together_log = len(daemon.log())
        before_together_log = len(before.log()) if before is not None else 0
        spares_missing = 0
        before_clone: list[float] = []
        before_spare: list[float] = []
        before_pool: list[float] = []
        for round_ in range(options.together_rounds):
            if before is not None:
                before_clone += together(before, "warm", options.together)[0]
                spares_missing += not wait_spares(before, 1 << 30, 1)
                before_spare += together(before, "spare", options.together)[0]
                if options.before_pool:
                    spares_missing += not wait_spares(before, pool_size, options.together)
                    before_pool += together(before, "pool", options.together)[0]
            burst, burst_memory, cpu = together(daemon, "warm", options.together)
            burst_cpu["warm"].append(cpu)
            clone_together += burst
            clone_together_memory += burst_memory
            spares_missing += not wait_spares(daemon, 1 << 30, 1)
            burst, _, cpu = together(daemon, "spare", options.together)
            spare_together += burst
            burst_cpu["spare"].append(cpu)
            spares_missing += not wait_spares(daemon, pool_size, options.together)
            burst, burst_memory, cpu = together(daemon, "pool", options.together)
            burst_cpu["pool"].append(cpu)
            pool_together += burst
            pool_together_memory += burst_memory
            print(f"{options.together} at once, round {round_ + 1}: without spares "
                  f"{statistics.median(seconds_of(clone_together, round_, options.together)):.3f} s, "
                  f"with a spare {statistics.median(seconds_of(spare_together, round_, options.together)):.3f} s, "
                  f"with a pool of {options.together} "
                  f"{statistics.median(seconds_of(pool_together, round_, options.together)):.3f} s"
                  + (f"; before: without spares "
                     f"{statistics.median(seconds_of(before_clone, round_, options.together)):.3f} s, with a spare "
                     f"{statistics.median(seconds_of(before_spare, round_, options.together)):.3f} s"
                     + (f", with a pool {statistics.median(seconds_of(before_pool, round_, options.together)):.3f} s"
                        if before_pool else "")
                     if before is not None else ""), flush=True)
        together_steps = daemon.log()[together_log:]
        print(f"{options.together} at once: cold {statistics.median(cold_together):.3f} s, "
              f"clone {statistics.median(clone_together):.3f} s, "
              f"with a spare {statistics.median(spare_together):.3f} s, "
              f"with a pool of {options.together} {statistics.median(pool_together):.3f} s", flush=True)
        forks, file_forks = [], []
        for _ in range(3):  # alternating: the same load for both
            forks.append(fork(daemon, "warm", options.together))
            file_forks.append(fork(daemon, "fmem", options.together))
        for name, runs in (("", forks), (" (memory file)", file_forks)):
            print(f"fork of {options.together}{name}: {statistics.median(f[0] for f in runs):.3f} s, parent paused "
                  f"{statistics.median(f[1] for f in runs):.3f} s", flush=True)
        accel = re.search(r"accelerator: (\w+)", daemon.log())
        clone_steps, fork_steps = steps(daemon.log(), "cloned", "warm"), steps(daemon.log(), "forked", "warm")
        spare_steps = steps(daemon.log(), r"cloned from spare VM \S+", "spare")
        spare_events = [line for line in daemon.log().splitlines() if "spare VM" in line]
        file_fork_steps = steps(daemon.log(), "forked", "fmem")
        fork_states = [float(size) * 1e6 for size in re.findall(
            r"forked node warm-\d+ into .* after a pause of [0-9.]+ s \(state (\d+) MB\)", daemon.log())]
        copies = [(float(size) * 1e6, float(ms) / 1000) for size, ms in re.findall(
            r"copied the memory of fmem-\d+\.ram \((\d+) MB\) in (\d+) ms", daemon.log())]
        daemon_peak_rss = peak_rss(daemon.process.pid) if daemon.process else None
        before_spare_steps = steps(before.log()[:before_together_log], r"cloned from spare VM \S+", "spare") \
            if before is not None else None
        before_steps = {
            "without spares": steps(before.log(), "cloned", "warm"),
            "with a spare, from the spare": steps(before.log(), r"cloned from spare VM \S+", "spare"),
            "with a spare, the others": steps(before.log(), "cloned", "spare"),
            "with a pool, from a spare": steps(before.log(), r"cloned from spare VM \S+", "pool"),
        } if before is not None else None
    finally:
        daemon.cleanup()
        if before is not None:
            before.cleanup()

    def per_node(figures: list[dict[str, int]], key: str) -> dict[str, Any]:
        return {"median": statistics.median(f[key] for f in figures), "samples": [f[key] for f in figures]}

    result = {
        "benchmark": "warm",
        "accel": accel.group(1) if accel else "tcg",
        "rounds": options.rounds,
        "ram_bytes": RAM_MB << 20,
        "first_warm_create_with_template_build_s": first_warm,
        "cold_create_wait_agent_s": summary(cold),
        "clone_create_wait_agent_s": summary(clone),
        "ratio_cold_over_clone": statistics.median(cold) / statistics.median(clone),
        "spare_clone_create_wait_agent_s": summary(spared),
        "ratio_clone_over_spare_clone": statistics.median(clone) / statistics.median(spared),
        "ratio_cold_over_spare_clone": statistics.median(cold) / statistics.median(spared),
        "together_rounds": options.together_rounds,
        "spare_clone_together_s": summary(spare_together),
        "pool_clone_together_s": summary(pool_together),
        "ratio_clone_over_pool_clone_together": statistics.median(clone_together) / statistics.median(pool_together),
        "ratio_spare_clone_over_pool_clone_together": statistics.median(spare_together) / statistics.median(
            pool_together),
        "together_steps_ms": {
            "without spares (warm_spare: 0)": steps(together_steps, "cloned", "warm"),
            "with a spare (warm_spare: 1), from the spare": steps(together_steps, r"cloned from spare VM \S+", "spare"),
            "with a spare (warm_spare: 1), the others": steps(together_steps, "cloned", "spare"),
            f"with a pool (warm_spare: {options.together}), from a spare": steps(
                together_steps, r"cloned from spare VM \S+", "pool"),
            f"with a pool (warm_spare: {options.together}), the others": steps(together_steps, "cloned", "pool"),
        },
        "together_rounds_without_ready_spares": spares_missing,
        "rounds_without_a_ready_spare": one_spares_missing,
        "before": {
            **earlier.record(),
            "clone_create_wait_agent_s": summary(before_one_clone),
            "spare_clone_create_wait_agent_s": summary(before_one_spared),
            "spare_clone_steps_ms": before_spare_steps,
            "clone_together_s": summary(before_clone),
            "spare_clone_together_s": summary(before_spare),
            "pool_clone_together_s": summary(before_pool) if before_pool else None,
            "ratio_before_clone_over_pool_clone_together": statistics.median(before_clone) / statistics.median(
                pool_together),
            "ratio_before_spare_clone_over_pool_clone_together": statistics.median(before_spare) / statistics.median(
                pool_together),
            "together_steps_ms": before_steps,
        } if earlier is not None else None,
        "together_daemon_cpu_s": {
            "without spares (warm_spare: 0)": summary(burst_cpu["warm"]),
            "with a spare (warm_spare: 1)": summary(burst_cpu["spare"]),
            f"with a pool (warm_spare: {options.together})": summary(burst_cpu["pool"]),
        },
        "pool_pss_bytes_together": per_node(pool_together_memory, "pss"),
        "spare_clone_steps_ms": spare_steps,
        "spare_events": spare_events,
        "together": options.together,
        "cold_together_s": summary(cold_together),
        "clone_together_s": summary(clone_together),
        "ratio_cold_over_clone_together": statistics.median(cold_together) / statistics.median(clone_together),
        "fork_of_together_s": summary([f[0] for f in forks]),
        "fork_parent_pause_s": summary([f[1] for f in forks]),
        "fork_state_bytes": summary(fork_states) if fork_states else None,
        "clone_steps_ms": clone_steps,
        "fork_child_steps_ms": fork_steps,
        "fork_memory_file_of_together_s": summary([f[0] for f in file_forks]),
        "fork_memory_file_parent_pause_s": summary([f[1] for f in file_forks]),
        "fork_memory_file_copy_bytes": summary([size for size, _ in copies]) if copies else None,
        "fork_memory_file_copy_s": summary([seconds for _, seconds in copies]) if copies else None,
        "fork_memory_file_child_steps_ms": file_fork_steps,
        "ratio_fork_over_fork_memory_file": statistics.median(f[0] for f in forks) / statistics.median(
            f[0] for f in file_forks),
        "cold_rss_bytes_together": per_node(cold_together_memory, "rss"),
        "cold_pss_bytes_together": per_node(cold_together_memory, "pss"),
        "clone_rss_bytes_together": per_node(clone_together_memory, "rss"),
        "clone_pss_bytes_together": per_node(clone_together_memory, "pss"),
        "cold_rss_bytes": per_node(cold_memory, "rss"),
        "cold_pss_bytes": per_node(cold_memory, "pss"),
        "clone_rss_bytes": per_node(clone_memory, "rss"),
        "clone_pss_bytes": per_node(clone_memory, "pss"),
        "daemon_peak_rss_bytes": daemon_peak_rss,
        "note": options.note,
    }
    if earlier is not None:
        result["ratio_after_over_before"] = ratios(result, result["before"], (
            "clone_create_wait_agent_s.median", "spare_clone_create_wait_agent_s.median",
            "clone_together_s.median", "spare_clone_together_s.median", "pool_clone_together_s.median"))
    write_result(output, result, run)
    print(json.dumps({k: result[k] for k in ("accel", "ratio_cold_over_clone", "ratio_clone_over_spare_clone",
                                              "ratio_clone_over_pool_clone_together",
                                              "ratio_cold_over_clone_together",
                                              "fork_of_together_s", "fork_memory_file_of_together_s",
                                              "clone_pss_bytes_together", "daemon_peak_rss_bytes",
                                              "ratio_after_over_before") if k in result}, default=str))


if __name__ == "__main__":
    main()
