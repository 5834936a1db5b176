# -*- test-case-name: tests.integration.test_watching -*-
"""
Integration tests of ``GET /vm/{hostname}/fs/watch`` against a real guest
booted by the real daemon: each event type, patterns and event filters,
recursion into a directory made while watching, one_shot, max_events,
timeout, a missing path, and a watcher abandoned by its client being removed
in the guest (the agent's inotify descriptors counted before and after).
"""

from __future__ import annotations

import http.client
import json
import os
import time
from typing import Any, Optional
from urllib.parse import urlencode

from tests.integration.daemon import SharedGuestTestCase


class SseClient:
    """
    One watch request read as a client would: the status, then each event
    (its ``id:`` line and decoded data) as it arrives; comments are skipped.
    """

    def __init__(self, connection: http.client.HTTPConnection, path: str, headers: dict[str, str]) -> None:
        self.connection = connection
        connection.request("GET", path, headers={"Accept": "text/event-stream", **headers})
        self.response = connection.getresponse()
        self.status = self.response.status
        self.headers = {k.lower(): v for k, v in self.response.getheaders()}

    def next_event(self, timeout: float = 30.0) -> Optional[dict[str, Any]]:
        """The next event, or ``None`` once the daemon closed the stream."""
        assert self.connection.sock is not None
        self.connection.sock.settimeout(timeout)
        line_id: Optional[int] = None
        data: list[str] = []
        while True:
            raw = self.response.readline()
            if not raw:
                return None
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if data:
                    event: dict[str, Any] = json.loads("\n".join(data))
                    event["line_id"] = line_id
                    return event
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "id":
                line_id = int(value.strip())
            elif name == "data":
                data.append(value.strip())

    def events_until(self, predicate: Any, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Events until one satisfies ``predicate`` (included)."""
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            event = self.next_event(max(1.0, deadline - time.monotonic()))
            if event is None:
                raise AssertionError(f"the stream ended after {found}")
            found.append(event)
            if predicate(event):
                return found

    def close(self) -> None:
        self.connection.close()


class WatchTests(SharedGuestTestCase):
    """One daemon and one guest for every test; each test watches its own directory."""

    def workdir(self, name: str) -> str:
        path = f"/tmp/watch-{name}"
        self.run_ok(f"rm -rf {path} && mkdir -p {path}")
        return path

    def run_ok(self, cmd: str) -> str:
        code, out = self.daemon.run("demo-1", cmd)
        self.assertEqual(code, 0, (cmd, out))
        return out

    def watch(self, **query: Any) -> SseClient:
        path = "/vm/demo-1/fs/watch?" + urlencode(query, doseq=True)
        headers = {"Authorization": f"Bearer {self.daemon.token}"} if self.daemon.token else {}
        client = SseClient(self.daemon._connection(120), path, headers)
        self.addCleanup(client.close)
        return client

    def ok(self, **query: Any) -> SseClient:
        client = self.watch(**query)
        if client.status != 200:
            self.fail(f"{client.status}: {client.response.read()!r}")
        self.assertEqual((client.headers["content-type"], client.headers["cache-control"]),
                         ("text/event-stream", "no-cache"))
        return client

    def test_event_types(self) -> None:
        """create, write, chmod, rename (old name; the new one is a create) and remove, with ids from 1."""
        base = self.workdir("types")
        client = self.ok(paths=base)
        self.run_ok(f"cd {base} && echo hi > f && chmod 600 f && mv f g && rm g && mkdir d")
        events = client.events_until(lambda e: e["path"] == f"{base}/d")
        self.assertEqual([(e["type"], os.path.basename(e["path"])) for e in events], [
            ("create", "f"), ("write", "f"), ("chmod", "f"), ("rename", "f"), ("create", "g"), ("remove", "g"),
            ("create", "d"),
        ])
        self.assertEqual([e["id"] for e in events], list(range(1, len(events) + 1)))
        self.assertEqual([e["line_id"] for e in events], list(range(1, len(events) + 1)))
        self.assertEqual((events[1]["size"], events[1]["isDir"], events[-1]["isDir"]), (3, False, True))
        for event in events:
            self.assertRegex(event["timestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
            self.assertEqual(set(event) - {"line_id"}, {"id", "type", "path", "timestamp", "size", "isDir"})

    def test_patterns_events_and_max_events(self) -> None:
        """Only creates of names matching the patterns arrive; the stream closes after max_events."""
        base = self.workdir("patterns")
        client = self.ok(paths=base, patterns=["*.txt", "*.md"], events="create", max_events=2)
        self.run_ok(f"cd {base} && echo x > a.log && echo x > b.txt && chmod 600 b.txt && echo x > c.md && touch d.txt")
        first, second = client.next_event(), client.next_event()
        assert first is not None and second is not None
        self.assertEqual([(e["type"], e["path"]) for e in (first, second)],
                         [("create", f"{base}/b.txt"), ("create", f"{base}/c.md")])
        self.assertIsNone(client.next_event())

    def test_recursive_new_subdirectory(self) -> None:
        """With recursive, a directory made while watching is watched too, including what was made in it at once."""
        base = self.workdir("recursive")
        self.run_ok(f"mkdir -p {base}/old/inner")
        client = self.ok(paths=base, recursive="true", events="create")
        self.run_ok(f"echo x > {base}/old/inner/f && mkdir -p {base}/new/a/b && echo y > {base}/new/a/b/g")
        events = client.events_until(lambda e: e["path"] == f"{base}/new/a/b/g")
        self.assertEqual([e["path"] for e in events], [f"{base}/old/inner/f", f"{base}/new", f"{base}/new/a",
                                                      f"{base}/new/a/b", f"{base}/new/a/b/g"])
        self.run_ok(f"echo z > {base}/new/a/later")
        later = client.next_event()
        assert later is not None
        self.assertEqual(later["path"], f"{base}/new/a/later")

    def test_not_recursive(self) -> None:
        """Without recursive, a subdirectory's contents are not reported."""
        base = self.workdir("flat")
        self.run_ok(f"mkdir {base}/sub")
        client = self.ok(paths=base, one_shot="true")
        self.run_ok(f"touch {base}/sub/hidden && touch {base}/seen")
        event = client.next_event()
        assert event is not None
        self.assertEqual(event["path"], f"{base}/seen")

    def test_one_shot(self) -> None:
        """one_shot: the first event, then the stream closes."""
        base = self.workdir("oneshot")
        client = self.ok(paths=base, one_shot="true")
        self.run_ok(f"touch {base}/a {base}/b")
        event = client.next_event()
        assert event is not None
        self.assertEqual((event["id"], event["path"]), (1, f"{base}/a"))
        self.assertIsNone(client.next_event())

    def test_timeout_and_last_event_id(self) -> None:
        """timeout: the stream closes once it has run that long; ids continue after Last-Event-ID."""
        base = self.workdir("timeout")
        client = self.watch(paths=base, timeout="3s")
        self.assertEqual(client.status, 200)
        started = time.monotonic()
        self.assertIsNone(client.next_event(timeout=30))
        self.assertGreaterEqual(time.monotonic() - started, 2.5)
        path = "/vm/demo-1/fs/watch?" + urlencode({"paths": base, "one_shot": "true"})
        client = SseClient(self.daemon._connection(60), path, {"Last-Event-ID": "41"})
        self.addCleanup(client.close)
        self.run_ok(f"touch {base}/x")
        event = client.next_event()
        assert event is not None
        self.assertEqual((event["id"], event["line_id"]), (42, 42))

    def test_missing_path(self) -> None:
        """A path that does not exist in the guest is a 404 before any stream; a relative one a 400."""
        client = self.watch(paths=["/tmp", "/nope/missing"])
        body = json.loads(client.response.read())
        self.assertEqual((client.status, body["code"]), (404, "not_found"))
        self.assertIn("/nope/missing", body["error"])
        client = self.watch(paths="relative")
        self.assertEqual(client.status, 400)

    def test_watched_directory_removed(self) -> None:
        """Removing the watched directory reports it, then the stream closes (nothing is left to watch)."""
        base = self.workdir("gone")
        client = self.ok(paths=base)
        self.run_ok(f"rmdir {base}")
        events = client.events_until(lambda e: e["path"] == base)
        self.assertEqual((events[-1]["type"], events[-1]["isDir"]), ("remove", True))
        self.assertIsNone(client.next_event())

    def agent_inotify_descriptors(self) -> int:
        """How many inotify instances the guest agent holds (its pid found by its command line)."""
        out = self.run_ok(
            "n=agent; for d in /proc/[0-9]*; do if grep -qa \"guest\\.$n import\" $d/cmdline 2>/dev/null; then "
            "ls -l $d/fd 2>/dev/null | grep -c inotify; fi; done")
        counts = [int(line) for line in out.split()]
        self.assertEqual(len(counts), 1, out)
        return counts[0]

    def test_abandoned_watcher_removed(self) -> None:
        """A client that goes away: its watches are removed in the guest (the agent closes the inotify instance)."""
        base = self.workdir("abandoned")
        before = self.agent_inotify_descriptors()
        client = self.ok(paths=base, recursive="true")
        self.assertEqual(self.agent_inotify_descriptors(), before + 1)
        client.close()
        deadline = time.monotonic() + 30
        while self.agent_inotify_descriptors() != before:
            if time.monotonic() > deadline:
                self.fail("the guest still holds the abandoned watch")
            time.sleep(0.2)
        # One-shot and timed-out streams leave nothing behind either.
        client = self.ok(paths=base, one_shot="true")
        self.run_ok(f"touch {base}/x")
        self.assertIsNotNone(client.next_event())
        self.assertIsNone(client.next_event())
        self.assertEqual(self.agent_inotify_descriptors(), before)
