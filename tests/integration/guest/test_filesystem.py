# -*- test-case-name: tests.integration.guest.test_filesystem -*-
"""
Tests for :mod:`vmservice.guest.filesystem`: :class:`~vmservice.guest.fs_requests.FsHandler` served by a real
:class:`~vmservice.guest.agent.Session` and :class:`~vmservice.guest.agent.Loop`,
its work on a real thread.  The operations themselves are tested in
:mod:`tests.guest.test_filesystem`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest import health
from vmservice.guest import filesystem as fs
from vmservice.guest import fs_requests
from vmservice.wire import Data, HalfClose, Open, Reset, ResetCode


def _temp_dir(case: SynchronousTestCase) -> str:
    path = tempfile.mkdtemp(prefix="vmsfs-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    return path


class HandlerTests(GuestSessionMixin, SynchronousTestCase):
    """
    :class:`~vmservice.guest.fs_requests.FsHandler` behind the agent's real session and loop.
    """

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        self.start_session()
        self.handshake()

    def run_until(self, predicate, timeout: float = 5.0) -> list:  # type: ignore[no-untyped-def]
        events: list = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.loop.run_once(max_wait=0.05)
            events += self.receive()
            if predicate(events):
                return events
        self.fail(f"no answer in {timeout} s: {events}")

    def test_reply_then_half_close(self) -> None:
        """The agent answers an ``fs`` stream with one JSON reply, then half-closes."""
        stream = self.host.next_stream_id()
        self.send(Open(stream, {"op": "fs", "action": "stat", "path": self.root}), HalfClose(stream))
        events = self.run_until(lambda evs: any(isinstance(e, HalfClose) for e in evs))
        body = b"".join(e.data for e in events if isinstance(e, Data))
        reply = json.loads(body)
        self.assertEqual((reply["ok"], reply["result"]["type"]), (True, "directory"))
        self.assertIsInstance(events[-1], HalfClose)
        self.assertEqual(self.session.streams, {})

    def test_error_reply(self) -> None:
        """A failure is an ``ok: false`` reply on a normally closed stream, not a reset."""
        stream = self.host.next_stream_id()
        self.send(Open(stream, {"op": "fs", "action": "readdir", "path": self.root + "/x"}), HalfClose(stream))
        events = self.run_until(lambda evs: any(isinstance(e, HalfClose) for e in evs))
        self.assertFalse(any(isinstance(e, Reset) for e in events))
        reply = json.loads(b"".join(e.data for e in events if isinstance(e, Data)))
        self.assertEqual(reply["error"], "not_found")

    def test_reset_while_working(self) -> None:
        """A stream reset before the work finishes gets no reply, and its pipe is closed."""
        stream = self.host.next_stream_id()
        self.send(Open(stream, {"op": "fs", "action": "readdir", "path": self.root}))
        handler = self.session.streams[stream].handler
        self.send(Reset(stream, ResetCode.CANCEL, "bye"))
        events = self.run_until(lambda evs: handler._wake_r == -1)
        self.assertEqual([e for e in events + self.receive() if isinstance(e, Data)], [])

    def test_crash_resets(self) -> None:
        """A bug in the work resets the stream with INTERNAL_ERROR."""
        self.patch(fs_requests, "perform", lambda header, cancelled: 1 / 0)
        stream = self.host.next_stream_id()
        self.send(Open(stream, {"op": "fs", "action": "stat", "path": "/"}), HalfClose(stream))
        events = self.run_until(lambda evs: any(isinstance(e, Reset) for e in evs))
        reset = next(e for e in events if isinstance(e, Reset))
        self.assertEqual(reset.code, ResetCode.INTERNAL_ERROR)
        self.assertIn("ZeroDivisionError", reset.reason)

    def test_other_streams_move_meanwhile(self) -> None:
        """While an fs operation is still working, another stream (health) is served."""
        import threading

        release = threading.Event()
        self.addCleanup(release.set)

        def slow(header: object, cancelled: object) -> dict:
            release.wait(10)
            return {"ok": True, "result": []}

        self.patch(fs_requests, "perform", slow)
        self.patch(health, "system_uptime_ns", lambda path: 1)
        busy = self.host.next_stream_id()
        self.send(Open(busy, {"op": "fs", "action": "readdir", "path": "/"}), HalfClose(busy))
        quick = self.host.next_stream_id()
        self.send(Open(quick, {"op": "health"}), HalfClose(quick))
        events = self.run_until(lambda evs: any(isinstance(e, HalfClose) and e.stream_id == quick for e in evs))
        self.assertFalse(any(e.stream_id == busy for e in events if isinstance(e, (Data, HalfClose))))
        release.set()
        events = self.run_until(lambda evs: any(isinstance(e, HalfClose) and e.stream_id == busy for e in evs))
        self.assertEqual(json.loads(b"".join(e.data for e in events if isinstance(e, Data) and e.stream_id == busy)),
                         {"ok": True, "result": []})
