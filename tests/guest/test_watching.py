# -*- test-case-name: tests.guest.test_watching -*-
"""
Tests for :mod:`vmservice.guest.watching` without a session: the parsing of
``struct inotify_event`` records (hypothesis), the header, the selection, the
debouncer on a fake clock, and the watched tree on a real inotify instance in
a temporary directory (the kernel queues an event during the system call that
causes it, so each test reads what it just did, without waiting).  The handler
behind a real session and loop is tested in
:mod:`tests.integration.guest.test_watching`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest import watching
from vmservice.guest.filesystem import FsError
from vmservice.guest import watch_coalescing
from vmservice.guest.inotify import IN_CREATE, IN_IGNORED, IN_ISDIR, IN_Q_OVERFLOW, Inotify, RawEvent, encode_event, parse_events
from vmservice.guest.loop import Timer
from vmservice.guest.watch_coalescing import Debouncer, Selection
from vmservice.guest.watch_tree import OVERFLOW, Report, Tree
from vmservice.guest.watching import WatchSpec, set_up


def _temp_dir(case: SynchronousTestCase) -> str:
    path = tempfile.mkdtemp(prefix="vmswatch-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    return path


raw_events = st.builds(
    RawEvent,
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=40).map(lambda name: name.replace(b"\0", b"x")),
)


class ParseTests(SynchronousTestCase):
    """``struct inotify_event`` records."""

    @given(st.lists(st.tuples(raw_events, st.integers(0, 7)), max_size=20))
    def test_round_trip(self, items: list[tuple[RawEvent, int]]) -> None:
        """Events come back as they were laid out, whatever NUL padding follows their names."""
        data = b"".join(encode_event(event, padding) for event, padding in items)
        self.assertEqual(parse_events(data), [event for event, _ in items])

    @given(st.lists(raw_events, max_size=5), raw_events, st.data())
    def test_truncated(self, whole: list[RawEvent], last: RawEvent, data: st.DataObject) -> None:
        """Bytes that end inside an event are refused, never half parsed."""
        encoded = encode_event(last, padding=3)
        kept = data.draw(st.integers(1, len(encoded) - 1))
        with self.assertRaises(ValueError):
            parse_events(b"".join(encode_event(event) for event in whole) + encoded[:kept])


class SpecTests(SynchronousTestCase):
    """The OPEN header and the paths it names."""

    def test_fields(self) -> None:
        """Every field is read; empty patterns are dropped."""
        spec = WatchSpec.from_header({"paths": ["/a", "~"], "patterns": ["*.py", ""], "events": ["create", "write"],
                                      "recursive": True, "debounce": 0.25, "uid": 1000})
        self.assertEqual(spec, WatchSpec(("/a", "~"), Selection(frozenset({"create", "write"}), ("*.py",)), True,
                                         0.25, 1000))
        self.assertEqual(WatchSpec.from_header({"paths": ["/"]}), WatchSpec(("/",)))

    def test_refused(self) -> None:
        """Missing paths, wrong types, unknown events and out-of-range numbers are ``invalid``."""
        for header in ({}, {"paths": []}, {"paths": "/x"}, {"paths": [1]}, {"paths": ["/"], "events": ["open"]},
                       {"paths": ["/"], "recursive": "yes"}, {"paths": ["/"], "debounce": -1},
                       {"paths": ["/"], "debounce": True}, {"paths": ["/"], "debounce": 7200},
                       {"paths": ["/"], "uid": -1}, {"paths": ["/"], "uid": 2**32}, {"paths": ["/"], "patterns": [3]}):
            with self.assertRaises(FsError) as caught:
                WatchSpec.from_header(header)
            self.assertEqual(caught.exception.kind, "invalid", header)

    def test_resolved(self) -> None:
        """``~`` is the uid's home from the password file (root's defaults to /root); paths are normalised, once."""
        passwd = os.path.join(_temp_dir(self), "passwd")
        with open(passwd, "w") as f:
            f.write("root:x:0:0:root:/root:/bin/bash\nu:x:1000:1000::/home/u:/bin/sh\nn:x:7:7::/nohome\n")
        self.assertEqual(WatchSpec(("~/x/", "/a//b/../c", "/a/c")).resolved(passwd), ["/root/x", "/a/c"])
        self.assertEqual(WatchSpec(("~", "~/d"), uid=1000).resolved(passwd), ["/home/u", "/home/u/d"])
        self.assertEqual(WatchSpec(("//srv",)).resolved(passwd), ["/srv"])
        with self.assertRaises(FsError):
            WatchSpec(("~",), uid=4242).resolved(passwd)
        self.assertEqual(WatchSpec(("/abs",), uid=4242).resolved(passwd), ["/abs"])
        with self.assertRaises(FsError):
            WatchSpec(("relative",)).resolved(passwd)


class SelectionTests(SynchronousTestCase):
    """Which reports a request keeps."""

    def test_everything_by_default(self) -> None:
        """No events and no patterns keep every report."""
        self.assertTrue(Selection().wants(Report("chmod", "/a/b")))

    def test_events(self) -> None:
        """Only the types asked for are kept; an overflow always is."""
        selection = Selection(frozenset({"create"}))
        self.assertTrue(selection.wants(Report("create", "/a")))
        self.assertFalse(selection.wants(Report("write", "/a")))
        self.assertTrue(selection.wants(Report(OVERFLOW, "", message="lost")))

    def test_patterns_on_base_name(self) -> None:
        """Patterns match the base name, case-sensitively, any of them."""
        selection = Selection(patterns=("*.py", "Makefile"))
        self.assertTrue(selection.wants(Report("write", "/src/deep/x.py")))
        self.assertTrue(selection.wants(Report("write", "/src/Makefile")))
        self.assertFalse(selection.wants(Report("write", "/src/x.PY")))
        self.assertFalse(selection.wants(Report("write", "/src.py/x")))
        self.assertTrue(selection.wants(Report(OVERFLOW, "")))


class FakeTimers:
    """A clock and ``call_later`` for the debouncer."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[tuple[float, Any]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        timer = Timer(self.now + delay, callback)
        self.timers.append((self.now + delay, timer))
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [timer for when, timer in self.timers if when <= self.now]
        self.timers = [(when, timer) for when, timer in self.timers if when > self.now]
        for timer in due:
            if timer.callback is not None:
                timer.callback()


class DebouncerTests(SynchronousTestCase):
    """Coalescing within a window."""

    def setUp(self) -> None:
        self.sent: list[Report] = []
        self.timers = FakeTimers()

    def debouncer(self, window: float) -> Debouncer:
        return Debouncer(window, self.sent.append, lambda: self.timers.now, self.timers.call_later)

    def test_no_window(self) -> None:
        """Without a window every report goes out at once."""
        debouncer = self.debouncer(0)
        debouncer.add(Report("write", "/a"))
        debouncer.add(Report("write", "/a"))
        self.assertEqual(len(self.sent), 2)

    def test_coalesced_within_window(self) -> None:
        """Reports of one type and path within the window become one, sent when it closes, the latest kept."""
        debouncer = self.debouncer(0.5)
        debouncer.add(Report("write", "/a"))
        self.timers.advance(0.2)
        debouncer.add(Report("write", "/a", message="latest"))
        debouncer.add(Report("create", "/b"))
        self.assertEqual(self.sent, [])
        self.timers.advance(0.3)
        self.assertEqual(self.sent, [Report("write", "/a", message="latest")])
        self.timers.advance(0.2)
        self.assertEqual(self.sent[1:], [Report("create", "/b")])
        debouncer.add(Report("write", "/a"))
        self.timers.advance(0.5)
        self.assertEqual(len(self.sent), 3)

    def test_overflow_and_flush(self) -> None:
        """An overflow is never held; flush sends what is open, in order; close stops the timer."""
        debouncer = self.debouncer(1)
        debouncer.add(Report("write", "/a"))
        debouncer.add(Report("remove", "/a"))
        debouncer.add(Report(OVERFLOW, ""))
        self.assertEqual([r.type for r in self.sent], [OVERFLOW])
        debouncer.flush()
        self.assertEqual([r.type for r in self.sent], [OVERFLOW, "write", "remove"])
        self.timers.advance(2)
        self.assertEqual(len(self.sent), 3)

    def test_bounded(self) -> None:
        """Past the most windows held, reports go out uncoalesced instead of growing memory."""
        self.patch(watch_coalescing, "MAX_DEBOUNCED", 2)
        debouncer = self.debouncer(1)
        for name in "abc":
            debouncer.add(Report("write", "/" + name))
        self.assertEqual(self.sent, [Report("write", "/c")])


class TreeTests(SynchronousTestCase):
    """The watched tree on a real inotify instance."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        self.inotify = Inotify()
        self.addCleanup(self.inotify.close)

    def tree(self, recursive: bool = False, *roots: str) -> Tree:
        tree = Tree(self.inotify, recursive)
        for root in roots or (self.root,):
            tree.add_root(root)
        return tree

    def reports(self, tree: Tree) -> list[tuple[str, str, bool]]:
        """Everything queued, as (type, path relative to the root, is_dir)."""
        found = []
        while True:
            events = self.inotify.read()
            if events is None:
                tree.drained()
                return found
            for raw in events:
                for report in tree.handle(raw):
                    found.append((report.type, os.path.relpath(report.path, self.root) if report.path else "",
                                  report.is_dir))

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def test_event_types(self) -> None:
        """create, write, chmod, rename (old name, then the new one as create) and remove."""
        tree = self.tree()
        with open(self.path("f"), "w") as f:
            f.write("x")
        os.chmod(self.path("f"), 0o600)
        os.rename(self.path("f"), self.path("g"))
        os.unlink(self.path("g"))
        os.mkdir(self.path("d"))
        os.rmdir(self.path("d"))
        self.assertEqual(self.reports(tree), [
            ("create", "f", False), ("write", "f", False), ("chmod", "f", False), ("rename", "f", False),
            ("create", "g", False), ("remove", "g", False), ("create", "d", True), ("remove", "d", True),
        ])

    def test_missing_root(self) -> None:
        """A path that does not exist is ``not_found``; one through a file ``not_a_directory``."""
        with self.assertRaises(FsError) as caught:
            self.tree(False, self.path("nope"))
        self.assertEqual(caught.exception.kind, "not_found")
        open(self.path("file"), "w").close()
        with self.assertRaises(FsError) as caught:
            self.tree(False, self.path("file", "x"))
        self.assertEqual(caught.exception.kind, "not_a_directory")

    def test_file_root(self) -> None:
        """A watched file reports under its own path; once removed, nothing is left to watch."""
        open(self.path("f"), "w").close()
        tree = self.tree(False, self.path("f"))
        with open(self.path("f"), "a") as f:
            f.write("more")
        os.unlink(self.path("f"))
        self.assertEqual(self.reports(tree), [("write", "f", False), ("chmod", "f", False), ("remove", "f", False)])
        self.assertFalse(tree.alive)

    def test_not_recursive(self) -> None:
        """Without recursion, what happens inside a subdirectory is not seen."""
        os.mkdir(self.path("sub"))
        tree = self.tree()
        open(self.path("sub", "f"), "w").close()
        self.assertEqual(self.reports(tree), [])
        self.assertEqual(tree.count, 1)

    def test_recursive_existing_and_new(self) -> None:
        """Directories present at the start and made later are watched; a new one's contents are reported once."""
        os.makedirs(self.path("a", "b"))
        tree = self.tree(True)
        self.assertEqual(tree.count, 3)
        open(self.path("a", "b", "f"), "w").close()
        os.makedirs(self.path("n", "m"))
        open(self.path("n", "m", "g"), "w").close()  # before the watch of n exists
        self.assertEqual(self.reports(tree), [
            ("create", "a/b/f", False), ("create", "n", True), ("create", "n/m", True), ("create", "n/m/g", False),
        ])
        open(self.path("n", "m", "h"), "w").close()
        self.assertEqual(self.reports(tree), [("create", "n/m/h", False)])
        self.assertEqual(tree.count, 5)

    def test_recursive_removal(self) -> None:
        """Removing a watched subtree reports each entry once and drops its watches."""
        os.makedirs(self.path("a", "b"))
        open(self.path("a", "b", "f"), "w").close()
        tree = self.tree(True)
        shutil.rmtree(self.path("a"))
        self.assertEqual(self.reports(tree), [("remove", "a/b/f", False), ("remove", "a/b", True),
                                              ("remove", "a", True)])
        self.assertEqual(tree.count, 1)
        self.assertTrue(tree.alive)

    def test_recursive_rename(self) -> None:
        """A directory moved within the tree is watched under its new name, not its old one."""
        os.makedirs(self.path("old", "in"))
        tree = self.tree(True)
        os.rename(self.path("old"), self.path("new"))
        self.assertEqual(self.reports(tree), [("rename", "old", True), ("create", "new", True)])
        open(self.path("new", "in", "f"), "w").close()
        self.assertEqual(self.reports(tree), [("create", "new/in/f", False)])
        self.assertEqual(sorted(os.path.relpath(p, self.root) for p in tree.paths()), [".", "new", "new/in"])

    def test_moved_out(self) -> None:
        """A directory moved out of the tree is reported as renamed and no longer watched."""
        os.makedirs(self.path("a"))
        outside = _temp_dir(self)
        tree = self.tree(True)
        os.rename(self.path("a"), os.path.join(outside, "a"))
        open(os.path.join(outside, "a", "f"), "w").close()
        self.assertEqual(self.reports(tree), [("rename", "a", True)])
        self.assertEqual(tree.count, 1)

    def test_root_removed_or_moved(self) -> None:
        """A watched directory that is removed or moved is reported, then nothing of it is watched."""
        first, second = self.path("first"), self.path("second")
        os.makedirs(os.path.join(first, "sub"))
        os.mkdir(second)
        tree = self.tree(True, first, second)
        os.rename(first, self.path("elsewhere"))
        self.assertEqual(self.reports(tree), [("rename", "first", True)])
        self.assertEqual(tree.paths(), [second])
        os.rmdir(second)
        self.assertEqual(self.reports(tree), [("remove", "second", True)])
        self.assertFalse(tree.alive)

    def test_root_chmod(self) -> None:
        """A change of a watched directory's own mode is reported under its path."""
        tree = self.tree()
        os.chmod(self.root, 0o700)
        self.assertEqual(self.reports(tree), [("chmod", ".", True)])

    def test_overflow(self) -> None:
        """The kernel's overflow is one ``overflow`` report with a message."""
        tree = self.tree()
        [report] = tree.handle(RawEvent(-1, IN_Q_OVERFLOW, 0, b""))
        self.assertEqual(report.type, OVERFLOW)
        self.assertIn("max_queued_events", report.message or "")


class RacingWatches:
    """
    Watches that let a test act between a new directory's watch and its scan:
    ``on_watch`` runs right after each subdirectory watch is added.
    """

    def __init__(self) -> None:
        self.next = 1
        self.on_watch: Callable[[str], None] = lambda path: None
        self.limit: int | None = None
        self.removed: list[int] = []

    def add_watch(self, path: str, mask: int) -> int:
        if self.limit is not None and self.next > self.limit:
            raise OSError(28, "No space left on device", path)
        wd, self.next = self.next, self.next + 1
        if wd > 1:
            self.on_watch(path)
        return wd

    def rm_watch(self, wd: int) -> None:
        self.removed.append(wd)


class RaceTests(SynchronousTestCase):
    """What happens between the ``mkdir`` of a new directory and the scan of it."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        self.watches = RacingWatches()
        self.tree = Tree(self.watches, True)
        self.tree.add_root(self.root)

    def test_created_between_watch_and_scan_reported_once(self) -> None:
        """A file made after the new directory's watch but before its scan is reported by the scan only."""
        os.mkdir(os.path.join(self.root, "d"))
        self.watches.on_watch = lambda path: open(os.path.join(path, "f"), "w").close()
        reports = self.tree.handle(RawEvent(1, IN_CREATE | IN_ISDIR, 0, b"d"))
        self.assertEqual([(r.type, os.path.basename(r.path)) for r in reports], [("create", "d"), ("create", "f")])
        self.assertEqual(self.tree.handle(RawEvent(2, IN_CREATE, 0, b"f")), [])
        self.tree.drained()
        self.assertEqual(len(self.tree.handle(RawEvent(2, IN_CREATE, 0, b"f"))), 1)

    def test_no_watch_left(self) -> None:
        """No watch left for a new directory is an overflow report (while setting up, an ``io_error``)."""
        os.mkdir(os.path.join(self.root, "d"))
        self.watches.limit = 1
        reports = self.tree.handle(RawEvent(1, IN_CREATE | IN_ISDIR, 0, b"d"))
        self.assertEqual([r.type for r in reports], ["create", OVERFLOW])
        self.assertIn("max_user_watches", reports[1].message or "")
        strict = RacingWatches()
        strict.limit = 1
        with self.assertRaises(FsError) as caught:
            Tree(strict, True).add_root(self.root)
        self.assertEqual(caught.exception.kind, "io_error")

    def test_stale_watch_ignored(self) -> None:
        """Events queued for a watch that was removed meanwhile, or for an unknown one, are dropped."""
        self.assertEqual(self.tree.handle(RawEvent(99, IN_CREATE, 0, b"x")), [])
        self.assertEqual(self.tree.handle(RawEvent(1, IN_IGNORED, 0, b"")), [])
        self.assertFalse(self.tree.alive)


class SetUpTests(SynchronousTestCase):
    """:func:`set_up`: a real instance watching what a spec asks for."""

    def test_set_up(self) -> None:
        """Every path is watched; a missing one fails the whole request and closes the instance."""
        root = _temp_dir(self)
        os.mkdir(os.path.join(root, "sub"))
        inotify, tree, paths = set_up(WatchSpec((root, root + "/sub/"), recursive=True))
        self.addCleanup(inotify.close)
        self.assertEqual((paths, tree.count), ([root, root + "/sub"], 2))
        opened: list[Inotify] = []
        real = watching.Inotify

        def recording() -> Inotify:
            opened.append(real())
            return opened[-1]

        self.patch(watching, "Inotify", recording)
        with self.assertRaises(FsError) as caught:
            set_up(WatchSpec((root, root + "/missing")))
        self.assertEqual(caught.exception.kind, "not_found")
        self.assertEqual(opened[0].fd, -1)
