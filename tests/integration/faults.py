"""
What the fault tests share: the check every one of them ends with ("nothing
lost, nothing stray, the daemon still answers"), a state directory on a small
tmpfs that a test fills and frees, requests sent in the background, and the
ways a test finds and kills a node's QEMU or its guest agent.

Every wait here is bounded, and everything a helper makes (a mount, a filler
file, a thread) is undone by the cleanup it registers, also when the test
fails.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from ipaddress import IPv4Address
from typing import Any, Callable
from urllib.parse import urlencode

from tests.integration.daemon import Daemon, processes_under, wait_until

#: The temporary files of the daemon's atomic writes (``vmservice.durable``) and a snapshot being written.
TEMPORARY = re.compile(r"(\..*\.[0-9a-f]{16}\.tmp|.*\.partial)\Z", re.DOTALL)


def records(daemon: Daemon) -> dict[str, dict[str, Any]]:
    """The node records on disk, by hostname (a directory without a readable record is left out)."""
    found = {}
    nodes = os.path.join(daemon.state_dir, "nodes")
    for name in os.listdir(nodes):
        try:
            with open(os.path.join(nodes, name, "node.json")) as f:
                found[name] = json.load(f)
        except (OSError, ValueError):
            continue
    return found


def stray_files(daemon: Daemon) -> list[str]:
    """Temporary files of atomic writes and snapshots being written, anywhere under the state directory."""
    found = []
    for directory, _, files in os.walk(daemon.state_dir):
        found += [os.path.join(directory, name) for name in files if TEMPORARY.match(name)]
    return sorted(found)


def fork_states(daemon: Daemon, tmpfs_dir: str) -> list[str]:
    """The fork state files in the daemon's memory directory of ``tmpfs_dir`` (a fork under way has one)."""
    from vmservice.nodes.warm.fork_memory import STATE_PREFIX, memory_directory

    directory = memory_directory(daemon.state_dir, tmpfs_dir)
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(name for name in names if name.startswith(STATE_PREFIX))


def accounted(daemon: Daemon, network_prefixes: tuple[str, ...] = ()) -> str | None:
    """
    Why the host does not match the listed nodes, or ``None`` when it does:
    every listed node has its record and directory, and no other directory
    is there; the running (and paused) nodes' records name the very QEMU
    processes of the state directory, no other runs; a suspended node has
    its snapshot, no other node one; no temporary file of a write is left,
    nor a fork's directory that no record names; and, given the prefixes
    of the daemon's network objects, one namespace and one host interface
    per running node.
    """
    nodes = daemon.nodes()
    running = [h for h, n in nodes.items() if n["status"] in ("Running", "Paused")]
    on_disk = {}
    for hostname in nodes:
        try:
            with open(os.path.join(daemon.state_dir, "nodes", hostname, "node.json")) as f:
                on_disk[hostname] = json.load(f)
        except FileNotFoundError:
            return f"{hostname} is listed without a record"
        if on_disk[hostname]["status"] != nodes[hostname]["status"]:
            return f"{hostname} is listed {nodes[hostname]['status']}, its record says {on_disk[hostname]['status']}"
    pids = set(daemon.vm_pids())
    recorded = {h: on_disk[h].get("pid") for h in running}
    if pids != set(recorded.values()) or len(set(recorded.values())) != len(recorded):
        return f"QEMU processes {sorted(pids)} for the recorded pids of the running nodes {recorded}"
    directories = sorted(name for name in os.listdir(os.path.join(daemon.state_dir, "nodes")))
    if directories != sorted(nodes):
        return f"node directories {directories} for nodes {sorted(nodes)}"
    for hostname, node in nodes.items():
        snapshot = os.path.exists(os.path.join(daemon.state_dir, "nodes", hostname, "state.bin"))
        if snapshot != (node["status"] == "Suspended"):
            return f"{hostname} is {node['status']} with{'' if snapshot else 'out'} a snapshot"
    strays = stray_files(daemon)
    if strays:
        return f"temporary files left: {strays}"
    forks = os.path.join(daemon.state_dir, "forks")
    named = {os.path.dirname(path) for record in on_disk.values() for path in record.get("forked_disks", [])}
    kept = {os.path.join(forks, name) for name in (os.listdir(forks) if os.path.isdir(forks) else [])}
    if kept - named:
        return f"fork directories {sorted(kept - named)} that no record names"
    if network_prefixes:
        wanted = sorted(f"{prefix}{int(IPv4Address(nodes[h]['ip'])):08x}" for h in running
                        for prefix in ("vmh", "vms-"))
        found = network_objects(network_prefixes)
        if found != wanted:
            return f"network objects {found} for running nodes {running}"
    return None


def network_objects(prefixes: tuple[str, ...]) -> list[str]:
    """Network namespaces and host interfaces whose names start with one of ``prefixes``."""
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    links = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, check=True, timeout=30).stdout
    names += [link["ifname"] for link in json.loads(links)]
    return sorted(name for name in names if name.startswith(prefixes))


def daemon_log(daemon: Daemon) -> str:
    """The daemon's log, with the part twistd rotated away (at 1 MB) before it."""
    try:
        with open(daemon.log_path + ".1", errors="replace") as f:
            older = f.read()
    except OSError:
        older = ""
    return older + daemon.log()


def remove_network(prefixes: tuple[str, ...]) -> None:
    """
    Delete the network namespaces and host interfaces whose names start with
    one of ``prefixes`` (a test's own range): what a daemon killed for good
    by a failing test could not remove itself.
    """
    for name in network_objects(prefixes):
        if os.path.exists(os.path.join("/run/netns", name)):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)
        else:
            subprocess.run(["ip", "link", "delete", name], capture_output=True, timeout=30)


def healthy(daemon: Daemon) -> None:
    """Fail unless ``/healthz`` answers 200 within 10 s."""
    status, _, _ = daemon.request("GET", "/healthz", timeout=10)
    if status != 200:
        raise AssertionError(f"/healthz answered {status}")


def settled(daemon: Daemon, network_prefixes: tuple[str, ...] = (), timeout: float = 60.0, why: str = "") -> None:
    """
    Nothing lost, nothing stray, the daemon still answers: wait (at most
    ``timeout`` seconds) until :func:`accounted` holds, then check ``/healthz``.
    """
    deadline = time.monotonic() + timeout
    problem = accounted(daemon, network_prefixes)
    while problem is not None and time.monotonic() < deadline:
        time.sleep(0.2)
        problem = accounted(daemon, network_prefixes)
    if problem is not None:
        raise AssertionError(f"{why + ': ' if why else ''}{problem}; daemon log:\n{daemon_log(daemon)[-4000:]}")
    healthy(daemon)


class Background:
    """
    One request sent from a thread, so that the test can act while it runs;
    :meth:`result` waits for its answer within a bound.
    """

    def __init__(self, daemon: Daemon, method: str, path: str, body: Any = None, timeout: float = 120.0,
                 headers: dict[str, str] | None = None) -> None:
        self.answer: tuple[int, dict[str, str], bytes] | None = None
        self.error: BaseException | None = None
        self._timeout = timeout

        def send() -> None:
            try:
                self.answer = daemon.request(method, path, body, headers=headers, timeout=timeout)
            except BaseException as error:  # the daemon may die first
                self.error = error

        self._thread = threading.Thread(target=send, daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        """Whether the answer (or the failure) is in."""
        return not self._thread.is_alive()

    def over(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the answer or the failure; whether it came."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def result(self, timeout: float | None = None) -> tuple[int, dict[str, Any] | bytes]:
        """
        The status and the body (parsed when it is JSON) once answered;
        fails when no answer came within ``timeout`` (the request's own by
        default) or the connection failed.
        """
        self._thread.join(self._timeout + 5 if timeout is None else timeout)
        if self._thread.is_alive():
            raise AssertionError("no answer in time")
        if self.answer is None:
            raise AssertionError(f"the request failed: {self.error!r}")
        status, headers, data = self.answer
        if headers.get("content-type", "").startswith("application/json"):
            try:
                return status, json.loads(data)
            except ValueError:
                pass
        return status, data


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid``; gone already is fine."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def node_pid(daemon: Daemon, hostname: str) -> int | None:
    """The QEMU pid ``hostname``'s record names, if any."""
    with open(os.path.join(daemon.state_dir, "nodes", hostname, "node.json")) as f:
        pid = json.load(f).get("pid")
    return int(pid) if pid else None


def qemu_of(daemon: Daemon, hostname: str) -> list[int]:
    """Pids of QEMU processes whose command line names ``hostname``'s directory."""
    return processes_under(os.path.join(daemon.state_dir, "nodes", hostname, ""))


def run(daemon: Daemon, hostname: str, cmd: str, timeout: float = 60.0) -> tuple[int, str]:
    """A buffered exec: its exit code and stdout (fails on any other answer)."""
    status, _, data = daemon.request("POST", f"/vm/{hostname}/exec?{urlencode({'cmd': cmd, 'buffered': 'true'})}",
                                     timeout=timeout)
    if status != 200:
        raise AssertionError(f"exec {cmd!r} in {hostname}: {status} {data!r}")
    result = json.loads(data)
    return int(result["exit_code"]), str(result["stdout"])


def agent_pid(daemon: Daemon, hostname: str) -> int:
    """The pid of the guest agent in ``hostname``: the parent of the commands it runs."""
    code, out = run(daemon, hostname, "echo $PPID")
    if code != 0:
        raise AssertionError(f"echo $PPID exited {code}")
    return int(out.strip())


def kill_agent(daemon: Daemon, hostname: str, pid: int) -> None:
    """
    Kill the guest agent ``pid`` with SIGKILL from inside the guest (the
    exec that does it loses its agent too, so its answer is not read).
    """
    try:
        daemon.request("POST", f"/vm/{hostname}/exec?{urlencode({'cmd': f'kill -9 {pid}', 'buffered': 'true'})}",
                       timeout=30)
    except OSError:
        pass


def agent_back(daemon: Daemon, hostname: str, old_pid: int, timeout: float = 90.0) -> int:
    """Wait until ``hostname``'s guest runs commands again, from an agent other than ``old_pid``; its pid."""

    def new_agent() -> int | None:
        try:
            pid = agent_pid(daemon, hostname)
        except (AssertionError, OSError):
            return None
        return pid if pid != old_pid else None

    return int(wait_until(f"a new agent in {hostname}", new_agent, timeout, interval=0.5))


class StateTmpfs:
    """
    A daemon's state directory on a tmpfs of its own, ``size`` bytes large,
    that a test fills (a filler file taking all but ``room`` bytes) and
    frees again; unmounted (and the filler gone) in the cleanup.

    :param daemon: the daemon, not started yet (its state directory is mounted here).
    """

    def __init__(self, daemon: Daemon, size: int) -> None:
        self.path = daemon.state_dir
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", self.path],
                       check=True, capture_output=True, timeout=30)
        self.filler = os.path.join(self.path, "filler")

    def free(self) -> int:
        """Bytes free on the tmpfs."""
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self, room: int = 0) -> None:
        """Take every byte of the tmpfs but ``room`` (rounded to its pages) with the filler file."""
        self.release()
        with open(self.filler, "wb") as f:
            want = max(0, self.free() - room)
            chunk = b"\xa5" * (1 << 20)
            written = 0
            while written < want:
                try:
                    written += f.write(chunk[: min(len(chunk), want - written)])
                    f.flush()
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    break

    def release(self) -> None:
        """Remove the filler: the room is back."""
        try:
            os.unlink(self.filler)
        except FileNotFoundError:
            pass

    def unmount(self) -> None:
        """Unmount the tmpfs (lazily when something still holds it)."""
        self.release()
        result = subprocess.run(["umount", self.path], capture_output=True, timeout=30)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=30)


def upload(daemon: Daemon, path: str, payload: bytes, timeout: float = 120.0) -> tuple[int, Any]:
    """
    POST ``payload`` to ``path`` as a client that reads an answer that comes
    before the whole body was sent (and then sends no more), as curl does:
    the status and the body (parsed when it is JSON).  Every wait is bounded
    by ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=timeout)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\nContent-Type: application/octet-stream\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n")
        sock.sendall(head.encode())
        view, sent = memoryview(payload), 0
        while sent < len(payload):
            readable, writable, _ = select.select([sock], [sock], [], max(0.0, deadline - time.monotonic()))
            if readable:
                break  # answered before the whole body: the rest is not sent
            if not writable:
                raise AssertionError(f"the upload stalled after {sent} of {len(payload)} bytes")
            try:
                sent += sock.send(view[sent:sent + 65536])
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = b""
        while True:  # to the end of the connection (the request said Connection: close)
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except socket.timeout:
                raise AssertionError(f"no whole answer to the upload in time: {answer[:300]!r}") from None
            if not chunk:
                break
            answer += chunk
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head:
        raise AssertionError(f"no answer to the upload after {sent} of {len(payload)} bytes")
    if b"transfer-encoding: chunked" in head.lower():
        body = _dechunked(body)
    status = int(head.split()[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def _dechunked(data: bytes) -> bytes:
    """The content of a chunked body."""
    content = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        content, data = content + data[:size], data[size + 2:]
    return content


def digest(data: bytes) -> str:
    """The SHA-256 of ``data`` in hex (what ``sha256sum`` prints in the guest)."""
    return hashlib.sha256(data).hexdigest()


class WebSocket:
    """
    A blocking WebSocket client of the daemon's shell route, just enough to
    see a session start and end: the upgrade, binary frames in, frames out
    (unmasked from the server), a bound on every read.
    """

    def __init__(self, daemon: Daemon, path: str, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        head = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\nConnection: Upgrade\r\n"
                f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n")
        self.sock.sendall(head.encode())
        self.upgraded()

    def upgraded(self) -> None:
        """Read the answer to the upgrade: its status in ``status``, what follows it in ``buffer``."""
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError(f"the connection closed during the upgrade: {self.buffer!r}")
            self.buffer += data
        answer, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        self.status = int(answer.split()[1])

    def send(self, payload: bytes, opcode: int = 2) -> None:
        """Send one masked frame."""
        mask = os.urandom(4)
        header = bytes([0x80 | opcode])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        else:
            header += bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def _read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError
            self.buffer += data
        taken, self.buffer = self.buffer[:count], self.buffer[count:]
        return taken

    def frame(self) -> tuple[int, bytes]:
        """The next frame: its opcode and payload (``EOFError`` once the connection closed)."""
        first, second = self._read(2)
        length = second & 0x7F
        if length == 126:
            length = int.from_bytes(self._read(2), "big")
        elif length == 127:
            length = int.from_bytes(self._read(8), "big")
        return first & 0x0F, self._read(length)

    def until_closed(self, timeout: float) -> tuple[bytes, bytes | None]:
        """
        Read until the server closes the session (a close frame, or the
        connection's end), at most ``timeout`` seconds: everything read, and
        the close frame's payload (``None`` when the connection just ended).
        """
        deadline = time.monotonic() + timeout
        seen = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the session did not end in time; it showed {seen[-300:]!r}")
            self.sock.settimeout(left)
            try:
                opcode, payload = self.frame()
            except EOFError:
                return seen, None
            except socket.timeout:
                continue
            if opcode == 8:
                return seen, payload
            seen += payload

    def close(self) -> None:
        self.sock.close()


def download_under_way(daemon: Daemon, hostname: str, path: str, at_least: int = 1 << 20) -> tuple[socket.socket, int, bytes]:
    """
    Start ``GET /vm/{hostname}/cp`` of ``path`` on a socket of its own and read until
    ``at_least`` bytes of the body came: the socket, the ``Content-Length``, the body so far.
    The caller closes the socket.
    """
    sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=60)
    sock.sendall(f"GET /vm/{hostname}/cp?{urlencode({'path': path})} HTTP/1.1\r\n"
                 f"Host: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    received = b""
    while b"\r\n\r\n" not in received or len(received.partition(b"\r\n\r\n")[2]) < at_least:
        chunk = sock.recv(1 << 16)
        if not chunk:
            sock.close()
            raise AssertionError(f"the download ended early: {received[:300]!r}")
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n")[0]:
        sock.close()
        raise AssertionError(f"the download was not answered 200: {head[:300]!r}")
    [length] = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    return sock, length, body
