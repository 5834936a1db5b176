# -*- test-case-name: tests.guest.test_exec_phase -*-
"""
Tests for :mod:`vmservice.guest.exec_phase`, the phases of the guest's exec
handler: the tables against their diagram, and
:class:`~vmservice.guest.execution.ExecHandler` taking them with a fake
stream and a fake child (the handler with real children is in
:mod:`tests.integration.guest.test_execution`).
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Optional

from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions
from vmservice.guest.exec_phase import (ABANDONED, CLOSED, DRAINING, ENDED, ENDING, FLOW, HELD, KILLING, OPEN, QUIET,
                                        READING, RUNNING, STDIN, TRANSITIONS)
from vmservice.guest.execution import KILL_GRACE, PENDING_HIGH_WATER, ExecHandler
from vmservice.wire.payloads import STDOUT, encode_record, exit_record


class FakeLoop:
    """Records which descriptors are watched."""

    def __init__(self) -> None:
        self.watched: dict[int, tuple[Optional[Callable[[], None]], Optional[Callable[[], None]]]] = {}

    def watch(self, fd: int, on_readable: Optional[Callable[[], None]] = None,
              on_writable: Optional[Callable[[], None]] = None) -> None:
        if on_readable is None and on_writable is None:
            self.watched.pop(fd, None)
        else:
            self.watched[fd] = (on_readable, on_writable)


class FakeStream:
    """What the handler writes, and whether it ended the stream."""

    def __init__(self) -> None:
        self.loop = FakeLoop()
        self.pending = 0
        self.written: list[bytes] = []
        self.ended = False
        self.consumed_bytes = 0

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def end(self) -> None:
        self.ended = True

    def consumed(self, count: int) -> None:
        self.consumed_bytes += count


class FakeChild:
    """Records the signals sent to the process group and how it was let go."""

    def __init__(self, status: int = 0) -> None:
        self.status = status
        self.calls: list[Any] = []

    def signal(self, number: int) -> None:
        self.calls.append(number)

    def kill_later(self, delay: float) -> None:
        self.calls.append(("kill_later", delay))

    def reap(self) -> int:
        self.calls.append("reap")
        return self.status

    def forget(self) -> None:
        self.calls.append("forget")


class TableTests(SynchronousTestCase):
    def test_diagram_is_the_tables(self) -> None:
        """docs/state-machines/guest-exec.dot draws exactly the three tables' transitions."""
        tables = {(phase, event, new) for table in (TRANSITIONS, FLOW, STDIN) for (phase, event), new in table.items()}
        self.assertEqual(drawn_transitions("guest-exec.dot"), tables)

    def test_phases_apart(self) -> None:
        """No phase name is in two tables, so the one diagram tells them apart."""
        names = [{phase for pair in table.items() for phase in (pair[0][0], pair[1])} for table in (TRANSITIONS, FLOW, STDIN)]
        self.assertEqual(len(set.union(*names)), sum(map(len, names)))


class HandlerPhaseTests(SynchronousTestCase):
    """The handler's reactions, phase by phase."""

    def setUp(self) -> None:
        self.stream = FakeStream()
        self.handler = ExecHandler(self.stream, {"op": "exec"})  # type: ignore[arg-type]
        self.child = FakeChild()
        self.mine: list[int] = []  # pipe ends the test holds
        self.addCleanup(self.close_leftovers)

    def close_leftovers(self) -> None:
        """Close the ends the test still holds, and those the handler did not close."""
        for fd in self.mine + list(self.handler._outputs) + ([self.handler._stdin] if self.handler._stdin >= 0 else []):
            os.close(fd)

    def running(self, phase: str = RUNNING) -> None:
        self.handler._child = self.child  # type: ignore[assignment]
        self.handler.pid = 4242
        self.handler.phase = phase

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        os.set_blocking(r, False)
        return r, w

    def test_reset_while_running_kills(self) -> None:
        """A reset while the process runs signals its group (again on a second reset); its exit is forgotten, not reaped."""
        self.running()
        self.handler.reset(0, "gone")
        self.assertEqual(self.handler.phase, KILLING)
        self.handler.reset(0, "gone")
        self.handler._child_exited()
        self.assertEqual(self.handler.phase, ABANDONED)
        self.assertEqual(self.child.calls, [signal.SIGTERM, ("kill_later", KILL_GRACE)] * 2 + ["forget"])
        self.assertEqual((self.stream.written, self.stream.ended), ([], False))

    def test_reset_after_reaping_kills_nothing(self) -> None:
        """A reset once the process was reaped signals nothing: its group id may be another's."""
        self.running(DRAINING)
        self.handler.reset(0, "gone")
        self.assertEqual((self.handler.phase, self.child.calls), (ABANDONED, []))

    def test_quiet_exit_ends(self) -> None:
        """A process whose outputs are all closed ends the stream with EXIT when it exits."""
        self.child.status = 3 << 8
        self.running(QUIET)
        self.handler._child_exited()
        self.assertEqual(self.handler.phase, ENDED)
        self.assertEqual((self.stream.written, self.stream.ended), ([exit_record(3, None)], True))

    def test_output_then_exit(self) -> None:
        """After the exit the pipes are drained: what the process wrote comes before EXIT, which waits for EOF."""
        r, w = self.pipe()
        self.handler._outputs = {r: STDOUT}
        self.running()
        os.write(w, b"hi")
        os.close(w)
        self.handler._child_exited()
        self.assertEqual((self.handler.phase, self.stream.written), (DRAINING, [encode_record(STDOUT, b"hi")]))
        self.handler._read_output(r)
        self.assertEqual(self.handler.phase, ENDED)
        self.assertEqual(self.stream.written, [encode_record(STDOUT, b"hi"), exit_record(0, None)])
        self.assertTrue(self.stream.ended)

    def test_empty_pipe_after_exit_closed(self) -> None:
        """Once the process was reaped, an empty pipe (held open by something it left running) is closed."""
        r, w = self.pipe()
        self.mine.append(w)
        self.handler._outputs = {r: STDOUT}
        self.running()
        self.handler._child_exited()
        self.assertEqual((self.handler.phase, self.stream.written), (ENDED, [exit_record(0, None)]))

    def test_outputs_held_while_link_full(self) -> None:
        """Output beyond the high water stops the pipes being watched; room on the link watches them again, once."""
        r, w = self.pipe()
        self.mine.append(w)
        self.handler._outputs = {r: STDOUT}
        self.running()
        self.handler._watch_outputs()
        self.assertEqual((self.handler._flow, list(self.stream.loop.watched)), (READING, [r]))
        os.write(w, b"x")
        self.stream.pending = PENDING_HIGH_WATER
        self.handler._read_output(r)
        self.assertEqual((self.handler._flow, self.stream.loop.watched), (HELD, {}))
        self.stream.pending = 0
        self.handler.flushed()
        self.handler.flushed()
        self.assertEqual((self.handler._flow, list(self.stream.loop.watched)), (READING, [r]))

    def test_stdin_closed_after_buffer(self) -> None:
        """EOF from the host closes stdin once what it buffered is written; EOF without a pipe changes nothing."""
        self.handler.half_closed()
        self.assertEqual(self.handler._stdin_phase, CLOSED)
        r, w = self.pipe()
        self.mine.append(r)
        self.handler._stdin = w
        self.handler._stdin_phase = OPEN
        self.handler._stdin_buffer += b"abc"
        self.handler.half_closed()
        self.assertEqual(self.handler._stdin_phase, ENDING)
        self.handler._write_stdin()
        self.assertEqual((self.handler._stdin_phase, self.handler._stdin, os.read(r, 10)), (CLOSED, -1, b"abc"))
        self.assertEqual(self.stream.consumed_bytes, 3)

