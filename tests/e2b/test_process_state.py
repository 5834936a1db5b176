"""
Tests for :mod:`vmservice.e2b.process_state`: a process's machine over a
clock and recording sinks; its diagram against its transitions.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions, machine_transitions
from tests.e2b.process_fakes import RecordingSink
from vmservice.e2b.connect import Code, ConnectError
from vmservice.e2b.process_messages import end_event, keepalive_event, start_event
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.e2b.process_state import PROCESS_LIFE, ProcessCore, ProcessLife, process_life


class Controls:
    """Records a kill."""

    killed = False

    def write(self, name: str, data: bytes) -> None:
        pass

    def close_stdin(self) -> None:
        pass

    def resize(self, cols: int, rows: int) -> None:
        pass

    def kill(self) -> None:
        self.killed = True


class ProcessLifeTests(SynchronousTestCase):
    """A process's streams from its start to its end."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.running: list[int] = []
        self.ended: list[bool] = []
        self.core = ProcessCore(self.clock, self.running.append, lambda: self.ended.append(True), keepalive=10)
        self.controls = Controls()
        self.core.controls = self.controls
        self.life: ProcessLife = process_life(self.core)

    def test_diagram(self) -> None:
        """docs/state-machines/e2b-process.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("e2b-process.dot"), machine_transitions(PROCESS_LIFE))

    def test_start_to_exit(self) -> None:
        """The first stream gets the start event, output, the end event, and ends; the table is told."""
        sink = RecordingSink()
        done = self.life.subscribe(sink)
        self.life.output("stdout", b"early")  # before the start: there is no such thing, it is dropped
        self.life.started(42)
        self.life.output("stdout", b"hi")
        self.life.exited(0, None)
        self.assertEqual(sink.sent, [start_event(42), {"event": {"data": {"stdout": "aGk="}}}, end_event(0, None)])
        self.assertIsNone(self.successResultOf(done))
        self.assertEqual((self.running, self.ended, sink.aborted), ([42], [True], False))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_late_subscriber(self) -> None:
        """A stream that subscribes later gets the start event, then only what comes next."""
        self.life.started(7)
        self.life.output("stdout", b"lost")
        sink = RecordingSink()
        done = self.life.subscribe(sink)
        self.life.output("stderr", b"x")
        self.assertEqual(sink.sent, [start_event(7), {"event": {"data": {"stderr": "eA=="}}}])
        self.life.unsubscribe(sink)
        self.life.output("stderr", b"y")
        self.assertEqual(len(sink.sent), 2)
        self.assertNoResult(done)
        self.life.exited(1, None)
        self.assertEqual(self.ended, [True])

    def test_keepalive(self) -> None:
        """A stream gets a keepalive after the interval without a message; a message puts it off."""
        sink = RecordingSink()
        self.life.subscribe(sink)
        self.life.started(1)
        self.clock.advance(9)
        self.life.output("stdout", b"a")
        self.clock.advance(9)
        self.assertNotIn(keepalive_event(), sink.sent)
        self.clock.advance(1)
        self.assertEqual(sink.sent[-1], keepalive_event())
        self.clock.advance(10)
        self.assertEqual(sink.sent[-2:], [keepalive_event()] * 2)
        self.life.exited(0, None)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_refused(self) -> None:
        """A guest that refuses before the start fails the streams with the refusal's code."""
        sink = RecordingSink()
        done = self.life.subscribe(sink)
        self.life.lost(AgentError(GuestErrorKind.REJECTED, "cwd '/nope' does not exist"))
        self.assertEqual(self.failureResultOf(done, ConnectError).value.code, Code.INVALID_ARGUMENT)
        self.assertEqual((sink.sent, sink.aborted, self.ended), ([], False, [True]))

    def test_failed(self) -> None:
        """A program the guest cannot run fails the start with ``invalid_argument``."""
        done = self.life.subscribe(RecordingSink())
        self.life.failed("no such file")
        self.assertEqual(self.failureResultOf(done, ConnectError).value.code, Code.INVALID_ARGUMENT)

    def test_failed_running(self) -> None:
        """A failure after the start is an end event carrying the message."""
        sink = RecordingSink()
        self.life.subscribe(sink)
        self.life.started(3)
        self.life.failed("gone wrong")
        self.assertEqual(sink.sent[-1], end_event(127, None, "gone wrong"))

    def test_exited_unstarted(self) -> None:
        """An exit before any start fails the streams (``internal``)."""
        done = self.life.subscribe(RecordingSink())
        self.life.exited(0, None)
        self.assertEqual(self.failureResultOf(done, ConnectError).value.code, Code.INTERNAL)

    def test_lost(self) -> None:
        """A guest lost while the process runs breaks every stream (no end event)."""
        first, second = RecordingSink(), RecordingSink()
        done = [self.life.subscribe(first), self.life.subscribe(second)]
        self.life.started(5)
        self.life.lost(AgentError(GuestErrorKind.UNAVAILABLE, "gone"))
        self.assertEqual((first.aborted, second.aborted), (True, True))
        self.assertEqual([self.successResultOf(d) for d in done], [None, None])
        self.assertEqual((first.sent, self.ended, self.controls.killed), ([start_event(5)], [True], False))

    def test_forget(self) -> None:
        """A sandbox forgotten kills the process and breaks its streams, starting or running."""
        for start in (False, True):
            self.setUp()
            sink = RecordingSink()
            self.life.subscribe(sink)
            if start:
                self.life.started(5)
            self.life.forget()
            self.assertEqual((sink.aborted, self.controls.killed, self.ended), (True, True, [True]))

    def test_kill(self) -> None:
        """A kill ends it through the guest; the loss of its stream is an end event for the signal."""
        sink = RecordingSink()
        done = self.life.subscribe(sink)
        self.life.kill("SIGTERM")  # before the start: no client can name it, nothing happens
        self.assertFalse(self.controls.killed)
        self.life.started(8)
        self.life.kill("SIGKILL")
        self.life.kill("SIGTERM")
        self.assertTrue(self.controls.killed)
        self.life.output("stdout", b"last")
        self.life.lost(AgentError(GuestErrorKind.UNAVAILABLE, "stream reset"))
        self.assertEqual(sink.sent[-2:], [{"event": {"data": {"stdout": "bGFzdA=="}}}, end_event(-1, "SIGKILL")])
        self.assertIsNone(self.successResultOf(done))
        self.assertEqual((sink.aborted, self.ended), (False, [True]))

    def test_kill_outcomes(self) -> None:
        """While killing: an exit is its own end event; a forget breaks the streams."""
        sink = RecordingSink()
        self.life.subscribe(sink)
        self.life.started(8)
        self.life.kill("SIGTERM")
        self.life.exited(143, "SIGTERM")
        self.assertEqual(sink.sent[-1], end_event(143, "SIGTERM"))
        self.setUp()
        sink = RecordingSink()
        self.life.subscribe(sink)
        self.life.started(8)
        self.life.kill("SIGTERM")
        self.life.forget()
        self.assertEqual((sink.aborted, self.ended), (True, [True]))

    def test_ended(self) -> None:
        """An ended process ignores what comes later, and refuses streams with ``not_found``."""
        self.life.started(1)
        self.life.exited(0, None)
        for call in (lambda: self.life.output("stdout", b"x"), lambda: self.life.exited(0, None),
                     lambda: self.life.lost(Exception()), self.life.forget, lambda: self.life.started(2),
                     lambda: self.life.failed("x"), lambda: self.life.unsubscribe(RecordingSink()),
                     lambda: self.life.kill("SIGKILL")):
            call()
        self.assertEqual(self.ended, [True])
        done: Deferred[None] = self.life.subscribe(RecordingSink())
        self.assertEqual(self.failureResultOf(done, ConnectError).value.code, Code.NOT_FOUND)
