"""
Restart benchmark: what a daemon restart costs the nodes and the next create,
side by side in one run.

Each round kills the daemon (``kill -9``) with one running node and starts it
again (``accel: auto``), then times, from the moment the restarted daemon's
API answers (``/healthz`` 200):

- ``agent_after_restart_s``: the running node's agent answering an exec
  (``POST /vm/{h}/exec?cmd=true``, buffered) — the target is 1 s;
- ``first_create_s``: the first create after the start (cold, ``wait=agent``),
  and ``next_create_s`` the one after it: the target is a ratio of 1.

It does so twice per round: once with the KVM probe's outcome remembered
(what every start but the first on a state directory does) and once with it
removed (``<state_dir>/probe/outcome.json``), which makes the daemon probe
again, as every start did before the outcome was remembered.  The floor of
``agent_after_restart_s`` is one exec on a node whose agent is connected
(``exec_connected_s``, taken in the same round).

Writes medians, samples and the ratios to ``bench/results/restart.json``.

    .venv/bin/python bench/restart.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import Daemon, ensure_image  # noqa: E402
from bench.recording import begin, peak_rss, write_result  # noqa: E402

GROUP = {"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"}
EXEC = "/vm/demo-1/exec?" + urlencode({"cmd": "true", "shell": "", "buffered": "true"})
#: Seconds any single wait may take before the run fails.
TIMEOUT = 180.0


def _ok(daemon: Daemon, method: str, path: str, status: int = 200) -> Any:
    got, _, body = daemon.request(method, path, timeout=TIMEOUT)
    if got != status:
        raise RuntimeError(f"{method} {path}: {got} {body!r}")
    return body


def _until_ok(daemon: Daemon, method: str, path: str) -> float:
    """Seconds until ``method path`` is answered 200 (503s retried at once)."""
    started = time.monotonic()
    while True:
        got, _, body = daemon.request(method, path, timeout=TIMEOUT)
        if got == 200:
            return time.monotonic() - started
        if got != 503 or time.monotonic() - started > TIMEOUT:
            raise RuntimeError(f"{method} {path}: {got} {body!r}")


def _create(daemon: Daemon) -> tuple[str, float]:
    started = time.monotonic()
    body = daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=5m", {}, expect=201)
    return body["hostname"], time.monotonic() - started


def _restart(daemon: Daemon, remembered: bool) -> dict[str, float]:
    """Kill the daemon, start it again and time what its node and the next creates see."""
    if daemon.stop(signal.SIGKILL) != -signal.SIGKILL:
        raise RuntimeError("the daemon did not die by SIGKILL")
    outcome = os.path.join(daemon.state_dir, "probe", "outcome.json")
    if not remembered and os.path.exists(outcome):
        os.unlink(outcome)
    daemon.start(timeout=TIMEOUT)
    figures = {"agent_after_restart_s": _until_ok(daemon, "POST", EXEC)}
    first, figures["first_create_s"] = _create(daemon)
    second, figures["next_create_s"] = _create(daemon)
    figures["exec_connected_s"] = _until_ok(daemon, "POST", EXEC)
    for hostname in (first, second):
        daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")
    return figures


def _summary(samples: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(samples), "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ensure_image()
    run = begin()
    daemon = Daemon(groups=[GROUP], accel="auto")
    variants = ("remembered", "probing")
    samples: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    peak = None
    try:
        daemon.start(timeout=TIMEOUT)
        _create(daemon)  # demo-1, which every restart finds running
        for _ in range(args.rounds):
            for variant in variants:
                for name, value in _restart(daemon, variant == "remembered").items():
                    samples[variant].setdefault(name, []).append(value)
        accel = "tcg" if "accelerator: tcg" in daemon.log() else "kvm"
        assert daemon.process is not None
        peak = peak_rss(daemon.process.pid)
    finally:
        daemon.cleanup()
    result: dict[str, Any] = {"benchmark": "restart", "accel": accel, "rounds": args.rounds,
                              "daemon_peak_rss_bytes": peak}
    for variant in variants:
        figures: dict[str, Any] = {name: _summary(values) for name, values in samples[variant].items()}
        median = {name: figures[name]["median"] for name in samples[variant]}
        figures["ratio_first_create_over_next"] = median["first_create_s"] / median["next_create_s"]
        figures["ratio_agent_after_restart_over_connected_exec"] = (
            median["agent_after_restart_s"] / median["exec_connected_s"])
        result[variant] = figures
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "restart.json")
    write_result(path, result, run)
    for variant in variants:
        figures = result[variant]
        print(f"{variant}: agent after restart {figures['agent_after_restart_s']['median']:.3f} s "
              f"(connected exec {figures['exec_connected_s']['median']:.3f} s), first create "
              f"{figures['first_create_s']['median']:.2f} s, next {figures['next_create_s']['median']:.2f} s "
              f"(ratio {figures['ratio_first_create_over_next']:.2f})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
