# -*- test-case-name: tests.api.test_background -*-
"""
Tests for :mod:`vmservice.api.background`: the background exec routes over a
real HTTP channel, with the real host side of the agent protocol
(:mod:`vmservice.agent.background`) on a fake agent whose replies and log
streams the tests script.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from twisted.internet.error import ConnectionLost
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.test.proto_helpers import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.background_info import INFO, T0
from tests.agent.fakes import FakeExecAgent
from tests.api.connections import parse_response
from tests.fakes import OneNodeFleet
from vmservice.api.app import Api
from vmservice.api.background import BackgroundApi, frame_record
from vmservice.api.execution import ExecApi
from vmservice.api.streaming import StreamingSite
from vmservice.guestport.background import LogFrame
from vmservice.metrics import Metrics
from vmservice.nodes.background_limit import BackgroundLimit
from vmservice.wire.logframes import STDERR, STDOUT, encode_frame, exit_frame, gap_frame
from vmservice.wire.logframes import LogFrame as WireFrame
from vmservice.wire.payloads import encode_head

EXEC_ID = INFO["exec_id"]


class BackgroundAgent(FakeExecAgent):
    """
    A fake agent answering ``background`` requests with :attr:`reply` and
    recording them; the list a start asks for first (the node's bound) is
    :attr:`live`, counted in :attr:`lists` (unless :attr:`reply` is a list).
    """

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.reply: Any = {"ok": True, "result": INFO}
        self.live: list[dict[str, Any]] = []
        self.lists = 0

    async def request(self, header: Any, limit: int) -> bytes:
        if header.get("action") == "list" and not isinstance(self.reply.get("result"), list):
            self.lists += 1
            return json.dumps({"ok": True, "result": self.live}).encode()
        self.requests.append(dict(header))
        return json.dumps(self.reply).encode()


class BackgroundApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.fleet = OneNodeFleet()
        self.agent = BackgroundAgent()
        self.fleet.agent = self.agent
        background = BackgroundApi(self.fleet, BackgroundLimit(2))  # type: ignore[arg-type]
        routes = ExecApi(self.fleet, self.clock, background).routes() + background.routes()  # type: ignore[arg-type]
        api = Api(self.clock, routes, Metrics(), None)
        self.site = StreamingSite(api.resource(), api.plan_body, reactor=self.clock)
        self.channel = self.site.buildProtocol(None)
        self.transport = StringTransport()
        self.channel.makeConnection(self.transport)
        self.addCleanup(self._close)

    def _close(self) -> None:
        if not self.transport.disconnecting:
            self.channel.connectionLost(Failure(ConnectionLost()))

    def send(self, method: str, path: str, body: bytes = b"") -> None:
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        self.channel.dataReceived(head + body)
        self.clock.advance(0)

    def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
        self.send(method, path, body)
        status, _, content = parse_response(self.transport.value())
        self.transport.clear()
        return status, json.loads(content)

    def assertError(self, result: tuple[int, Any], status: int, code: str) -> None:
        self.assertEqual((result[0], result[1].get("code")), (status, code), result[1])

    # -- start, list, info ------------------------------------------------------------

    def test_start(self) -> None:
        """background=true asks the guest to start the exec and answers 201 with its id."""
        status, body = self.call("POST", "/vm/demo-1/exec?background=true&cmd=sleep+9&args=a&ring_bytes=1024&uid=7")
        self.assertEqual(status, 201)
        self.assertEqual(body, {"exec_id": EXEC_ID, "pid": 42, "started_at": "2023-11-14T22:13:20Z", "ring_bytes": 1024})
        request = self.agent.requests[0]
        self.assertEqual((request["op"], request["action"], request["cmd"], request["args"]),
                         ("background", "start", "sleep 9", ["a"]))
        self.assertEqual((request["ring_bytes"], request["uid"], request["shell"]), (1024, 7, "/bin/bash"))

    def test_start_default_ring(self) -> None:
        """Without ring_bytes the ring holds 1 MiB."""
        self.call("POST", "/vm/demo-1/exec?background=true&cmd=x")
        self.assertEqual(self.agent.requests[0]["ring_bytes"], 1024 * 1024)

    def test_start_refused(self) -> None:
        """Incompatible or bad parameters are 400 before the guest is asked; the guest's refusal is 400 too."""
        for query in ("background=true&cmd=x&stdin=true", "background=true&cmd=x&buffered=true",
                      "background=true&cmd=x&ring_bytes=0", f"background=true&cmd=x&ring_bytes={64 * 2**20 + 1}"):
            self.assertError(self.call("POST", f"/vm/demo-1/exec?{query}"), 400, "invalid_query")
        self.assertEqual(self.agent.requests, [])
        self.agent.reply = {"ok": False, "error": "rejected", "message": "/no/such: command not found"}
        self.assertError(self.call("POST", "/vm/demo-1/exec?background=true&cmd=x"), 400, "invalid_exec")
        self.agent.reply = {"ok": False, "error": "busy", "message": "too many"}
        self.assertError(self.call("POST", "/vm/demo-1/exec?background=true&cmd=x"), 409, "busy")

    def test_start_beyond_the_limit(self) -> None:
        """
        A start on a node that keeps as many background execs as it may (2
        here, running or ended) is 409 ``background_limit_reached``, and the
        guest is not asked to start it; one fewer, and it starts.
        """
        self.agent.live = [INFO, {**INFO, "running": False, "exit_code": 0}]
        status, body = self.call("POST", "/vm/demo-1/exec?background=true&cmd=x")
        self.assertError((status, body), 409, "background_limit_reached")
        self.assertIn("limits.background_execs_per_node", body["error"])
        self.assertEqual((self.agent.requests, self.agent.lists), ([], 1))
        self.agent.live = [INFO]
        self.assertEqual(self.call("POST", "/vm/demo-1/exec?background=true&cmd=x")[0], 201)
        self.assertEqual([r["action"] for r in self.agent.requests], ["start"])

    def test_list_within_the_budget(self) -> None:
        """A list's answer is held in the buffer budget while written: one with no room is 503 buffer_budget_exhausted."""
        from vmservice.buffer_budget import BufferBudget

        budget = BufferBudget(100)
        background = BackgroundApi(self.fleet, BackgroundLimit(2), budget)  # type: ignore[arg-type]
        api = Api(self.clock, background.routes(), Metrics(), None)
        self._close()
        self.site = StreamingSite(api.resource(), api.plan_body, reactor=self.clock)
        self.channel = self.site.buildProtocol(None)
        self.transport = StringTransport()
        self.channel.makeConnection(self.transport)
        self.agent.reply = {"ok": True, "result": []}
        self.assertEqual(self.call("GET", "/vm/demo-1/exec"), (200, []))
        self.agent.reply = {"ok": True, "result": [INFO]}
        self.assertError(self.call("GET", "/vm/demo-1/exec"), 503, "buffer_budget_exhausted")
        self.assertEqual(budget.held, 0)

    def test_list_and_info(self) -> None:
        """The list and info render times as RFC 3339 and leave out what is not known yet."""
        self.agent.reply = {"ok": True, "result": [INFO]}
        status, body = self.call("GET", "/vm/demo-1/exec")
        self.assertEqual(status, 200)
        self.assertEqual(body[0]["started_at"], "2023-11-14T22:13:20Z")
        self.assertNotIn("exit_code", body[0])
        self.assertNotIn("ended_at", body[0])
        ended = {**INFO, "running": False, "exit_code": 0, "ended_ns": T0 + 1_500_000_000}
        self.agent.reply = {"ok": True, "result": ended}
        status, body = self.call("GET", f"/vm/demo-1/exec/{EXEC_ID}")
        self.assertEqual((status, body["exit_code"], body["ended_at"]), (200, 0, "2023-11-14T22:13:21.5Z"))
        self.assertEqual(self.agent.requests[-1], {"op": "background", "action": "info", "exec_id": EXEC_ID})

    def test_guest_errors(self) -> None:
        """Unknown ids are 404, deleted ones 410, a running one cannot be deleted (409)."""
        for kind, status, code in (("not_found", 404, "not_found"), ("gone", 410, "exec_deleted"),
                                   ("running", 409, "exec_running")):
            self.agent.reply = {"ok": False, "error": kind, "message": "m"}
            self.assertError(self.call("DELETE", f"/vm/demo-1/exec/{EXEC_ID}"), status, code)

    def test_malformed_reply(self) -> None:
        """A reply without the fields the API needs is a 500, not a traceback."""
        self.agent.reply = {"ok": True, "result": {**INFO, "pid": "x"}}
        self.assertError(self.call("GET", f"/vm/demo-1/exec/{EXEC_ID}"), 500, "agent_error")

    def test_bad_paths(self) -> None:
        """An exec id that cannot be one is 400; the node's own checks still apply."""
        self.assertError(self.call("GET", "/vm/demo-1/exec/a.b"), 400, "invalid_path")
        self.assertError(self.call("GET", "/vm/other-1/exec"), 404, "node_not_found")
        self.fleet.state = "paused"
        self.assertError(self.call("GET", "/vm/demo-1/exec"), 409, "paused")

    # -- kill, wait, delete -------------------------------------------------------------

    def test_kill(self) -> None:
        """The body is optional; signal names are normalised; bad bodies are 400."""
        self.agent.reply = {"ok": True, "result": {"exec_id": EXEC_ID, "pid": 42, "running": True, "signal_sent": "TERM"}}
        status, body = self.call("POST", f"/vm/demo-1/exec/{EXEC_ID}/kill")
        self.assertEqual((status, body["signal_sent"]), (200, "TERM"))
        self.assertEqual((self.agent.requests[-1]["signal"], self.agent.requests[-1]["grace_ms"]), ("TERM", 5000))
        self.call("POST", f"/vm/demo-1/exec/{EXEC_ID}/kill", b'{"signal": "sigkill", "grace_ms": 0}')
        self.assertEqual((self.agent.requests[-1]["signal"], self.agent.requests[-1]["grace_ms"]), ("KILL", 0))
        asked = len(self.agent.requests)
        for body in (b'{"signal": "STOP"}', b'{"grace_ms": -5}', b'{"grace_ms": 3600001}', b'{"x": 1}', b"[1]", b"{"):
            status, answer = self.call("POST", f"/vm/demo-1/exec/{EXEC_ID}/kill", body)
            self.assertEqual(status, 400, body)
        self.assertEqual(len(self.agent.requests), asked)

    def test_wait_exit(self) -> None:
        """timeout is whole seconds (30 by default), sent to the guest in milliseconds."""
        self.agent.reply = {"ok": True, "result": {"exec_id": EXEC_ID, "running": True, "exit_code": None,
                                                    "signal": None, "ended_ns": None, "timed_out": True}}
        status, body = self.call("GET", f"/vm/demo-1/exec/{EXEC_ID}/wait-exit")
        self.assertEqual((status, body), (200, {"exec_id": EXEC_ID, "running": True, "timed_out": True}))
        self.assertEqual(self.agent.requests[-1]["timeout_ms"], 30_000)
        self.call("GET", f"/vm/demo-1/exec/{EXEC_ID}/wait-exit?timeout=2")
        self.assertEqual(self.agent.requests[-1]["timeout_ms"], 2000)
        for query in ("timeout=1.5", "timeout=-1", "timeout=86401"):
            self.assertError(self.call("GET", f"/vm/demo-1/exec/{EXEC_ID}/wait-exit?{query}"), 400, "invalid_query")

    def test_delete(self) -> None:
        self.agent.reply = {"ok": True, "result": {"exec_id": EXEC_ID, "reaped": True}}
        self.assertEqual(self.call("DELETE", f"/vm/demo-1/exec/{EXEC_ID}"), (200, {"exec_id": EXEC_ID, "reaped": True}))

    # -- logs ---------------------------------------------------------------------------

    def logs(self, query: str = "") -> Any:
        self.send("GET", f"/vm/demo-1/exec/{EXEC_ID}/logs{query}")
        return self.agent.streams[-1]

    def records(self) -> list[dict[str, Any]]:
        _, _, body = parse_response(self.transport.value())
        return [json.loads(line) for line in body.splitlines()]

    def test_logs(self) -> None:
        """The head opens a 200 NDJSON stream; frames become records; the stream ends with the guest's."""
        stream = self.logs("?from_id=3&follow=true")
        self.assertEqual(stream.header, {"op": "background", "action": "logs", "exec_id": EXEC_ID, "from_id": 3,
                                         "follow": True})
        self.assertTrue(stream.half_closed)
        self.assertEqual(self.transport.value(), b"")
        stream.deliver(encode_head({"ok": True, "result": INFO}), encode_frame(WireFrame(STDOUT, 3, T0, b"hi\n")))
        stream.deliver(encode_frame(WireFrame(STDERR, 4, T0, b"\xff")), encode_frame(exit_frame(5, T0, 1, None)))
        stream.end()
        records = self.records()
        self.assertEqual([r.get("id") for r in records], [3, 4, 5])
        self.assertEqual(base64.b64decode(records[0]["stdout"]), b"hi\n")
        self.assertEqual((records[1]["data"], records[1]["stderr"], records[1]["encoding"]), ("/w==", "/w==", "base64"))
        self.assertEqual((records[2]["type"], records[2]["exit_code"], records[2]["pid"]), ("exit", 1, 42))
        self.assertTrue(self.transport.value().endswith(b"0\r\n\r\n"))

    def test_logs_unknown(self) -> None:
        """An error head is the error's status before anything is streamed."""
        stream = self.logs()
        stream.deliver(encode_head({"ok": False, "error": "gone", "message": "deleted"}))
        stream.end()
        status, _, body = parse_response(self.transport.value())
        self.assertEqual((status, json.loads(body)["code"]), (410, "exec_deleted"))

    def test_logs_gap(self) -> None:
        """A gap frame has no id and says what was dropped."""
        stream = self.logs()
        stream.deliver(encode_head({"ok": True, "result": INFO}), encode_frame(gap_frame(T0, 3, 300)))
        stream.end()
        gap = self.records()[0]
        self.assertEqual((gap["type"], gap["dropped_frames"], gap["dropped_bytes"]), ("gap", 3, 300))
        self.assertNotIn("id", gap)

    def test_logs_back_pressure_and_disconnect(self) -> None:
        """A client that stops reading pauses the guest stream; one that goes away resets it."""
        stream = self.logs("?follow=true")
        stream.deliver(encode_head({"ok": True, "result": INFO}))
        self.transport.producer.pauseProducing()
        self.assertTrue(stream.paused)
        self.transport.producer.resumeProducing()
        self.assertFalse(stream.paused)
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertIsNotNone(stream.aborted)

    def test_logs_lost(self) -> None:
        """A stream lost after the head ends the response with an error record."""
        stream = self.logs("?follow=true")
        stream.deliver(encode_head({"ok": True, "result": INFO}), b"\x09garbage-that-is-no-frame-at-all")
        self.assertIn("error", self.records()[-1])
        self.assertIsNotNone(stream.aborted)


class FrameRecordTests(SynchronousTestCase):
    def test_exit_with_signal(self) -> None:
        record = frame_record(LogFrame("exit", 7, T0, exit_code=143, signal="SIGTERM"), 9)
        self.assertEqual(record, {"timestamp": "2023-11-14T22:13:20Z", "type": "exit", "pid": 9, "id": 7,
                                  "exit_code": 143, "ended_at": "2023-11-14T22:13:20Z", "signal": "SIGTERM"})
