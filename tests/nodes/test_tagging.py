"""
Tests for :mod:`vmservice.nodes.tagging`: what an edit makes of a node's tags
(pure, with hypothesis), and changes on a fleet of fakes: written before they
are taken, seen by the listings at once, kept across a crash, taken while an
operation runs, refused while the node is being removed.
"""

from __future__ import annotations

import os

from hypothesis import given, strategies as st
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.nodes.fleet_case import LifecycleTestCase
from vmservice.errors import BadRequest, Conflict, Internal, NotFound
from vmservice.nodes.model import MAX_TAGS, Status
from vmservice.nodes.tagging import TagEdit, edited

_TAGS = st.lists(st.sampled_from("abcdefgh"), max_size=10).map(tuple)


class EditedTests(SynchronousTestCase):
    """What an edit makes of a node's tags."""

    @given(_TAGS, _TAGS)
    def test_replace(self, tags: tuple[str, ...], replace: tuple[str, ...]) -> None:
        """replace sets the tags, in its order, each once."""
        self.assertEqual(edited(tags, TagEdit(replace=replace)), tuple(dict.fromkeys(replace)))

    @given(_TAGS, _TAGS, _TAGS)
    def test_add_and_remove(self, tags: tuple[str, ...], add: tuple[str, ...], remove: tuple[str, ...]) -> None:
        """
        remove drops what it names, add appends what is not there yet (in its
        order); the kept tags keep their order; no tag appears twice.
        """
        add = tuple(tag for tag in add if tag not in remove)  # the API refuses a tag in both
        result = edited(tags, TagEdit(add=add, remove=remove))
        self.assertEqual(len(result), len(set(result)))
        kept = tuple(dict.fromkeys(tag for tag in tags if tag not in remove))
        self.assertEqual(result[: len(kept)], kept)
        self.assertEqual(result[len(kept):], tuple(dict.fromkeys(tag for tag in add if tag not in kept)))
        self.assertFalse(set(remove) & set(result))

    def test_examples(self) -> None:
        """The documented examples."""
        self.assertEqual(edited(("a", "b"), TagEdit(add=("c", "a", "c"))), ("a", "b", "c"))
        self.assertEqual(edited(("a", "b", "c"), TagEdit(remove=("b", "x"))), ("a", "c"))
        self.assertEqual(edited(("a", "b"), TagEdit(add=("c",), remove=("a",))), ("b", "c"))
        self.assertEqual(edited(("a", "b"), TagEdit(replace=())), ())
        self.assertEqual(edited(("a", "a"), TagEdit()), ("a",))

    def test_too_many(self) -> None:
        """More than MAX_TAGS tags after the edit is 400 too_many_tags; exactly MAX_TAGS is fine."""
        full = tuple(f"t{i}" for i in range(MAX_TAGS))
        self.assertEqual(edited(full[:-1], TagEdit(add=full[-1:])), full)
        error = self.assertRaises(BadRequest, edited, full, TagEdit(add=("one-more",)))
        self.assertEqual(error.code, "too_many_tags")
        self.assertRaises(BadRequest, edited, (), TagEdit(replace=(*full, "one-more")))
        self.assertEqual(edited(full, TagEdit(add=("one-more",), remove=("t0",)))[-1], "one-more")


class TaggingTests(LifecycleTestCase):
    """Tag changes on a fleet."""

    def edit(self, hostname: str = "demo-1", **edit: tuple[str, ...]) -> tuple[str, ...]:
        result: tuple[str, ...] = self.fleet.tagging.edit(hostname, TagEdit(**edit))
        return result

    def test_read_and_change(self) -> None:
        """The created tags are read back; a change is in memory and in the record on disk."""
        self.create(tags=("a", "b"))
        self.assertEqual(self.fleet.tagging.tags("demo-1"), ("a", "b"))
        self.assertEqual(self.edit(add=("c",), remove=("a",)), ("b", "c"))
        self.assertEqual(self.fleet.tagging.tags("demo-1"), ("b", "c"))
        self.assertEqual(self.fleet.node("demo-1").tags, ("b", "c"))
        self.assertEqual(self.stored().tags, ("b", "c"))
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_create_collapses_duplicates(self) -> None:
        """A create's tags are kept in order, each once."""
        self.create(tags=("a", "b", "a"))
        self.assertEqual(self.stored().tags, ("a", "b"))

    def test_listings_see_it_at_once(self) -> None:
        """The tag filters of both listings see a change as soon as it is answered."""
        self.create(tags=("env=dev",))
        self.create("other")
        self.edit(replace=("env=prod", "team=a"))
        self.edit("other-1", add=("env=dev",))
        names = lambda **kw: [r.hostname for r in self.fleet.list(**kw)]
        self.assertEqual(names(tag="env=prod"), ["demo-1"])
        self.assertEqual(names(tag="env=dev"), ["other-1"])
        self.assertEqual(names(tag_prefix="team="), ["demo-1"])
        self.assertEqual(names(group="demo", tag="env=dev"), [])
        self.assertEqual(names(group="other", tag_prefix="env="), ["other-1"])

    def test_kept_across_a_crash(self) -> None:
        """After a kill -9 of the daemon, the next one has the changed tags (adopted VM, same record)."""
        self.create(tags=("a",))
        self.edit(add=("b",))
        self.restart()
        self.assertEqual(self.fleet.node("demo-1").tags, ("a", "b"))
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)
        self.assertEqual([r.hostname for r in self.fleet.list(tag="b")], ["demo-1"])

    def test_kept_across_a_stop(self) -> None:
        """A persistent node stopped with the daemon keeps its changed tags."""
        self.create(persistent=True, tags=("a",))
        self.edit(replace=("z",))
        self.successResultOf(self.h.fleet.stopService())
        self.h = self.harness(self.h.driver)
        self.assertEqual(self.fleet.node("demo-1").tags, ("z",))
        self.assertEqual(self.fleet.node("demo-1").status, Status.STOPPED)

    def test_no_change_writes_nothing(self) -> None:
        """An edit that changes nothing answers the tags and leaves the record file alone."""
        self.create(tags=("a",))
        record = os.path.join(self.h.store.node_dir("demo-1"), "node.json")
        before = os.stat(record).st_ino
        self.assertEqual(self.edit(add=("a",), remove=("x",)), ("a",))
        self.assertEqual(os.stat(record).st_ino, before)
        self.edit(add=("b",))
        self.assertNotEqual(os.stat(record).st_ino, before)

    def test_unknown_node(self) -> None:
        """An unknown node is NotFound, for reading and for changing."""
        self.assertRaises(NotFound, self.fleet.tagging.tags, "demo-9")
        self.assertRaises(NotFound, self.edit, "demo-9", add=("a",))

    def test_taken_while_an_operation_runs(self) -> None:
        """
        A change during a suspend is taken at once; the record says Suspending
        with the new tags, and Suspended with them once the suspend is done.
        """
        self.create(tags=("a",))
        machine = self.h.driver.machines[0]
        machine.hold_save = Deferred()
        suspending = self.do(self.fleet.snapshots.suspend("demo-1"))
        self.assertNoResult(suspending)
        self.assertEqual(self.edit(add=("b",)), ("a", "b"))
        self.assertEqual((self.stored().status, self.stored().tags), (Status.SUSPENDING, ("a", "b")))
        machine.hold_save.callback(None)
        self.successResultOf(suspending)
        self.assertEqual((self.stored().status, self.stored().tags), (Status.SUSPENDED, ("a", "b")))

    def test_refused_while_removed(self) -> None:
        """A node being removed (its record no longer written) refuses a change with 409 busy."""
        self.create(tags=("a",))
        self.h.node("demo-1").phase.abandon()
        error = self.assertRaises(Conflict, self.edit, add=("b",))
        self.assertEqual(error.code, "busy")
        self.assertEqual(self.h.node("demo-1").record.tags, ("a",))

    def test_failed_write_changes_nothing(self) -> None:
        """A record that cannot be written is a 500 record_write_failed, and the tags stay as they were."""
        self.create(tags=("a",))
        directory = self.h.store.node_dir("demo-1")
        aside = directory + ".aside"
        os.rename(directory, aside)
        self.addCleanup(lambda: os.path.exists(aside) and (os.remove(directory), os.rename(aside, directory)))
        with open(directory, "w"):
            pass  # a file where the directory was: the record cannot be written
        error = self.assertRaises(Internal, self.edit, add=("b",))
        self.assertEqual(error.code, "record_write_failed")
        self.assertEqual(self.fleet.tagging.tags("demo-1"), ("a",))
