"""
Exec spawn benchmark: where an exec of ``true`` spends its time, and what
the guest's address space randomization (``guest_aslr``) and the daemon add.

For each image given (``--image LABEL=IMAGE_DIR``, by default the one of
``$VMSERVICE_IMAGE_DIR``), in one run: the images' guests started by hand at
once (the daemon's QEMU command, TCG), each measured with its address space
randomization on (the default) and off (``randomize_va_space`` 0, what
``norandmaps`` sets at boot for a ``guest_aslr: false`` group), in blocks of
a few samples taken in turn on every guest and setting (the load of a shared
machine comes and goes: it weighs on all alike).  Through each agent:

- PING/PONG round trips (the least an exec can cost),
- exec ``/bin/true`` without a shell, ``true`` through the default ``/bin/bash``,
  and ``bash --norc --noprofile -c true`` / ``/bin/sh -c true`` started as
  programs (the image has no dash; its /bin/sh is busybox),
- ``bench/exec_spawn_probe.py`` run in the guest: each step the agent takes for
  an exec timed with the agent's own code, the agent's whole work for one
  exec without the port, and what each program costs to start and exit by
  itself, from inside the guest.

With ``--api``: a daemon (image of ``$VMSERVICE_IMAGE_DIR``) with one node per
setting, and beside it a guest of the same image started by hand; execs
through the HTTP API (``POST /vm/NODE/exec``, a new connection each, the
whole NDJSON response read) alternate with the same execs sent straight to
the bare guest's agent: what the daemon and HTTP add; and ``GET /vm/NODE``
(answered from the node's record), HTTP and the daemon without the guest;
``GET /vm/NODE/health`` (one round trip to the agent) alternating with exec
``/bin/true`` through the API, and their ratio; and the host CPU time per
exec of the daemon (through the API) and of this process's agent client
(straight to the agent).

``--bash-static PATH`` also copies that binary into the guest and measures
the default shell's ``true`` with it (get it with ``apt-get download
bash-static`` and ``dpkg-deb -x``).  Before and after a change to the guest,
side by side: ``--image before=DIR --image after=DIR``.

Writes ``bench/results/exec_spawn.json``: p50s and the ratio of each exec to
the round trip of the same guest (the target for ``/bin/true`` is 3x).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import reactor  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.threads import deferToThread  # noqa: E402

from tests.integration.daemon import IMAGE_DIR, Daemon  # noqa: E402
from bench.limits import image_guest  # noqa: E402
from bench.recording import begin, cpu_seconds, write_result  # noqa: E402
from vmservice.agent.client import AgentClient  # noqa: E402
from vmservice.agent.execution import run_collected  # noqa: E402
from vmservice.guestport.exec import ExecRequest  # noqa: E402
from vmservice.images.store import resolve_image  # noqa: E402

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
#: The execs compared through the API and straight to the agent, as query strings.
API_EXECS = {
    "true_no_shell": (ExecRequest(cmd="/bin/true", shell=""), "cmd=/bin/true&shell="),
    "true_bash": (ExecRequest(cmd="true"), "cmd=true"),
}
SETTINGS = {"aslr_on": True, "aslr_off": False}
RAM_MB = 256
#: Samples taken in a row on one guest and setting before the next one's turn.
BLOCK = 5


def start_guest(image_dir: str, workdir: str, aslr: bool) -> tuple[subprocess.Popen[bytes], str]:
    argv, agent = image_guest(resolve_image(image_dir, "default"), workdir, "bench-exec")
    if not aslr:
        at = argv.index("-append") + 1
        argv[at] += " norandmaps"  # as kernel_cmdline(aslr=False) boots a guest_aslr: false group
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), agent


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


class BareGuest:
    """The image's guest started by hand and its agent client, for ``async with``."""

    def __init__(self, image_dir: str, aslr: bool) -> None:
        self.image_dir, self.aslr = image_dir, aslr

    async def __aenter__(self) -> AgentClient:
        self.workdir = tempfile.mkdtemp(prefix="vms-bench-exec-", dir="/tmp")
        self.qemu, socket_path = start_guest(self.image_dir, self.workdir, self.aslr)
        self.client = AgentClient(reactor, socket_path)
        self.client.start()
        await self.client.when_ready()
        await self.client.ping()
        return self.client

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.stop()
        self.qemu.kill()
        self.qemu.wait()
        subprocess.run(["rm", "-rf", self.workdir])


async def timed(client: AgentClient, request: ExecRequest) -> float:
    started = time.monotonic()
    outcome = await run_collected(client, request, reactor)
    if outcome.exit_code != 0:
        raise RuntimeError(f"{request} failed: {outcome}")
    return time.monotonic() - started


async def set_aslr(client: AgentClient, value: str) -> None:
    """``kernel.randomize_va_space`` of a running guest (what ``norandmaps`` sets at boot: 0)."""
    outcome = await run_collected(
        client, ExecRequest(cmd=f"echo {value} > /proc/sys/kernel/randomize_va_space"), reactor)
    if outcome.exit_code != 0:
        raise RuntimeError(f"setting randomize_va_space failed: {outcome}")


async def measure(images: list[tuple[str, str]], rounds: int, bash_static: str | None,
                  baseline: bytes | None) -> dict[str, Any]:
    """
    The images' guests at once, and every exec in blocks of :data:`BLOCK`
    samples taken in turn on each guest and setting (the setting switched in
    the running guest), so that a load that comes and goes weighs on all alike.
    """
    guests = [BareGuest(directory, True) for _, directory in images]
    clients = [await guest.__aenter__() for guest in guests]
    try:
        combos = [(label, client, name, value) for (label, _), client in zip(images, clients)
                  for name, value in (("aslr_on", "2"), ("aslr_off", "0"))]
        result: dict[str, Any] = {label: {name: {"image": os.path.realpath(os.path.join(directory, "default"))}
                                          for name in SETTINGS} for label, directory in images}
        execs = dict(EXECS)
        if bash_static:
            for client in clients:
                await copy_bash_static(client, bash_static)
            execs.update(STATIC_EXECS)
        samples: dict[tuple[str, str], dict[str, list[float]]] = {(c[0], c[2]): {} for c in combos}
        for _ in range(0, rounds, BLOCK):
            for label, client, name, value in combos:
                await set_aslr(client, value)
                mine = samples[(label, name)]
                await client.ping()
                mine.setdefault("ping", []).extend([await client.ping() for _ in range(BLOCK)])
                for kind, request in execs.items():
                    await timed(client, request)  # warm-up after the switch
                    mine.setdefault(kind, []).extend([await timed(client, request) for _ in range(BLOCK)])
        for (label, name), mine in samples.items():
            figures = result[label][name]
            figures["raw_round_trip_p50_s"] = p50(mine["ping"])
            for kind in execs:
                figures[f"exec_{kind}_p50_s"] = p50(mine[kind])
                figures[f"ratio_exec_{kind}_over_round_trip"] = p50(mine[kind]) / p50(mine["ping"])
        with open(PROBE, "rb") as f:
            probe = f.read()
        if baseline is not None:
            probe = b"BASELINE = %r\n" % base64.b64encode(baseline).decode() + probe
        for label, client, name, value in combos:
            outcome = await run_collected(
                client, ExecRequest(cmd="/usr/bin/python3", args=("-I", "-", str(rounds), value), shell="",
                                    stdin=True), reactor, stdin=probe)
            if outcome.exit_code != 0:
                raise RuntimeError(f"probe failed: {outcome}")
            result[label][name]["in_guest"] = json.loads(outcome.stdout)
        return result
    finally:
        for guest in guests:
            await guest.__aexit__()


async def copy_bash_static(client: AgentClient, path: str) -> None:
    with open(path, "rb") as f:
        outcome = await run_collected(
            client, ExecRequest(cmd="cat > /tmp/bash-static && chmod 755 /tmp/bash-static", stdin=True),
            reactor, stdin=f.read())
    if outcome.exit_code != 0:
        raise RuntimeError(f"copying bash-static failed: {outcome}")


def api_exec(daemon: Daemon, hostname: str, query: str) -> Callable[[], float]:
    def run() -> float:
        started = time.monotonic()
        status, _, body = daemon.request("POST", f"/vm/{hostname}/exec?{query}")
        elapsed = time.monotonic() - started
        if status != 200 or not body.rstrip().endswith(b"}") or b'"exit_code":0' not in body.replace(b" ", b""):
            raise RuntimeError(f"exec through the API failed: {status} {body!r}")
        return elapsed

    return run


def api_get(daemon: Daemon, path: str) -> Callable[[], float]:
    """
    ``GET path``: ``/vm/NODE`` is HTTP and the daemon without the guest
    (answered from the node's record), ``/vm/NODE/health`` one round trip to
    its agent besides.
    """
    def run() -> float:
        started = time.monotonic()
        status, _, body = daemon.request("GET", path)
        elapsed = time.monotonic() - started
        if status != 200:
            raise RuntimeError(f"GET {path} failed: {status} {body!r}")
        return elapsed

    return run


async def host_cpu(daemon: Daemon, hostname: str, client: AgentClient, rounds: int) -> dict[str, float]:
    """
    Host CPU per exec of ``/bin/true``: the daemon's for one through the API
    (HTTP, routing, the node's agent connection, NDJSON; less what it spends
    on its own in as long a time idle), and this process's
    for one straight to the agent (its agent client alone).  CPU time moves
    much less with the load than the wall clock does.
    """
    assert daemon.process is not None
    request, query = API_EXECS["true_no_shell"]
    through_api = api_exec(daemon, hostname, query)
    before, started = cpu_seconds(daemon.process.pid), time.monotonic()
    for _ in range(rounds):
        await deferToThread(through_api)
    busy = cpu_seconds(daemon.process.pid) - before
    # What the daemon spends meanwhile on its own (statistics sampling ...), for as long, idle.
    before, elapsed = cpu_seconds(daemon.process.pid), time.monotonic() - started
    await deferToThread(time.sleep, elapsed)
    daemon_cpu = (busy - (cpu_seconds(daemon.process.pid) - before)) / rounds
    before = cpu_seconds(os.getpid())
    for _ in range(rounds):
        await timed(client, request)
    return {"daemon_cpu_per_api_exec_s": daemon_cpu,
            "bench_cpu_per_agent_exec_s": (cpu_seconds(os.getpid()) - before) / rounds}


async def measure_api(rounds: int) -> dict[str, Any]:
    """Execs through the daemon's API and straight to a bare guest's agent, alternating, per setting."""
    groups = [{"name": name.replace("_", ""), "vcpu": 1, "ram_mb": RAM_MB, "storage_size": "1G",
               "guest_aslr": aslr} for name, aslr in SETTINGS.items()]
    daemon = Daemon(groups=groups)
    result: dict[str, Any] = {"image": os.path.realpath(os.path.join(IMAGE_DIR, "default"))}
    try:
        await deferToThread(daemon.start)
        for group in groups:
            await deferToThread(daemon.json, "POST", f"/hostgroup/{group['name']}/nodes?wait=agent&timeout=4m", {},
                                expect=201)
        for name, aslr in SETTINGS.items():
            hostname = f"{name.replace('_', '')}-1"
            async with BareGuest(IMAGE_DIR, aslr) as client:
                pings = [await client.ping() for _ in range(rounds)]
                figures: dict[str, Any] = {"raw_round_trip_p50_s": p50(pings)}
                for kind, (request, query) in API_EXECS.items():
                    through_api = api_exec(daemon, hostname, query)
                    await deferToThread(through_api)
                    await timed(client, request)
                    api, agent = [], []
                    for _ in range(rounds):
                        api.append(await deferToThread(through_api))
                        agent.append(await timed(client, request))
                    figures[f"exec_{kind}_api_p50_s"] = p50(api)
                    figures[f"exec_{kind}_agent_p50_s"] = p50(agent)
                    figures[f"exec_{kind}_api_minus_agent_p50_s"] = p50(api) - p50(agent)
                    figures[f"ratio_exec_{kind}_api_over_round_trip"] = p50(api) / p50(pings)
                figures.update(await host_cpu(daemon, hostname, client, rounds))
                describe = api_get(daemon, f"/vm/{hostname}")
                await deferToThread(describe)
                figures["describe_api_p50_s"] = p50([await deferToThread(describe) for _ in range(rounds)])
                # The exec against a health check through the API, alternating (issue 29: exec <= 2x health).
                health, exec_true = api_get(daemon, f"/vm/{hostname}/health"), api_exec(
                    daemon, hostname, API_EXECS["true_no_shell"][1])
                healths, execs = [], []
                for _ in range(rounds):
                    healths.append(await deferToThread(health))
                    execs.append(await deferToThread(exec_true))
                figures["health_api_p50_s"] = p50(healths)
                figures["exec_true_no_shell_beside_health_api_p50_s"] = p50(execs)
                figures["ratio_exec_true_no_shell_api_over_health_api"] = p50(execs) / p50(healths)
                result[name] = figures
        return result
    finally:
        await deferToThread(daemon.cleanup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--image", action="append", default=[], help="LABEL=IMAGE_DIR (repeatable)")
    parser.add_argument("--bash-static", help="Debian's bash-static binary, also measured when given")
    parser.add_argument("--api", action="store_true", help="also through the daemon's API, beside a bare guest")
    parser.add_argument("--api-only", action="store_true", help="only the API part")
    parser.add_argument("--baseline", metavar="GIT_REF",
                        help="also time the agent's work in the guest with vmservice/guest/execution.py of GIT_REF")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                         "exec_spawn.json"))
    options = parser.parse_args()
    images = [(label, directory) for label, _, directory in (item.partition("=") for item in options.image)]
    images = images or [("this", IMAGE_DIR)]
    run_ = begin()
    outcome: dict[str, Any] = {"benchmark": "exec_spawn", "accel": "tcg", "rounds": options.rounds, "images": {}}

    def run() -> Deferred[None]:
        async def go() -> None:
            baseline = None
            if options.baseline:
                baseline = subprocess.run(["git", "show", f"{options.baseline}:vmservice/guest/execution.py"],
                                          check=True, capture_output=True).stdout
                outcome["baseline"] = options.baseline
            if not options.api_only:
                outcome["images"] = await measure(images, options.rounds, options.bash_static, baseline)
            if options.api or options.api_only:
                outcome["api"] = await measure_api(options.rounds)

        d = Deferred.fromCoroutine(go())
        d.addErrback(lambda failure: outcome.update(error=failure))
        d.addBoth(lambda _: reactor.stop())
        return d

    reactor.callWhenRunning(run)
    reactor.run()
    if "error" in outcome:
        outcome["error"].raiseException()
    write_result(options.output, outcome, run_)
    print(json.dumps(outcome, indent=1))


if __name__ == "__main__":
    main()
