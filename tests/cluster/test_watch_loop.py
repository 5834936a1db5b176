"""
Tests for :mod:`vmservice.cluster.watch_loop`: list, watch, reconnect with a
back-off, relist on 410, against the fake API server's pods.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.fake_api import FakeApi, fake_client
from vmservice.cluster.watch_events import WatchEvent
from vmservice.cluster.watch_loop import WatchLoop


class Seen:
    """A handler that keeps what it is told."""

    def __init__(self) -> None:
        self.lists: list[list[dict[str, Any]]] = []
        self.events: list[WatchEvent] = []

    def listed(self, items: list[dict[str, Any]]) -> None:
        self.lists.append(items)

    def changed(self, event: WatchEvent) -> None:
        self.events.append(event)


def _event(kind: str, name: str, version: int) -> bytes:
    return json.dumps({"type": kind, "object": {"kind": "Pod", "metadata": {
        "name": name, "resourceVersion": str(version)}}}).encode() + b"\n"


class WatchLoopTests(SynchronousTestCase):
    """A pod collection listed and watched."""

    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.api = FakeApi()
        self.api.pods = [{"metadata": {"name": "p1"}}]
        self.client, self.stub = fake_client(self.clock, self.api)
        self.seen = Seen()
        self.loop = WatchLoop(self.clock, self.client, "/api/v1/pods", {"fieldSelector": "spec.nodeName=vms-a"},
                              self.seen, lambda: 0.0, list_kind="PodList", max_line=4096)
        self.loop.start()

    def tearDown(self) -> None:
        self.loop.stop()
        self.stub.flush()

    def _watch_queries(self) -> list[str]:
        return [path for method, path, _ in self.api.requests if method == "GET"]

    def test_list_then_watch(self) -> None:
        """The list goes to the handler, then events; the version follows the events."""
        self.assertEqual(self.seen.lists, [[{"metadata": {"name": "p1"}}]])
        self.assertEqual((self.loop.listings, self.loop.watches, self.loop.version), (1, 1, "100"))
        self.api.send(_event("ADDED", "p2", 101) + _event("MODIFIED", "p2", 102))
        self.stub.flush()
        self.assertEqual([(e.type, e.object["metadata"]["name"]) for e in self.seen.events],
                         [("ADDED", "p2"), ("MODIFIED", "p2")])
        self.assertEqual(self.loop.version, "102")

    def test_bookmark_moves_version(self) -> None:
        """A BOOKMARK moves the version without telling the handler."""
        self.api.send(_event("BOOKMARK", "", 150))
        self.stub.flush()
        self.assertEqual((self.seen.events, self.loop.version), ([], "150"))

    def test_stream_end_rewatches_from_version(self) -> None:
        """A watch the server ends is watched again from the last version, without a relist."""
        self.api.send(_event("ADDED", "p2", 101))
        self.stub.flush()
        self.api.end_watches()
        self.stub.flush()
        self.assertEqual((self.loop.listings, self.loop.watches), (1, 2))
        self.assertEqual(len(self.api.watchers), 1)

    def test_expired_relists(self) -> None:
        """An ERROR 410 event ends the watch and lists again."""
        self.api.send(b'{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}\n')
        self.stub.flush()
        self.assertEqual((self.loop.listings, len(self.seen.lists)), (2, 2))

    def test_gone_answer_relists_after_backoff(self) -> None:
        """A watch refused with 410 lists again after a back-off."""
        self.api.end_watches()
        self.api.queue("GET", "/pods", 410)
        self.stub.flush()
        self.assertEqual(self.loop.listings, 1)
        self.clock.advance(0.5)
        self.assertEqual(self.loop.listings, 2)

    def test_failures_back_off(self) -> None:
        """Failed watches wait longer each time (capped), and the wait starts again after an event."""
        self.api.end_watches()
        for _ in range(3):
            self.api.queue("GET", "/pods", 500)
        self.stub.flush()
        watches = self.loop.watches
        for delay in (0.5, 1.0, 2.0):
            self.clock.advance(delay - 0.01)
            self.assertEqual(self.loop.watches, watches)
            self.clock.advance(0.01)
            watches += 1
            self.assertEqual(self.loop.watches, watches)

    def test_oversize_or_malformed_line_relists(self) -> None:
        """A line over the bound, or not an event, drops the stream and lists again after a back-off."""
        for bad in (b"x" * 5000, b"{nope\n"):
            listings = self.loop.listings
            self.api.send(bad)
            self.stub.flush()
            self.clock.advance(30)
            self.stub.flush()
            self.assertEqual(self.loop.listings, listings + 1)

    def test_error_event_relists_after_backoff(self) -> None:
        """An ERROR event that is not a 410 is a failure: a back-off, then a relist."""
        self.api.send(b'{"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError"}}\n')
        self.stub.flush()
        self.assertEqual(self.loop.listings, 1)
        self.clock.advance(0.5)
        self.assertEqual(self.loop.listings, 2)

    def test_stop(self) -> None:
        """A stop closes the watch and leaves no timer."""
        self.api.end_watches()
        self.api.queue("GET", "/pods", 500)
        self.stub.flush()
        self.loop.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.clock.advance(100)
        self.assertEqual(self.loop.watches, 2)
