# -*- test-case-name: tests.api.test_watching -*-
"""
``GET /vm/{hostname}/fs/watch`` (:mod:`vmservice.api.watching`,
:mod:`vmservice.api.sse`) through the real Api on a
:class:`~vmservice.api.streaming.StreamingSite` and an HTTP/1.1 channel over a
``StringTransport``, with a fake agent whose watch stream the test drives and a
``MemoryReactorClock``: input errors, the SSE format, ids (also after
``Last-Event-ID``), heartbeats, the ends of a stream (one_shot, max_events,
timeout, the guest), back-pressure and disconnects.
"""

from __future__ import annotations

import json
import re
from typing import Any

from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import open_connection, parse_response
from tests.fakes import OneNodeFleet
from vmservice.agent.stream import StreamReset
from vmservice.api.app import Api
from vmservice.api.sse import sse_event
from vmservice.api.streaming import StreamingSite
from vmservice.api.watching import WatchApi
from vmservice.metrics import Metrics
from vmservice.wire import ResetCode
from vmservice.wire.messages import encode_message

OK = encode_message({"ok": True, "result": {"paths": ["/srv"], "watches": 1}})
RFC3339_NANO = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$"


def event(kind: str = "create", path: str = "/srv/a", size: int = 0, is_dir: bool = False, **extra: Any) -> bytes:
    return encode_message({"type": kind, "path": path, "size": size, "is_dir": is_dir, **extra})


def parse_sse(body: bytes) -> list[dict[str, Any]]:
    """The blocks of an SSE body: ``{"id": line id, "data": decoded JSON}`` or ``{"comment": text}``."""
    blocks = []
    for block in body.decode("utf-8").split("\n\n"):
        if not block:
            continue
        fields: dict[str, Any] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                fields["comment"] = line[1:].strip()
            else:
                name, _, value = line.partition(": ")
                fields[name] = int(value) if name == "id" else json.loads(value)
        blocks.append(fields)
    return blocks


class WatchApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(1_700_000_000.25)
        self.fleet = OneNodeFleet()
        routes = WatchApi(self.fleet, self.reactor, heartbeat=15).routes()  # type: ignore[arg-type]
        api = Api(self.reactor, routes, Metrics(), None)
        self.site = StreamingSite(api.resource(), api.plan_body, reactor=self.reactor)
        self.connect()

    def connect(self) -> None:
        """A new HTTP connection (a streaming response holds its connection)."""
        self.channel, self.transport = open_connection(self, self.site)

    def get(self, query: str, host: str = "demo-1", headers: str = "") -> None:
        self.channel.dataReceived(f"GET /vm/{host}/fs/watch?{query} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        self.reactor.advance(0)

    @property
    def stream(self) -> Any:
        return self.fleet.agent.streams[-1]

    def response(self) -> tuple[int, dict[bytes, bytes], bytes]:
        return parse_response(self.transport.value())

    def blocks(self) -> list[dict[str, Any]]:
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-type"]), (200, b"text/event-stream"))
        return parse_sse(body)

    def ended(self) -> bool:
        return self.transport.value().endswith(b"0\r\n\r\n")

    def timers(self) -> list[Any]:
        """The delayed calls of the watch (heartbeats, timeouts), not the HTTP channel's own."""
        return [call for call in self.reactor.getDelayedCalls()
                if type(getattr(call.func, "__self__", None)).__name__ in ("SseStream", "WatchCall")]

    def assertError(self, status: int, code: str) -> None:
        got, headers, body = self.response()
        self.assertEqual((got, headers[b"content-type"]), (status, b"application/json"), body)
        self.assertEqual(json.loads(body)["code"], code)

    def test_bad_input(self) -> None:
        """No paths, a relative path, unknown types, bad durations, counts, uids or Last-Event-ID: 400, no stream."""
        for query, headers in (("", ""), ("paths=", ""), ("paths=etc", ""), ("paths=/a&events=open", ""),
                               ("paths=/a&debounce=soon", ""), ("paths=/a&timeout=0s", ""),
                               ("paths=/a&max_events=0", ""), ("paths=/a&uid=x", ""), ("paths=/a&recursive=maybe", ""),
                               ("paths=/a", "Last-Event-ID: x\r\n"), ("paths=/a", "Last-Event-ID: -1\r\n"),
                               ("paths=/a", "Last-Event-ID: 18446744073709551616\r\n")):
            self.transport.clear()
            self.get(query, headers=headers)
            status, _, body = self.response()
            self.assertEqual(status, 400, (query, headers, body))
            self.assertIn(json.loads(body)["code"], ("invalid_query", "invalid_path", "invalid_header"))
        self.assertEqual(self.fleet.agent.streams, [])

    def test_header_from_query(self) -> None:
        """Every parameter lands in the OPEN header; debounce in seconds, uid 4294967295 means root."""
        self.get("paths=/srv&paths=%7E%2Fsrc&patterns=*.py&patterns=Makefile&events=create&events=write"
                 "&recursive=true&debounce=250ms&uid=4294967295")
        self.assertEqual(self.stream.header, {
            "op": "watch", "paths": ["/srv", "~/src"], "patterns": ["*.py", "Makefile"], "events": ["create", "write"],
            "recursive": True, "debounce": 0.25, "uid": 0,
        })
        self.assertTrue(self.stream.half_closed)
        self.connect()
        self.get("paths=/srv&uid=1000")
        self.assertEqual((self.stream.header["uid"], self.stream.header["debounce"], self.stream.header["events"]),
                         (1000, 0.0, []))

    def test_node_errors(self) -> None:
        """An unknown node is 404, a paused one 409, one whose agent is not connected 503."""
        self.get("paths=/a", host="demo-9")
        self.assertError(404, "node_not_found")
        for state, status, code in (("paused", 409, "paused"), ("down", 503, "agent_unavailable")):
            self.connect()
            self.fleet.state = state
            self.get("paths=/a")
            self.assertError(status, code)

    def test_missing_path(self) -> None:
        """The guest's not_found reply is a 404 before any event; the stream is not reset (the guest ended it)."""
        self.get("paths=/nope")
        self.assertEqual(self.transport.value(), b"")
        self.stream.deliver(encode_message({"ok": False, "error": "not_found", "message": "/nope: No such file"}))
        self.assertError(404, "not_found")
        self.assertIsNone(self.stream.aborted)

    def test_agent_lost_before_ready(self) -> None:
        """The agent going away before the reply is a 503."""
        self.get("paths=/a")
        self.stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        self.assertError(503, "agent_unavailable")

    def test_events(self) -> None:
        """Headers go out once the guest watches; each event is id, data JSON and a blank line; ids are consecutive."""
        self.get("paths=/srv")
        self.stream.deliver(OK)
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-type"], headers[b"cache-control"], body),
                         (200, b"text/event-stream", b"no-cache", b""))
        self.stream.deliver(event("create", "/srv/a", 0), event("write", "/srv/a", 5))
        self.reactor.advance(0.5)
        self.stream.deliver(event("overflow", "", message="12 events were dropped"))
        blocks = self.blocks()
        self.assertEqual([b["id"] for b in blocks], [1, 2, 3])
        self.assertEqual([b["data"]["id"] for b in blocks], [1, 2, 3])
        first = blocks[0]["data"]
        self.assertEqual(list(first), ["id", "type", "path", "timestamp", "size", "isDir"])
        self.assertEqual((first["type"], first["path"], first["size"], first["isDir"]), ("create", "/srv/a", 0, False))
        self.assertEqual(first["timestamp"], "2023-11-14T22:13:20.25Z")
        self.assertRegex(blocks[2]["data"]["timestamp"], RFC3339_NANO)
        self.assertEqual(blocks[2]["data"]["message"], "12 events were dropped")
        self.assertNotIn("message", blocks[1]["data"])
        self.assertFalse(self.ended())

    def test_wire_layout(self) -> None:
        """An event is exactly ``id: N``, ``data: <compact JSON>`` and an empty line."""
        self.assertEqual(sse_event(7, {"id": 7, "type": "write"}), b'id: 7\ndata: {"id":7,"type":"write"}\n\n')
        self.assertNotIn(b"\n", sse_event(1, {"path": "a\nb"})[:-2].split(b"data: ")[1])

    def test_last_event_id(self) -> None:
        """With Last-Event-ID the ids continue after it (nothing is replayed)."""
        self.get("paths=/srv", headers="Last-Event-ID: 41\r\n")
        self.stream.deliver(OK, event(), event())
        self.assertEqual([b["id"] for b in self.blocks()], [42, 43])

    def test_last_possible_id(self) -> None:
        """A Last-Event-ID that leaves no id closes the stream at once."""
        self.get("paths=/srv", headers="Last-Event-ID: 18446744073709551615\r\n")
        self.stream.deliver(OK)
        self.assertTrue(self.ended())
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)

    def test_heartbeats(self) -> None:
        """A comment goes out after 15 s without anything written; an event puts it off."""
        self.get("paths=/srv")
        self.stream.deliver(OK)
        self.reactor.advance(14)
        self.assertEqual(self.blocks(), [])
        self.reactor.advance(1)
        self.assertEqual(self.blocks(), [{"comment": "heartbeat"}])
        self.reactor.advance(10)
        self.stream.deliver(event())
        self.reactor.advance(14)
        self.assertEqual(len(self.blocks()), 2)
        self.reactor.advance(1)
        self.assertEqual([b.get("comment") for b in self.blocks()], ["heartbeat", None, "heartbeat"])

    def test_one_shot(self) -> None:
        """one_shot: the stream closes after the first event and the guest's watches are removed."""
        self.get("paths=/srv&one_shot=true")
        self.stream.deliver(OK, event("create"), event("write"))
        self.assertEqual([b["data"]["type"] for b in self.blocks()], ["create"])
        self.assertTrue(self.ended())
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)
        self.assertEqual(self.timers(), [])

    def test_max_events(self) -> None:
        """max_events: the stream closes after that many events."""
        self.get("paths=/srv&max_events=2")
        self.stream.deliver(OK, event())
        self.assertFalse(self.ended())
        self.stream.deliver(event(), event())
        self.assertEqual(len(self.blocks()), 2)
        self.assertTrue(self.ended())
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)

    def test_timeout(self) -> None:
        """timeout: the stream closes once it has run that long, heartbeats or not."""
        self.get("paths=/srv&timeout=1m0s")
        self.stream.deliver(OK)
        self.reactor.advance(59)
        self.assertFalse(self.ended())
        self.reactor.advance(1)
        self.assertTrue(self.ended())
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)
        self.assertEqual(self.timers(), [])

    def test_guest_ends(self) -> None:
        """The guest ending the watch (nothing left to watch) closes the stream; so does a lost agent."""
        self.get("paths=/srv")
        self.stream.deliver(OK, event("remove", "/srv", is_dir=True))
        self.stream.end()
        self.assertTrue(self.ended())
        self.assertEqual(len(self.blocks()), 1)
        self.connect()
        self.get("paths=/srv")
        self.stream.deliver(OK)
        self.stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        self.assertTrue(self.ended())

    def test_disconnect_resets(self) -> None:
        """A client that goes away resets the guest's stream (it removes its watches), also before the reply."""
        self.get("paths=/srv")
        self.stream.deliver(OK, event())
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)
        self.assertEqual(self.timers(), [])

    def test_disconnect_before_ready(self) -> None:
        """A client gone while the guest sets its watches up resets the stream too."""
        self.get("paths=/srv")
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)

    def test_head(self) -> None:
        """HEAD answers the status and headers once the guest watches, then ends (no events follow)."""
        self.channel.dataReceived(b"HEAD /vm/demo-1/fs/watch?paths=/srv HTTP/1.1\r\nHost: x\r\n\r\n")
        self.reactor.advance(0)
        self.stream.deliver(OK)
        self.assertTrue(self.transport.value().startswith(b"HTTP/1.1 200 OK"))
        self.assertIn(b"Content-Type: text/event-stream", self.transport.value())
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)
        self.assertEqual(self.timers(), [])
        self.transport.clear()
        self.get("paths=/srv", host="demo-9")  # the connection serves the next request
        self.assertError(404, "node_not_found")

    def test_slow_client_pauses_stream(self) -> None:
        """When the HTTP transport is full, the agent stream is paused (no credit to the guest)."""
        self.get("paths=/srv")
        self.stream.deliver(OK)
        self.transport.producer.pauseProducing()
        self.assertTrue(self.stream.paused)
        self.transport.producer.resumeProducing()
        self.assertFalse(self.stream.paused)


class QueryTests(SynchronousTestCase):
    """The document of the route."""

    def test_paths_required_in_document(self) -> None:
        """paths is documented as a required array of at least one path."""
        from vmservice.api.openapi import openapi_document

        routes = WatchApi(OneNodeFleet(), MemoryReactorClock()).routes()  # type: ignore[arg-type]
        operation = openapi_document(routes)["paths"]["/vm/{hostname}/fs/watch"]["get"]
        [paths] = [p for p in operation["parameters"] if p["name"] == "paths"]
        self.assertEqual((paths["required"], paths["schema"]["type"], paths["schema"]["minItems"]), (True, "array", 1))
        self.assertTrue(re.search("text/event-stream", json.dumps(operation["responses"]["200"])))
