"""
Tests of :mod:`vmservice.e2b.watching`: ``WatchDir``'s stream and the
polling watchers over a guest's watch in memory: the events' names and
types, the end, the bounds, and a sandbox's watchers going with it.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.e2b.envd_harness import messages
from tests.e2b.fs_fakes import FsCase, Node
from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.e2b import watcher_state, watching
from vmservice.e2b.inputs import NewSandbox
from vmservice.e2b import watch_events
from vmservice.e2b.watch_events import EventFolding, event_message
from vmservice.e2b.watcher_state import WATCHER_MACHINE
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.watch import WatchEvent


class EventTests(SynchronousTestCase):
    def test_names_relative(self) -> None:
        self.assertEqual(event_message(WatchEvent("create", "/w/a/b", 0, False), "/w"),
                         {"name": "a/b", "type": "EVENT_TYPE_CREATE"})
        self.assertEqual(event_message(WatchEvent("chmod", "/w/x", 0, False), "/w")["type"],  # type: ignore[index]
                         "EVENT_TYPE_CHMOD")
        self.assertIsNone(event_message(WatchEvent("overflow", "", 0, False, "lost"), "/w"))

    def test_upload_folded(self) -> None:
        """An upload's temporary file shows as its name: create, writes, chmod; its rename and the name's create not."""
        folding, temp = EventFolding(), "/w/.a.txt.vmservice-0123456789ab"
        shown = [folding.fold(WatchEvent(kind, path, 0, False)) for kind, path in (
            ("create", temp), ("write", temp), ("chmod", temp), ("rename", temp), ("create", "/w/a.txt"),
            ("create", "/w/a.txt"), ("remove", "/w/.b.vmservice-0123456789ab"), ("write", "/w/.x.vmservice-no"))]
        self.assertEqual([(event.type, event.path) if event else None for event in shown], [
            ("create", "/w/a.txt"), ("write", "/w/a.txt"), ("chmod", "/w/a.txt"), None, None,
            ("create", "/w/a.txt"), None, ("write", "/w/.x.vmservice-no")])

    def test_pending_bound(self) -> None:
        self.patch(watch_events, "MAX_PENDING", 2)
        folding = EventFolding()
        for name in "abc":
            folding.fold(WatchEvent("rename", f"/w/.{name}.vmservice-0123456789ab", 0, False))
        self.assertIsNotNone(folding.fold(WatchEvent("create", "/w/a", 0, False)))
        self.assertIsNone(folding.fold(WatchEvent("create", "/w/c", 0, False)))

    def test_diagram(self) -> None:
        """docs/state-machines/e2b-watcher.dot draws exactly the watcher's machine."""
        self.assertEqual(drawn_transitions("e2b-watcher.dot"), machine_transitions(WATCHER_MACHINE))


class WatchDirTests(FsCase):
    def setUp(self) -> None:
        super().setUp()
        self.guest.put("/home/user/w", Node("directory", mode=0o755))
        self.guest.put("/home/user/f", Node("file"))

    def test_stream(self) -> None:
        channel, transport = self.open_stream("/filesystem.Filesystem/WatchDir", {"path": "w", "recursive": True})
        watch = self.guest.watches[0]
        self.assertEqual((watch.request.paths, watch.request.recursive), (("/home/user/w",), True))
        watch.event("create", "/home/user/w/new")
        watch.event("write", "/home/user/w/new")
        watch.event("overflow", "")
        watch.event("remove", "/home/user/w/sub/x")
        status, sent, end = messages(transport)
        self.assertEqual((status, end), (200, None))
        self.assertEqual(sent, [{"start": {}}, {"filesystem": {"name": "new", "type": "EVENT_TYPE_CREATE"}},
                                {"filesystem": {"name": "new", "type": "EVENT_TYPE_WRITE"}},
                                {"filesystem": {"name": "sub/x", "type": "EVENT_TYPE_REMOVE"}}])
        watch.sink.ended(None)
        self.assertEqual(messages(transport)[2], {})
        self.assertTrue(watch.cancelled)

    def test_client_gone(self) -> None:
        channel, _ = self.open_stream("/filesystem.Filesystem/WatchDir", {"path": "w"})
        channel.connectionLost(Exception("gone"))
        self.assertTrue(self.guest.watches[0].cancelled)

    def test_lost(self) -> None:
        _, transport = self.open_stream("/filesystem.Filesystem/WatchDir", {"path": "w"})
        self.guest.watches[0].sink.ended(AgentError(GuestErrorKind.UNAVAILABLE, "agent lost"))
        self.assertEqual(messages(transport)[2]["error"]["code"], "unavailable")

    def test_not_directory(self) -> None:
        _, transport = self.open_stream("/filesystem.Filesystem/WatchDir", {"path": "f"})
        self.assertEqual(messages(transport)[2]["error"]["code"], "invalid_argument")
        _, transport = self.open_stream("/filesystem.Filesystem/WatchDir", {"path": "nope"})
        self.assertEqual(messages(transport)[2]["error"]["code"], "not_found")
        self.assertEqual(self.guest.watches, [])


class PollingTests(FsCase):
    def setUp(self) -> None:
        super().setUp()
        self.guest.put("/home/user/w", Node("directory", mode=0o755))

    def create(self) -> str:
        status, body = self.fs("CreateWatcher", {"path": "w"})
        self.assertEqual(status, 200)
        return str(body["watcherId"])

    def test_events_then_cleared(self) -> None:
        watcher_id = self.create()
        self.guest.watches[0].event("create", "/home/user/w/a")
        self.assertEqual(self.fs("GetWatcherEvents", {"watcherId": watcher_id}),
                         (200, {"events": [{"name": "a", "type": "EVENT_TYPE_CREATE"}]}))
        self.assertEqual(self.fs("GetWatcherEvents", {"watcherId": watcher_id}), (200, {}))
        self.assertEqual(self.fs("RemoveWatcher", {"watcherId": watcher_id}), (200, {}))
        self.assertTrue(self.guest.watches[0].cancelled)
        self.assertEqual(self.fs("GetWatcherEvents", {"watcherId": watcher_id})[1]["code"], "not_found")

    def test_buffer_bound(self) -> None:
        self.patch(watcher_state, "MAX_EVENTS", 3)
        watcher_id = self.create()
        for number in range(5):
            self.guest.watches[0].event("write", f"/home/user/w/{number}")
        self.assertEqual([event["name"] for event in self.fs("GetWatcherEvents", {"watcherId": watcher_id})[1]
                          ["events"]], ["0", "1", "2"])

    def test_watchers_bound(self) -> None:
        self.patch(watching, "MAX_WATCHERS", 2)
        self.create()
        self.create()
        self.assertEqual(self.fs("CreateWatcher", {"path": "w"})[1]["code"], "resource_exhausted")

    def test_ended(self) -> None:
        watcher_id = self.create()
        self.guest.watches[0].event("remove", "/home/user/w")
        self.guest.watches[0].sink.ended(None)
        self.assertEqual(self.fs("GetWatcherEvents", {"watcherId": watcher_id})[1]["events"][0]["name"], ".")
        self.assertEqual(self.fs("GetWatcherEvents", {"watcherId": watcher_id})[1]["code"], "not_found")

    def test_gone_with_sandbox(self) -> None:
        watcher_id = self.create()
        self.successResultOf(Deferred.fromCoroutine(self.sandboxes.kill(self.sandbox_id)))
        other = self.successResultOf(Deferred.fromCoroutine(self.sandboxes.create(NewSandbox("base"))))
        self.sandbox_id, self.token = other.sandbox.sandbox_id, other.sandbox.access_token
        self.host.guests[self.sandbox_id] = self.guest
        self.guest.put("/home/user/w", Node("directory", mode=0o755))
        self.create()
        self.assertTrue(self.guest.watches[0].cancelled)
        self.assertEqual(self.fs("GetWatcherEvents", {"watcherId": watcher_id})[1]["code"], "not_found")

    def test_gone_with_node(self) -> None:
        watcher_id = self.create()
        for listener in list(self.host.listeners):
            listener(self.sandbox_id)
        self.assertTrue(self.guest.watches[0].cancelled)
        self.assertEqual(self.fs("GetWatcherEvents", {"watcherId": watcher_id})[0], 502)  # the sandbox is gone too

    def test_unknown(self) -> None:
        self.assertEqual(self.fs("RemoveWatcher", {"watcherId": "nope"})[1]["code"], "not_found")
