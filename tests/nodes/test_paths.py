"""Tests for :mod:`vmservice.nodes.paths`: a node's files and its machine spec."""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime, timezone

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase

from vmservice.errors import Internal
from vmservice.hypervisors.base import NetSpec, RamBacking
from vmservice.nodes.model import NodeRecord
from vmservice.nodes.paths import MAX_SOCKET_PATH, NodePaths


class NodePathsTests(SynchronousTestCase):
    def test_files(self) -> None:
        """Every file of a node is in its directory, the snapshot written as .partial first."""
        paths = NodePaths.of("/var/lib/vmservice/nodes/demo-1")
        self.assertEqual(paths.disk, "/var/lib/vmservice/nodes/demo-1/disk.qcow2")
        self.assertEqual(paths.agent, "/var/lib/vmservice/nodes/demo-1/agent.sock")
        self.assertEqual(paths.partial_state, "/var/lib/vmservice/nodes/demo-1/state.bin.partial")

    def test_socket_paths_must_fit(self) -> None:
        """A state directory too long for UNIX socket addresses is a 500 naming it."""
        state_dir = "/" + "s" * (MAX_SOCKET_PATH - len("/nodes/demo-1/agent.sock"))
        NodePaths.of(state_dir[:-1] + "/nodes/demo-1")
        error = self.assertRaises(Internal, NodePaths.of, state_dir + "x/nodes/demo-1")
        self.assertEqual(error.code, "state_dir_too_long")
        self.assertIn(state_dir, str(error))

    def test_spec(self) -> None:
        """The machine spec takes the record's size and the node's files; incoming and net as given."""
        record = NodeRecord("demo-1", "demo", 256 << 20, 2, datetime(2026, 1, 1, tzinfo=timezone.utc))
        paths = NodePaths.of("/s/nodes/demo-1")
        net = NetSpec("tap0", "52:54:00:00:00:01", "10.0.0.2/30", "10.0.0.1")
        spec = paths.spec(record, "vmlinux", "initrd.img", paths.state, net)
        self.assertEqual((spec.name, spec.vcpus, spec.ram_bytes), ("demo-1", 2, 256 << 20))
        self.assertEqual((spec.disk, spec.qmp_socket, spec.console_log), (paths.disk, paths.qmp, paths.console))
        self.assertEqual((spec.incoming, spec.net), (paths.state, net))
        self.assertEqual(spec.agent_socket, "/s/nodes/demo-1/agent.sock")
        self.assertIsNone(spec.metrics_socket)  # a state saved without the metrics channel
        self.assertEqual(paths.spec(evolve(record, metrics_channel=True), "k", "i", paths.state).metrics_socket,
                         "/s/nodes/demo-1/stats.sock")
        self.assertEqual(paths.spec(record, "k", "i").metrics_socket, "/s/nodes/demo-1/stats.sock")  # a boot
        self.assertIsNone(spec.bulk_socket)  # a state saved without the bulk port
        self.assertEqual(paths.spec(evolve(record, bulk_channel=True), "k", "i", paths.state).bulk_socket,
                         "/s/nodes/demo-1/bulk.sock")
        self.assertEqual(paths.spec(record, "k", "i").bulk_socket, "/s/nodes/demo-1/bulk.sock")  # a boot
        # As many tunnel ports as the record says its VM had: none in a record from before them.
        self.assertEqual(spec.tunnel_sockets, ())
        self.assertEqual(paths.spec(evolve(record, tunnel_ports=2), "k", "i", paths.state).tunnel_sockets,
                         ("/s/nodes/demo-1/tun0.sock", "/s/nodes/demo-1/tun1.sock"))

    def test_spec_memory(self) -> None:
        """A memory file mapped shared, booted or restored; a clone's restore anonymous under the block name."""
        record = NodeRecord("demo-1", "demo", 256 << 20, 2, datetime(2026, 1, 1, tzinfo=timezone.utc))
        paths = NodePaths.of("/s/nodes/demo-1")
        self.assertIsNone(paths.spec(record, "k", "i").memory)
        self.assertEqual(paths.spec(evolve(record, clone_memory=True), "k", "i", paths.state).memory, RamBacking(None))
        filed = evolve(record, memory_file="/dev/shm/m/demo-1.ram")
        for incoming in (None, paths.state):
            self.assertEqual(paths.spec(filed, "k", "i", incoming).memory, RamBacking("/dev/shm/m/demo-1.ram", True))

    def test_spec_pci_devices(self) -> None:
        """The machine spec passes through the PCI devices of the record (none by default)."""
        from attrs import evolve

        record = NodeRecord("demo-1", "demo", 256 << 20, 2, datetime(2026, 1, 1, tzinfo=timezone.utc))
        paths = NodePaths.of("/s/nodes/demo-1")
        self.assertEqual(paths.spec(record, "vmlinux", "initrd.img").pci_devices, ())
        record = evolve(record, pci_devices=("0000:01:00.0",))
        self.assertEqual(paths.spec(record, "vmlinux", "initrd.img").pci_devices, ("0000:01:00.0",))

    def test_snapshot_files(self) -> None:
        """Discarding a snapshot removes it and any partial one; missing files are fine."""
        # Short and independent of where the checkout lives: a node directory must fit socket paths.
        directory = tempfile.mkdtemp(prefix="vms-", dir="/tmp")
        self.addCleanup(shutil.rmtree, directory, True)
        paths = NodePaths.of(directory)
        for path in (paths.state, paths.partial_state):
            with open(path, "wb") as f:
                f.write(b"x")
        self.assertTrue(paths.has_snapshot())
        paths.discard_partial_snapshot()
        self.assertEqual(os.listdir(directory), ["state.bin"])
        paths.discard_snapshot()
        paths.discard_snapshot()
        self.assertFalse(paths.has_snapshot())
