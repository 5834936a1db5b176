# -*- test-case-name: tests.integration.test_fault_guest -*-
"""
A guest that abuses its agent channel, as its root user can: the guest
agent's module in the guest gets a ``main`` that, once ``/tmp/evil.json``
says how, opens the channel's virtio-serial port itself and, for a bounded
time, writes noise, breaks the protocol after every handshake, or sends
pings, HELLOs or stream opens without reading what the daemon answers;
then it exits and init starts the honest agent again.

Meanwhile the daemon must stay responsive (``/healthz`` and an exec on
another node answer), its memory bounded, its log bounded; afterwards the
node's honest agent is reached again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
import time
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

#: Appended to the guest's ``vmservice/guest/agent.py``: ``main`` abuses the channel once (importing what
#: it uses itself: the agent module's own imports are not a stable interface).
EVIL = '''

_honest_main = main


def main(argv=None):
    import json as _json
    import os
    try:
        with open("/tmp/evil.json") as _stream:
            how = _json.load(_stream)
        os.unlink("/tmp/evil.json")
    except OSError:
        return _honest_main(argv)
    _abuse(how)


def _abuse(how):
    import json as _json
    import os
    import select as _select
    import time
    from vmservice.guest.loop import Loop
    from vmservice.guest.servers import wait_for_port
    from vmservice.wire import NEED_DATA, Connection, Hello, Open, Ping, Role
    from vmservice.wire.frames import encode_event

    device = wait_for_port(Loop(), PORT_NAME)
    fd = os.open(device, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    deadline = time.monotonic() + how["seconds"]
    stats = {"written": 0, "sessions": 0}

    def put(data):
        view = memoryview(data)
        while view and time.monotonic() < deadline:
            if not _select.select([], [fd], [], 0.2)[1]:
                continue
            try:
                count = os.write(fd, view)
            except BlockingIOError:
                continue
            except OSError:
                time.sleep(0.05)
                continue
            stats["written"] += count
            view = view[count:]

    def handshake():
        connection = Connection(Role.GUEST)
        put(connection.send(connection.hello("evil")))
        until = min(deadline, time.monotonic() + 5)
        while not connection.established and time.monotonic() < until:
            if not _select.select([fd], [], [], 0.2)[0]:
                continue
            try:
                connection.receive_data(os.read(fd, 65536))
            except (BlockingIOError, OSError):
                continue
            while connection.next_event() is not NEED_DATA:
                pass
            if connection.hello_wanted:
                put(connection.send(connection.hello("evil")))
        if connection.established:
            stats["sessions"] += 1
        return connection

    mode = how["mode"]
    if mode == "noise":
        while time.monotonic() < deadline:
            put(os.urandom(65536))
    elif mode == "garbage":
        while time.monotonic() < deadline:
            if handshake().established:
                put(b"\\xff" * 4096)
    else:
        connection = handshake()
        peer = connection.peer_hello.nonce if connection.peer_hello else bytes(8)
        if mode == "pings":
            batch = b"".join(encode_event(Ping(os.urandom(8))) for _ in range(2048))
        elif mode == "hellos":
            batch = b"".join(encode_event(Hello(os.urandom(8), peer, "evil")) for _ in range(512))
        else:
            batch = None
        frame = encode_event(Open(2, {"op": "x"}))
        stream_id = 0
        while time.monotonic() < deadline:
            if batch is None:
                ids = range(stream_id + 2, stream_id + 2 * 4096 + 1, 2)
                stream_id = ids[-1]
                put(b"".join(frame[:6] + i.to_bytes(4, "big") + frame[10:] for i in ids))
            else:
                put(batch)
    with open("/tmp/evil.out", "w") as _stream:
        _json.dump(stats, _stream)
'''

#: How long each abuse lasts, in seconds.
ABUSE = 20
#: What the daemon's resident memory may grow by during an abuse (it receives far more than this).
RSS_BOUND = 64 * 1024 * 1024


def rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        match = re.search(r"^VmRSS:\s+(\d+) kB", status.read(), re.M)
    assert match is not None
    return int(match.group(1)) * 1024


class AbusiveGuestTests(SharedDaemonTestCase):
    """
    One daemon and a node that behaves (``bystander``); each test has a node of its
    own whose agent abuses the channel when told (``victim``: the daemon's wait
    after a fault is a node's own, so each test starts from none), and ends with
    the victim's honest agent back.
    """

    victim: str
    bystander: str

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon()
        cls.daemon.start()
        cls.bystander = cls.create()

    @classmethod
    def create(cls) -> str:
        hostname: str = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)["hostname"]
        return hostname

    def setUp(self) -> None:
        super().setUp()
        self.victim = self.create()
        self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/demo/nodes/{self.victim}", timeout=120)
        code, out = self.daemon.run(self.victim, f"printf %s {shlex.quote(EVIL)} >> /opt/vmservice/vmservice/guest/agent.py")
        self.assertEqual(code, 0, out)

    def agent_pid(self) -> str:
        code, out = self.daemon.run(self.victim, "pgrep -f 'guest[.]agent import'")
        self.assertEqual(code, 0, out)
        return out.split()[0]

    def abuse(self, mode: str) -> dict[str, Any]:
        """
        Have the victim abuse its channel in ``mode`` for :data:`ABUSE` seconds while the
        bystander and ``/healthz`` are used; return what was seen: the daemon's RSS growth,
        the slowest answers, the daemon's log meanwhile and what the guest wrote.
        """
        daemon = self.daemon
        assert daemon.process is not None
        pid = daemon.process.pid
        old_agent = self.agent_pid()
        how = json.dumps({"mode": mode, "seconds": ABUSE})
        code, out = daemon.run(
            self.victim,
            f"printf %s {shlex.quote(how)} > /tmp/evil.json && rm -f /tmp/evil.out && "
            f"setsid sh -c 'sleep 1; kill {old_agent}' >/dev/null 2>&1 < /dev/null &",
        )
        self.assertEqual(code, 0, out)
        log_from = len(daemon.log())
        before = rss(pid)
        seen: dict[str, Any] = {"rss": 0, "health": 0.0, "exec": 0.0}
        stop = threading.Event()

        def sample_memory() -> None:
            while not stop.is_set():
                seen["rss"] = max(seen["rss"], rss(pid) - before)
                stop.wait(0.25)

        sampler = threading.Thread(target=sample_memory)
        sampler.start()
        try:
            end = time.monotonic() + ABUSE + 2
            while time.monotonic() < end:
                started = time.monotonic()
                status, _, _ = daemon.request("GET", "/healthz", timeout=30)
                self.assertEqual(status, 200)
                seen["health"] = max(seen["health"], time.monotonic() - started)
                started = time.monotonic()
                code, out = daemon.run(self.bystander, "echo fine")
                self.assertEqual((code, out.strip()), (0, "fine"))
                seen["exec"] = max(seen["exec"], time.monotonic() - started)
                time.sleep(0.5)
        finally:
            stop.set()
            sampler.join()

        def honest_again() -> bool:
            try:
                code, out = daemon.run(self.victim, "cat /tmp/evil.out")
            except AssertionError:
                return False
            return code == 0 and bool(out.strip())

        daemon.wait_for("the victim's honest agent", honest_again, timeout=180)
        code, out = daemon.run(self.victim, "cat /tmp/evil.out")
        seen["guest"] = json.loads(out)
        seen["log"] = daemon.log()[log_from:]
        status, _, _ = daemon.request("GET", "/healthz", timeout=30)
        self.assertEqual(status, 200)
        print(f"{mode}: {json.dumps({k: v for k, v in seen.items() if k != 'log'})}")
        return seen

    def assert_bounded(self, seen: dict[str, Any]) -> None:
        """The daemon's memory grew by less than :data:`RSS_BOUND`; the bystander and health answered in time."""
        self.assertLess(seen["rss"], RSS_BOUND, seen)
        self.assertLess(seen["health"], 5.0, seen)
        self.assertLess(seen["exec"], 15.0, seen)

    def test_noise(self) -> None:
        """
        Random bytes where the agent's HELLO should be are skipped within a bound;
        the daemon retries the channel at its HELLO timeout.
        """
        seen = self.abuse("noise")
        self.assert_bounded(seen)
        self.assertGreater(seen["guest"]["written"], RSS_BOUND, seen["guest"])

    def test_garbage_after_every_handshake(self) -> None:
        """
        A guest that breaks the protocol after every handshake has its connection
        dropped each time, and the daemon waits longer before each new one: a
        bounded number of handshakes and log lines, not one every few milliseconds.
        """
        seen = self.abuse("garbage")
        self.assert_bounded(seen)
        errors = seen["log"].count("agent protocol error")
        self.assertGreaterEqual(errors, 1, seen["log"][-2000:])
        self.assertLessEqual(errors, 8, seen["log"][-4000:])
        self.assertLessEqual(seen["guest"]["sessions"], 8, seen["guest"])

    def assert_dropped_for_not_reading(self, seen: dict[str, Any]) -> None:
        self.assert_bounded(seen)
        self.assertIn("not reading", seen["log"], seen["log"][-2000:])
        self.assertGreater(seen["guest"]["written"], 0, seen["guest"])

    def test_pings_unread(self) -> None:
        """
        Pings sent without reading the pongs cost the daemon a bounded amount of
        memory: it drops the connection when its answers pile up.
        """
        self.assert_dropped_for_not_reading(self.abuse("pings"))

    def test_opens_unread(self) -> None:
        """
        Streams opened (and refused) without reading the refusals: the same bound.
        """
        self.assert_dropped_for_not_reading(self.abuse("opens"))

    def test_hellos(self) -> None:
        """
        A flood of HELLOs, each a new session: the connection is dropped after a
        bounded number of them, so the daemon's log (one line per agent restart)
        stays bounded.
        """
        seen = self.abuse("hellos")
        self.assert_bounded(seen)
        restarts = seen["log"].count("guest agent restarted")
        self.assertLessEqual(restarts, 200, seen["log"][-2000:])
