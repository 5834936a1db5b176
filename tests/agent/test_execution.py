"""
The host's end of an exec stream (:mod:`vmservice.agent.execution`) over a
fake stream: the OPEN header, record decoding into sink calls, stdin, flow
control and kill, and :func:`run_collected`.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import FakeExecAgent
from vmservice.agent.execution import run_collected, start_exec
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.exec import ExecRequest
from vmservice.agent.stream import StreamReset
from vmservice.wire.payloads import (
    ERROR,
    EXIT,
    REJECTED,
    STARTED,
    STDERR,
    STDOUT,
    encode_json_record,
    encode_record,
)
from vmservice.wire import ResetCode


class Sink:
    """Records the sink calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def started(self, pid: int) -> None:
        self.calls.append(("started", pid))

    def output(self, name: str, data: bytes) -> None:
        self.calls.append((name, data))

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        self.calls.append(("exited", exit_code, signal))

    def failed(self, message: str, exit_code: int) -> None:
        self.calls.append(("failed", message, exit_code))

    def lost(self, error: AgentError) -> None:
        self.calls.append(("lost", error.kind))


class ExecStreamTests(SynchronousTestCase):
    """:func:`start_exec` and the record decoding."""

    def setUp(self) -> None:
        self.agent = FakeExecAgent()
        self.sink = Sink()

    def test_header(self) -> None:
        """The OPEN header carries every field of the request."""
        request = ExecRequest(cmd="ls", args=("-l",), env=("A=1",), uid=7, gid=8, cwd="~", shell="", umask=0o22,
                              stdin=True, stdout=False, stderr=True)
        start_exec(self.agent, request, self.sink)
        self.assertEqual(self.agent.streams[0].header, {
            "op": "exec", "cmd": "ls", "args": ["-l"], "env": ["A=1"], "uid": 7, "gid": 8, "cwd": "~", "shell": "",
            "umask": 0o22, "stdin": True, "stdout": False, "stderr": True,
        })
        self.assertFalse(self.agent.streams[0].half_closed)

    def test_no_stdin_closes_at_once(self) -> None:
        """Without stdin the stream is half-closed right away (EOF on stdin)."""
        start_exec(self.agent, ExecRequest(cmd="true"), self.sink)
        self.assertTrue(self.agent.streams[0].half_closed)

    def test_records_in_order(self) -> None:
        """Records become sink calls in order, split anywhere across DATA."""
        start_exec(self.agent, ExecRequest(cmd="x"), self.sink)
        data = (encode_json_record(STARTED, {"pid": 42}) + encode_record(STDOUT, b"out") + encode_record(STDERR, b"err")
                + encode_json_record(EXIT, {"exit_code": 0, "signal": None}))
        stream = self.agent.streams[0]
        for i in range(len(data)):
            stream.deliver(data[i:i + 1])
        stream.end()
        self.assertEqual(self.sink.calls, [("started", 42), ("stdout", b"out"), ("stderr", b"err"), ("exited", 0, None)])

    def test_failed_and_rejected(self) -> None:
        """ERROR and REJECTED records end the exec (a refusal as an agent error of kind REJECTED)."""
        start_exec(self.agent, ExecRequest(cmd="x"), self.sink)
        self.agent.streams[0].deliver(encode_json_record(ERROR, {"message": "nope", "exit_code": 127}))
        start_exec(self.agent, ExecRequest(cmd="x"), self.sink)
        self.agent.streams[1].deliver(encode_json_record(REJECTED, {"message": "bad cwd"}))
        self.assertEqual(self.sink.calls, [("failed", "nope", 127), ("lost", GuestErrorKind.REJECTED)])

    def test_lost(self) -> None:
        """A stream that ends without a last record is lost, once."""
        start_exec(self.agent, ExecRequest(cmd="x"), self.sink)
        self.agent.streams[0].deliver(encode_json_record(STARTED, {"pid": 1}))
        self.agent.streams[0].end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        self.assertEqual(self.sink.calls, [("started", 1), ("lost", GuestErrorKind.UNAVAILABLE)])

    def test_bad_record_resets(self) -> None:
        """A record that does not parse resets the stream and loses the exec."""
        start_exec(self.agent, ExecRequest(cmd="x"), self.sink)
        self.agent.streams[0].deliver(b"\x63\x00\x00\x00\x00")
        self.assertEqual(self.agent.streams[0].aborted[0], ResetCode.PROTOCOL_ERROR)
        self.assertEqual([c[0] for c in self.sink.calls], ["lost"])

    def test_process_controls(self) -> None:
        """The process handle writes stdin, closes it, pauses output, and kills by resetting."""
        process = start_exec(self.agent, ExecRequest(cmd="x", stdin=True), self.sink)
        stream = self.agent.streams[0]
        process.write_stdin(b"abc")
        process.close_stdin()
        process.pauseProducing()
        self.assertEqual((bytes(stream.written), stream.half_closed, stream.paused), (b"abc", True, True))
        process.resumeProducing()
        self.assertFalse(stream.paused)
        process.stopProducing()
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)

    def test_run_collected(self) -> None:
        """run_collected gathers the whole output with times from the clock."""
        clock = Clock()
        clock.advance(100)
        d = Deferred.fromCoroutine(
            run_collected(self.agent, ExecRequest(cmd="x", stdin=True), clock, stdin=b"in"))
        stream = self.agent.streams[0]
        self.assertEqual((bytes(stream.written), stream.half_closed), (b"in", True))
        stream.deliver(encode_json_record(STARTED, {"pid": 3}), encode_record(STDOUT, b"a"), encode_record(STDOUT, b"b"))
        clock.advance(2)
        stream.deliver(encode_json_record(EXIT, {"exit_code": 143, "signal": "SIGTERM"}))
        outcome = self.successResultOf(d)
        self.assertEqual((outcome.pid, outcome.stdout, outcome.exit_code, outcome.signal), (3, b"ab", 143, "SIGTERM"))
        self.assertEqual((outcome.started_at, outcome.ended_at), (100, 102))

    def test_run_collected_rejected(self) -> None:
        """A rejection fails run_collected with an agent error of kind REJECTED."""
        d = Deferred.fromCoroutine(run_collected(self.agent, ExecRequest(cmd="x"), Clock()))
        self.agent.streams[0].deliver(encode_json_record(REJECTED, {"message": "m"}))
        self.assertIs(self.failureResultOf(d, AgentError).value.kind, GuestErrorKind.REJECTED)
