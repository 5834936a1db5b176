"""
Run inside the guest (``python3 -I exec_spawn_probe.py ROUNDS [ASLR]``, sent
as an exec by ``bench/exec_spawn.py``; ``ASLR`` is written to
``/proc/sys/kernel/randomize_va_space`` first, as ``norandmaps`` would set
it at boot): times, with the agent's own code, each step
an exec of ``/bin/true`` goes through in the guest agent; the agent's whole
work for one exec (its session and exec handler in this process, fed an
OPEN and a HALF_CLOSE as from the host, without the port); and what starting
a process costs by itself (``/bin/true``, ``bash``, busybox ``sh`` ...).
Prints one JSON object of median seconds, with the guest's
``randomize_va_space`` and clock source (a guest that fell back to
``jiffies`` times in 4 ms steps).  When the bench prepends
``BASELINE = "<base64 of another execution.py>"``, the agent's whole work is
also timed with that exec handler, sample by sample in turn with the
guest's own: the agent's code before and after a change, in one guest at
one moment.  Stdlib only.
"""

import base64
import json
import os
import select
import statistics
import sys
import time
import types

sys.path.insert(0, "/opt/vmservice")

from vmservice.guest.context import AgentContext  # noqa: E402
from vmservice.guest.loop import Loop  # noqa: E402
from vmservice.guest.operations import HANDLERS  # noqa: E402
from vmservice.guest.session import Session  # noqa: E402
from vmservice.guest import exec_spec, execution, spawning  # noqa: E402
from vmservice.wire import NEED_DATA, Connection, Role  # noqa: E402
from vmservice.wire.events import Data, HalfClose, Open  # noqa: E402
from vmservice.wire.openheaders.exec import ExecHeader  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
if len(sys.argv) > 2:
    with open("/proc/sys/kernel/randomize_va_space", "w") as f:
        f.write(sys.argv[2])


def median(samples):
    return statistics.median(samples)


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def agent_steps():
    """The steps of ExecHandler.start for ``/bin/true`` without a shell, timed one by one."""
    steps = {name: [] for name in ("header", "prepare", "pipes", "spawn", "exit_noticed", "reap", "drain", "total")}
    header = {"cmd": "/bin/true", "shell": ""}
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        spec = exec_spec.runnable(ExecHeader.from_json(header))
        t1 = time.perf_counter()
        launch = spawning.prepare(spec)
        t2 = time.perf_counter()
        opened = []
        stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        opened.extend((stdin, out_w, err_w))
        t3 = time.perf_counter()
        pid = spawning.spawn(launch, (stdin, out_w, err_w), opened)
        pidfd = os.pidfd_open(pid)
        t4 = time.perf_counter()
        select.select([pidfd], [], [])
        t5 = time.perf_counter()
        os.waitpid(pid, 0)
        os.close(pidfd)
        t6 = time.perf_counter()
        for fd in (out_r, err_r):
            os.read(fd, 65536)
            os.close(fd)
        t7 = time.perf_counter()
        for name, value in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, t7 - t0)):
            steps[name].append(value)
    return {name: median(values) for name, values in steps.items()}


def header_reader(module):
    """How ``module`` (this guest's exec handler module, or a baseline's) reads an exec's OPEN header."""
    if hasattr(module, "ExecSpec"):
        return module.ExecSpec.from_header
    return lambda header: exec_spec.runnable(ExecHeader.from_json(header))


def baseline_module():
    """The exec handler's module of ``BASELINE`` (set by the bench), or ``None``."""
    source = globals().get("BASELINE")
    if not source:
        return None
    module = types.ModuleType("baseline_execution")
    sys.modules[module.__name__] = module
    exec(compile(base64.b64decode(source).decode(), "baseline_execution.py", "exec"), module.__dict__)
    return module


def steps_against(baseline, block=100):
    """
    The header and ``prepare`` steps of the default exec (``true``, default
    shell, root) with the guest's code and with ``baseline``'s, in turn, in
    blocks of ``block`` calls timed together (a guest whose clock fell back
    to jiffies counts in 4 ms steps): median microseconds per call.
    """
    header = {"cmd": "true"}
    modules = {"this": execution, "baseline": baseline}
    samples = {f"{step}_{label}": [] for step in ("header", "prepare") for label in modules}
    for _ in range(ROUNDS):
        for label, module in modules.items():
            read_header = header_reader(module)
            t0 = time.perf_counter()
            for _ in range(block):
                spec = read_header(header)
            t1 = time.perf_counter()
            for _ in range(block):
                module.prepare(spec)
            t2 = time.perf_counter()
            samples[f"header_{label}"].append((t1 - t0) / block)
            samples[f"prepare_{label}"].append((t2 - t1) / block)
    return {name: round(median(values) * 1e6, 1) for name, values in samples.items()}


def in_process_agent(module=execution):
    """
    A function running one exec through the agent's own Session and
    ExecHandler in this process (no port: what the host would send is fed to
    the session directly): seconds from the OPEN to the stream's end.
    """
    loop = Loop()
    written = bytearray()
    session = Session(loop, AgentContext("probe"), written.extend, lambda: True,
                      {**HANDLERS, "exec": module.ExecHandler})
    host = Connection(Role.HOST, nonce=b"PROBENON")

    def received():
        host.receive_data(bytes(written))
        written.clear()
        events = []
        while True:
            event = host.next_event()
            if event is NEED_DATA:
                return events
            events.append(event)

    session.start()
    session.data_received(host.send(host.hello("probe")))
    for _ in range(4):
        received()
        if host.hello_wanted:
            session.data_received(host.send(host.hello("probe")))

    def one(header):
        stream_id = host.next_stream_id()
        started = time.perf_counter()
        session.data_received(host.send(Open(stream_id, {"op": "exec", **header})) + host.send(HalfClose(stream_id)))
        while True:
            for event in received():
                if isinstance(event, Data):
                    session.data_received(host.acknowledge_received_data(stream_id, len(event.data)))
                elif isinstance(event, HalfClose):
                    return time.perf_counter() - started
            loop.run_once(5.0)

    return one


def process_cost(argv, program=None):
    """Median seconds from posix_spawn of ``program`` (default argv[0]) to the reaped exit (stdio on /dev/null)."""
    null = os.open(os.devnull, os.O_RDWR)
    samples = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        pid = os.posix_spawn(program or argv[0], argv, {"PATH": exec_spec.DEFAULT_PATH},
                             file_actions=[(os.POSIX_SPAWN_DUP2, null, n) for n in (0, 1, 2)])
        os.waitpid(pid, 0)
        samples.append(time.perf_counter() - t0)
    os.close(null)
    return median(samples)


def main():
    result = {
        "python": sys.version.split()[0],
        "bin_sh": os.path.realpath("/bin/sh"),
        "randomize_va_space": read("/proc/sys/kernel/randomize_va_space"),
        "clocksource": read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "agent_steps_s": agent_steps(),
        "agent_in_process_s": {},
        "process_s": {},
    }
    runs = {"this": in_process_agent()}
    baseline = baseline_module()
    if baseline is not None:
        runs["baseline"] = in_process_agent(baseline)
        result["agent_in_process_baseline_s"] = {}
    for name, header in (
        ("/bin/true, no shell", {"cmd": "/bin/true", "shell": ""}),
        ("true, default shell", {"cmd": "true"}),
        ("busybox true, no shell", {"cmd": "/bin/busybox", "args": ["true"], "shell": ""}),
    ):
        samples = {label: [] for label in runs}
        for one in runs.values():
            one(header)
        for _ in range(ROUNDS):
            for label, one in runs.items():
                samples[label].append(one(header))
        result["agent_in_process_s"][name] = median(samples["this"])
        if baseline is not None:
            result["agent_in_process_baseline_s"][name] = median(samples["baseline"])
    for name, argv in (
        ("/bin/true", ["/bin/true"]),
        ("/bin/sh -c true", ["/bin/sh", "-c", "true"]),
        ("bash -c true", ["/bin/bash", "-c", "true"]),
        ("bash --norc --noprofile -c true", ["/bin/bash", "--norc", "--noprofile", "-c", "true"]),
        ("bash-static -c true", ["/tmp/bash-static", "-c", "true"]),
        ("/bin/bash-static -c true", ["/bin/bash-static", "-c", "true"]),
        ("busybox sh -c true", ["/opt/vmservice/runtime/bin/sh", "-c", "true"]),
        ("busybox true", ["/bin/busybox", "true"]),
    ):
        if os.access(argv[0], os.X_OK):
            result["process_s"][name] = process_cost(argv)
    if os.access("/bin/bash-static", os.X_OK):
        # As the agent runs the default shell: the static bash with argv[0] /bin/bash.
        result["process_s"]["/bin/bash-static as /bin/bash -c true"] = process_cost(
            ["/bin/bash", "-c", "true"], "/bin/bash-static")
    if baseline is not None:
        result["steps_vs_baseline_us"] = steps_against(baseline)
    print(json.dumps(result))


main()
