# -*- test-case-name: tests.guest.test_metrics,tests.integration.test_stats -*-
"""
The guest's metrics agent: answers the host's requests for a statistics snapshot.

A process of its own, separate from the guest agent (a busy or stuck agent does not hide the numbers,
and the other way round), run and respawned by busybox init through ``/opt/vmservice/bin/metrics``.
Standard library only, no imports from the rest of ``vmservice``.

It serves the virtio-serial port named ``metrics``.  The protocol is one line each way: the host
writes ``snapshot ID\\n`` (``ID`` a token of its choosing), the agent samples ``/proc`` and
``statvfs("/")`` at that moment and answers one JSON object on one line, ``{"id": ID, ...fields}``
(``{"id": ID, "error": "..."}`` when sampling failed).  The id lets the host drop an answer that was
meant for an earlier connection.  Nothing is sampled between requests.

Fields (all sizes and counters in bytes; counters since the guest booted): ``hostname``, ``arch``,
``timestamp`` (RFC 3339, UTC), ``uptimeSeconds``, ``totalCpus``, ``totalMemory``, ``memoryUsed``
(``MemTotal - MemAvailable``), ``memoryAvailable``, ``memoryUsedPercent``, ``loadAvg1/5/15``,
``diskReadTotal``/``diskWriteTotal`` (sectors of whole disks times 512), ``networkReadTotal``/
``networkWriteTotal`` (every interface but ``lo``), ``diskIOInflight`` (I/Os in progress),
``openConnections`` (established TCP connections, IPv4 and IPv6), ``openFiles`` (open file
descriptors of every process), ``entropy`` (bits), ``diskSpaceTotal``/``diskSpaceUsed``/``diskSpaceFree`` (the root file
system; free is what an unprivileged user may use) and ``diskSpaceUsedPercent`` (as ``df``:
used / (used + free)).

While no host is connected the port reports POLLHUP (level-triggered) and reads return 0, so the agent
waits for the SIGIO the kernel sends when a host connects (looking again every
:data:`DISCONNECTED_POLL_INTERVAL` seconds anyway); while one is connected it sleeps in ``poll``.  ``--listen-unix PATH`` serves a UNIX socket instead, for tests on the host.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from typing import TYPE_CHECKING

from vmservice.guest.ports import find_port
from vmservice.guest.procfs import (disk_totals, entropy, established_connections, load_average, memory,
                                    network_totals, open_files, space, whole_disks)

if TYPE_CHECKING:
    from typing import Callable

__all__ = ["PORT_NAME", "handle_line", "main", "mark_ready", "sample"]

#: Name of the virtio-serial port the host attaches the metrics channel to.
PORT_NAME = "metrics"
#: How often to look again while no host is connected (when no SIGIO says one did).
DISCONNECTED_POLL_INTERVAL = 0.5
#: How often to look again for a port that is missing.
PORT_POLL_INTERVAL = 1.0
#: Longest request line; a longer one is dropped.
MAX_LINE = 256
#: Most seconds an answer may wait for the port to take it before it is dropped.
WRITE_DEADLINE = 2.0
#: Where the agent writes its process id (tests and operators find it there).
PID_FILE = "/run/vmservice-metrics.pid"
#: The file the agent creates once it serves its port: a template's guest agent waits for it before the
#: template is frozen (:mod:`vmservice.guest.identity`), so that no clone finishes this agent's start.
READY_FILE = "/run/vmservice-metrics.ready"


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"vmservice-metrics: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# -- sampling ------------------------------------------------------------------------------


def _read(path: str) -> str:
    with open(path, "rb") as stream:
        return stream.read().decode("ascii", "replace")


def _optional(path: str) -> str:
    try:
        return _read(path)
    except OSError:
        return ""


def _timestamp(now: float) -> str:
    seconds = int(now)
    micros = int((now - seconds) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def sample(root: str = "/") -> dict[str, object]:
    """Every field of one snapshot, read now."""
    snapshot: dict[str, object] = {
        "hostname": _read("/proc/sys/kernel/hostname").strip(),
        "arch": os.uname().machine,
        "timestamp": _timestamp(time.time()),
        "uptimeSeconds": float(_read("/proc/uptime").split()[0]),
        "totalCpus": os.cpu_count() or 1,
    }
    snapshot.update(memory(_read("/proc/meminfo")))
    snapshot.update(load_average(_read("/proc/loadavg")))
    try:
        devices = os.listdir("/sys/block")
    except OSError:
        devices = []
    snapshot.update(disk_totals(_read("/proc/diskstats"), whole_disks(devices)))
    snapshot.update(network_totals(_read("/proc/net/dev")))
    snapshot["openConnections"] = established_connections(_optional("/proc/net/tcp"), _optional("/proc/net/tcp6"))
    snapshot["openFiles"] = open_files()
    snapshot["entropy"] = entropy(_read("/proc/sys/kernel/random/entropy_avail"))
    vfs = os.statvfs(root)
    snapshot.update(space(vfs.f_frsize, vfs.f_blocks, vfs.f_bfree, vfs.f_bavail))
    return snapshot


def handle_line(line: bytes, sampler: Callable[[], dict[str, object]] = sample) -> bytes:
    """
    The answer line to one request line (without its newline): ``snapshot ID`` gets a snapshot,
    anything else an error; both carry the request's id.
    """
    words = line.decode("utf-8", "replace").split()
    request_id = words[1] if len(words) > 1 else ""
    answer: dict[str, object]
    if not words or words[0] != "snapshot":
        answer = {"id": request_id, "error": f"unknown request {line[:40]!r}"}
    else:
        try:
            answer = {"id": request_id, **sampler()}
        except Exception as e:  # a broken /proc must not end the agent
            answer = {"id": request_id, "error": f"sampling failed: {e}"}
    return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


# -- serving -------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> bool:
    """Write ``data`` within :data:`WRITE_DEADLINE`; ``False`` when the host went away or never took it."""
    deadline = time.monotonic() + WRITE_DEADLINE
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    while data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        events = poller.poll(remaining * 1000)
        if not events:
            return False
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except OSError:
            return False
        data = data[written:]
    return True


def serve_connection(fd: int) -> None:
    """
    Answer requests on ``fd`` until the host hangs up (a read returns 0 or fails).  The port is
    non-blocking; ``poll`` waits for input, and a hang-up without input ends the session.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    pending = b""
    while True:
        events = poller.poll()
        revents = 0
        for _, revents in events:
            pass
        if not revents & select.POLLIN:
            if revents & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                return
            continue
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if not _write_all(fd, handle_line(line.strip())):
                return
        if len(pending) > MAX_LINE:
            pending = b""


def _connected(fd: int) -> bool:
    """
    Whether a host is connected to the port: no POLLHUP.  (Without a host the virtio console driver
    reports POLLIN too, since a read would not block: it returns 0 at once.)
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    for _, revents in poller.poll(0):
        return not revents & (select.POLLHUP | select.POLLERR | select.POLLNVAL)
    return True


def mark_ready(path: str = READY_FILE) -> None:
    """Create ``path``: the agent serves its port."""
    try:
        with open(path, "w"):
            pass
    except OSError as e:
        _log(f"cannot create {path}: {e}")


def serve_port(device: str, ready: "Callable[[], None]" = lambda: None) -> None:
    """
    Serve the virtio-serial port ``device`` forever; hosts come and go.

    The port is opened ``O_ASYNC``: the kernel sends SIGIO when a host connects, so the agent sleeps in
    ``sigtimedwait`` (SIGIO blocked, so one that comes between the check and the wait is not lost)
    instead of polling; :data:`DISCONNECTED_POLL_INTERVAL` is only the fallback.  ``ready`` is called once
    the port is open and watched.
    """
    import fcntl
    import signal

    fd = os.open(device, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGIO})
    try:
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    except OSError as e:
        _log(f"no SIGIO on {device} ({e}); polling")
    ready()
    while True:
        if _connected(fd):
            serve_connection(fd)
        else:
            signal.sigtimedwait({signal.SIGIO}, DISCONNECTED_POLL_INTERVAL)


def serve_unix(path: str) -> None:
    """Serve a UNIX socket, one connection at a time, as QEMU's server socket does (tests on the host)."""
    from vmservice.guest.listeners import unix_listener

    listener = unix_listener(path)
    print(f"vmservice-metrics: ready on {path}", flush=True)
    while True:
        conn, _ = listener.accept()
        conn.setblocking(False)
        try:
            serve_connection(conn.fileno())
        finally:
            conn.close()


def main(argv: list[str] | None = None) -> None:
    """Run the metrics agent until killed (``--listen-unix PATH`` for a UNIX socket)."""
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--listen-unix"] and len(arguments) == 2:
        serve_unix(arguments[1])
        return
    try:
        with open(PID_FILE, "w") as stream:
            stream.write(f"{os.getpid()}\n")
    except OSError:
        pass
    logged = False
    while True:
        device = find_port(PORT_NAME)
        if device is not None:
            break
        if not logged:
            _log(f"waiting for virtio-serial port {PORT_NAME!r}")
            logged = True
        time.sleep(PORT_POLL_INTERVAL)
    _log(f"ready on {device}")
    serve_port(device, mark_ready)


if __name__ == "__main__":
    main()
