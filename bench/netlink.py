"""
A networked clone's adoption, side by side in one run: this checkout's
daemon and image (the guest sets eth0 through rtnetlink) against an earlier
checkout's with its own image (``--before``: e.g. one that ran ``ip``), each
with three networked warm groups: isolated without spares, bridged without
spares, bridged with a spare VM.  Creates alternate between the two daemons,
one at a time (``--rounds`` of each group).  Without ``--before``, this
checkout's daemon alone (``after``, no ratios), as ``make bench`` runs it.

For each create: the seconds of ``POST /hostgroup/G/nodes?wait=agent``, the
daemon's ``adopt`` and ``load`` steps (``node … cloned: …``) and the guest's
``network`` step from the node's console (``adopted X (… network N ms …)``).
Writes medians, samples and the ratios (before / after) to
``bench/results/netlink.json``.

    .venv/bin/python bench/netlink.py [--before DIR [--before-images DIR]] [--rounds 5] [--note TEXT]

``--before DIR``: ``git archive <commit> | tar -x -C DIR``; its image is
built into ``--before-images`` (default ``/var/cache/vmservice/images``) if
missing, this checkout's into ``$VMSERVICE_IMAGE_DIR``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integration.daemon import IMAGE_DIR, Daemon, ensure_image  # noqa: E402
from bench.earlier import ready_spares, start_daemon  # noqa: E402
from bench.recording import begin, write_result  # noqa: E402

GROUP = {"vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True}
KINDS = ("isolated", "bridged", "bridged-spare")


def groups(side: int) -> tuple[list[dict[str, Any]], str]:
    """The three groups of daemon ``side`` (0 or 1: their own bridge and ranges), and its bridge's name."""
    bridge = f"vmsnlbr{side}"
    bridged = {"mode": "bridge", "bridge": bridge, "gateway": f"10.93.{side}.1/24"}
    return [{**GROUP, "name": "isolated", "warm_spare": 0,
             "network": {"mode": "isolated", "range": f"10.92.{side}.0/26"}},
            {**GROUP, "name": "bridged", "warm_spare": 0, "network": {**bridged, "range": f"10.93.{side}.0/28"}},
            {**GROUP, "name": "bridged-spare", "warm_spare": 1,
             "network": {**bridged, "range": f"10.93.{side}.16/28"}}], bridge


def build_before(path: str, image_dir: str) -> None:
    """Build the earlier checkout's image (from its own recipe and guest code) if it is missing."""
    code = ("import sys; sys.path.insert(0, '.'); from vmservice.images.build import build_image; "
            f"build_image({image_dir!r}, name='default', force=False, out=lambda *a, **k: None)")
    subprocess.run([sys.executable, "-c", code], cwd=path, check=True)


def network_ms(daemon: Daemon, hostname: str, timeout: float = 30.0) -> float:
    """The guest's ``network`` step, from its console (logged just after its answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = daemon.json("GET", f"/vm/{hostname}/logs?lines=0")
        found = re.findall(rf"adopted {hostname} \(.*?network (\d+) ms", logs["content"])
        if found:
            return float(found[-1])
        time.sleep(0.2)
    raise AssertionError(f"no adoption line on {hostname}'s console")


def clone_steps(daemon: Daemon, hostname: str) -> dict[str, float]:
    line = re.findall(rf"node {hostname} cloned(?: from spare VM \S+)?: (.*)", daemon.log())[-1]
    return {step.strip(): float(ms) for step, ms in re.findall(r"([a-z ]+?) (\d+) ms", line)}


def wait_spare(daemon: Daemon, timeout: float = 180.0) -> None:
    """Wait until the ``bridged-spare`` group's template has a ready spare none took."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready_spares(daemon.log()):
            return
        time.sleep(0.2)
    raise AssertionError("no spare VM got ready")


def one(daemon: Daemon, group: str) -> dict[str, float]:
    """One create of ``group``: its seconds, its clone steps and the guest's network step; then its removal."""
    if group == "bridged-spare":
        wait_spare(daemon)
    started = time.monotonic()
    node = daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=4m", {}, expect=201)
    seconds = time.monotonic() - started
    hostname = node["hostname"]
    try:
        figures = {"create_s": seconds, "network_ms": network_ms(daemon, hostname)}
        steps = clone_steps(daemon, hostname)
        figures.update({f"{step}_ms": steps[step] for step in ("load", "adopt") if step in steps})
        return figures
    finally:
        daemon.json("DELETE", f"/hostgroup/{group}/nodes/{hostname}")


def summarize(samples: list[dict[str, float]]) -> dict[str, Any]:
    keys = sorted({key for sample in samples for key in sample})
    return {key: {"median": statistics.median(values), "samples": values}
            for key in keys if (values := [sample[key] for sample in samples if key in sample])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="an earlier checkout (git archive), measured beside this one")
    parser.add_argument("--before-images", default="/var/cache/vmservice/images")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                         "netlink.json"))
    parser.add_argument("--note", default="", help="what to know about the run, e.g. other VMs on the machine")
    options = parser.parse_args()
    ensure_image()
    sides: list[tuple[str, str | None, str]] = [("after", None, IMAGE_DIR)]
    if options.before:
        build_before(options.before, options.before_images)
        sides.insert(0, ("before", options.before, options.before_images))
    run = begin()
    daemons: dict[str, Daemon] = {}
    bridges = []
    try:
        for side, (name, path, images) in enumerate(sides):
            groups_, bridge = groups(side)
            bridges.append(bridge)
            daemons[name] = start_daemon(groups_, path, images)
        samples: dict[str, dict[str, list[dict[str, float]]]] = {name: {kind: [] for kind in KINDS}
                                                                  for name in daemons}
        for name, daemon in daemons.items():  # the templates' builds (and the first clone's page cache)
            for kind in KINDS:
                one(daemon, kind)
        for round_ in range(options.rounds):
            for kind in KINDS:
                for name, daemon in daemons.items():
                    samples[name][kind].append(one(daemon, kind))
            print(f"round {round_ + 1}: " + "; ".join(
                f"{kind} network " + " -> ".join(f"{samples[name][kind][-1]['network_ms']:.0f}" for name in daemons)
                + " ms" for kind in KINDS), flush=True)
    finally:
        for daemon in daemons.values():
            daemon.cleanup()
        for bridge in bridges:
            subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
    result: dict[str, Any] = {"benchmark": "netlink", "note": options.note, "before_code": options.before,
                              "rounds": options.rounds}
    for kind in KINDS:
        after = summarize(samples["after"][kind])
        result[kind] = {"after": after}
        if "before" not in samples:
            print(f"{kind}: " + ", ".join(f"{key} {after[key]['median']:.3f}" for key in after), flush=True)
            continue
        before = summarize(samples["before"][kind])
        result[kind].update(before=before, ratios={key: before[key]["median"] / after[key]["median"]
                                                   for key in before if key in after and after[key]["median"] > 0})
        print(f"{kind}: " + ", ".join(f"{key} {before[key]['median']:.3f} -> {after[key]['median']:.3f}"
                                      for key in before if key in after), flush=True)
    write_result(options.output, result, run)


if __name__ == "__main__":
    main()
