# -*- test-case-name: tests.integration.test_load -*-
"""
The clients of the load benchmark (``bench/load.py``): each is a thread that
owns a few nodes of its own and goes through a realistic mix of requests
against one daemon over plain HTTP on loopback (and raw sockets for the
shell's WebSocket and the tunnel's byte pipe), checking every answer, and
records each request's time and outcome in a shared :class:`Recorder`.

An outcome is *ok* (the expected status and a checked answer), a *refusal*
(an admission refusal of a create: 409 ``max_nodes_reached`` or 503
``insufficient_memory``; the load is sized so that they happen) or an
*error* (anything else: another status, a wrong answer, a connection that
broke or stayed silent past its timeout).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import math
import os
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import urlencode

#: The codes of admission refusals: counted apart from errors.
REFUSALS = {(409, "max_nodes_reached"), (503, "insufficient_memory")}
#: Seconds a create may take (its own ``timeout`` covers a wait for a boot slot and the boot).
CREATE_TIMEOUT = "5m"
#: Seconds any other request may stay silent before it counts as an error.
TIMEOUT = 180.0
#: Where the guests' files of the load go (on the node's disk, not its tmpfs: uploads are up to 64 MiB).
GUEST_DIR = "/srv/load"
#: The port of the HTTP server a node's tunnels reach (started as a background exec).
SERVER_PORT = 8000
#: The sizes of copies: from 1 to 64 MiB, evenly spread on a log scale.
MIN_COPY, MAX_COPY = 1 << 20, 64 << 20
#: Random bytes every upload is a slice of (a random offset, so each upload differs).
_PAYLOAD_SLACK = 8 << 20


class Refused(Exception):
    """An admission refusal (``code`` says which)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class Failed(Exception):
    """An error: ``detail`` says what came back instead of what was expected."""

    def __init__(self, detail: dict[str, Any]) -> None:
        super().__init__(json.dumps(detail))
        self.detail = detail


@dataclass
class OpFigures:
    """What one kind of request gave: the seconds of each ok one, the refusals and errors counted."""

    seconds: list[float] = field(default_factory=list)
    errors: int = 0
    refusals: int = 0
    refusal_codes: dict[str, int] = field(default_factory=dict)
    bytes: int = 0


class Recorder:
    """
    The outcomes of every request of every client, by operation name, kept
    under a lock (the clients are threads), with the first errors' details.

    :param started: the monotonic time the run's clock counts from.
    :param max_details: how many errors are kept in full.
    """

    def __init__(self, started: float, max_details: int = 50) -> None:
        self._lock = threading.Lock()
        self.started = started
        self.ops: dict[str, OpFigures] = {}
        self.details: list[dict[str, Any]] = []
        self.max_details = max_details
        self.created: set[str] = set()
        self.deleted: set[str] = set()

    def _figures(self, op: str) -> OpFigures:
        return self.ops.setdefault(op, OpFigures())

    def ok(self, op: str, seconds: float, size: int = 0) -> None:
        with self._lock:
            figures = self._figures(op)
            figures.seconds.append(seconds)
            figures.bytes += size

    def refused(self, op: str, code: str) -> None:
        with self._lock:
            figures = self._figures(op)
            figures.refusals += 1
            figures.refusal_codes[code] = figures.refusal_codes.get(code, 0) + 1

    def failed(self, op: str, detail: dict[str, Any]) -> None:
        with self._lock:
            self._figures(op).errors += 1
            if len(self.details) < self.max_details:
                self.details.append({"t": round(time.monotonic() - self.started, 1), "op": op, **detail})

    def node_created(self, hostname: str) -> None:
        with self._lock:
            self.created.add(hostname)

    def node_deleted(self, hostname: str) -> None:
        with self._lock:
            self.deleted.add(hostname)

    def error_count(self) -> int:
        with self._lock:
            return sum(figures.errors for figures in self.ops.values())


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of ``values`` (``None`` when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _dechunk(body: bytes) -> bytes:
    """The payload of a chunked body read raw (``body`` itself when it is not one)."""
    payload, rest = b"", body
    while rest:
        size_line, separator, rest = rest.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            return body
        if not separator or size == 0:
            return payload if separator else body
        payload, rest = payload + rest[:size], rest[size + 2:]
    return body


def _error_detail(status: int, body: bytes) -> dict[str, Any]:
    """What an error answer said: its status and code and message (or the start of its body)."""
    try:
        decoded = json.loads(_dechunk(body))
        return {"status": status, "code": decoded.get("code"), "error": str(decoded.get("error"))[:300]}
    except (ValueError, AttributeError):
        return {"status": status, "body": body[:300].decode(errors="replace")}


def check(condition: bool, what: str, **context: Any) -> None:
    """Fail the request (an error) unless ``condition``."""
    if not condition:
        raise Failed({"check": what, **{key: str(value)[:300] for key, value in context.items()}})


class Api:
    """
    How the clients reach the daemon: HTTP/1.1 on loopback, one connection
    per request (as most clients do), raw sockets for the upgrades.

    :param port: the daemon's TCP port on 127.0.0.1.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.host = f"127.0.0.1:{port}"

    def connection(self, timeout: float = TIMEOUT) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def call(self, method: str, path: str, body: Any = None, expect: int = 200, timeout: float = TIMEOUT,
             headers: dict[str, str] | None = None) -> bytes:
        """
        One request; its body when the status is ``expect``, else
        :class:`Refused` for an admission refusal and :class:`Failed` for
        anything else.  ``body`` is sent as it is when bytes-like, else as JSON.
        """
        connection = self.connection(timeout)
        try:
            payload = body if body is None or isinstance(body, (bytes, memoryview)) else json.dumps(body).encode()
            connection.request(method, path, body=payload, headers=headers or {})
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        if response.status != expect:
            detail = _error_detail(response.status, data)
            if (response.status, detail.get("code")) in REFUSALS:
                raise Refused(str(detail["code"]))
            raise Failed({"request": f"{method} {path.split('?')[0]}", **detail})
        return data

    def request(self, method: str, path: str, timeout: float = 30.0) -> tuple[int, dict[str, str], bytes]:
        """One request whatever its answer: status, headers, body."""
        connection = self.connection(timeout)
        try:
            connection.request(method, path)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def json(self, method: str, path: str, body: Any = None, expect: int = 200, timeout: float = TIMEOUT) -> Any:
        return json.loads(self.call(method, path, body, expect, timeout))

    def raw(self, head: str, timeout: float = TIMEOUT) -> tuple[socket.socket, int, bytes]:
        """
        Send a request head on a new socket and read the answer's head: the
        socket, the status, and the bytes read past the head.
        """
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            sock.sendall(head.encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    raise Failed({"check": "answer head", "got": data[:200].decode(errors="replace")})
                data += chunk
        except BaseException:
            sock.close()
            raise
        head_bytes, rest = data.split(b"\r\n\r\n", 1)
        status = int(head_bytes.split(b" ", 2)[1])
        return sock, status, rest


def read_until_closed(sock: socket.socket, data: bytes = b"", limit: int = 8 << 20) -> bytes:
    """Everything ``sock`` sends until it closes (at most ``limit`` bytes)."""
    while len(data) <= limit:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    raise Failed({"check": "answer size", "got": len(data)})


class WebSocket:
    """
    A minimal RFC 6455 client over a blocking socket: binary messages out
    (masked), messages in (a ping answered, fragments joined).

    :param sock: the socket past the ``101`` answer's head.
    :param data: the bytes read past that head.
    """

    def __init__(self, sock: socket.socket, data: bytes) -> None:
        self.sock = sock
        self._data = data

    @staticmethod
    def upgrade_head(host: str, path: str) -> str:
        key = base64.b64encode(os.urandom(16)).decode()
        return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")

    def send(self, payload: bytes, opcode: int = 0x2) -> None:
        mask = os.urandom(4)
        size = len(payload)
        if size < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
        elif size < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
        masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def _take(self, count: int) -> bytes:
        while len(self._data) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Failed({"check": "websocket frame", "got": "connection closed"})
            self._data += chunk
        taken, self._data = self._data[:count], self._data[count:]
        return taken

    def receive(self) -> tuple[int, bytes]:
        """The next message: its opcode and payload (control frames other than close handled here)."""
        opcode, parts = None, []
        while True:
            first, second = self._take(2)
            size = second & 0x7F
            if size == 126:
                (size,) = struct.unpack("!H", self._take(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", self._take(8))
            mask = self._take(4) if second & 0x80 else b""
            payload = self._take(size)
            if mask:
                payload = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
            kind = first & 0x0F
            if kind == 0x9:
                self.send(payload, 0xA)
                continue
            if kind == 0xA:
                continue
            if kind == 0x8:
                return kind, payload
            opcode = opcode if kind == 0 else kind
            parts.append(payload)
            if first & 0x80:
                assert opcode is not None
                return opcode, b"".join(parts)

    def close(self, code: int = 1000) -> None:
        try:
            self.send(struct.pack("!H", code), 0x8)
        except OSError:
            pass
        self.sock.close()


#: The shell's frame types (docs/api.md, "Shell").
DATA, WINDOW_SIZE, SHUTDOWN, SESSION_CLOSE = 0x01, 0x02, 0x03, 0x05


def shell_frame(kind: int, payload: bytes = b"") -> bytes:
    return struct.pack("!BI", kind, len(payload)) + payload


@dataclass
class Node:
    """
    A node a client owns: its group and name, how many actions it gets
    before the client deletes it, the files uploaded to it (slot → size and
    SHA-256), and when its tunnels' HTTP server was started and whether it answers.
    """

    group: str
    hostname: str
    lifetime: int
    actions: int = 0
    files: dict[int, tuple[int, str]] = field(default_factory=dict)
    server_started: float | None = None
    server_ready: bool = False
    token: str = field(default_factory=lambda: os.urandom(6).hex())


@dataclass
class Mix:
    """
    What the clients do.

    :ivar groups: the groups creates go to, with their weights.
    :ivar actions: the actions on a node, with their weights.
    :ivar nodes_per_client: the most nodes a client holds at once.
    :ivar lifetime: the least and most actions a node gets before its client deletes it.
    :ivar think: the most seconds a client waits between two actions.
    """

    groups: dict[str, float]
    actions: dict[str, float] = field(default_factory=lambda: {
        "health": 1.0, "list": 0.5, "exec_buffered": 3.0, "exec_streamed": 2.0, "exec_stdin": 1.0,
        "cp_upload": 2.0, "cp_download": 1.5, "fs": 2.0, "shell": 1.5, "tunnel": 1.5, "background": 1.5,
    })
    nodes_per_client: int = 2
    lifetime: tuple[int, int] = (4, 16)
    think: float = 0.3


class Payload:
    """Random bytes shared by every upload (read only, so threads share it)."""

    def __init__(self) -> None:
        self.data = memoryview(os.urandom(MAX_COPY + _PAYLOAD_SLACK))

    def slice(self, rng: random.Random) -> memoryview:
        size = int(math.exp(rng.uniform(math.log(MIN_COPY), math.log(MAX_COPY))))
        offset = rng.randrange(0, _PAYLOAD_SLACK)
        return self.data[offset:offset + size]


class Client(threading.Thread):
    """
    One client of the load: a thread that, until ``run_state`` says stop,
    creates nodes (a create refused by admission is counted as a refusal
    and retried later), acts on them and deletes each after its lifetime,
    and deletes what it still holds before it ends.

    :param index: the client's number (its name, and the first group it creates in).
    :param daemon: how to reach the daemon.
    :param recorder: where outcomes go.
    :param mix: what to do.
    :param rng: the client's own random source (seeded by the run).
    :param payload: the uploads' bytes.
    :param run_state: says when to stop and when to quiesce (``stopping()``, ``quiesce(client)``).
    """

    def __init__(self, index: int, daemon: Api, recorder: Recorder, mix: Mix, rng: random.Random,
                 payload: Payload, run_state: Any) -> None:
        super().__init__(name=f"load-client-{index}", daemon=True)
        self.index = index
        self.api = daemon
        self.recorder = recorder
        self.mix = mix
        self.rng = rng
        self.payload = payload
        self.run_state = run_state
        self.nodes: list[Node] = []
        self.crashed: str | None = None

    # -- the loop ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            groups = list(self.mix.groups)
            first = groups[self.index % len(groups)]
            while not self.run_state.stopping():
                if self.run_state.quiesce_due(self):
                    self.delete_all()
                    self.run_state.quiesce(self)
                    continue
                if not self.nodes:
                    self.create(first or self.pick(self.mix.groups))
                    first = ""
                elif len(self.nodes) < self.mix.nodes_per_client and self.rng.random() < 0.1:
                    self.create(self.pick(self.mix.groups))
                else:
                    node = self.rng.choice(self.nodes)
                    if node.actions >= node.lifetime:
                        self.delete(node)
                    else:
                        node.actions += 1
                        self.act(node, self.pick(self.mix.actions))
                time.sleep(self.rng.uniform(0, self.mix.think))
        except BaseException as error:  # a bug of the client: reported, never silent
            self.crashed = repr(error)
        finally:
            self.delete_all()
            self.run_state.left(self)

    def pick(self, weights: dict[str, float]) -> str:
        names = list(weights)
        return self.rng.choices(names, [weights[name] for name in names])[0]

    def measure(self, op: str, call: Callable[[], int | None]) -> bool:
        """Run ``call`` as operation ``op`` and record its outcome; whether it was ok."""
        started = time.monotonic()
        try:
            size = call()
        except Refused as refusal:
            self.recorder.refused(op, refusal.code)
            return False
        except Failed as failure:
            self.recorder.failed(op, {"client": self.index, **failure.detail})
            return False
        except (OSError, http.client.HTTPException, ValueError, KeyError) as error:
            self.recorder.failed(op, {"client": self.index, "exception": repr(error)[:300]})
            return False
        self.recorder.ok(op, time.monotonic() - started, size or 0)
        return True

    # -- create and delete ------------------------------------------------------------------------------------

    def create(self, group: str) -> None:
        created: dict[str, Any] = {}

        def call() -> None:
            created.update(self.api.json(
                "POST", f"/hostgroup/{group}/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {}, expect=201,
                timeout=360))
            check(created.get("hostgroup") == group, "created in its group", answer=created)

        if self.measure(f"create_{group}", call):
            self.recorder.node_created(created["hostname"])
            self.nodes.append(Node(group, created["hostname"], self.rng.randint(*self.mix.lifetime)))
        else:
            time.sleep(self.rng.uniform(0.5, 2.0))

    def delete(self, node: Node) -> None:
        def call() -> None:
            answer = self.api.json("DELETE", f"/hostgroup/{node.group}/nodes/{node.hostname}")
            check(answer.get("disk_removed") == "true" and not answer.get("error"), "deleted", answer=answer)

        self.nodes.remove(node)
        if self.measure("delete", call):
            self.recorder.node_deleted(node.hostname)

    def delete_all(self) -> None:
        for node in list(self.nodes):
            self.delete(node)

    # -- actions on a node ------------------------------------------------------------------------------------

    def act(self, node: Node, action: str) -> None:
        getattr(self, f"do_{action}")(node)

    def do_health(self, node: Node) -> None:
        def call() -> None:
            answer = self.api.json("GET", f"/vm/{node.hostname}/health")
            check(answer.get("hostname") == node.hostname, "health of the node", answer=answer)

        self.measure("health", call)

    def do_list(self, node: Node) -> None:
        def call() -> None:
            listed = {entry["hostname"] for entry in self.api.json("GET", "/nodes")}
            check(node.hostname in listed, "the node listed", node=node.hostname)

        self.measure("list", call)

    def do_exec_buffered(self, node: Node) -> None:
        def call() -> None:
            query = urlencode({"cmd": f"echo {node.token}; cat /proc/loadavg", "buffered": "true"})
            answer = self.api.json("POST", f"/vm/{node.hostname}/exec?{query}")
            check(answer.get("exit_code") == 0 and answer.get("stdout", "").startswith(node.token + "\n"),
                  "buffered exec's answer", answer=answer)

        self.measure("exec_buffered", call)

    def do_exec_streamed(self, node: Node) -> None:
        def call() -> None:
            query = urlencode({"cmd": "for i in $(seq 1 50); do echo line-$i; done; echo done >&2"})
            connection = self.api.connection()
            try:
                connection.request("POST", f"/vm/{node.hostname}/exec?{query}")
                response = connection.getresponse()
                if response.status != 200:
                    raise Failed({"request": "POST exec (streamed)", **_error_detail(response.status, response.read())})
                records = [json.loads(line) for line in response.read().splitlines()]
            finally:
                connection.close()
            stdout = "".join(record.get("data", "") for record in records if record["type"] == "stdout")
            last = records[-1] if records else {}
            check(stdout == "".join(f"line-{i}\n" for i in range(1, 51)), "streamed exec's stdout", got=stdout[-200:])
            check(last.get("type") == "exit" and last.get("exit_code") == 0, "streamed exec's exit", last=last)

        self.measure("exec_streamed", call)

    def do_exec_stdin(self, node: Node) -> None:
        data = self.payload.slice(self.rng)[: self.rng.randint(1 << 16, 4 << 20)]

        def call() -> int:
            query = urlencode({"cmd": "sha256sum", "stdin": "true", "buffered": "true"})
            answer = self.api.json("POST", f"/vm/{node.hostname}/exec?{query}", data)
            check(answer.get("exit_code") == 0 and answer.get("stdout", "").split(" ")[0] ==
                  hashlib.sha256(data).hexdigest(), "stdin's hash", answer=answer)
            return len(data)

        self.measure("exec_stdin", call)

    def do_cp_upload(self, node: Node) -> None:
        slot = self.rng.randrange(2)
        data = self.payload.slice(self.rng)
        path = f"{GUEST_DIR}/slot{slot}.bin"

        def call() -> int:
            node.files.pop(slot, None)
            answer = self.api.json("POST", f"/vm/{node.hostname}/cp?{urlencode({'path': path})}", data)
            check(answer.get("size") == len(data) and answer.get("path") == path, "upload's answer", answer=answer)
            node.files[slot] = (len(data), hashlib.sha256(data).hexdigest())
            return len(data)

        self.measure("cp_upload", call)

    def do_cp_download(self, node: Node) -> None:
        if not node.files:
            self.do_cp_upload(node)
            return
        slot = self.rng.choice(list(node.files))
        size, digest = node.files[slot]

        def call() -> int:
            query = urlencode({"path": f"{GUEST_DIR}/slot{slot}.bin"})
            connection = self.api.connection()
            hasher, got = hashlib.sha256(), 0
            try:
                connection.request("GET", f"/vm/{node.hostname}/cp?{query}",
                                   headers={"Accept": "application/octet-stream"})
                response = connection.getresponse()
                if response.status != 200:
                    raise Failed({"request": "GET cp", **_error_detail(response.status, response.read())})
                while chunk := response.read(1 << 20):
                    hasher.update(chunk)
                    got += len(chunk)
            finally:
                connection.close()
            check(got == size and hasher.hexdigest() == digest, "download's bytes", size=size, got=got)
            return got

        self.measure("cp_download", call)

    def do_fs(self, node: Node) -> None:
        top = f"{GUEST_DIR}/fs-{os.urandom(4).hex()}"
        made = {"path": f"{top}/a/b", "recursive": True, "mode": "0750"}

        def mkdir() -> None:
            entry = self.api.json("POST", f"/vm/{node.hostname}/fs/mkdir", made)
            check(entry.get("type") == "directory" and entry.get("mode") == "0750", "mkdir's entry", entry=entry)

        def stat() -> None:
            entry = self.api.json("GET", f"/vm/{node.hostname}/fs/stat?{urlencode({'path': made['path']})}")
            check(entry.get("name") == "b" and entry.get("type") == "directory", "stat's entry", entry=entry)

        def readdir() -> None:
            entries = self.api.json("GET", f"/vm/{node.hostname}/fs/readdir?{urlencode({'path': top + '/a'})}")
            check([entry["name"] for entry in entries] == ["b"], "readdir's entries", entries=entries)

        def remove() -> None:
            query = urlencode({"path": top, "recursive": "true"})
            entry = self.api.json("DELETE", f"/vm/{node.hostname}/fs/remove?{query}")
            check(entry.get("type") == "directory", "remove's entry", entry=entry)

        if self.measure("fs_mkdir", mkdir):
            self.measure("fs_stat", stat)
            self.measure("fs_readdir", readdir)
            self.measure("fs_remove", remove)

    def do_shell(self, node: Node) -> None:
        def call() -> None:
            sock, status, rest = self.api.raw(WebSocket.upgrade_head(self.api.host, f"/vm/{node.hostname}/shell"))
            if status != 101:
                body = read_until_closed(sock, rest)
                sock.close()
                raise Failed({"request": "GET shell", **_error_detail(status, body)})
            ws = WebSocket(sock, rest)
            try:
                ws.send(shell_frame(WINDOW_SIZE, struct.pack("!II", 100, 30)))
                ws.send(shell_frame(DATA, b"echo L$((6*7))Z; exit\r"))
                screen, closed = b"", False
                while not closed:
                    opcode, message = ws.receive()
                    if opcode == 0x8:
                        check(message[:2] == struct.pack("!H", 1000), "shell closed normally", close=message)
                        break
                    if len(message) >= 5 and message[0] == DATA:
                        screen += message[5:5 + struct.unpack("!I", message[1:5])[0]]
                    closed = len(message) >= 1 and message[0] == SESSION_CLOSE
                check(b"L42Z" in screen, "shell's output", screen=screen[-300:])
            finally:
                ws.close()

        self.measure("shell", call)

    def start_server(self, node: Node) -> bool:
        """Start the node's HTTP server for tunnels (a background exec), once."""
        command = (f"mkdir -p /srv/www && echo {node.token} > /srv/www/t.txt && head -c 1048576 /dev/urandom "
                   f"> /srv/www/blob && exec python3 -m http.server {SERVER_PORT} --bind 127.0.0.1 "
                   "--directory /srv/www")

        def call() -> None:
            answer = self.api.json("POST", f"/vm/{node.hostname}/exec?{urlencode({'background': 'true', 'cmd': command})}",
                                   expect=201)
            check(str(answer.get("exec_id", "")).startswith("ex_"), "background start's answer", answer=answer)

        if self.measure("bg_start", call):
            node.server_started = time.monotonic()
            return True
        return False

    def forward_head(self, node: Node) -> str:
        return (f"GET /vm/{node.hostname}/forward HTTP/1.1\r\nHost: {self.api.host}\r\n"
                f"X-Inlets-Upstream: 127.0.0.1:{SERVER_PORT}\r\n\r\n")

    def server_ready(self, node: Node) -> bool:
        """
        Start the node's HTTP server for tunnels (a background exec) and wait
        until a tunnel to it opens (a Python start under TCG takes seconds):
        ``tunnel_server_ready``, apart from the tunnels themselves.
        """
        if node.server_ready:
            return True
        if node.server_started is None and not self.start_server(node):
            return False

        def call() -> None:
            assert node.server_started is not None
            while True:
                sock, status, rest = self.api.raw(self.forward_head(node))
                body = read_until_closed(sock, rest) if status != 200 else b""
                sock.close()
                if status == 200:
                    return
                detail = _error_detail(status, body)
                if detail.get("code") != "upstream_refused" or time.monotonic() - node.server_started > 120:
                    raise Failed({"request": "GET forward (server starting)", **detail})
                time.sleep(0.5)

        node.server_ready = self.measure("tunnel_server_ready", call)
        return node.server_ready

    def do_tunnel(self, node: Node) -> None:
        if not self.server_ready(node):
            return
        blob = self.rng.random() < 0.3
        request = f"GET /{'blob' if blob else 't.txt'} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode()

        def call() -> int:
            sock, status, rest = self.api.raw(self.forward_head(node))
            try:
                if status != 200:
                    raise Failed({"request": "GET forward", **_error_detail(status, read_until_closed(sock, rest))})
                sock.sendall(request)
                answer = read_until_closed(sock, rest)
            finally:
                sock.close()
            answer_head, _, body = answer.partition(b"\r\n\r\n")
            check(answer_head.startswith(b"HTTP/1.0 200"), "tunnelled answer's status", head=answer_head[:100])
            if blob:
                check(len(body) == 1048576, "tunnelled blob's size", size=len(body))
            else:
                check(body == f"{node.token}\n".encode(), "tunnelled file", body=body[:100])
            return len(body)

        self.measure("tunnel", call)

    def do_background(self, node: Node) -> None:
        exec_id = ""
        command = "for i in $(seq 1 20); do echo bg-$i; sleep 0.05; done"

        def start() -> None:
            nonlocal exec_id
            query = urlencode({"background": "true", "cmd": command})
            exec_id = self.api.json("POST", f"/vm/{node.hostname}/exec?{query}", expect=201)["exec_id"]

        def follow() -> None:
            connection = self.api.connection()
            try:
                connection.request("GET", f"/vm/{node.hostname}/exec/{exec_id}/logs?follow=true")
                response = connection.getresponse()
                if response.status != 200:
                    raise Failed({"request": "GET logs", **_error_detail(response.status, response.read())})
                frames = [json.loads(line) for line in _lines(response)]
            finally:
                connection.close()
            text = b"".join(base64.b64decode(frame["data"]) for frame in frames if frame["type"] == "stdout")
            check(text == "".join(f"bg-{i}\n" for i in range(1, 21)).encode(), "followed log's output",
                  got=text[-200:])
            check(frames[-1].get("type") == "exit" and frames[-1].get("exit_code") == 0, "followed log's end",
                  last=frames[-1])

        def delete() -> None:
            answer = self.api.json("DELETE", f"/vm/{node.hostname}/exec/{exec_id}")
            check(answer.get("reaped") is True, "background exec reaped", answer=answer)

        if self.measure("bg_start", start) and self.measure("bg_logs_follow", follow):
            self.measure("bg_delete", delete)


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The lines of a streamed answer, as they come."""
    while line := response.readline():
        if line.strip():
            yield line
