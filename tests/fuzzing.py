"""
Fuzz the daemon's HTTP API with schemathesis, against a real daemon with a real
guest, from the OpenAPI document the daemon serves: ``make fuzz`` (longer) and
``make test`` (a small bound).

    python tests/fuzzing.py [--max-examples N] [--max-time SECONDS] [--seed N] [--counts PATH]

The daemon runs with auth on (a token of this run's own), one host group of at
most two nodes of 256 MiB (what the fuzzer creates is bounded), and one node
booted before the run so that the guest routes reach a guest.  Every phase
runs (examples, coverage, fuzzing, stateful: the document's links take a
created node to its guest routes and its delete) with every check.  Then
every node is deleted and the run is checked to have left nothing behind: no
node, no QEMU of the state directory, and the daemon still answers.  Prints
schemathesis' own summary and one line of counts (with ``--counts PATH``
also written to PATH as JSON with the operations and checks that failed,
for ``bench/fuzz.py``); exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.child_output import run_teed  # noqa: E402
from tests.integration.daemon import Daemon, ensure_image, processes_under  # noqa: E402

TOKEN = "fuzz-token-0123456789abcdef"
GROUP = {"name": "demo", "count": 0, "max_nodes": 2, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"}


def _schemathesis(daemon: Daemon, args: argparse.Namespace) -> tuple[int, str]:
    """Run schemathesis against ``daemon``: its exit status and its output (shown as it comes)."""
    # The node booted for the run and its group, so that the guest routes reach a guest.
    config = os.path.join(daemon.root, "schemathesis.toml")
    with open(config, "w") as f:
        f.write('[parameters]\n"path.hostname" = "demo-1"\n"path.name" = "demo"\n')
    st = os.path.join(os.path.dirname(sys.executable), "st")
    command = [
        st, "--config-file", config, "run", f"http://127.0.0.1:{daemon.port}/openapi.json",
        "-H", f"Authorization: Bearer {TOKEN}",
        "--phases", "examples,coverage,fuzzing,stateful",
        "--checks", "all",
        "--max-examples", str(args.max_examples),
        "--workers", "1",
        "--request-timeout", "120",
        # A create with wait=agent boots a guest: seconds under TCG, more on a busy machine.
        "--max-response-time", "120",
        "--generation-database", "none",
        "--seed", str(args.seed),
        "--no-color",
        # A WebSocket-only route answers a plain GET 400 websocket_required, which OpenAPI cannot
        # state; the integration tests cover it (test_shell).
        "--exclude-path", "/vm/{hostname}/shell",
    ]
    if args.max_time:
        command += ["--max-time", str(args.max_time)]
    env = dict(os.environ, SCHEMATHESIS_HOOKS="tests.fuzz_hooks",
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    return run_teed(command, cwd=daemon.root, env=env, stderr=subprocess.STDOUT)


def _counts(output: str) -> dict[str, int]:
    """Cases generated and unique failures found, from schemathesis' summary."""
    generated = re.search(r"(\d+) generated", output)
    failures = re.search(r"(\d+) unique failures?", output)
    return {"cases": int(generated.group(1)) if generated else 0,
            "failures": int(failures.group(1)) if failures else 0}


def failures(output: str) -> list[dict[str, Any]]:
    """
    What failed, from schemathesis' FAILURES section: each operation with
    the checks that failed on it (``ST202 Schema-valid request rejected``).
    """
    found: list[dict[str, Any]] = []
    section = False
    for line in output.splitlines():
        line = line.rstrip()
        heading = re.fullmatch(r"=+ ([A-Z]+) =+", line)
        if heading:
            section = heading.group(1) == "FAILURES"
            continue
        operation = re.fullmatch(r"_+ (.+?) _+", line) if section else None
        if operation:
            found.append({"operation": operation.group(1), "checks": []})
        elif section and found:
            check = re.fullmatch(r"- (.+)", line)
            if check and check.group(1) not in found[-1]["checks"]:
                found[-1]["checks"].append(check.group(1))
    return found


def _clean(daemon: Daemon) -> list[str]:
    """Delete every node; what is left behind (empty when nothing)."""
    left: list[str] = []
    for node in daemon.json("GET", "/nodes"):
        hostname, group = node["hostname"], node["hostgroup"]
        if node.get("protected"):
            daemon.request("PATCH", f"/vm/{hostname}", {"protected": False})
        status, _, body = daemon.request("DELETE", f"/hostgroup/{group}/nodes/{hostname}")
        if status not in (200, 202, 204, 404):
            left.append(f"node {hostname}: delete answered {status} {body[:200]!r}")
    deadline = time.monotonic() + 60
    while daemon.json("GET", "/nodes") and time.monotonic() < deadline:
        time.sleep(0.5)
    left += [f"node {node['hostname']} still listed" for node in daemon.json("GET", "/nodes")]
    left += [f"QEMU {pid} of the state directory still runs" for pid in processes_under(daemon.state_dir)]
    status, _, _ = daemon.request("GET", "/healthz")
    if status != 200:
        left.append(f"/healthz answered {status}")
    return left


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=10, help="test cases per operation and phase")
    parser.add_argument("--max-time", type=int, default=0, help="seconds for the whole run (0: no bound)")
    parser.add_argument("--seed", type=int, default=1, help="schemathesis' random seed")
    parser.add_argument("--counts", metavar="PATH",
                        help="also write the closing line's counts, what failed and what was left behind to PATH "
                             "as JSON")
    args = parser.parse_args()
    ensure_image()
    daemon = Daemon(groups=[GROUP])
    tokens = os.path.join(daemon.root, "tokens")
    with open(tokens, "w") as f:
        f.write(f"{TOKEN} fuzz\n")
    os.chmod(tokens, 0o600)
    daemon.api["auth"] = {"enabled": True, "token_file": tokens}
    daemon.token = TOKEN
    try:
        daemon.start()
        # Persistent: a fuzzed shutdown leaves it Stopped (and a relaunch brings it back), not gone.
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {"persistent": True}, expect=201)
        status, output = _schemathesis(daemon, args)
        counts = _counts(output)
        left = _clean(daemon)
    finally:
        daemon.cleanup()
    for line in left:
        print(f"fuzz: left behind: {line}")
    print(f"fuzz: {counts['cases']} cases, {counts['failures']} unique failures, "
          f"schemathesis exit {status}, {len(left)} things left behind")
    if args.counts:
        with open(args.counts, "w") as f:
            json.dump({"cases": counts["cases"], "unique_failures": counts["failures"],
                       "failures": failures(output), "schemathesis_exit": status, "left_behind": left}, f)
    return 1 if status or left else 0


if __name__ == "__main__":
    sys.exit(main())
