"""Tests for node records on disk (:mod:`vmservice.nodes.store`)."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.nodes.model import NodeRecord, Status, valid_hostname, visible
from vmservice.nodes.store import NodeStore


class StoreTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """A saved record loads back equal."""
        store = NodeStore(self.mktemp())
        record = NodeRecord("demo-1", "demo", 1 << 28, 1, datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc),
                            Status.RUNNING, tags=("a", "b"), persistent=True, pid=42)
        store.save(record)
        self.assertEqual(store.load_all(), ([record], []))

    def test_pci_devices_round_trip(self) -> None:
        """A record's PCI devices are saved and load back; a record written before them has none."""
        import json

        store = NodeStore(self.mktemp())
        record = NodeRecord("demo-1", "demo", 1 << 28, 1, datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc),
                            pci_devices=("0000:01:00.0", "0000:02:00.0"))
        store.save(record)
        self.assertEqual(store.load_all(), ([record], []))
        path = os.path.join(store.node_dir("demo-1"), "node.json")
        with open(path) as stream:
            data = json.load(stream)
        self.assertEqual(data["pci_devices"], ["0000:01:00.0", "0000:02:00.0"])
        del data["pci_devices"]
        with open(path, "w") as stream:
            json.dump(data, stream)
        [loaded], _ = store.load_all()
        self.assertEqual(loaded.pci_devices, ())

    def test_remove(self) -> None:
        """remove takes the record and the whole directory."""
        store = NodeStore(self.mktemp())
        store.save(NodeRecord("demo-1", "demo", 1, 1, datetime.now(timezone.utc)))
        open(os.path.join(store.node_dir("demo-1"), "disk.qcow2"), "w").close()
        store.remove("demo-1")
        self.assertFalse(os.path.exists(store.node_dir("demo-1")))

    def test_strays(self) -> None:
        """Directories without a record are strays; one with an unreadable record is set aside, disk and all."""
        store = NodeStore(self.mktemp())
        os.makedirs(store.node_dir("half-1"))
        os.makedirs(store.node_dir("bad-1"))
        with open(os.path.join(store.node_dir("bad-1"), "node.json"), "w") as f:
            f.write("{not json")
        with open(os.path.join(store.node_dir("bad-1"), "disk.qcow2"), "w") as f:
            f.write("data")
        self.assertEqual(store.load_all(), ([], ["half-1"]))
        (aside,) = [name for name in os.listdir(store.nodes_dir) if name.startswith(".broken-bad-1-")]
        self.assertTrue(os.path.exists(os.path.join(store.nodes_dir, aside, "disk.qcow2")))
        self.assertEqual(store.load_all(), ([], ["half-1"]))

    def test_crash_leftovers_removed(self) -> None:
        """
        The temporary file of a record's or counter's write that a crash cut
        short (never renamed into place) is removed at the next start; the
        record and the counter are the old ones, whole.
        """
        path = self.mktemp()
        store = NodeStore(path)
        record = NodeRecord("demo-1", "demo", 1 << 28, 1, datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc))
        store.save(record)
        store.next_index("demo")
        leftovers = [os.path.join(store.node_dir("demo-1"), ".node.json.0123456789abcdef.tmp"),
                     os.path.join(path, "counters", ".demo.fedcba9876543210.tmp")]
        for leftover in leftovers:
            with open(leftover, "w") as f:
                f.write('{"half')
        again = NodeStore(path)
        self.assertEqual(again.load_all(), ([record], []))
        self.assertEqual([os.path.exists(leftover) for leftover in leftovers], [False, False])
        self.assertEqual(sorted(os.listdir(store.node_dir("demo-1"))), ["node.json"])
        self.assertEqual(again.next_index("demo"), 2)

    def test_lock(self) -> None:
        """A second lock of one state directory (another daemon) fails naming the holder's pid."""
        from vmservice.nodes.store import StateDirectoryInUse

        path = self.mktemp()
        NodeStore(path).lock()
        error = self.assertRaises(StateDirectoryInUse, NodeStore(path).lock)
        self.assertIn(f"pid {os.getpid()}", str(error))

    def test_counter(self) -> None:
        """Counters start at 1, count per group, and persist."""
        path = self.mktemp()
        store = NodeStore(path)
        self.assertEqual([store.next_index("a"), store.next_index("a"), store.next_index("b")], [1, 2, 1])
        self.assertEqual(NodeStore(path).next_index("a"), 3)

    def test_visible(self) -> None:
        """Clients see an internal status as the one it comes from; the record itself keeps it."""
        record = NodeRecord("demo-1", "demo", 1, 1, datetime(2026, 1, 1, tzinfo=timezone.utc), pid=7)
        for internal, shown in ((Status.SUSPENDING, Status.RUNNING), (Status.RESTORING, Status.SUSPENDED),
                                (Status.STOPPING, Status.RUNNING), (Status.PAUSED, Status.PAUSED)):
            seen = visible(record.with_status(internal, 7))
            self.assertEqual((seen.status, seen.pid), (shown, 7))

    def test_hostname_no_trailing_newline(self) -> None:
        """A hostname with a trailing newline is not one (the whole text must be a label)."""
        self.assertFalse(valid_hostname("web\n"))

    @given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=70))
    def test_hostnames(self, name: str) -> None:
        """Valid hostnames are lowercase labels of at most 63 characters, no leading or trailing '-'."""
        expected = len(name) <= 63 and not name.startswith("-") and not name.endswith("-")
        self.assertEqual(valid_hostname(name), expected)
