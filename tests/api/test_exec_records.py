"""
Tests for :mod:`vmservice.api.exec_records`: the cap on what a buffered exec
collects (a regression: 50 MB of output grew the daemon by 40 MB), and the
streamed exec that has none; what a buffered exec holds in the daemon's
buffer budget (its answer's size, invalid bytes as six-byte escapes), its
refusal, and the budget given back.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

import json

from vmservice.api.exec_records import BUFFERED_LIMIT, LOST_EXIT_CODE, ExecCall
from vmservice.buffer_budget import BufferBudget
from vmservice.errors import AgentError, BufferBudgetExhausted, GuestErrorKind


class _Process:
    """Stands in for the running exec: counts kills."""

    def __init__(self) -> None:
        self.kills = 0

    def kill(self) -> None:
        self.kills += 1


class _Stream:
    """Stands in for the NDJSON response: keeps the records."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def send(self, record: dict[str, Any]) -> None:
        self.records.append(record)


class BufferedLimitTests(SynchronousTestCase):
    def call(self, buffered: bool, limit: int = 4) -> tuple[ExecCall, _Process]:
        call = ExecCall(MemoryReactorClock(), base64_mode=False, buffered=buffered, limit=limit)
        process = _Process()
        call.process = process  # type: ignore[assignment]
        call.started(7)
        return call, process

    def test_default_limit(self) -> None:
        """The documented limit: 16 MiB per stream."""
        self.assertEqual(BUFFERED_LIMIT, 16 * 1024 * 1024)

    def test_within_limit(self) -> None:
        """Output up to the limit is kept whole and the process left alone."""
        call, process = self.call(buffered=True)
        call.output("stdout", b"ab")
        call.output("stdout", b"cd")
        call.output("stderr", b"wxyz")
        call.exited(0, None)
        result = call.buffered_result()
        self.assertEqual((result["stdout"], result["stderr"], result["exit_code"]), ("abcd", "wxyz", 0))
        self.assertNotIn("error", result)
        self.assertEqual(process.kills, 0)

    def test_past_limit(self) -> None:
        """
        Past the limit the process is stopped once, nothing more is kept, and
        the result says why in ``error`` (with the daemon's own exit code).
        """
        call, process = self.call(buffered=True)
        call.output("stdout", b"abc")
        call.output("stdout", b"defg")
        call.output("stdout", b"more")
        call.output("stderr", b"late")
        self.assertEqual(process.kills, 1)
        call.lost(AgentError(GuestErrorKind.FAILED, "stream reset"))
        result = call.buffered_result()
        self.assertEqual((result["stdout"], result["stderr"], result["exit_code"]), ("abcd", "", LOST_EXIT_CODE))
        self.assertIn("stdout passed the 4 byte limit of a buffered exec", result["error"])

    def test_streamed_has_no_limit(self) -> None:
        """A streamed exec sends everything as it comes and never stops the process."""
        call, process = self.call(buffered=False)
        stream = _Stream()
        call.attach(stream)  # type: ignore[arg-type]
        call.output("stdout", b"0123456789")
        call.exited(0, None)
        self.assertEqual(process.kills, 0)
        self.assertEqual([r.get("data") for r in stream.records if r["type"] == "stdout"], ["0123456789"])


class BudgetTests(SynchronousTestCase):
    def call(self, budget: BufferBudget, base64_mode: bool = False, buffered: bool = True) -> tuple[ExecCall, _Process]:
        call = ExecCall(MemoryReactorClock(), base64_mode=base64_mode, buffered=buffered, budget=budget)
        process = _Process()
        call.process = process  # type: ignore[assignment]
        call.started(7)
        return call, process

    def test_counts_the_rendered_size(self) -> None:
        """
        The budget holds what the answer's output fields take: text escaped as
        JSON (an invalid byte is a six-byte \\ufffd, a newline two, a
        character split across reads counted once whole), base64 as 4 per 3.
        """
        budget = BufferBudget(None)
        call, _ = self.call(budget)
        pieces = [b"ab\n", b"\xff", b"\xc3", b"\xa9", b"\x01"]
        for piece in pieces:
            call.output("stdout", piece)
        call.exited(0, None)
        text = json.dumps(b"".join(pieces).decode("utf-8", "replace"))
        self.assertEqual(budget.held, len(text) - 2)
        self.assertEqual(budget.held, 4 + 6 + 6 + 6)
        call.release()
        binary = BufferBudget(None)
        call, _ = self.call(binary, base64_mode=True)
        for piece in (b"a", b"bc", b"defg"):
            call.output("stderr", piece)
        self.assertEqual(binary.held, len("YWJjZGVmZw=="))

    def test_invalid_bytes_count_six_times(self) -> None:
        """Output that fits raw but not escaped is refused: 10 invalid bytes take 60 of the budget."""
        call, process = self.call(BufferBudget(59))
        call.output("stdout", b"\xff" * 10)
        self.failureResultOf(call.done, BufferBudgetExhausted)
        self.assertEqual(process.kills, 1)
        call, process = self.call(BufferBudget(59))
        call.output("stdout", b"a" * 59)
        self.assertNoResult(call.done)
        self.assertEqual(process.kills, 0)

    def test_refused(self) -> None:
        """
        Past the budget the exec fails: the process is stopped once, what it
        collected is dropped and given back at once, ``done`` fails with
        BufferBudgetExhausted, and later output or its end change nothing.
        """
        budget = BufferBudget(10)
        other = budget.reservation("another exec")
        other.grow(4)
        call, process = self.call(budget)
        call.output("stdout", b"abc")
        self.assertEqual(budget.held, 7)
        call.output("stderr", b"defg")
        failure = self.failureResultOf(call.done, BufferBudgetExhausted)
        self.assertIn("a buffered exec's output", failure.value.message)
        self.assertEqual((process.kills, budget.held, budget.refusals), (1, 4, 1))
        call.output("stdout", b"x")
        call.lost(AgentError(GuestErrorKind.FAILED, "stream reset"))
        call.release()
        self.assertEqual((process.kills, budget.held), (1, 4))
        self.assertEqual(call.buffered_result()["stdout"], "")

    def test_settled_then_released(self) -> None:
        """The answer's size is held from settle() until release(); output after release is dropped."""
        budget = BufferBudget(None)
        call, _ = self.call(budget)
        call.output("stdout", b"abc")
        call.exited(0, None)
        body = json.dumps(call.buffered_result()).encode()
        call.settle(len(body))
        self.assertEqual(budget.held, len(body))
        call.release()
        call.output("stdout", b"late")
        self.assertEqual(budget.held, 0)

    def test_streamed_reserves_nothing(self) -> None:
        """A streamed exec's records take nothing from the budget."""
        budget = BufferBudget(1)
        call, process = self.call(budget, buffered=False)
        call.attach(_Stream())  # type: ignore[arg-type]
        call.output("stdout", b"0123456789")
        call.exited(0, None)
        self.assertEqual((budget.held, process.kills), (0, 0))
        self.successResultOf(call.done)
