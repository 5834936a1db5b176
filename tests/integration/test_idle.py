# -*- test-case-name: tests.integration.test_idle -*-
"""
Idle suspend and wake on request against real guests: a node of a group with
``idle_suspend: 5s`` suspends itself; exec, cp, fs, shell, forward and health
each wake it and succeed, with what the guest held in memory intact; a paused
node is neither suspended nor woken; concurrent requests wake it once; a
daemon killed with ``kill -9`` during an automatic suspend comes back with
the node suspended-and-wakeable or running.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from typing import Any
from urllib.parse import urlencode

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image, processes_under
from tests.integration.forwarding import open_pipe, read_all
from tests.integration.screen import Screen
from vmservice.client import Client

#: The idle time of the tests' group.
IDLE = "5s"

GROUPS: list[dict[str, Any]] = [
    {"name": "idle", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "idle_suspend": IDLE},
]


def metric(daemon: Daemon, name: str) -> float:
    """The value of one series of ``/metrics`` (0 when it is not there)."""
    _, _, body = daemon.request("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def wakes(daemon: Daemon) -> int:
    """How many wakes the daemon counted."""
    return int(metric(daemon, 'vmservice_idle_wake_duration_seconds_count{hostgroup="idle"}'))


class IdleTests(SharedDaemonTestCase, TestCase):
    """One node of the idle group, put to sleep before each test."""

    timeout = 900
    hostname: str

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS)
        cls.daemon.start()
        created = cls.daemon.json("POST", "/hostgroup/idle/nodes?wait=agent&timeout=3m", {}, expect=201)
        cls.hostname = created["hostname"]
        code, out = cls.daemon.run(cls.hostname, "mkdir -p /tmp/www && printf 'hello from the guest' > "
                                                 "/tmp/www/hello.txt && echo kept > /tmp/memory.txt")
        assert code == 0, out
        status, _, body = cls.daemon.request("POST", f"/vm/{cls.hostname}/exec?" + urlencode(
            {"background": "true", "cmd": "cd /tmp/www && exec python3 -m http.server --bind 127.0.0.1 8000"}))
        assert status == 201, body

    def asleep(self) -> None:
        """Wait until the node suspended itself (listed Suspended, described as idle_suspended)."""
        self.daemon.wait_status(self.hostname, "Suspended", timeout=180)
        described = self.daemon.json("GET", f"/vm/{self.hostname}")
        self.assertEqual((described["status"], described.get("idle_suspended")), ("Suspended", True))

    def test_suspends_itself(self) -> None:
        """Left alone for idle_suspend, the node suspends itself: Suspended, no VM process, counted in /metrics."""
        self.asleep()
        self.assertEqual(self.daemon.vm_pids(), [])
        self.assertGreaterEqual(metric(self.daemon, 'vmservice_idle_suspend_duration_seconds_count{hostgroup="idle"}'),
                                1)
        status, _, body = self.daemon.request("GET", "/events?follow=false&last_event_id=0")
        self.assertEqual(status, 200)
        events = [json.loads(line[len("data: "):]) for line in body.decode().splitlines() if line.startswith("data: ")]
        slept = [e for e in events if e.get("hostname") == self.hostname and e["type"] == "suspended"]
        self.assertTrue(slept and all(e.get("idle") is True for e in slept), events)

    def test_exec_wakes(self) -> None:
        """An exec wakes the node and succeeds; tmpfs contents (memory) are intact; the node runs again, then sleeps again."""
        self.asleep()
        began = time.monotonic()
        self.assertEqual(self.daemon.run(self.hostname, "cat /tmp/memory.txt"), (0, "kept\n"))
        woken_in = time.monotonic() - began
        self.assertEqual(self.daemon.nodes()[self.hostname]["status"], "Running")
        self.assertNotIn("idle_suspended", self.daemon.json("GET", f"/vm/{self.hostname}"))
        began = time.monotonic()
        self.daemon.run(self.hostname, "true")
        awake = time.monotonic() - began
        print(f"exec on a sleeping node: {woken_in:.3f} s; on an awake one: {awake:.3f} s")
        self.asleep()

    def test_cp_wakes(self) -> None:
        """An upload wakes the node; then a download of the same file (waking it again if it slept)."""
        self.asleep()
        data = os.urandom(200_000)
        status, _, body = self.daemon.request(
            "POST", f"/vm/{self.hostname}/cp?" + urlencode({"path": "/root/up.bin"}), data,
            headers={"Content-Type": "application/octet-stream"})
        self.assertEqual(status, 200, body)
        self.asleep()
        status, _, body = self.daemon.request(
            "GET", f"/vm/{self.hostname}/cp?" + urlencode({"path": "/root/up.bin"}),
            headers={"Accept": "application/octet-stream"})
        self.assertEqual((status, body), (200, data))

    def test_fs_wakes(self) -> None:
        """fs stat and readdir wake the node and answer."""
        self.asleep()
        entry = self.daemon.json("GET", f"/vm/{self.hostname}/fs/stat?" + urlencode({"path": "/tmp/memory.txt"}))
        self.assertEqual((entry["name"], entry["size"]), ("memory.txt", 5))
        self.asleep()
        names = [e["name"] for e in self.daemon.json("GET", f"/vm/{self.hostname}/fs/readdir?path=/tmp/www")]
        self.assertEqual(names, ["hello.txt"])

    def test_health_wakes(self) -> None:
        """Health wakes the node and answers 200 from its agent."""
        self.asleep()
        health = self.daemon.json("GET", f"/vm/{self.hostname}/health")
        self.assertEqual(health["hostname"], self.hostname)

    def test_forward_wakes(self) -> None:
        """A tunnel wakes the node and reaches the HTTP server that ran in it before it slept."""
        self.asleep()
        sock, status = open_pipe(self.daemon, "127.0.0.1:8000", self.hostname)
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            sock.sendall(b"GET /hello.txt HTTP/1.0\r\nHost: guest\r\n\r\n")
            answer = read_all(sock)
        self.assertTrue(answer.endswith(b"\r\n\r\nhello from the guest"), answer[-100:])

    def test_open_stream_keeps_awake(self) -> None:
        """An open stream (an exec running longer than idle_suspend) keeps the node awake."""
        self.asleep()
        self.assertEqual(self.daemon.run(self.hostname, "sleep 12; echo done"), (0, "done\n"))
        self.assertEqual(self.daemon.nodes()[self.hostname]["status"], "Running")

    def test_shell_wakes(self) -> Deferred[None]:
        """A shell wakes the node; the shell runs a command."""
        self.asleep()
        client = Client(reactor, f"http://127.0.0.1:{self.daemon.port}", self.daemon.token)  # type: ignore[arg-type]

        async def go() -> None:
            try:
                session = await client.shell(self.hostname)
                try:
                    screen = Screen(session)
                    self.assertEqual((await screen.run("cat /tmp/memory.txt")).strip(), "kept")
                finally:
                    session.abort()
            finally:
                await client.close()

        return Deferred.fromCoroutine(go())

    def test_paused_not_woken(self) -> None:
        """A paused node is never suspended by the timer, and requests get 409 paused (they do not resume it)."""
        self.asleep()
        self.daemon.run(self.hostname, "true")
        self.daemon.post(f"/vm/{self.hostname}/pause")
        try:
            time.sleep(8)
            self.assertEqual(self.daemon.nodes()[self.hostname]["status"], "Paused")
            status, _, body = self.daemon.request("POST", f"/vm/{self.hostname}/exec?cmd=true")
            self.assertEqual((status, json.loads(body)["code"]), (409, "paused"))
            self.assertEqual(self.daemon.nodes()[self.hostname]["status"], "Paused")
        finally:
            self.daemon.post(f"/vm/{self.hostname}/resume")

    def test_explicit_suspend_not_woken(self) -> None:
        """A node the user suspended (even one that slept) is not woken by a request: 409 not_running."""
        self.asleep()
        self.daemon.post(f"/vm/{self.hostname}/suspend")
        self.assertNotIn("idle_suspended", self.daemon.json("GET", f"/vm/{self.hostname}"))
        status, _, body = self.daemon.request("POST", f"/vm/{self.hostname}/exec?cmd=true")
        self.assertEqual((status, json.loads(body)["code"]), (409, "not_running"))
        self.daemon.post(f"/vm/{self.hostname}/restore?wait=agent")
        self.assertEqual(self.daemon.run(self.hostname, "cat /tmp/memory.txt"), (0, "kept\n"))

    def test_request_during_suspend(self) -> None:
        """A request that arrives while the automatic suspend runs waits for it, then wakes the node: no 409 busy."""
        self.assertEqual(self.daemon.run(self.hostname, "true")[0], 0)
        record = os.path.join(self.daemon.state_dir, "nodes", self.hostname, "node.json")

        def suspending() -> bool:
            try:
                with open(record) as f:
                    return bool(json.load(f)["status"] == "Suspending")
            except (OSError, ValueError):
                return False  # read while it was replaced

        deadline = time.monotonic() + 120
        while not suspending():
            self.assertLess(time.monotonic(), deadline, "the automatic suspend did not start")
            time.sleep(0.005)
        self.assertEqual(self.daemon.run(self.hostname, "cat /tmp/memory.txt"), (0, "kept\n"))

    def test_concurrent_requests_wake_once(self) -> None:
        """Eight requests at once for the sleeping node: one wake, all eight answered."""
        self.asleep()
        before = wakes(self.daemon)
        results: list[Any] = [None] * 8

        def one(index: int) -> None:
            try:
                results[index] = self.daemon.run(self.hostname, f"echo {index}")
            except BaseException as error:  # reported below
                results[index] = error

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        self.assertEqual(results, [(0, f"{i}\n") for i in range(8)])
        self.assertEqual(wakes(self.daemon), before + 1)


class IdleCrashTests(SharedDaemonTestCase):
    """A daemon killed with kill -9 in the middle of an automatic suspend."""

    timeout = 900

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS)
        cls.daemon.start()

    def record(self, hostname: str) -> dict[str, Any]:
        with open(os.path.join(self.daemon.state_dir, "nodes", hostname, "node.json")) as f:
            record: dict[str, Any] = json.load(f)
        return record

    def kill_when(self, what: str, moment: Any) -> tuple[str, str]:
        """
        Create a node, kill -9 the daemon once ``moment(hostname)`` holds during
        its automatic suspend, start the daemon again: the node's hostname and
        the status it came back with (Suspended or Running), with no VM left over.
        """
        daemon = self.daemon
        hostname = daemon.json("POST", "/hostgroup/idle/nodes?wait=agent&timeout=3m", {}, expect=201)["hostname"]
        self.assertEqual(daemon.run(hostname, "echo kept > /tmp/memory.txt"), (0, ""))
        deadline = time.monotonic() + 120
        while not moment(hostname):
            self.assertLess(time.monotonic(), deadline, f"no {what}")
            time.sleep(0.005)
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        self.assertTrue(self.record(hostname)["idle_suspended"])
        daemon.start()
        # The listing shows a Suspending record as Running: the record on disk says when the recovery did it.
        daemon.wait_for("the recovery", lambda: self.record(hostname)["status"] in ("Suspended", "Running"))
        found: str = self.record(hostname)["status"]
        self.assertEqual(daemon.nodes()[hostname]["status"], found)
        self.assertLessEqual(len(daemon.vm_pids()), 1)  # none left over (it may sleep again by now)
        print(f"kill -9 at {what}: the node came back {found}")
        return hostname, found

    def woken(self, hostname: str) -> None:
        """The node answers with its memory intact (an adopted one once its agent is back, as after any restart)."""
        daemon = self.daemon
        daemon.wait_for("the agent", lambda: daemon.request("GET", f"/vm/{hostname}/health")[0] == 200, 120)
        self.assertEqual(daemon.run(hostname, "cat /tmp/memory.txt"), (0, "kept\n"))
        self.assertLessEqual(len(processes_under(daemon.state_dir)), 1)
        daemon.json("DELETE", f"/hostgroup/idle/nodes/{hostname}")

    def test_kill_during_suspend(self) -> None:
        """kill -9 as soon as the record says Suspending: the node comes back Running (or Suspended) and answers."""

        def suspending(hostname: str) -> bool:
            try:
                return self.record(hostname)["status"] == "Suspending"
            except (OSError, ValueError):
                return False  # read while it was replaced

        hostname, _ = self.kill_when("Suspending", suspending)
        self.woken(hostname)

    def test_kill_after_snapshot(self) -> None:
        """kill -9 once the snapshot is committed: the node comes back Suspended and wakeable, and a request wakes it."""
        hostname, found = self.kill_when(
            "the committed snapshot",
            lambda hostname: os.path.exists(os.path.join(self.daemon.state_dir, "nodes", hostname, "state.bin")))
        self.assertEqual(found, "Suspended")
        self.assertTrue(self.daemon.json("GET", f"/vm/{hostname}")["idle_suspended"])
        self.woken(hostname)
