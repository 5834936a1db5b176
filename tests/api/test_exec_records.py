"""
Tests for :mod:`vmservice.api.exec_records`: the cap on what a buffered exec
collects (a regression: 50 MB of output grew the daemon by 40 MB), and the
streamed exec that has none.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vmservice.api.exec_records import BUFFERED_LIMIT, LOST_EXIT_CODE, ExecCall
from vmservice.errors import AgentError, GuestErrorKind


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
