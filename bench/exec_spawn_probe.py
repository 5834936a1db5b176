"""
Run inside the guest (``python3 -I exec_spawn_probe.py ROUNDS``, sent as an
exec by ``bench/exec_spawn.py``): times, with the agent's own code, each step
an exec of ``/bin/true`` goes through in the guest agent, and what starting a
process costs by itself (``/bin/true``, ``dash``, ``bash``, busybox ``sh``).
Prints one JSON object of median seconds.  Stdlib only.
"""

import json
import os
import select
import statistics
import sys
import time

sys.path.insert(0, "/opt/vmservice")

from vmservice.guest import execution  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30


def median(samples):
    return statistics.median(samples)


def agent_steps():
    """The steps of ExecHandler.start for ``/bin/true`` without a shell, timed one by one."""
    steps = {name: [] for name in ("header", "prepare", "pipes", "spawn", "exit_noticed", "reap", "drain", "total")}
    header = {"cmd": "/bin/true", "shell": ""}
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        spec = execution.ExecSpec.from_header(header)
        t1 = time.perf_counter()
        launch = execution.prepare(spec)
        t2 = time.perf_counter()
        opened = []
        stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        opened.extend((stdin, out_w, err_w))
        t3 = time.perf_counter()
        pid = execution.spawn(launch, (stdin, out_w, err_w), opened)
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


def process_cost(argv, program=None):
    """Median seconds from posix_spawn of ``program`` (default argv[0]) to the reaped exit (stdio on /dev/null)."""
    null = os.open(os.devnull, os.O_RDWR)
    samples = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        pid = os.posix_spawn(program or argv[0], argv, {"PATH": execution.DEFAULT_PATH},
                             file_actions=[(os.POSIX_SPAWN_DUP2, null, n) for n in (0, 1, 2)])
        os.waitpid(pid, 0)
        samples.append(time.perf_counter() - t0)
    os.close(null)
    return median(samples)


def main():
    if len(sys.argv) > 2:
        # "norandom": the guest's ASLR off (kernel.randomize_va_space=0) while measuring.
        with open("/proc/sys/kernel/randomize_va_space", "w") as f:
            f.write("0" if sys.argv[2] == "norandom" else sys.argv[2])
    result = {"python": sys.version.split()[0], "bin_sh": os.path.realpath("/bin/sh"), "agent_steps_s": agent_steps(), "process_s": {}}
    for name, argv in (
        ("/bin/true", ["/bin/true"]),
        ("dash -c true", ["/bin/dash", "-c", "true"]),
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
    print(json.dumps(result))


main()
