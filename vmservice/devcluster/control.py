# -*- test-case-name: tests.devcluster.test_control,tests.integration.test_devcluster -*-
"""
Starting, stopping and querying a development control plane in its directory.

``start`` makes the directory's material (certificates, tokens, kubeconfigs: :func:`prepare`), starts
etcd and the API server detached (a session of their own, output to ``logs/NAME.log``), waits until the
API server's ``/readyz`` answers ok (bounded: on time-out it stops what it started and shows the logs'
tails), then starts the scheduler and the controller-manager, recording every process in
``state.json`` as it goes. ``stop`` signals exactly the recorded processes through pidfds, and only
those whose start time still matches. Synchronous code of a command-line tool.
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from typing import Callable, Iterable, Sequence

from attrs import evolve

from vmservice.devcluster.build import build_entry
from vmservice.devcluster.certificates import ensure_certificates
from vmservice.devcluster.commands import Layout, command_lines
from vmservice.devcluster.identities import (ADMIN, CONTROLLER_MANAGER, SCHEDULER, identities, node_user,
                                             parse_tokens, render_kubeconfig, render_tokens)
from vmservice.devcluster.ports import free_ports, ports_from_base, ports_in_use
from vmservice.devcluster.state import (STATE_FILE, ClusterState, Process, is_running, load_state,
                                        process_start_time, save_state)
from vmservice.durable import write_atomic
from vmservice.private_files import private_directory

__all__ = ["READY_TIMEOUT", "export_line", "prepare", "readyz", "start", "status", "stop"]

#: Seconds the API server has to answer ``/readyz`` ok after it is started.
READY_TIMEOUT = 90.0

#: Seconds a component has to exit after SIGTERM before it gets SIGKILL.
STOP_TIMEOUT = 10.0

Out = Callable[[str], None]


class NotReady(Exception):
    """The control plane did not come up; the message says what happened."""


def export_line(directory: str) -> str:
    """The line that points kubectl at ``directory``'s control plane as its administrator."""
    return f"export KUBECONFIG={os.path.join(directory, 'admin.kubeconfig')}"


def prepare(layout: Layout, nodes: Sequence[str]) -> None:
    """
    Make ``layout``'s directory ready to start from: its subdirectories (0700), the certificates, the
    token file (earlier tokens kept) and a kubeconfig per identity: ``admin.kubeconfig``,
    ``scheduler.kubeconfig``, ``controller-manager.kubeconfig`` and ``nodes/NAME.kubeconfig`` with
    ``nodes/NAME.token`` (every file 0600).
    """
    for name in ("etcd", "logs", "nodes", "flexvolume"):
        private_directory(layout.path(name), repair=True)
    ensure_certificates(layout.directory)
    known: dict[str, str] = {}
    if os.path.exists(layout.path("tokens.csv")):
        with open(layout.path("tokens.csv"), encoding="utf-8") as f:
            known = parse_tokens(f.read())
    users = identities(nodes, known)
    write_atomic(layout.path("tokens.csv"), render_tokens(users).encode())
    tokens = {identity.user: identity.token for identity in users}
    files = {ADMIN: "admin.kubeconfig", SCHEDULER: "scheduler.kubeconfig",
             CONTROLLER_MANAGER: "controller-manager.kubeconfig"}
    files.update({node_user(name): os.path.join("nodes", f"{name}.kubeconfig") for name in nodes})
    for user, name in files.items():
        config = render_kubeconfig(layout.api_url, layout.path("ca.crt"), user, tokens[user])
        write_atomic(layout.path(name), config.encode())
    for name in nodes:
        write_atomic(layout.path(os.path.join("nodes", f"{name}.token")), (tokens[node_user(name)] + "\n").encode())


def readyz(directory: str, api_url: str, timeout: float = 5.0) -> tuple[bool, str]:
    """``(ok, what it said)`` of the API server's ``/readyz``, asked as the administrator."""
    with open(os.path.join(directory, "tokens.csv"), encoding="utf-8") as f:
        token = parse_tokens(f.read()).get(ADMIN, "")
    context = ssl.create_default_context(cafile=os.path.join(directory, "ca.crt"))
    request = urllib.request.Request(f"{api_url}/readyz", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            body = response.read(4096).decode("utf-8", "replace").strip()
            return response.status == 200 and body == "ok", body
    except urllib.error.HTTPError as error:
        return False, f"{error.code} {error.read(4096).decode('utf-8', 'replace').strip()[-300:]}"
    except (urllib.error.URLError, OSError) as error:
        return False, str(getattr(error, "reason", error))


def _launch(layout: Layout, name: str, argv: Sequence[str]) -> Process:
    fd = os.open(layout.path(os.path.join("logs", f"{name}.log")),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=fd, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=layout.directory)
    finally:
        os.close(fd)
    start_time = process_start_time(child.pid)
    if start_time is None:
        raise NotReady(f"{name} exited at once (status {child.wait()})")
    return Process(name, child.pid, start_time)


def _wait_ready(layout: Layout, started: Sequence[Process], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    said = "no answer yet"
    while time.monotonic() < deadline:
        for process in started:
            if not is_running(process):
                raise NotReady(f"{process.name} exited")
        ok, said = readyz(layout.directory, layout.api_url, timeout=5.0)
        if ok:
            return
        time.sleep(0.5)
    raise NotReady(f"/readyz not ok within {timeout:.0f} s (last: {said})")


def _start_all(layout: Layout, state: ClusterState, out: Out, timeout: float) -> ClusterState:
    argvs = command_lines(layout)
    for group in (("etcd", "kube-apiserver"), ("kube-scheduler", "kube-controller-manager")):
        for name in group:
            state = evolve(state, processes=state.processes + (_launch(layout, name, argvs[name]),))
            save_state(layout.directory, state)
            out(f"started {name} (pid {state.processes[-1].pid})")
        if "kube-apiserver" in group:
            _wait_ready(layout, state.processes, timeout)
    time.sleep(1.0)
    for process in state.processes:
        if not is_running(process):
            raise NotReady(f"{process.name} exited")
    return state


def start(directory: str, nodes: Sequence[str], base: int | None, cache_dir: str, out: Out,
          timeout: float = READY_TIMEOUT) -> int:
    """
    Start a control plane in ``directory`` (unless one runs there) with identities for ``nodes`` on
    ports from ``base`` (``None``: free ones); the exit status. The last line it prints is
    :func:`export_line`'s.
    """
    directory = os.path.abspath(directory)
    private_directory(directory, repair=True)
    earlier = load_state(directory)
    if earlier is not None and earlier.processes and all(is_running(each) for each in earlier.processes):
        out(f"a control plane runs in {directory} already: {earlier.api_url}")
        out(export_line(directory))
        return 0
    if earlier is not None:
        out(f"stopping what is left of an earlier control plane in {directory}")
        _end(earlier.processes, out)
        os.unlink(os.path.join(directory, STATE_FILE))
    entry = build_entry(cache_dir, out)
    ports = free_ports() if base is None else ports_from_base(base)
    busy = ports_in_use(ports)
    if busy:
        out(f"error: ports in use already: {', '.join(map(str, busy))} (choose another --ports)")
        return 1
    layout = Layout(directory, os.path.join(entry, "bin"), ports)
    prepare(layout, nodes)
    began = time.monotonic()
    state = ClusterState(directory, layout.bin_dir, layout.api_url, ports, ())
    try:
        state = _start_all(layout, state, out, timeout)
    except (NotReady, OSError) as error:  # OSError: a program that cannot be run
        out(f"error: the control plane did not start: {error}")
        _show_logs(layout, out)
        recorded = load_state(directory)
        _end(recorded.processes if recorded else (), out)
        if recorded:
            os.unlink(os.path.join(directory, STATE_FILE))
        return 1
    out(f"control plane ready in {time.monotonic() - began:.1f} s at {layout.api_url} (nodes: {len(nodes)})")
    out(export_line(directory))
    return 0


def _show_logs(layout: Layout, out: Out, lines: int = 15) -> None:
    for name in command_lines(layout):
        path = layout.path(os.path.join("logs", f"{name}.log"))
        if os.path.exists(path):
            with open(path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 8192))
                tail = f.read().decode("utf-8", "replace").splitlines()[-lines:]
            out(f"--- {path} (last lines)")
            for line in tail:
                out(f"    {line}")


def _signal(process: Process, number: int) -> bool:
    """Send ``number`` to ``process`` if its pid still names it (through a pidfd: no recycled pid); sent?"""
    try:
        pidfd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return False
    try:
        if process_start_time(process.pid) != process.start_time:
            return False
        signal.pidfd_send_signal(pidfd, number)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)


def _end(processes: Iterable[Process], out: Out, timeout: float = STOP_TIMEOUT) -> None:
    """End ``processes`` (last started first): SIGTERM, then SIGKILL to those still there after ``timeout``."""
    alive = [process for process in reversed(tuple(processes)) if _signal(process, signal.SIGTERM)]
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [process for process in alive if is_running(process)]
    for process in alive:
        if _signal(process, signal.SIGKILL):
            out(f"{process.name} (pid {process.pid}) did not end within {timeout:.0f} s: killed")
    deadline = time.monotonic() + 5.0
    while any(is_running(process) for process in alive) and time.monotonic() < deadline:
        time.sleep(0.1)


def stop(directory: str, purge: bool, out: Out) -> int:
    """
    End the control plane recorded in ``directory`` and remove its state file (``purge``: the whole
    directory, etcd's data included); the exit status.
    """
    directory = os.path.abspath(directory)
    state = load_state(directory)
    if state is None:
        out(f"no control plane recorded in {directory}")
    else:
        _end(state.processes, out)
        os.unlink(os.path.join(directory, STATE_FILE))
        out(f"stopped the control plane of {directory}")
    if purge and os.path.isdir(directory):
        if os.listdir(directory) and not os.path.exists(os.path.join(directory, "ca.crt")):
            out(f"error: {directory} is no control plane directory: not removed")
            return 1
        shutil.rmtree(directory)
        out(f"removed {directory}")
    return 0


def status(directory: str, out: Out) -> int:
    """Print whether each recorded process runs and whether ``/readyz`` is ok; 0 if all is well, else 1."""
    state = load_state(os.path.abspath(directory))
    if state is None:
        out(f"no control plane recorded in {directory}")
        return 1
    running = [is_running(process) for process in state.processes]
    for process, up in zip(state.processes, running):
        out(f"{process.name}: {'running' if up else 'not running'} (pid {process.pid})")
    ok, said = readyz(state.directory, state.api_url)
    out(f"{state.api_url}/readyz: {said}")
    return 0 if ok and all(running) else 1
