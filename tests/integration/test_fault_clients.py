# -*- test-case-name: tests.integration.test_fault_clients -*-
"""
Fault injection: a client that stops reading.

A raw socket with a small receive buffer sends its request (a streamed
exec, a cp download, the shell's WebSocket upgrade, the event stream) and
then never reads, for a bounded time, while the guest (for the event
stream: the test, pausing and resuming the node) produces far more than the
daemon may hold.  Each test checks, meanwhile and after:

1. **memory bounded**: the daemon's RSS (``VmRSS``) grows by less than
   :data:`RSS_BOUND` over what it was before the client stalled; the
   producer in the guest is held back (what it wrote, or for a download
   what the guest's agent read, stops growing, under :data:`HELD_BOUND`),
   although a client that reads gets the same output at a rate that would
   have brought the daemon more than twice :data:`RSS_BOUND` within the
   window (a terminal is slower under TCG: there, at a rate at which the
   producer's count would have moved far past :data:`SLACK`); for the
   event stream, the events due to the stalled client add up to more than
   twice :data:`RSS_BOUND`, and once it reads again it gets a ``gap``: the
   daemon had kept nothing for it.  A daemon that buffered for the stalled
   client fails these;
2. **other clients unaffected**: ``/healthz``, a buffered exec on the same
   node and a second stream of the same kind, read by its client, complete
   within :data:`OTHERS` seconds;
3. **everything released** once the stalled client closes: the guest's
   producer ends, the daemon's open streams and connections are back to
   what they were, nothing lost or stray, the daemon answers
   (:func:`tests.integration.faults.settled`).

Every wait is bounded; each test's cleanups end what it started in the
guest and close its sockets, also when it fails.  The figures seen are
printed.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import socket
import threading
import time
from typing import Any, Callable
from urllib.parse import urlencode

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.bulk_port import bulk_connections
from tests.integration.daemon import Daemon, SharedGuestTestCase
from tests.integration.faults import WebSocket, agent_pid, digest, run, settled, upload, wait_until
from vmservice.nodes.events import RING_SIZE
from vmservice.nodes.model import MAX_TAG_LENGTH, MAX_TAGS

MiB = 1 << 20
HOSTNAME = "demo-1"

#: How much the daemon's RSS may grow over what it was before a client stalled.
RSS_BOUND = 64 * MiB
#: How much a held-back producer may have written: what the buffers on the way hold (the agent's credit
#: window, a pipe or the terminal, the daemon's socket), with room to spare.
HELD_BOUND = 16 * MiB
#: How much the guest's agent may have read of a file whose download is held back: the same, and the
#: guest kernel's buffers of the bulk port's virtio-serial queue (about 32 MiB are seen there).
HELD_DOWNLOAD_BOUND = 48 * MiB
#: Seconds a stalled client sits without reading, at least; and at least this long after its producer
#: was seen held back.
STALL = 20.0
HELD_FOR = 15.0
#: Seconds within which another client's request must complete while one is stalled.
OTHERS = 15.0
#: The receive buffer of a stalled client (the kernel doubles it).
RCVBUF = 4096
#: A count counts as held once it grew by at most ``SLACK`` bytes in ``QUIET`` seconds (a held-back
#: producer writes nothing; a download's count has the few KiB of the test's own execs).
SLACK = 256 * 1024
QUIET = 3.0
#: The file a stalled download asks for, and the one a second download gets meanwhile.
BIG = 256 * MiB
SMALL = 32 * MiB
#: What floods a terminal fastest under TCG: no newlines (no CR added), whole 4 KiB reads of the pty
#: (``yes`` goes at a fifth of it).
TERMINAL_FLOOD = "base64 -w 0 /dev/zero"
#: Events produced while the event stream's client is stalled: more than the daemon's ring keeps.
EVENTS = RING_SIZE + 176
#: Seconds the events may take to produce (about 20 on an idle machine).
EVENTS_TIME = 120.0


def rss(pid: int) -> int:
    """The resident set of process ``pid``, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class RssWatch:
    """
    The daemon's RSS sampled every 0.1 s by a thread from a baseline taken
    when it is made; stopped by :meth:`stop`.
    """

    def __init__(self, daemon: Daemon) -> None:
        assert daemon.process is not None
        self._pid = daemon.process.pid
        self.before = rss(self._pid)
        self.peak = self.before
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stopped.wait(0.1):
            try:
                self.peak = max(self.peak, rss(self._pid))
            except OSError:
                return

    @property
    def growth(self) -> int:
        """The most the RSS grew over the baseline so far."""
        return max(self.peak, rss(self._pid)) - self.before

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5)


def request_head(method: str, path: str, extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()


def upgrade_head(path: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return request_head("GET", path, "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                                     f"Sec-WebSocket-Key: {key}\r\n")


def exec_path(cmd: str) -> str:
    return f"/vm/{HOSTNAME}/exec?{urlencode({'cmd': cmd})}"


def series(daemon: Daemon, name: str, **labels: str) -> float:
    """The value of series ``name`` with exactly ``labels`` in ``/metrics`` now (0 when absent)."""
    status, _, body = daemon.request("GET", "/metrics", timeout=OTHERS)
    assert status == 200, status
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def timed(what: str, call: Callable[[], Any], bound: float = OTHERS) -> tuple[Any, float]:
    """``call()``'s value and the seconds it took; fails when it took more than ``bound``."""
    started = time.monotonic()
    value = call()
    took = time.monotonic() - started
    if took > bound:
        raise AssertionError(f"{what} took {took:.1f} s, over {bound} s, while a client was stalled")
    return value, took


class Shell(WebSocket):
    """
    :class:`~tests.integration.faults.WebSocket` to the shell, over a socket
    of the caller's (a stalled one) or a new one, typing in DATA frames.
    """

    def __init__(self, daemon: Daemon, sock: socket.socket | None = None) -> None:
        if sock is None:
            super().__init__(daemon, f"/vm/{HOSTNAME}/shell", timeout=OTHERS)
            return
        self.sock = sock
        self.upgraded()

    def type(self, text: bytes) -> None:
        """``text`` typed into the terminal (one DATA frame)."""
        self.send(b"\x01" + len(text).to_bytes(4, "big") + text)


class Subscriber:
    """
    A client of ``/events`` that reads everything (a thread): the ids it
    got, in order, the bytes of their events, and whether a gap came.
    """

    def __init__(self, daemon: Daemon) -> None:
        self.ids: list[int] = []
        self.sizes: dict[int, int] = {}
        self.gaps = 0
        self.error: BaseException | None = None
        self._connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=300)
        self._connection.request("GET", "/events")
        self._response = self._connection.getresponse()
        if self._response.status != 200:
            raise AssertionError(f"/events: {self._response.status}")
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        pending = bytearray()
        try:
            while True:
                chunk = self._response.read1(1 << 20)
                if not chunk:
                    return
                pending += chunk
                while True:
                    end = pending.find(b"\n\n")
                    if end < 0:
                        break
                    event = bytes(pending[:end + 2])
                    del pending[:end + 2]
                    if event.startswith(b":"):
                        continue  # a heartbeat
                    head = event.split(b"\n", 2)
                    if head[1] == b"event: gap":
                        self.gaps += 1
                    event_id = int(head[0].removeprefix(b"id: "))
                    self.ids.append(event_id)
                    self.sizes[event_id] = len(event)
        except Exception as error:  # also closed under the reader (close()), whichever way http.client notices
            self.error = error

    def close(self) -> None:
        sock = self._connection.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._connection.close()
        self._thread.join(10)


class SlowClientTests(SharedGuestTestCase):
    """One daemon and one booted node for every test; a stalled client's stream of each kind."""

    def setUp(self) -> None:
        super().setUp()
        self.tag = os.urandom(4).hex()
        #: The stalled client's producer in the guest, run under this name (``exec -a``).
        self.producer = f"producer-{self.tag}"
        # Whatever happens, no producer of this test is left running.
        self.addCleanup(self.daemon.request, "POST", exec_path(f"pkill -KILL -f '[p]roducer-{self.tag}'"),
                        timeout=60)
        self.connections = series(self.daemon, "vmservice_api_connections")

    # -- helpers ------------------------------------------------------------------------------------------

    def stall(self, head: bytes) -> tuple[socket.socket, RssWatch]:
        """
        The daemon's RSS watched from now, and a connection with a small
        receive buffer (set before the connect) that has sent ``head`` and
        is never read (closed by the cleanup at the latest).
        """
        watch = RssWatch(self.daemon)
        self.addCleanup(watch.stop)
        sock = socket.socket()
        self.addCleanup(sock.close)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", self.daemon.port))
        sock.sendall(head)
        return sock, watch

    def written(self) -> int | None:
        """The bytes the producer has written so far (its ``wchar``); ``None`` while it does not run."""
        _, out = run(self.daemon, HOSTNAME, f"p=$(pgrep -f '[p]roducer-{self.tag}') && "
                                            "sed -n 's/^wchar: //p' /proc/$p/io || echo none")
        return None if out.strip() in ("none", "") else int(out)

    def producer_ended(self) -> bool:
        _, out = run(self.daemon, HOSTNAME, f"pgrep -f '[p]roducer-{self.tag}' || echo none")
        return out.strip() == "none"

    def held(self, what: str, count: Callable[[], int | None], watch: RssWatch, bound: int = HELD_BOUND,
             timeout: float = 60.0) -> int:
        """
        Poll ``count()`` until it has grown by at most :data:`SLACK` in
        :data:`QUIET` seconds: held back; its value then.  Fails when it
        passes ``bound`` first, or is not held within ``timeout``.
        """
        seen: list[tuple[float, int]] = []
        deadline = time.monotonic() + timeout
        while True:
            value = count()
            now = time.monotonic()
            if value is not None:
                if value > bound:
                    raise AssertionError(f"{what} was not held back: {value / MiB:.1f} MiB, over "
                                         f"{bound // MiB} MiB (the daemon's RSS grew {watch.growth / MiB:.1f} MiB)")
                seen.append((now, value))
                earlier = [v for t, v in seen if now - t >= QUIET]
                if earlier and value - earlier[-1] <= SLACK:
                    return value
            if now > deadline:
                raise AssertionError(f"{what} was not held back within {timeout} s: {seen[-5:]}")
            time.sleep(0.3)

    def others_unaffected(self) -> dict[str, float]:
        """``/healthz`` and a buffered exec on the node answer within :data:`OTHERS` seconds; their times."""
        status, health = timed("/healthz", lambda: self.daemon.request("GET", "/healthz", timeout=OTHERS)[0])
        self.assertEqual(status, 200)
        answer, took = timed("a buffered exec", lambda: run(self.daemon, HOSTNAME, "echo ok", timeout=OTHERS))
        self.assertEqual(answer, (0, "ok\n"))
        return {"healthz_s": round(health, 2), "buffered_exec_s": round(took, 2)}

    def sit_out(self, started: float, held_at: float, watch: RssWatch) -> None:
        """
        Check the RSS bound every half second until :data:`STALL` seconds
        have passed since ``started`` and :data:`HELD_FOR` since ``held_at``.
        """
        while time.monotonic() < max(started + STALL, held_at + HELD_FOR):
            self.assertLess(watch.growth, RSS_BOUND)
            time.sleep(0.5)

    def released(self, kind: str, watch: RssWatch) -> None:
        """
        Once the stalled client closed: the daemon's open streams of
        ``kind`` are none, its connections as before, nothing is lost or
        stray, and its RSS stayed within the bound.
        """
        self.open_streams(kind, 0)
        wait_until("the daemon's connections as before",
                   lambda: series(self.daemon, "vmservice_api_connections") <= self.connections, OTHERS, 0.3)
        settled(self.daemon)
        self.assertLess(watch.growth, RSS_BOUND)

    def open_streams(self, kind: str, count: int) -> None:
        """Wait (at most :data:`OTHERS` seconds) until the daemon counts ``count`` open streams of ``kind``."""
        wait_until(f"{count} open {kind} streams",
                   lambda: series(self.daemon, "vmservice_open_streams", kind=kind) == count, OTHERS, 0.2)

    def report(self, what: str, **figures: Any) -> None:
        print(f"\n{what}: " + ", ".join(f"{name} {value}" for name, value in figures.items()))

    def assert_window_shows(self, rate: float, what: str) -> None:
        """At ``rate`` bytes/s the daemon would have taken in more than twice the RSS bound within the window."""
        self.assertGreater(rate * STALL, 2 * RSS_BOUND,
                           f"{what} went at {rate / MiB:.1f} MiB/s only: a daemon that buffered everything would "
                           f"not have passed the RSS bound in {STALL} s")

    def assert_stop_shows(self, rate: float, seconds: float, what: str) -> None:
        """
        At ``rate`` bytes/s a producer that was not held back would have
        written more than twice :data:`SLACK` in ``seconds``: its count
        standing still means something.
        """
        self.assertGreater(rate * seconds, 2 * SLACK,
                           f"{what} went at {rate / 1024:.0f} KiB/s only: a producer not held back would not have "
                           f"written more than the slack in {seconds:.1f} s")

    # -- the streamed exec --------------------------------------------------------------------------------

    def reading_exec(self, cmd: str) -> tuple[int, float, dict[str, Any]]:
        """
        A streamed exec of ``cmd`` whose client reads it all: the bytes of
        its answer's body, the seconds it took, and its last record.
        """
        connection = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=OTHERS)
        started = time.monotonic()
        try:
            connection.request("POST", exec_path(cmd), headers={"Content-Length": "0"})
            response = connection.getresponse()
            self.assertEqual(response.status, 200)
            received, tail = 0, b""
            while True:
                chunk = response.read1(1 << 20)
                if not chunk:
                    break
                received += len(chunk)
                tail = (tail + chunk)[-4096:]
        finally:
            connection.close()
        return received, time.monotonic() - started, json.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])

    def test_exec_stream(self) -> None:
        """
        A streamed exec of ``yes`` to a client that never reads: ``yes`` is
        held back (under HELD_BOUND written) and the daemon's RSS grows less
        than RSS_BOUND, while a second exec of ``yes`` read by its client
        goes at a rate that would have brought the daemon more than twice
        RSS_BOUND in the window; /healthz, a buffered exec and that second
        exec complete meanwhile; once the client closes, its ``yes`` ends
        and the daemon has no exec stream open.
        """
        stalled, watch = self.stall(request_head("POST", exec_path(f"exec -a {self.producer} yes"),
                                                 "Content-Length: 0\r\n"))
        started = time.monotonic()
        held = self.held("the stalled exec's yes", self.written, watch)
        held_at = time.monotonic()
        figures = self.others_unaffected()
        (received, took, last), _ = timed("a second streamed exec", lambda: self.reading_exec("timeout 4 yes"))
        self.assertEqual((last["type"], last.get("exit_code")), ("exit", 124), last)  # ended by its timeout
        rate = received / took
        self.open_streams("exec", 1)
        self.sit_out(started, held_at, watch)
        final = self.written()
        assert final is not None
        self.assertLessEqual(final - held, SLACK, "the stalled exec's yes went on writing")
        self.assertLess(final, HELD_BOUND)
        self.assertLess(watch.growth, RSS_BOUND)
        self.assert_window_shows(rate, "a second exec of yes read by its client")
        self.assert_stop_shows(rate, time.monotonic() - held_at, "a second exec of yes read by its client")
        self.report("a streamed exec to a client that stops reading",
                    yes_wrote_MiB=round(final / MiB, 2), rss_growth_MiB=round(watch.growth / MiB, 1),
                    reading_client_MiB_s=round(rate / MiB, 1), in_window_MiB=round(rate * STALL / MiB),
                    second_exec_s=round(took, 1), **figures)
        stalled.close()
        wait_until("the stalled exec's yes to end", self.producer_ended, OTHERS, 0.3)
        self.released("exec", watch)

    # -- the cp download ----------------------------------------------------------------------------------

    def agent_read(self, agent: int) -> int:
        """The bytes the guest's agent (and the commands it reaped) read so far (its ``rchar``)."""
        code, out = run(self.daemon, HOSTNAME, f"sed -n 's/^rchar: //p' /proc/{agent}/io")
        self.assertEqual(code, 0)
        return int(out)

    def reading_download(self, path: str) -> tuple[int, str, float]:
        """A download whose client reads it all: its status, its content's sha256, the seconds it took."""
        connection = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=OTHERS)
        started = time.monotonic()
        sha = hashlib.sha256()
        try:
            connection.request("GET", f"/vm/{HOSTNAME}/cp?{urlencode({'path': path})}")
            response = connection.getresponse()
            while True:
                chunk = response.read1(1 << 20)
                if not chunk:
                    break
                sha.update(chunk)
        finally:
            connection.close()
        return response.status, sha.hexdigest(), time.monotonic() - started

    def test_cp_download(self) -> None:
        """
        A download of a 256 MiB file to a client that never reads: the
        guest's agent stops reading it (under HELD_DOWNLOAD_BOUND read) and
        the daemon's RSS grows less than RSS_BOUND, although a download over
        the same bulk port read by its client goes at a rate that would have
        brought the daemon more than twice RSS_BOUND in the window;
        /healthz, a buffered exec and a second download (32 MiB, over the
        agent's channel: the stalled one holds the bulk port), whole, answer
        meanwhile; once the client closes, the agent reads no more of the
        file, the bulk port is free and the daemon has no cp stream open.
        """
        big, small = f"/root/big-{self.tag}.bin", f"/root/small-{self.tag}.bin"
        self.addCleanup(self.daemon.request, "POST", exec_path(f"rm -f {big} {small}"), timeout=60)
        code, _ = run(self.daemon, HOSTNAME, f"head -c {BIG} /dev/zero > {big}", timeout=120)
        self.assertEqual(code, 0)
        content = os.urandom(SMALL)
        status, answer = upload(self.daemon, f"/vm/{HOSTNAME}/cp?path={small}", content)
        self.assertEqual(status, 200, answer)
        # What the stalled download's path (the bulk port, free now) carries to a client that reads.
        status, sha, took = self.reading_download(small)
        self.assertEqual((status, sha), (200, digest(content)))
        rate = SMALL / took
        wait_until("the bulk port free", lambda: bulk_connections(self.daemon, HOSTNAME) == 0, OTHERS, 0.3)
        agent = agent_pid(self.daemon, HOSTNAME)
        before = self.agent_read(agent)
        stalled, watch = self.stall(request_head("GET", f"/vm/{HOSTNAME}/cp?path={big}"))
        started = time.monotonic()
        held = self.held("the guest's reading of the stalled download", lambda: self.agent_read(agent) - before,
                         watch, HELD_DOWNLOAD_BOUND)
        held_at = time.monotonic()
        self.assertEqual(bulk_connections(self.daemon, HOSTNAME), 1)
        figures = self.others_unaffected()
        (status, sha, took), _ = timed("a second download", lambda: self.reading_download(small))
        self.assertEqual((status, sha), (200, digest(content)))
        after_second = self.agent_read(agent)
        self.sit_out(started, held_at, watch)
        self.assertLessEqual(self.agent_read(agent) - after_second, SLACK, "the stalled download went on")
        self.assertLess(watch.growth, RSS_BOUND)
        self.assert_window_shows(rate, "a download over the bulk port read by its client")
        self.report("a cp download to a client that stops reading",
                    guest_read_MiB=round(held / MiB, 2), of_MiB=BIG // MiB,
                    rss_growth_MiB=round(watch.growth / MiB, 1), reading_client_MiB_s=round(rate / MiB, 1),
                    in_window_MiB=round(rate * STALL / MiB), second_download_s=round(took, 1), **figures)
        stalled.close()
        wait_until("the bulk port free", lambda: bulk_connections(self.daemon, HOSTNAME) == 0, OTHERS, 0.3)
        # The guest reads no more of the file: what it read stays far short of its 256 MiB.
        self.held("the guest's reading once the client closed", lambda: self.agent_read(agent) - after_second,
                  watch, HELD_BOUND)
        self.released("cp", watch)

    # -- the shell ----------------------------------------------------------------------------------------

    def reading_shell(self, line: bytes) -> tuple[int, float, int | None]:
        """
        A shell whose client reads everything, ``line`` typed in it: the
        bytes of terminal output it got, the seconds until its session
        closed, and its close code.
        """
        shell = Shell(self.daemon)
        started = time.monotonic()
        try:
            self.assertEqual(shell.status, 101)
            shell.type(line)
            received = 0
            while True:
                shell.sock.settimeout(max(0.1, started + OTHERS - time.monotonic()))
                try:
                    opcode, payload = shell.frame()
                except EOFError:
                    return received, time.monotonic() - started, None
                if opcode == 8:
                    code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                    return received, time.monotonic() - started, code
                if opcode == 2 and payload[:1] == b"\x01":
                    received += len(payload) - 5
        finally:
            shell.close()

    def test_shell(self) -> None:
        """
        A shell whose client never reads runs ``base64 -w 0 /dev/zero``: it
        is held back (under HELD_BOUND written, then nothing for HELD_FOR
        seconds) and the daemon's RSS grows less than RSS_BOUND, while the
        same in a second shell read by its client goes at a rate at which a
        producer not held back would have written more than twice the slack
        meanwhile; /healthz, a buffered exec and that second shell (closed
        with 1000) complete meanwhile; once the client closes, its producer
        is hung up and the daemon has no shell stream open.
        """
        stalled, watch = self.stall(upgrade_head(f"/vm/{HOSTNAME}/shell"))
        shell = Shell(self.daemon, stalled)
        self.assertEqual(shell.status, 101)
        shell.type(f"exec -a {self.producer} {TERMINAL_FLOOD}\r".encode())
        started = time.monotonic()
        held = self.held("the stalled shell's producer", self.written, watch)
        held_at = time.monotonic()
        figures = self.others_unaffected()
        (received, took, code), _ = timed("a second shell", lambda: self.reading_shell(
            f"timeout 4 {TERMINAL_FLOOD}; exit\r".encode()))
        self.assertEqual(code, 1000)
        rate = received / took
        self.open_streams("shell", 1)
        self.sit_out(started, held_at, watch)
        final = self.written()
        assert final is not None
        self.assertLessEqual(final - held, SLACK, "the stalled shell's producer went on writing")
        self.assertLess(final, HELD_BOUND)
        self.assertLess(watch.growth, RSS_BOUND)
        # A terminal is slow under TCG (under a MiB/s): not enough to pass the RSS bound in the window, but
        # a producer that was not held back would have moved its count far past the slack.
        self.assert_stop_shows(rate, time.monotonic() - held_at, "a second shell read by its client")
        self.report("a shell to a client that stops reading",
                    producer_wrote_MiB=round(final / MiB, 2), rss_growth_MiB=round(watch.growth / MiB, 1),
                    reading_client_KiB_s=round(rate / 1024), held_for_s=round(time.monotonic() - held_at, 1),
                    second_shell_s=round(took, 1), **figures)
        stalled.close()
        wait_until("the stalled shell's producer to end", self.producer_ended, OTHERS, 0.3)
        self.released("shell", watch)

    # -- the event stream ---------------------------------------------------------------------------------

    def test_event_stream(self) -> None:
        """
        The event stream to a client that never reads while the node is
        paused and resumed over and over (EVENTS events of about 190 KB
        each: the node has 64 tags of 256 characters, each 12 bytes in
        the JSON): the daemon's RSS grows less than RSS_BOUND although the
        events due to that client add up to more than twice that; a client
        that reads gets every event, in order, without a gap, within OTHERS
        seconds of the last; /healthz and a buffered exec answer meanwhile;
        the stalled client, reading again, gets what the socket buffers held
        and then a gap: the daemon had kept nothing for it; once it closes
        the daemon has no event stream open.
        """
        daemon = self.daemon
        tags = ["\U0001F600" * (MAX_TAG_LENGTH - 6) + f"{i:06d}" for i in range(MAX_TAGS)]
        self.addCleanup(daemon.request, "PATCH", f"/vm/{HOSTNAME}/tags", {"replace": []})
        self.addCleanup(daemon.request, "POST", f"/vm/{HOSTNAME}/resume")
        daemon.json("PATCH", f"/vm/{HOSTNAME}/tags", {"replace": tags})
        reader = Subscriber(daemon)
        self.addCleanup(reader.close)
        self.open_streams("events", 1)
        stalled, watch = self.stall(request_head("GET", "/events"))
        self.open_streams("events", 2)
        started = time.monotonic()
        figures: dict[str, float] = {}
        pairs = 0
        while 2 * pairs < EVENTS:
            self.assertLess(time.monotonic() - started, EVENTS_TIME, f"only {2 * pairs} events were made in time")
            daemon.post(f"/vm/{HOSTNAME}/pause")
            daemon.post(f"/vm/{HOSTNAME}/resume")
            pairs += 1
            if pairs % 100 == 0:
                self.assertLess(watch.growth, RSS_BOUND)
                figures = self.others_unaffected()
        made = time.monotonic() - started
        wait_until("the reading subscriber to have every event", lambda: len(reader.ids) >= 2 * pairs or reader.error,
                   OTHERS, 0.1)
        self.assertIsNone(reader.error)
        self.assertEqual((reader.gaps, len(reader.ids)), (0, 2 * pairs))
        self.assertEqual(reader.ids, list(range(reader.ids[0], reader.ids[0] + 2 * pairs)))
        due = sum(reader.sizes.values())
        self.assertLess(watch.growth, RSS_BOUND)
        self.assertGreater(due, 2 * RSS_BOUND, "the events were too few to show anything")

        # Reading again: what the buffers held (the first events, in order), then a gap up to the ring.
        stalled.settimeout(OTHERS)
        seen = bytearray()
        gap = re.compile(rb"\nid: (\d+)\nevent: gap\ndata: (\{[^\n]*\})\n")
        deadline = time.monotonic() + OTHERS
        while (found := gap.search(seen)) is None:
            self.assertLess(time.monotonic(), deadline, f"no gap within {OTHERS} s")
            self.assertLess(len(seen), 2 * HELD_BOUND, "no gap: the daemon had kept the events for the client")
            data = stalled.recv(1 << 20)
            self.assertTrue(data, "the stream ended")
            seen += data
        got = [int(n) for n in re.findall(rb"\nid: (\d+)\ndata: ", seen[:found.start() + 1])]
        self.assertEqual(got, list(range(reader.ids[0], reader.ids[0] + len(got))))
        held = sum(reader.sizes[event_id] for event_id in got)
        self.assertLess(held, HELD_BOUND)
        info = json.loads(found.group(2))
        self.assertEqual(info["last_event_id"], got[-1] if got else reader.ids[0] - 1)
        self.assertEqual(info["oldest_id"], reader.ids[-1] - RING_SIZE + 1)
        self.assertGreater(info["oldest_id"], info["last_event_id"] + 1)
        self.report("the event stream to a client that stops reading",
                    events=2 * pairs, in_s=round(made, 1), due_MiB=round(due / MiB),
                    rss_growth_MiB=round(watch.growth / MiB, 1), held_in_buffers=len(got),
                    held_MiB=round(held / MiB, 1), **figures)
        stalled.close()
        reader.close()
        self.released("events", watch)
