# -*- test-case-name: tests.test_audit -*-
"""Tests for :mod:`vmservice.audit`."""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any

from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from vmservice.audit import MAX_VALUE, AuditEntry, AuditLog


def _entry(**changes: object) -> AuditEntry:
    fields: dict[str, object] = dict(
        at=1764331200.25, peer="127.0.0.1:40000", token="ci", method="POST",
        route="/vm/{hostname}/exec", target={"hostname": "demo-1"}, status=200,
    )
    fields.update(changes)
    return AuditEntry(**fields)  # type: ignore[arg-type]


class EntryTests(SynchronousTestCase):
    def test_line(self) -> None:
        """An entry is one JSON line with the documented fields, times in UTC with milliseconds."""
        line = _entry(status=403, code="forbidden_origin").line()
        self.assertTrue(line.endswith(b"\n"))
        self.assertEqual(line.count(b"\n"), 1)
        self.assertEqual(json.loads(line), {
            "time": "2025-11-28T12:00:00.250Z", "peer": "127.0.0.1:40000", "token": "ci", "method": "POST",
            "route": "/vm/{hostname}/exec", "target": {"hostname": "demo-1"}, "status": 403,
            "code": "forbidden_origin",
        })

    def test_bounded(self) -> None:
        """An unknown method is OTHER and a long path value is cut: a client cannot grow a line at will."""
        record = json.loads(_entry(method="X" * 5000, target={"hostname": "h" * 10000}).line())
        self.assertEqual(record["method"], "OTHER")
        self.assertEqual(len(record["target"]["hostname"]), MAX_VALUE)

    def test_escaped(self) -> None:
        """Control characters and non-ASCII in a value cannot break a line."""
        line = _entry(target={"name": "a\nb\u2028\"c"}).line()
        self.assertEqual(line.count(b"\n"), 1)
        self.assertEqual(json.loads(line)["target"]["name"], "a\nb\u2028\"c")


class LogTests(SynchronousTestCase):
    def test_private_and_appended(self) -> None:
        """The log is made 0600 in a 0700 directory, and lines are appended across reopenings."""
        path = os.path.join(self.mktemp(), "audit", "audit.log")
        log = AuditLog(path, 1 << 20, 3)
        log.record(_entry())
        log.close()
        log = AuditLog(path, 1 << 20, 3)
        log.record(_entry(status=201))
        log.close()
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
        with open(path, "rb") as f:
            self.assertEqual([json.loads(line)["status"] for line in f], [200, 201])

    def test_rotated(self) -> None:
        """Past its size the log is rotated, and only `keep` rotated files remain, each private."""
        directory = self.mktemp()
        path = os.path.join(directory, "audit.log")
        log = AuditLog(path, 1000, 2)
        for status in range(100, 160):
            log.record(_entry(status=status))
        log.close()
        self.assertEqual(sorted(os.listdir(directory)), ["audit.log", "audit.log.1", "audit.log.2"])
        for name in os.listdir(directory):
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(directory, name)).st_mode), 0o600)
            self.assertLessEqual(os.path.getsize(os.path.join(directory, name)), 1000 + 300)
        with open(path, "rb") as f:
            self.assertEqual(json.loads(f.readlines()[-1])["status"], 159)


class _Full:
    """A file that takes ``room`` more bytes, then no more (a short write, then ENOSPC)."""

    def __init__(self, file: Any, room: int) -> None:
        self._file = file
        self.room = room

    def write(self, data: bytes) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        taken = self._file.write(data[: self.room])
        self.room -= taken
        return int(taken)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class NoRoomTests(SynchronousTestCase):
    def test_no_room(self) -> None:
        """
        A line the file system has no room for, whole or in part, fails
        nothing: it goes to the daemon's log with the reason, the file keeps
        no part of it, and the next line that fits follows the last whole one.
        """
        path = os.path.join(self.mktemp(), "audit.log")
        audit = AuditLog(path, 1 << 20, 3)
        self.addCleanup(audit.close)
        audit.record(_entry(status=200))
        logged: list[str] = []
        observer = lambda event: logged.append(formatEvent(event))  # noqa: E731
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        full = _Full(audit._file._file, 10)
        audit._file._file = full
        audit.record(_entry(status=201))
        audit.record(_entry(status=202))
        self.assertEqual(len(logged), 2)
        self.assertIn("No space left on device", logged[0])
        self.assertIn('"status":201', logged[0])
        self.assertIn('"status":202', logged[1])
        full.room = 1 << 20
        audit.record(_entry(status=203))
        with open(path, "rb") as f:
            self.assertEqual([json.loads(line)["status"] for line in f], [200, 203])
