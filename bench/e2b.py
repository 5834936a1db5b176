"""
E2B benchmark: the official E2B Python SDK (``e2b``, unchanged) against the
daemon's E2B port, side by side in one run with the same work through our
own API, alternating round by round so that the load hits both alike:

- **create to first command**: ``Sandbox.create()`` then
  ``commands.run("true")``, against ``POST /hostgroup/e2b/nodes?wait=agent``
  then ``POST /vm/NODE/exec?cmd=true&buffered=true``;
- **command round trip**: ``commands.run("true")`` in a running sandbox,
  against the same buffered exec of our API in a running node (what the
  E2B path adds: Connect's envelopes, ``bash -l``, the process table);
- the floor of a round trip through our API: ``GET /vm/NODE/health``.

The group is warm (a clone of a template booted once), as the shipped
configuration's ``e2b`` group is.  Writes medians, samples, the ratios
(SDK over API) and the daemon's peak memory to ``bench/results/e2b.json``.

    .venv/bin/python bench/e2b.py [--rounds 5] [--commands 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable

# This script's directory leaves the path: its name would hide the SDK's package, ``e2b``.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [os.path.dirname(HERE)] + [entry for entry in sys.path if os.path.abspath(entry or ".") != HERE]

from tests.integration.daemon import Daemon, ensure_image, free_port  # noqa: E402
from bench.recording import begin, peak_rss, write_result  # noqa: E402
from e2b import Sandbox  # noqa: E402

RESULT = os.path.join(HERE, "results", "e2b.json")
#: The warm group the ``base`` template names (the shipped configuration's ``e2b`` group).
GROUP = {"name": "e2b", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "image": "e2b"}


def timed(action: Callable[[], Any]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
            "samples_s": [round(sample, 4) for sample in samples]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="creates through each path")
    parser.add_argument("--commands", type=int, default=20, help="command round trips per round and path")
    options = parser.parse_args()
    ensure_image("e2b")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY="e2b_bench")
    os.environ.pop("E2B_DEBUG", None)

    daemon = Daemon(groups=[GROUP], e2b={"enabled": True, "port": port, "templates": {"base": "e2b"}})
    daemon.start()
    try:
        warm = daemon.json("POST", "/hostgroup/e2b/nodes?wait=agent&timeout=5m", {}, expect=201)
        daemon.json("DELETE", f"/hostgroup/e2b/nodes/{warm['hostname']}")
        run = begin()
        sdk_first, api_first, sdk_round, api_round, health = [], [], [], [], []
        for _ in range(options.rounds):
            started = time.monotonic()
            sandbox = Sandbox.create()
            sandbox.commands.run("true")
            sdk_first.append(time.monotonic() - started)
            sdk_round += [timed(lambda: sandbox.commands.run("true")) for _ in range(options.commands)]
            sandbox.kill()

            started = time.monotonic()
            node = daemon.json("POST", "/hostgroup/e2b/nodes?wait=agent&timeout=2m", {}, expect=201)["hostname"]
            daemon.run(node, "true")
            api_first.append(time.monotonic() - started)
            api_round += [timed(lambda: daemon.run(node, "true")) for _ in range(options.commands)]
            health += [timed(lambda: daemon.json("GET", f"/vm/{node}/health")) for _ in range(options.commands)]
            daemon.json("DELETE", f"/hostgroup/e2b/nodes/{node}")
        result = {
            "create_to_first_command": {"sdk": summary(sdk_first), "api": summary(api_first),
                                        "ratio_sdk_over_api": statistics.median(sdk_first)
                                        / statistics.median(api_first)},
            "command_round_trip": {"sdk": summary(sdk_round), "api": summary(api_round),
                                   "api_health": summary(health),
                                   "ratio_sdk_over_api": statistics.median(sdk_round) / statistics.median(api_round),
                                   "ratio_sdk_over_health": statistics.median(sdk_round)
                                   / statistics.median(health)},
            "rounds": options.rounds, "commands_per_round": options.commands,
            "daemon_peak_rss_bytes": peak_rss(daemon.process.pid) if daemon.process else None,
        }
        write_result(RESULT, result, run)
        print(f"create to first command: SDK {statistics.median(sdk_first):.3f} s, "
              f"API {statistics.median(api_first):.3f} s; round trip: SDK {statistics.median(sdk_round) * 1000:.1f} ms, "
              f"API {statistics.median(api_round) * 1000:.1f} ms, health {statistics.median(health) * 1000:.1f} ms")
    finally:
        daemon.cleanup()


if __name__ == "__main__":
    main()
