# -*- test-case-name: tests.integration.test_private_files -*-
"""
The daemon's files kept from other users, against the real daemon and real
guests (docs/security.md, "The daemon's files"): a daemon whose directory
in the tmpfs another user made first (or a link in its place) refuses to
start with one clear line; an older state directory's loose modes are
tightened at start; and nothing the daemon or its QEMUs make while nodes
run, fork, are cloned and are suspended (by the idle timer, nobody asking,
or by a request) gives group or other users any permission: the state
directory, the disks, the records, the snapshots (guest memory, its
/run/secrets too), the templates and the memory files in the tmpfs.
"""

from __future__ import annotations

import os
import shutil
import stat
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import Daemon, TemplatesDaemonTestCase, ensure_image
from vmservice.nodes.warm.fork_memory import memory_directory
from vmservice.nodes.warm.template_files import ram_directory

#: The uid of another user of the host.
NOBODY = 65534


def exposed(top: str) -> list[str]:
    """Everything under ``top`` (``top`` too) that gives group or other users any permission; links aside."""
    found = []
    for directory, _, names in os.walk(top):
        for path in [directory, *(os.path.join(directory, name) for name in names)]:
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue  # gone meanwhile
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o077:
                found.append(f"{os.path.relpath(path, top)} {stat.S_IMODE(info.st_mode):04o}")
    return found


class StartTests(SynchronousTestCase):
    """Daemons started on what another user (or an older version) left; no guest is booted."""

    def setUp(self) -> None:
        ensure_image()
        self.daemon = Daemon()
        # Its own names in the real /dev/shm, as the default templates_tmpfs_dir gives them.
        self.tmpfs = (ram_directory(self.daemon.state_dir, "/dev/shm"),
                      memory_directory(self.daemon.state_dir, "/dev/shm"))
        for path in self.tmpfs:
            self.addCleanup(_remove, path)
        self.addCleanup(self.daemon.cleanup)  # first: the daemon stops before its directories go

    def refused(self) -> str:
        """The daemon's start fails: its one line."""
        error = self.assertRaises(RuntimeError, self.daemon.start)
        self.assertIn("daemon exited with 1", str(error))
        return str(error)

    def test_squatted_tmpfs_directory(self) -> None:
        """
        A directory of the daemon's name in /dev/shm that another user made
        first, or a link there, and it refuses to start, saying which and
        what is wrong (nothing is written there); once it is removed, it
        starts and makes it its own.
        """
        ram, memory = self.tmpfs
        os.mkdir(ram, 0o777)
        os.chown(ram, NOBODY, NOBODY)
        line = self.refused()
        self.assertIn(f"vmservice: templates_tmpfs_dir: {ram} is owned by uid {NOBODY}, not by the daemon's user", line)
        self.assertIn("another user may have made it first", line)
        self.assertEqual((os.stat(ram).st_uid, os.listdir(ram)), (NOBODY, []))
        os.rmdir(ram)
        elsewhere = os.path.join(self.daemon.root, "elsewhere")
        os.mkdir(elsewhere, 0o700)
        os.symlink(elsewhere, memory)
        self.assertIn(f"vmservice: templates_tmpfs_dir: {memory} is a symbolic link", self.refused())
        self.assertEqual(os.listdir(elsewhere), [])
        os.unlink(memory)
        self.daemon.start()
        for path in self.tmpfs:
            info = os.lstat(path)
            self.assertEqual((stat.S_ISDIR(info.st_mode), info.st_uid, stat.S_IMODE(info.st_mode)),
                             (True, os.geteuid(), 0o700))

    def test_loose_modes_tightened(self) -> None:
        """A state directory an older version left with modes others may read is the daemon's alone once it ran."""
        state = self.daemon.state_dir
        os.makedirs(os.path.join(state, "counters"))
        os.makedirs(os.path.join(state, "nodes"), 0o750)
        with open(os.path.join(state, "counters", "demo"), "w") as f:
            f.write("4\n")
        os.chmod(os.path.join(state, "counters", "demo"), 0o644)
        os.chmod(state, 0o755)
        self.assertNotEqual(exposed(state), [])
        self.daemon.start()
        self.assertEqual(exposed(state), [])


class NodeFilesTests(TemplatesDaemonTestCase):
    """One daemon with warm and file-memory nodes (its tmpfs directory the class's own)."""

    groups: list[dict[str, Any]] = [
        {"name": "f", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "fork_memory": "file",
         "idle_suspend": "3s"},
        {"name": "w", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True},
    ]

    def setUp(self) -> None:
        super().setUp()
        #: What let group or others in, by when it was seen.
        self.found: dict[str, list[str]] = {}

    def look(self, when: str) -> None:
        """Note what of the daemon's, in its state directory or its tmpfs, lets group or others in now."""
        self.found[when] = exposed(self.daemon.state_dir) + exposed(self.shm)

    def assert_private(self) -> None:
        """Nothing was ever seen letting them in."""
        self.assertEqual({when: found for when, found in self.found.items() if found}, {})

    def snapshot(self, hostname: str) -> os.stat_result:
        return os.lstat(os.path.join(self.daemon.state_dir, "nodes", hostname, "state.bin"))

    def test_idle_suspended_node(self) -> None:
        """
        A node whose memory is a file in the tmpfs: its file, disk, record,
        logs and sockets are the daemon's alone while it runs, and so is the
        snapshot the idle timer has its memory written to (nobody asking).
        """
        hostname = self.create_node("f")
        self.assertEqual(self.daemon.run(hostname, "echo secret > /dev/shm/in-memory; echo ok"), (0, "ok\n"))
        self.look("running")
        self.daemon.wait_status(hostname, "Suspended", timeout=180)  # the listing holds no node awake
        self.assertTrue(self.daemon.json("GET", f"/vm/{hostname}").get("idle_suspended"))
        self.look("idle-suspended")
        self.assertEqual(stat.S_IMODE(self.snapshot(hostname).st_mode), 0o600)
        self.assert_private()

    def test_clone_fork_and_suspend(self) -> None:
        """
        A warm group's template (frozen disk, device state, RAM file), its
        clone, a fork of the clone (frozen disk, the state saved in the
        tmpfs), and the clone suspended on request: all the daemon's alone.
        """
        hostname = self.create_node("w")
        self.look("cloned")
        [child] = self.fork_node(hostname, {"count": 1})
        self.assertEqual(self.daemon.run(child["hostname"], "echo ok"), (0, "ok\n"))
        self.look("forked")
        self.assertIn(b"suspended", self.daemon.post(f"/vm/{hostname}/suspend"))
        self.look("suspended")
        self.assertEqual(stat.S_IMODE(self.snapshot(hostname).st_mode), 0o600)
        self.assert_private()


def _remove(path: str) -> None:
    """Remove ``path`` (a directory, a link, or nothing) without following a link."""
    if os.path.islink(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
