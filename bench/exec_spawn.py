"""
Exec spawn benchmark: where an exec of ``true`` spends its time in the guest.

For each image given (``--image LABEL=IMAGE_DIR``, by default the one of
``$VMSERVICE_IMAGE_DIR``), in one run, one after the other: the image's guest
started by hand (the daemon's QEMU command, TCG), then through its agent

- PING/PONG round trips (the least an exec can cost),
- exec ``/bin/true`` without a shell, ``true`` through the default ``/bin/bash``,
  and ``bash --norc --noprofile -c true`` / ``/bin/sh -c true`` started as programs (the image has no dash; its /bin/sh is named in the probe),
- ``bench/exec_spawn_probe.py`` run in the guest: each step the agent takes for
  an exec timed with the agent's own code, and what each program costs to
  start and exit by itself, from inside the guest.

``--bash-static PATH`` also copies that binary into the guest and measures
the default shell's ``true`` with it (get it with ``apt-get download
bash-static`` and ``dpkg-deb -x``): compares the static bash in an image that
lacks it.  Before and after an image change, side by side: ``--image
before=DIR --image after=DIR``.

Writes ``bench/results/exec_spawn.json``: p50s and the ratio of each exec to
the round trip (the target for ``/bin/true`` is 3x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import reactor  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402

from tests.integration.daemon import IMAGE_DIR  # noqa: E402
from bench.limits import image_guest  # noqa: E402
from vmservice.agent.client import AgentClient  # noqa: E402
from vmservice.agent.execution import run_collected  # noqa: E402
from vmservice.images.store import resolve_image  # noqa: E402
from vmservice.nodes.guest_exec import ExecRequest  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exec_spawn_probe.py")
EXECS = {
    "true_no_shell": ExecRequest(cmd="/bin/true", shell=""),
    "true_bash": ExecRequest(cmd="true"),
    "bash_norc_no_shell": ExecRequest(cmd="/bin/bash", args=("--norc", "--noprofile", "-c", "true"), shell=""),
    "sh_no_shell": ExecRequest(cmd="/bin/sh", args=("-c", "true"), shell=""),
}
#: With ``--bash-static``: Debian's statically linked bash (package bash-static),
#: copied into the guest as /tmp/bash-static.
STATIC_EXECS = {
    "true_bash_static": ExecRequest(cmd="true", shell="/tmp/bash-static"),
}


def start_guest(image_dir: str, workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    argv, agent = image_guest(resolve_image(image_dir, "default"), workdir, "bench-exec")
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), agent


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


async def measure(image_dir: str, rounds: int, bash_static: str | None) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="vms-bench-exec-", dir="/tmp")
    qemu, socket_path = start_guest(image_dir, workdir)
    client = AgentClient(reactor, socket_path)
    try:
        client.start()
        await client.when_ready()
        await client.ping()
        pings = [await client.ping() for _ in range(rounds)]
        result: dict[str, Any] = {"image": os.path.realpath(os.path.join(image_dir, "default")),
                                  "raw_round_trip_p50_s": p50(pings)}
        execs = dict(EXECS)
        if bash_static:
            with open(bash_static, "rb") as f:
                outcome = await run_collected(
                    client, ExecRequest(cmd="cat > /tmp/bash-static && chmod 755 /tmp/bash-static", stdin=True),
                    reactor, stdin=f.read())
            if outcome.exit_code != 0:
                raise RuntimeError(f"copying bash-static failed: {outcome}")
            execs.update(STATIC_EXECS)
        for name, request in execs.items():
            await run_collected(client, request, reactor)  # warm-up
            samples = []
            for _ in range(rounds):
                started = time.monotonic()
                outcome = await run_collected(client, request, reactor)
                samples.append(time.monotonic() - started)
                if outcome.exit_code != 0:
                    raise RuntimeError(f"{name} failed: {outcome}")
            result[f"exec_{name}_p50_s"] = p50(samples)
            result[f"ratio_exec_{name}_over_round_trip"] = p50(samples) / p50(pings)
        with open(PROBE, "rb") as f:
            probe = f.read()
        outcome = await run_collected(
            client, ExecRequest(cmd="/usr/bin/python3", args=("-I", "-", str(rounds)), shell="", stdin=True),
            reactor, stdin=probe)
        if outcome.exit_code != 0:
            raise RuntimeError(f"probe failed: {outcome}")
        result["in_guest"] = json.loads(outcome.stdout)
        # The same with the guest's ASLR off: QEMU 7.2's TCG keys its translations
        # by virtual address, so a program mapped elsewhere at each start is
        # translated again each time.
        outcome = await run_collected(
            client, ExecRequest(cmd="/usr/bin/python3", args=("-I", "-", str(rounds), "norandom"), shell="",
                                stdin=True), reactor, stdin=probe)
        if outcome.exit_code != 0:
            raise RuntimeError(f"probe failed: {outcome}")
        result["in_guest_aslr_off"] = json.loads(outcome.stdout)
        for name, request in execs.items():
            samples = []
            for _ in range(rounds):
                started = time.monotonic()
                await run_collected(client, request, reactor)
                samples.append(time.monotonic() - started)
            result[f"aslr_off_exec_{name}_p50_s"] = p50(samples)
        return result
    finally:
        await client.stop()
        qemu.kill()
        qemu.wait()
        subprocess.run(["rm", "-rf", workdir])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--image", action="append", default=[], help="LABEL=IMAGE_DIR (repeatable)")
    parser.add_argument("--bash-static", help="Debian's bash-static binary, also measured when given")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                         "exec_spawn.json"))
    options = parser.parse_args()
    images = [tuple(item.split("=", 1)) for item in options.image] or [("this", IMAGE_DIR)]
    outcome: dict[str, Any] = {"benchmark": "exec_spawn", "accel": "tcg", "rounds": options.rounds,
                               "load_average_before": os.getloadavg(), "images": {}}

    def run() -> Deferred[None]:
        async def go() -> None:
            for label, directory in images:
                outcome["images"][label] = await measure(directory, options.rounds, options.bash_static)

        d = Deferred.fromCoroutine(go())
        d.addErrback(lambda failure: outcome.update(error=failure))
        d.addBoth(lambda _: reactor.stop())
        return d

    reactor.callWhenRunning(run)
    reactor.run()
    if "error" in outcome:
        outcome["error"].raiseException()
    outcome["load_average_after"] = os.getloadavg()
    outcome["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    os.makedirs(os.path.dirname(options.output), exist_ok=True)
    with open(options.output, "w") as f:
        json.dump(outcome, f, indent=2)
        f.write("\n")
    print(json.dumps(outcome, indent=1))


if __name__ == "__main__":
    main()
