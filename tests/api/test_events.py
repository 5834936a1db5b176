# -*- test-case-name: tests.api.test_events -*-
"""
``GET /events`` (:mod:`vmservice.api.events`) through the real Api on a
:class:`~vmservice.api.streaming.StreamingSite` and an HTTP/1.1 channel over a
``StringTransport``, with a real :class:`~vmservice.nodes.events.EventHub` and
a ``MemoryReactorClock``: the SSE format, replay after ``Last-Event-ID`` (or
``last_event_id``), gaps, filters, heartbeats, ``follow=false``, back-pressure,
and that a client going away leaves no subscription behind.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import open_connection, parse_response
from vmservice.api.app import Api
from vmservice.api.events import EventsApi
from vmservice.api.streaming import StreamingSite
from vmservice.errors import NotFound
from vmservice.metrics import Metrics
from vmservice.nodes.events import EventHub, EventType
from vmservice.nodes.model import NodeRecord, Status


def record(hostname: str = "demo-1", group: str = "demo", tags: tuple[str, ...] = ()) -> NodeRecord:
    return NodeRecord(hostname=hostname, hostgroup=group, ram_bytes=1, cpus=1,
                      created_at=datetime(2024, 1, 1, tzinfo=timezone.utc), status=Status.RUNNING, tags=tags)


def parse_blocks(body: bytes) -> list[dict[str, Any]]:
    """The blocks of an SSE body: ``{"id": int, "event": name, "data": JSON}`` or ``{"comment": text}``."""
    blocks = []
    for block in body.decode("utf-8").split("\n\n"):
        if not block:
            continue
        fields: dict[str, Any] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                fields["comment"] = line[1:].strip()
                continue
            name, _, value = line.partition(": ")
            fields[name] = int(value) if name == "id" else json.loads(value) if name == "data" else value
        blocks.append(fields)
    return blocks


class _Fleet:
    """What the route needs of a fleet: its events and its host groups."""

    def __init__(self, events: EventHub) -> None:
        self.events = events

    def group(self, name: str) -> object:
        if name not in ("demo", "other"):
            raise NotFound(f"host group {name!r} not found", code="hostgroup_not_found")
        return object()


class EventsApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(1_700_000_000.25)
        self.hub = EventHub(self.reactor.seconds, size=4)
        self.metrics = Metrics()
        routes = EventsApi(_Fleet(self.hub), self.reactor, heartbeat=15).routes()  # type: ignore[arg-type]
        api = Api(self.reactor, routes, self.metrics, None)
        self.site = StreamingSite(api.resource(), api.plan_body, reactor=self.reactor)
        self.connect()

    def connect(self) -> None:
        """A new HTTP connection (a stream holds its connection)."""
        self.channel, self.transport = open_connection(self, self.site)

    def get(self, query: str = "", headers: str = "", method: str = "GET") -> None:
        self.channel.dataReceived(f"{method} /events?{query} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        self.reactor.advance(0)

    def publish(self, kind: EventType = EventType.PAUSED, **fields: Any) -> None:
        self.hub.publish(kind, record(**fields))

    def blocks(self) -> list[dict[str, Any]]:
        status, headers, body = parse_response(self.transport.value())
        self.assertEqual((status, headers[b"content-type"]), (200, b"text/event-stream"), body)
        return parse_blocks(body)

    def ids(self) -> list[Any]:
        return [b.get("event", b.get("id")) for b in self.blocks() if "comment" not in b]

    def open_streams(self) -> float:
        return self.metrics.registry.get_sample_value("vmservice_open_streams", {"kind": "events"}) or 0.0

    def test_event_format(self) -> None:
        """Each event: its hub id on the id line and in its JSON, RFC 3339 time, type, node, group, status, tags."""
        self.get()
        self.reactor.advance(1.5)
        self.hub.publish(EventType.CREATED, record(tags=("a",)))
        self.hub.publish(EventType.USERDATA_FINISHED, record(), exit_code=2)
        first, second = self.blocks()
        self.assertEqual(first, {"id": 1, "data": {
            "id": 1, "time": "2023-11-14T22:13:21.75Z", "type": "created", "hostname": "demo-1", "hostgroup": "demo",
            "status": "Running", "tags": ["a"]}})
        self.assertEqual((second["id"], second["data"]["exit_code"]), (2, 2))

    def test_only_new_without_last_id(self) -> None:
        """Without Last-Event-ID the stream starts with the next event."""
        self.publish()
        self.get()
        self.publish()
        self.assertEqual(self.ids(), [2])

    def test_replay(self) -> None:
        """Last-Event-ID (or last_event_id in the query, which wins) replays what came after it, then follows."""
        for _ in range(3):
            self.publish()
        self.get(headers="Last-Event-ID: 1\r\n")
        self.publish()
        self.assertEqual(self.ids(), [2, 3, 4])
        self.connect()
        self.get("last_event_id=3", headers="Last-Event-ID: 1\r\n")
        self.assertEqual(self.ids(), [4])

    def test_gap(self) -> None:
        """An id older than the ring: a gap event (its id the one before the oldest held), then the ring."""
        for _ in range(6):
            self.publish()
        self.get(headers="Last-Event-ID: 1\r\n")
        blocks = self.blocks()
        self.assertEqual(blocks[0], {"id": 2, "event": "gap", "data": {
            "id": 2, "type": "gap", "last_event_id": 1, "oldest_id": 3}})
        self.assertEqual([b["id"] for b in blocks[1:]], [3, 4, 5, 6])

    def test_filters(self) -> None:
        """hostgroup and tag keep only the matching events; an unknown host group is 404."""
        self.get("hostgroup=other&tag=x")
        self.publish(group="other", tags=("x",))
        self.publish(group="demo", tags=("x",))
        self.publish(group="other")
        self.assertEqual(self.ids(), [1])
        self.connect()
        self.get("hostgroup=nope")
        status, _, body = parse_response(self.transport.value())
        self.assertEqual((status, json.loads(body)["code"]), (404, "hostgroup_not_found"))

    def test_bad_input(self) -> None:
        """A bad Last-Event-ID or last_event_id is 400 and subscribes nothing."""
        for query, headers in (("", "Last-Event-ID: x\r\n"), ("last_event_id=-1", ""), ("follow=maybe", "")):
            self.connect()
            self.get(query, headers)
            status, _, body = parse_response(self.transport.value())
            self.assertEqual(status, 400, body)
        self.assertEqual(self.hub.subscribers, 0)

    def test_heartbeats(self) -> None:
        """A quiet stream gets a heartbeat comment every 15 s; an event puts it off."""
        self.get()
        self.reactor.advance(14)
        self.assertEqual(self.blocks(), [])
        self.reactor.advance(1)
        self.assertEqual(self.blocks(), [{"comment": "heartbeat"}])
        self.reactor.advance(10)
        self.publish()
        self.reactor.advance(14)
        self.assertEqual(len(self.blocks()), 2)
        self.reactor.advance(1)
        self.assertEqual([b.get("comment") for b in self.blocks()], ["heartbeat", None, "heartbeat"])

    def test_disconnect_unsubscribes(self) -> None:
        """A client that goes away leaves no subscription, no timer and no open stream behind."""
        self.get()
        self.assertEqual((self.hub.subscribers, self.open_streams()), (1, 1.0))
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual((self.hub.subscribers, self.open_streams()), (0, 0.0))
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.publish()  # nothing is written to a gone client
        for _ in range(20):
            self.connect()
            self.get()
            self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual((self.hub.subscribers, self.open_streams()), (0, 0.0))

    def test_no_follow(self) -> None:
        """follow=false ends the stream once the replay is over."""
        for _ in range(2):
            self.publish()
        self.get("follow=false&last_event_id=0")
        self.assertEqual(self.ids(), [1, 2])
        self.assertTrue(self.transport.value().endswith(b"0\r\n\r\n"))
        self.assertEqual(self.hub.subscribers, 0)

    def test_head(self) -> None:
        """HEAD answers the status and headers, and ends."""
        self.get(method="HEAD")
        self.assertTrue(self.transport.value().startswith(b"HTTP/1.1 200 OK"))
        self.assertIn(b"Content-Type: text/event-stream", self.transport.value())
        self.assertEqual(self.hub.subscribers, 0)

    def test_slow_client(self) -> None:
        """A full transport pauses the subscription; once it drains the missed events follow, in order."""
        self.get()
        self.transport.producer.pauseProducing()
        self.publish()
        self.publish()
        self.assertEqual(self.blocks(), [])
        self.transport.producer.resumeProducing()
        self.assertEqual(self.ids(), [1, 2])
