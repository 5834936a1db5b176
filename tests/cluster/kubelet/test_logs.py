"""Tests for :mod:`vmservice.cluster.kubelet.logs` and :mod:`.console_files`: a VM's console as kubectl logs shows it."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any, Callable, TypeVar

from twisted.internet.defer import Deferred, execute
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from vmservice.cluster.kubelet import console_files
from vmservice.cluster.kubelet.logs import POLL, ConsoleLogs, stamp
from vmservice.cluster.kubelet.params import LogsQuery
from vmservice.errors import NotFound

_T = TypeVar("_T")

#: When the console log was last written, in these tests.
WRITTEN = 1_700_000_000.25


def at_once(call: Callable[[], _T]) -> Deferred[_T]:
    return execute(call)


class PushRequest(DummyRequest):
    """A DummyRequest that holds a push producer (DummyRequest's own pulls in a loop)."""

    def __init__(self) -> None:
        super().__init__([b""])
        self.producer: Any = None

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


class ConsoleCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.path = os.path.join(self.directory, "console.log")
        self.gone = False
        self.clock = Clock()
        self.clock.advance(WRITTEN + 100)

    def write(self, data: bytes, name: str = "console.log", mode: str = "ab") -> None:
        path = os.path.join(self.directory, name)
        with open(path, mode) as stream:
            stream.write(data)
        os.utime(path, (WRITTEN, WRITTEN))

    def console_path(self, hostname: str) -> str:
        if self.gone or hostname != "demo-1":
            raise NotFound("no such node")
        return self.path

    def logs(self, query: LogsQuery, limit: int = 1 << 20) -> tuple[PushRequest, Deferred[None]]:
        request = PushRequest()
        logs = ConsoleLogs(self.clock, at_once, self.console_path, limit)
        return request, Deferred.fromCoroutine(logs.write(request, query, "demo-1"))

    def answer(self, query: LogsQuery, limit: int = 1 << 20) -> bytes:
        request, done = self.logs(query, limit)
        self.successResultOf(done)
        self.assertEqual(request.responseCode, 200)
        return b"".join(request.written)


class SnapshotTests(ConsoleCase):
    def test_both_parts_in_order(self) -> None:
        """console.log.1 comes before console.log; the position is console.log's end."""
        self.write(b"old\n", "console.log.1")
        self.write(b"new\n")
        snapshot = console_files.snapshot(self.path, 100)
        self.assertEqual(snapshot.data, b"old\nnew\n")
        self.assertEqual(snapshot.position.offset, 4)
        self.assertEqual(snapshot.modified, WRITTEN)

    def test_newest_bytes(self) -> None:
        """At most the newest ``limit`` bytes, across both parts."""
        self.write(b"abcdef", "console.log.1")
        self.write(b"ghij")
        self.assertEqual(console_files.snapshot(self.path, 6).data, b"efghij")
        self.assertEqual(console_files.snapshot(self.path, 3).data, b"hij")

    def test_no_log(self) -> None:
        """A log not written yet is empty, its time 0."""
        snapshot = console_files.snapshot(self.path, 10)
        self.assertEqual((snapshot.data, snapshot.modified), (b"", 0.0))

    def test_link_refused(self) -> None:
        """The log is never read through a link."""
        os.symlink("/etc/hostname", self.path)
        self.assertRaises(Exception, console_files.snapshot, self.path, 10)

    def test_more_after_rotation(self) -> None:
        """A log truncated under the follower is read again from its start."""
        self.write(b"0123456789")
        position = console_files.snapshot(self.path, 100).position
        self.write(b"ab")
        data, position = console_files.more(self.path, position, 100)
        self.assertEqual((data, position.offset), (b"ab", 12))
        self.write(b"xy", mode="wb")
        data, position = console_files.more(self.path, position, 100)
        self.assertEqual((data, position.offset), (b"xy", 2))


class LogsTests(ConsoleCase):
    def test_whole(self) -> None:
        """The whole console, CRLF as LF, bad UTF-8 replaced."""
        self.write(b"boot\r\nok \xff\n")
        self.assertEqual(self.answer(LogsQuery()), "boot\nok \ufffd\n".encode())

    def test_tail_lines(self) -> None:
        """tailLines keeps the last lines; 0 keeps none; more than there are keeps all."""
        self.write(b"a\nb\nc\n")
        self.assertEqual(self.answer(LogsQuery(tail_lines=2)), b"b\nc\n")
        self.assertEqual(self.answer(LogsQuery(tail_lines=0)), b"")
        self.assertEqual(self.answer(LogsQuery(tail_lines=10)), b"a\nb\nc\n")

    def test_limit_bytes(self) -> None:
        """limitBytes cuts the answer."""
        self.write(b"abcdef\n")
        self.assertEqual(self.answer(LogsQuery(limit_bytes=3)), b"abc")

    def test_timestamps(self) -> None:
        """Each line is prefixed with the log's last write time, RFC 3339 with nanoseconds."""
        self.write(b"a\nb\n")
        self.assertEqual(self.answer(LogsQuery(timestamps=True)),
                         b"2023-11-14T22:13:20.250000000Z a\n2023-11-14T22:13:20.250000000Z b\n")

    def test_stamp(self) -> None:
        self.assertEqual(stamp(0.5), "1970-01-01T00:00:00.500000000Z")

    def test_since(self) -> None:
        """A log last written before the since time gives nothing; one written after gives all of it."""
        self.write(b"a\n")
        self.assertEqual(self.answer(LogsQuery(since_seconds=10)), b"")
        self.assertEqual(self.answer(LogsQuery(since_seconds=1000)), b"a\n")
        early = datetime.fromtimestamp(WRITTEN - 1, timezone.utc)
        self.assertEqual(self.answer(LogsQuery(since_time=early)), b"a\n")

    def test_unknown_vm(self) -> None:
        """A VM that is gone is NotFound before anything is written."""
        self.gone = True
        request, done = self.logs(LogsQuery())
        self.failureResultOf(done, NotFound)
        self.assertEqual(request.written, [])

    def test_follow(self) -> None:
        """follow writes what is appended, polled, with its own timestamps, until the VM is gone."""
        self.write(b"a\n")
        request, done = self.logs(LogsQuery(follow=True, timestamps=True))
        self.assertNoResult(done)
        self.write(b"b\n")
        self.clock.advance(POLL)
        self.assertEqual(request.written[-1], stamp(self.clock.seconds()).encode() + b" b\n")
        self.gone = True
        self.clock.advance(POLL)
        self.successResultOf(done)

    def test_follow_limit(self) -> None:
        """limitBytes ends a follow."""
        self.write(b"ab")
        request, done = self.logs(LogsQuery(follow=True, limit_bytes=4))
        self.write(b"cdef")
        self.clock.advance(POLL)
        self.successResultOf(done)
        self.assertEqual(b"".join(request.written), b"abcd")

    def test_follow_paced(self) -> None:
        """While the client takes nothing the log is not read; a client gone ends the follow."""
        self.write(b"a\n")
        request, done = self.logs(LogsQuery(follow=True))
        producer: Any = request.producer
        producer.pauseProducing()
        self.write(b"b\n")
        self.clock.advance(POLL)
        self.assertEqual(request.written, [b"a\n"])
        producer.resumeProducing()
        self.assertEqual(request.written, [b"a\n", b"b\n"])
        request.processingFailed(Exception("client gone"))  # type: ignore[no-untyped-call]
        self.clock.advance(POLL)
        self.successResultOf(done)
