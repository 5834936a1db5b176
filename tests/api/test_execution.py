"""
``POST /vm/{hostname}/exec`` (:mod:`vmservice.api.execution`) through the real
Api on a :class:`~vmservice.api.streaming.StreamingSite` and an HTTP/1.1
channel over a ``StringTransport``, with a fake agent whose exec stream the
test drives: input errors, NDJSON records, text and base64, buffered results,
stdin streamed in both directions, back-pressure and disconnects.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import parse_response
from tests.fakes import OneNodeFleet
from vmservice.api.app import Api
from vmservice.api.background import BackgroundApi
from vmservice.api.execution import ExecApi
from vmservice.api.streaming import StreamingSite
from vmservice.wire.payloads import ERROR, EXIT, REJECTED, STARTED, STDERR, STDOUT, encode_json_record, encode_record
from vmservice.metrics import Metrics
from vmservice.wire import ResetCode




class ExecApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(1_700_000_000)
        self.fleet = OneNodeFleet()
        routes = ExecApi(self.fleet, self.reactor, BackgroundApi(self.fleet)).routes()  # type: ignore[arg-type]
        api = Api(self.reactor, routes, Metrics(), None)
        self.site = StreamingSite(api.resource(), api.plan_body, reactor=self.reactor)
        self.channel = self.site.buildProtocol(None)
        self.transport = StringTransport()
        self.channel.makeConnection(self.transport)
        self.addCleanup(self._close)

    def _close(self) -> None:
        if not self.transport.disconnecting:
            self.channel.connectionLost(Failure(ConnectionLost()))

    def post(self, query: str, body: bytes = b"", chunked: bool = False) -> None:
        head = f"POST /vm/demo-1/exec?{query} HTTP/1.1\r\nHost: x\r\n".encode()
        if chunked:
            head += b"Transfer-Encoding: chunked\r\n\r\n"
        else:
            head += b"Content-Length: %d\r\n\r\n" % len(body) + body
        self.channel.dataReceived(head)
        self.reactor.advance(0)

    @property
    def stream(self) -> Any:
        return self.fleet.agent.streams[-1]

    def response(self) -> tuple[int, dict[bytes, bytes], bytes]:
        return parse_response(self.transport.value())

    def records(self) -> list[dict[str, Any]]:
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-type"]), (200, b"application/x-ndjson"))
        return [json.loads(line) for line in body.split(b"\n") if line]

    def test_bad_input(self) -> None:
        """Missing cmd, bad uid, bad booleans, bad umask or env are 400 before any stream opens."""
        for query in ("", "cmd=x&uid=abc", "cmd=x&uid=4294967296", "cmd=x&stdout=maybe", "cmd=x&permissions=9",
                      "cmd=x&env=NOEQ", "cmd=x&stdio=hex", "cmd=x&buffered=2"):
            self.transport.clear()
            self.post(query)
            status, _, body = self.response()
            self.assertEqual(status, 400, (query, body))
            self.assertIn(b'"error"', body)
        self.assertEqual(self.fleet.agent.streams, [])

    def test_header_from_query(self) -> None:
        """Every query parameter lands in the OPEN header; 4294967295 means 0."""
        self.post("cmd=ls+-l&args=a+b&args=c&env=A%3D1&env=B%3D&uid=4294967295&gid=7&cwd=%7E&shell=&permissions=027"
                  "&stdout=false&stderr=true")
        self.assertEqual(self.stream.header, {
            "op": "exec", "cmd": "ls -l", "args": ["a b", "c"], "env": ["A=1", "B="], "uid": 0, "gid": 7, "cwd": "~",
            "shell": "", "umask": 0o27, "stdin": False, "stdout": False, "stderr": True,
        })
        self.stream.deliver(encode_json_record(ERROR, {"message": "m", "exit_code": 127}))
        self.post("cmd=true")
        self.assertEqual((self.stream.header["shell"], self.stream.header["umask"]), ("/bin/bash", None))

    def test_unknown_vm_and_agent_down(self) -> None:
        """An unknown node is 404; a node whose agent is not connected is 503."""
        self.channel.dataReceived(b"POST /vm/demo-9/exec?cmd=x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        self.assertEqual(self.response()[0], 404)
        self.transport.clear()
        self.fleet.state = "down"
        self.post("cmd=x")
        self.assertEqual(self.response()[0], 503)

    def test_stream_records(self) -> None:
        """Records are written as NDJSON lines as they arrive, and the response ends after exit."""
        self.post("cmd=x")
        self.assertEqual(self.transport.value(), b"")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 9}))
        self.stream.deliver(encode_record(STDOUT, b"hi\n"))
        self.assertIn(b'"data":"hi\\n"', self.transport.value())
        self.stream.deliver(encode_record(STDERR, b"e"), encode_json_record(EXIT, {"exit_code": 2, "signal": None}))
        records = self.records()
        self.assertEqual([r["type"] for r in records], ["started", "stdout", "stderr", "exit"])
        self.assertEqual(records[0]["started_at"], "2023-11-14T22:13:20Z")
        # The payload in data and in the field named after the type, never in the other one.
        self.assertEqual((records[1]["data"], records[1]["stdout"], "stderr" in records[1]), ("hi\n", "hi\n", False))
        self.assertEqual((records[2]["data"], records[2]["stderr"], "stdout" in records[2]), ("e", "e", False))
        self.assertEqual((records[-1]["exit_code"], records[-1]["pid"]), (2, 9))
        self.assertNotIn("signal", records[-1])
        self.assertTrue(self.transport.value().endswith(b"0\r\n\r\n"))

    def test_text_mode_replacement(self) -> None:
        """Text mode: invalid UTF-8 is U+FFFD; a character split across records stays whole."""
        self.post("cmd=x")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 1}), encode_record(STDOUT, b"\xff\xc3"),
                            encode_record(STDOUT, b"\xa9"), encode_record(STDOUT, b"\xe2"),
                            encode_json_record(EXIT, {"exit_code": 0, "signal": None}))
        text = "".join(r["data"] for r in self.records() if r["type"] == "stdout")
        self.assertEqual(text, "\ufffd\u00e9\ufffd")

    def test_base64_mode(self) -> None:
        """stdio=base64: exact bytes and encoding on payload records only."""
        self.post("cmd=x&stdio=base64")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 1}), encode_record(STDOUT, b"\xff\x00"),
                            encode_json_record(EXIT, {"exit_code": 0, "signal": None}))
        records = self.records()
        self.assertEqual((base64.b64decode(records[1]["data"]), records[1]["encoding"]), (b"\xff\x00", "base64"))
        self.assertEqual(records[1]["stdout"], records[1]["data"])
        self.assertNotIn("encoding", records[0])

    def test_failed_to_start(self) -> None:
        """An ERROR record is a 200 stream with one error record carrying exit_code."""
        self.post("cmd=x")
        self.stream.deliver(encode_json_record(ERROR, {"message": "x: command not found", "exit_code": 127}))
        records = self.records()
        self.assertEqual([(r["type"], r["exit_code"], r["error"]) for r in records],
                         [("error", 127, "x: command not found")])

    def test_rejected_is_400(self) -> None:
        """A REJECTED record (bad cwd) is a 400."""
        self.post("cmd=x&cwd=/nope")
        self.stream.deliver(encode_json_record(REJECTED, {"message": "cwd '/nope' is not a directory"}))
        status, _, body = self.response()
        self.assertEqual(status, 400)
        self.assertIn(b"/nope", body)

    def test_lost_before_start_is_503(self) -> None:
        """The agent going away before the first record is a 503."""
        from vmservice.agent.stream import StreamReset

        self.post("cmd=x")
        self.stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        self.assertEqual(self.response()[0], 503)

    def test_lost_while_running(self) -> None:
        """The agent going away mid-stream ends it with an error record."""
        from vmservice.agent.stream import StreamReset

        self.post("cmd=x")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 1}))
        self.stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        records = self.records()
        self.assertEqual((records[-1]["type"], records[-1]["exit_code"]), ("error", 255))

    def test_buffered(self) -> None:
        """buffered=true answers one ExecResult after the exit."""
        self.post("cmd=x&buffered=true&stdio=base64")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 4}), encode_record(STDOUT, b"a"),
                            encode_record(STDERR, b"b"))
        self.assertEqual(self.transport.value(), b"")
        self.stream.deliver(encode_json_record(EXIT, {"exit_code": 137, "signal": "SIGKILL"}))
        status, headers, body = self.response()
        result = json.loads(body)
        self.assertEqual(headers[b"content-type"], b"application/json")
        self.assertEqual((result["stdout"], result["stderr"], result["encoding"], result["pid"], result["exit_code"],
                          result["signal"]), ("YQ==", "Yg==", "base64", 4, 137, "SIGKILL"))
        self.assertIn("started_at", result)

    def test_stdin_streams_full_duplex(self) -> None:
        """stdin=true: body chunks reach the stream while output flows back; the body's end is EOF."""
        self.post("cmd=cat&stdin=true", chunked=True)
        self.assertEqual(self.stream.header["stdin"], True)
        self.channel.dataReceived(b"3\r\nabc\r\n")
        self.assertEqual(bytes(self.stream.written), b"abc")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 1}), encode_record(STDOUT, b"abc"))
        self.assertIn(b'"data":"abc"', self.transport.value())
        self.assertFalse(self.stream.half_closed)
        self.channel.dataReceived(b"2\r\nde\r\n0\r\n\r\n")
        self.assertEqual(bytes(self.stream.written), b"abcde")
        self.assertTrue(self.stream.half_closed)
        self.stream.deliver(encode_json_record(EXIT, {"exit_code": 0, "signal": None}))
        self.assertEqual(self.records()[-1]["type"], "exit")

    def test_stdin_back_pressure(self) -> None:
        """A guest that takes no stdin pauses the HTTP connection."""
        self.post("cmd=cat&stdin=true", chunked=True)
        self.stream.producer.pauseProducing()
        self.channel.dataReceived(b"%x\r\n" % 300_000 + b"x" * 300_000 + b"\r\n")
        self.assertEqual(self.transport.producerState, "paused")
        self.stream.producer.resumeProducing()
        self.assertEqual(self.transport.producerState, "producing")
        self.assertEqual(len(self.stream.written), 300_000)

    def test_slow_client_pauses_stream(self) -> None:
        """When the HTTP transport is full, the agent stream is paused (no credit to the guest)."""
        self.post("cmd=x")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 1}))
        self.transport.producer.pauseProducing()
        self.assertTrue(self.stream.paused)
        self.transport.producer.resumeProducing()
        self.assertFalse(self.stream.paused)

    def test_disconnect_kills(self) -> None:
        """A client that goes away resets the stream (the guest kills the process group)."""
        self.post("cmd=sleep")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 1}))
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)

    def test_predicate(self) -> None:
        """Only POST exec requests with stdin=true stream their body."""
        from twisted.web.http_headers import Headers

        def streams(method: bytes, uri: bytes, headers: Headers) -> bool:
            plan = self.site.plan_body(method, uri, headers, None)
            self.assertIsNone(plan.refusal)
            return bool(plan.streamed)

        self.assertTrue(streams(b"POST", b"/vm/a/exec?cmd=x&stdin=true", Headers()))
        self.assertFalse(streams(b"POST", b"/vm/a/exec?cmd=x&stdin=false", Headers()))
        self.assertFalse(streams(b"GET", b"/vm/a/exec?cmd=x&stdin=true", Headers()))
        self.assertFalse(streams(b"POST", b"/vm/a/cp?stdin=true", Headers()))
        # A query that does not parse is not streamed: the handler answers 400 once the body is in.
        self.assertFalse(streams(b"POST", b"/vm/a/exec?cmd=x&stdin=maybe", Headers()))
        self.assertFalse(streams(b"POST", b"/vm/a/exec?cmd=%C3%81&stdin=true&uid=%FF", Headers()))


class _Transport(StringTransport):
    """A transport that, while :attr:`full`, pauses its producer at each write, as a full socket's does."""

    full = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.full and self.producer is not None:
            self.producer.pauseProducing()


class BufferedBudgetTests(ExecApiTests):
    """``buffered=true`` within the daemon's buffer budget (here 1 MB), through the real Api."""

    SIZE = 1_000_000

    def setUp(self) -> None:
        from vmservice.buffer_budget import BufferBudget

        super().setUp()
        self.budget = BufferBudget(self.SIZE)
        routes = ExecApi(self.fleet, self.reactor, BackgroundApi(self.fleet), self.budget).routes()  # type: ignore[arg-type]
        api = Api(self.reactor, routes, Metrics(), None)
        self.site = StreamingSite(api.resource(), api.plan_body, reactor=self.reactor)
        self.connect()

    def connect(self) -> None:
        """A new connection to the site (the last one closed)."""
        self._close()
        self.channel = self.site.buildProtocol(None)
        self.transport = _Transport()
        self.channel.makeConnection(self.transport)

    def test_over_budget_is_503(self) -> None:
        """
        Output past the budget (two invalid bytes: twelve escaped) fails the
        exec with 503 buffer_budget_exhausted (an ErrorResponse), stops the
        process, and gives its share back, while another's stays held.
        """
        other = self.budget.reservation("another exec")
        other.grow(self.SIZE - 60)
        self.post("cmd=x&buffered=true")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 4}), encode_record(STDOUT, b"a" * 50))
        self.assertEqual(self.budget.held, self.SIZE - 10)
        self.stream.deliver(encode_record(STDERR, b"\xff" * 2))
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-type"]), (503, b"application/json"))
        self.assertEqual(json.loads(body)["code"], "buffer_budget_exhausted")
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)
        self.assertEqual(self.budget.held, self.SIZE - 60)

    def deliver_answer(self, size: int) -> None:
        """An exec that writes ``size`` bytes of ``a`` and exits 0, its answer due."""
        self.post("cmd=x&buffered=true")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 4}))
        for _ in range(size // 10_000):
            self.stream.deliver(encode_record(STDOUT, b"a" * 10_000))
        self.stream.deliver(encode_json_record(EXIT, {"exit_code": 0, "signal": None}))

    def test_answer_held_until_written(self) -> None:
        """
        The answer is held in the budget (its whole size) until the client has
        taken it: while the transport is full it stays held, the last write
        gives it back.
        """
        self.transport.full = True
        self.deliver_answer(200_000)
        self.assertGreater(self.budget.held, 200_000)
        self.transport.full = False
        self.transport.producer.resumeProducing()
        status, headers, body = self.response()
        self.assertEqual((status, json.loads(body)["stdout"]), (200, "a" * 200_000))
        self.assertEqual(int(headers[b"content-length"]), len(body))
        self.assertEqual(self.budget.held, 0)

    def test_client_gone_gives_back(self) -> None:
        """
        A client that goes away while the exec runs, or while its answer waits,
        gives the budget back (and nothing is logged as an internal error).
        """
        self.post("cmd=x&buffered=true")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 4}), encode_record(STDOUT, b"a" * 40))
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual((self.stream.aborted[0], self.budget.held), (ResetCode.CANCEL, 0))
        self.connect()
        self.transport.full = True
        self.deliver_answer(200_000)
        self.assertGreater(self.budget.held, 200_000)
        self.transport.producer.stopProducing()  # as a TCP transport does when its connection is lost
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual(self.budget.held, 0)

    def test_failure_gives_back(self) -> None:
        """An exec lost midway, or refused by the guest, gives back what it held."""
        from vmservice.agent.stream import StreamReset

        self.post("cmd=x&buffered=true")
        self.stream.deliver(encode_json_record(STARTED, {"pid": 4}), encode_record(STDOUT, b"a" * 40))
        self.stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        self.assertEqual((self.response()[0], self.budget.held), (200, 0))
        self.transport.clear()
        self.post("cmd=x&buffered=true&cwd=/nope")
        self.stream.deliver(encode_json_record(REJECTED, {"message": "no"}))
        self.assertEqual((self.response()[0], self.budget.held), (400, 0))
