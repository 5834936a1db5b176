# -*- test-case-name: tests.integration.guest.test_watching -*-
"""
Tests for :mod:`vmservice.guest.watching`: :class:`WatchHandler` served by a
real :class:`~vmservice.guest.agent.Session` and
:class:`~vmservice.guest.agent.Loop`, its set-up on a real thread, real inotify
in a temporary directory: the reply, events, refusals, the end of a stream
whose paths are gone, the release of every watch on a reset, and overflow
when the host withholds credit.  The parts are tested in
:mod:`tests.guest.test_watching`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, Callable

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest import watching
from vmservice.guest.inotify import RawEvent
from vmservice.guest.watch_tree import Report
from vmservice.wire import Data, HalfClose, Open, Reset, ResetCode
from vmservice.wire.messages import MessageDecoder


def _temp_dir(case: SynchronousTestCase) -> str:
    path = tempfile.mkdtemp(prefix="vmswatch-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    return path


def inotify_descriptors() -> int:
    """How many inotify instances this process holds."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:inotify":
                count += 1
        except OSError:
            pass
    return count


class HandlerTests(GuestSessionMixin, SynchronousTestCase):
    """:class:`WatchHandler` behind the agent's real session and loop."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        self.start_session({"watch": watching.WatchHandler})
        self.handshake()
        self.decoder = MessageDecoder()
        self.messages: list[dict[str, Any]] = []
        self.ended = ""
        self.acknowledge = True
        self.unacknowledged = 0

    def open(self, **header: Any) -> int:
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "watch", **header}), HalfClose(stream_id))
        return stream_id

    def pump(self) -> None:
        """Run the loop once and read what the agent sent."""
        self.loop.run_once(0.02)
        for event in self.receive():
            if isinstance(event, Data):
                self.messages += self.decoder.feed(event.data)
                self.unacknowledged += len(event.data)
                if self.acknowledge:
                    self.session.data_received(
                        self.host.acknowledge_received_data(event.stream_id, self.unacknowledged))
                    self.unacknowledged = 0
            elif isinstance(event, HalfClose):
                self.ended = "end"
            elif isinstance(event, Reset):
                self.ended = "reset"

    def run_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                self.fail(f"timed out; messages {self.messages[:20]}, ended {self.ended!r}")
            self.pump()

    def events(self) -> list[tuple[str, str]]:
        return [(m["type"], os.path.relpath(m["path"], self.root) if m["path"] else "") for m in self.messages[1:]]

    def watch(self, **header: Any) -> int:
        """Open a watch of the temporary directory and wait for its reply."""
        stream_id = self.open(paths=[self.root], **header)
        self.run_until(lambda: bool(self.messages))
        self.assertEqual(self.messages[0]["ok"], True, self.messages[0])
        return stream_id

    def test_reply_then_events(self) -> None:
        """The reply names the watched paths; then each event is one message with type, path, size and is_dir."""
        self.watch(recursive=True)
        self.assertEqual(self.messages[0]["result"], {"paths": [self.root], "watches": 1})
        with open(os.path.join(self.root, "f"), "w") as f:
            f.write("hello")
        os.mkdir(os.path.join(self.root, "d"))
        self.run_until(lambda: len(self.messages) >= 4)
        self.assertEqual(self.messages[1:4], [
            {"type": "create", "path": os.path.join(self.root, "f"), "size": 5, "is_dir": False},
            {"type": "write", "path": os.path.join(self.root, "f"), "size": 5, "is_dir": False},
            {"type": "create", "path": os.path.join(self.root, "d"), "size": os.stat(os.path.join(self.root, "d")).st_size,
             "is_dir": True},
        ])
        self.assertEqual(self.ended, "")

    def test_selection(self) -> None:
        """Only the event types and base-name patterns asked for arrive."""
        self.watch(events=["create"], patterns=["*.txt"])
        for name in ("a.txt", "b.log", "c.txt"):
            with open(os.path.join(self.root, name), "w") as f:
                f.write("x")
        self.run_until(lambda: len(self.messages) >= 3)
        self.pump()
        self.assertEqual(self.events(), [("create", "a.txt"), ("create", "c.txt")])

    def test_debounce(self) -> None:
        """Writes within the debounce window arrive as one event."""
        path = os.path.join(self.root, "f")
        open(path, "w").close()
        self.watch(events=["write"], debounce=0.3)
        for _ in range(5):
            with open(path, "a") as f:
                f.write("more")
            self.pump()
        self.run_until(lambda: len(self.messages) >= 2)
        self.assertEqual(self.messages[1]["size"], 20)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            self.pump()
        self.assertEqual(self.events(), [("write", "f")])

    def test_missing_path(self) -> None:
        """A path that does not exist is refused with ``not_found``, then the agent half-closes."""
        self.open(paths=[self.root, os.path.join(self.root, "missing")])
        self.run_until(lambda: self.ended != "")
        self.assertEqual((self.messages[0]["ok"], self.messages[0]["error"]), (False, "not_found"))
        self.assertEqual(self.ended, "end")
        self.assertEqual(self.session.streams, {})

    def test_bad_header(self) -> None:
        """A header without paths is refused as ``invalid``."""
        self.open(paths=[])
        self.run_until(lambda: self.ended != "")
        self.assertEqual(self.messages[0]["error"], "invalid")

    def test_paths_gone_ends_stream(self) -> None:
        """Once the watched directory is removed, the agent reports it and half-closes."""
        self.watch()
        os.rmdir(self.root)
        self.run_until(lambda: self.ended != "")
        self.assertEqual((self.events(), self.ended), ([("remove", ".")], "end"))

    def test_reset_releases_watches(self) -> None:
        """A reset from the host closes the inotify instance at once."""
        before = inotify_descriptors()
        stream_id = self.watch(recursive=True)
        self.assertEqual(inotify_descriptors(), before + 1)
        self.send(Reset(stream_id, ResetCode.CANCEL, "client gone"))
        self.assertEqual(inotify_descriptors(), before)
        open(os.path.join(self.root, "after"), "w").close()
        for _ in range(5):
            self.pump()
        self.assertEqual(self.events(), [])

    def test_reset_during_set_up(self) -> None:
        """A reset that arrives while the watches are being set up leaves no instance behind."""
        before = inotify_descriptors()
        for index in range(30):
            os.makedirs(os.path.join(self.root, str(index), "x"))
        stream_id = self.open(paths=[self.root], recursive=True)
        self.send(Reset(stream_id, ResetCode.CANCEL, "client gone"))
        deadline = time.monotonic() + 5
        # The set-up thread's wake-up is the loop's only descriptor: wait until it was handled.
        while time.monotonic() < deadline and self.loop._callbacks:
            self.loop.run_once(0.02)
        self.assertEqual(inotify_descriptors(), before)
        self.assertEqual(self.messages, [])

    def test_slow_host_overflow(self) -> None:
        """
        While the host withholds credit, events beyond the backlog limit are
        dropped; once it catches up, one ``overflow`` says how many.
        """
        self.patch(watching, "PENDING_HIGH_WATER", 2048)
        self.patch(watching, "PENDING_LOW_WATER", 1024)
        self.acknowledge = False
        stream_id = self.watch(events=["create"])
        # About 3,500 events fill the stream's 256 KiB window; make more.
        for batch in range(25):
            for index in range(200):
                open(os.path.join(self.root, f"file-{batch}-{index:04}"), "w").close()
            for _ in range(3):
                self.pump()
        self.assertLess(len(self.messages), 4000)
        self.acknowledge = True
        self.session.data_received(self.host.acknowledge_received_data(stream_id, self.unacknowledged))
        self.unacknowledged = 0
        self.run_until(lambda: any(m.get("type") == "overflow" for m in self.messages))
        [overflow] = [m for m in self.messages if m.get("type") == "overflow"]
        dropped = int(overflow["message"].split()[0])
        creates = [m for m in self.messages if m.get("type") == "create"]
        self.assertGreater(dropped, 0)
        self.assertEqual(len(creates) + dropped, 5000)
        self.assertIn("did not take them", overflow["message"])

    def test_failure_resets_the_stream_only(self) -> None:
        """A failure while reading events resets this stream with INTERNAL_ERROR and releases its watches."""
        before = inotify_descriptors()
        self.watch()

        def broken(raw: RawEvent) -> list[Report]:
            raise RuntimeError("a bug")

        tree = self.session.streams[1].handler._tree  # type: ignore[attr-defined]
        self.patch(tree, "handle", broken)
        open(os.path.join(self.root, "f"), "w").close()
        self.run_until(lambda: self.ended != "")
        self.assertEqual(self.ended, "reset")
        self.assertEqual(inotify_descriptors(), before)

    def test_drops_reported_before_the_end(self) -> None:
        """Events dropped just before the watched paths are gone are still counted, in the last message."""
        self.patch(watching, "PENDING_HIGH_WATER", 2048)
        self.patch(watching, "PENDING_LOW_WATER", 1024)
        self.acknowledge = False
        stream_id = self.watch()
        for index in range(4000):
            open(os.path.join(self.root, f"file-{index:04}"), "w").close()
        handler = self.session.streams[stream_id].handler
        shutil.rmtree(self.root)
        self.run_until(lambda: handler._finished)  # type: ignore[attr-defined]
        self.acknowledge = True
        self.session.data_received(self.host.acknowledge_received_data(stream_id, self.unacknowledged))
        self.unacknowledged = 0
        self.run_until(lambda: self.ended != "")
        self.assertEqual(self.ended, "end")
        self.assertEqual(self.messages[-1]["type"], "overflow")
        dropped = int(self.messages[-1]["message"].split()[0])
        # 4,000 creates, 4,000 removes (each file's link count change is a chmod of the file, which a
        # directory watch does not see) and the directory's own removal.
        self.assertEqual(len(self.messages) - 2 + dropped, 8001)
