# -*- test-case-name: tests.integration.test_events -*-
"""
``GET /events`` against a real daemon and a real guest: a subscriber sees a
node's life in order (created, running, agent up, paused, resumed,
suspended, restored, deleted) with increasing ids; a reconnect with
``Last-Event-ID`` replays only what came after; a reboot is the agent lost
and back (a reconnect); ``vmctl events`` prints the
events the daemon holds; the Prometheus series move with it (the open
``events`` stream, the restore histogram, the events counter).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image


class EventStream:
    """
    A subscriber to ``/events`` on its own connection, read by a thread into a
    queue of decoded events (gaps included).
    """

    def __init__(self, daemon: Daemon, query: str = "", last_event_id: int | None = None) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=300)
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.connection.request("GET", "/events" + query, headers=headers)
        self.response = self.connection.getresponse()
        if self.response.status != 200:
            raise AssertionError(f"/events: {self.response.status} {self.response.read()!r}")
        self.content_type = self.response.getheader("content-type")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        data: list[str] = []
        try:
            while True:
                line = self.response.readline()
                if not line:
                    return
                text = line.decode("utf-8").rstrip("\r\n")
                if text.startswith("data: "):
                    data.append(text[len("data: "):])
                elif not text and data:
                    self.events.put(json.loads("\n".join(data)))
                    data = []
        except Exception:  # closed under the reader (close()), whichever way http.client notices
            return

    def until(self, done: Any, timeout: float = 240.0) -> list[dict[str, Any]]:
        """The events read until ``done(event)`` is true for one of them (included)."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no event satisfied the wait; got {got}") from None
            got.append(event)
            if done(event):
                return got

    def close(self) -> None:
        sock = self.connection.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.connection.close()
        self.thread.join(10)


def samples(daemon: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The daemon's /metrics, by sample name and sorted labels."""
    status, _, body = daemon.request("GET", "/metrics")
    assert status == 200, status
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def open_event_streams(daemon: Daemon) -> float:
    return samples(daemon)[("vmservice_open_streams", (("kind", "events"),))]


class EventStreamTests(SharedDaemonTestCase):
    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon()
        cls.daemon.start()

    def stream(self, query: str = "", last_event_id: int | None = None) -> EventStream:
        stream = EventStream(self.daemon, query, last_event_id)
        self.addCleanup(stream.close)
        return stream

    def test_a_node_s_life(self) -> None:
        """
        A node created, paused, resumed, suspended, restored and deleted: the
        subscriber gets each step once, in order, with increasing ids; a
        subscriber of another host group gets none of it; reconnecting with
        Last-Event-ID replays only what came after; the open stream, the
        restore and the events are in /metrics.
        """
        stream = self.stream("?tag=life")
        elsewhere = self.stream("?hostgroup=demo&tag=other")
        self.assertEqual(stream.content_type, "text/event-stream")
        self.daemon.wait_for("two open event streams", lambda: open_event_streams(self.daemon) == 2)
        created = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {"tags": ["life"]},
                                   expect=201)
        hostname = created["hostname"]
        self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/demo/nodes/{hostname}")
        up = stream.until(lambda e: e["type"] == "agent_up")
        self.daemon.post(f"/vm/{hostname}/pause")
        self.daemon.post(f"/vm/{hostname}/resume")
        self.daemon.post(f"/vm/{hostname}/suspend")
        self.daemon.post(f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        rest = stream.until(lambda e: e["type"] == "agent_up")
        self.daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")
        rest += stream.until(lambda e: e["type"] == "deleted")
        events = up + rest

        self.assertEqual([(e["type"], e["status"]) for e in events], [
            ("created", "Creating"), ("running", "Running"), ("agent_up", "Running"),
            ("paused", "Paused"), ("resumed", "Running"), ("suspended", "Suspended"), ("restored", "Running"),
            ("agent_up", "Running"), ("deleted", "Deleted"),
        ])
        ids = [e["id"] for e in events]
        self.assertEqual(ids, sorted(set(ids)), ids)
        for event in events:
            self.assertEqual((event["hostname"], event["hostgroup"], event["tags"]), (hostname, "demo", ["life"]))
            self.assertRegex(event["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
        self.assertTrue(elsewhere.events.empty())

        # Reconnect after "paused": only what came after it, in order.
        paused = next(e["id"] for e in events if e["type"] == "paused")
        again = self.stream("?tag=life", last_event_id=paused)
        replayed = again.until(lambda e: e["type"] == "deleted", timeout=30)
        self.assertEqual([e["type"] for e in replayed],
                         ["resumed", "suspended", "restored", "agent_up", "deleted"])
        self.assertGreater(replayed[0]["id"], paused)

        found = samples(self.daemon)
        self.assertGreaterEqual(found[("vmservice_restore_duration_seconds_count", (("hostgroup", "demo"),))], 1)
        self.assertGreaterEqual(found[("vmservice_node_events_total", (("type", "paused"),))], 1)
        self.assertEqual(open_event_streams(self.daemon), 3)
        for subscriber in (stream, elsewhere, again):
            subscriber.close()
        self.daemon.wait_for("no open event stream", lambda: open_event_streams(self.daemon) == 0, timeout=30)

    def test_reboot(self) -> None:
        """
        A watch of the node is an open stream until its client leaves; a reboot
        is `rebooted`, then the agent lost and back (`agent_down`, `agent_up`),
        which counts as a reconnect of its host group.
        """
        stream = self.stream("?tag=reboot")
        created = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {"tags": ["reboot"]},
                                   expect=201)
        hostname = created["hostname"]
        self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/demo/nodes/{hostname}")
        stream.until(lambda e: e["type"] == "agent_up")
        # A watch of the guest counts as an open stream while its client reads it.
        watch = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=60)
        self.addCleanup(watch.close)
        watch.request("GET", f"/vm/{hostname}/fs/watch?paths=/tmp", headers={"Accept": "text/event-stream"})
        self.assertEqual(watch.getresponse().status, 200)
        kind = ("vmservice_open_streams", (("kind", "watch"),))
        self.daemon.wait_for("an open watch stream", lambda: samples(self.daemon)[kind] == 1, timeout=30)
        watch.close()
        self.daemon.wait_for("no open watch stream", lambda: samples(self.daemon)[kind] == 0, timeout=30)
        before = samples(self.daemon).get(("vmservice_agent_reconnects_total", (("hostgroup", "demo"),)), 0.0)
        self.daemon.post(f"/vm/{hostname}/shutdown?action=reboot")
        events = stream.until(lambda e: e["type"] == "agent_up")
        self.assertEqual([(e["type"], e["status"]) for e in events],
                         [("rebooted", "Running"), ("agent_down", "Running"), ("agent_up", "Running")])
        after = samples(self.daemon)[("vmservice_agent_reconnects_total", (("hostgroup", "demo"),))]
        self.assertEqual(after, before + 1)

    def test_vmctl_events(self) -> None:
        """vmctl events prints the held events (filtered) and ends; --json gives their JSON; an unknown group fails."""
        created = self.daemon.json("POST", "/hostgroup/demo/nodes", {"tags": ["cli"]}, expect=201)
        hostname = created["hostname"]
        self.daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")

        def vmctl(*args: str) -> subprocess.CompletedProcess[str]:
            command = [os.path.join(os.path.dirname(sys.executable), "vmctl"), "--url",
                       f"http://127.0.0.1:{self.daemon.port}", "events", *args]
            return subprocess.run(command, capture_output=True, text=True, timeout=60)

        lines = vmctl("--tag", "cli", "--json").stdout.splitlines()
        events = [json.loads(line) for line in lines]
        self.assertEqual([e["type"] for e in events][0], "created")
        self.assertEqual(events[-1]["type"], "deleted")
        self.assertEqual({e["hostname"] for e in events}, {hostname})
        plain = vmctl("--tag", "cli", "--since", str(events[0]["id"])).stdout.splitlines()
        self.assertEqual(len(plain), len(events) - 1)
        self.assertTrue(plain[-1].endswith(f" deleted {hostname} Deleted"), plain[-1])
        failed = vmctl("--hostgroup", "nope")
        self.assertEqual(failed.returncode, 1)
        self.assertIn("nope", failed.stderr)
