# -*- test-case-name: tests.service.test_host -*-
"""
Tests for :mod:`vmservice.service.host`: what the daemon takes of its host
at start (its image, its state directory, its secrets store, its files
kept private), through :func:`~vmservice.service.make_service` on a memory
reactor.
"""

from __future__ import annotations

import os
import stat

from attrs import evolve
from twisted.internet.testing import MemoryReactorClock

from tests.service.configured import ConfiguredCase
from vmservice.config import ApiConfig, Config
from vmservice.nodes.warm.fork_memory import memory_directory
from vmservice.nodes.warm.template_files import ram_directory
from vmservice.service import StartupError, make_service


class StartupTests(ConfiguredCase):
    """What stops the start: an image not built, a state directory in use, a secrets store not made."""

    def test_missing_image(self) -> None:
        """An image the configuration names that is not built stops the start with one line."""
        error = self.assertRaises(StartupError, make_service, self.config(image="other"), MemoryReactorClock())
        self.assertIn("other", str(error))

    def test_state_directory_in_use(self) -> None:
        """A second daemon on the same state directory refuses to start."""
        config = self.config()
        make_service(config, MemoryReactorClock())
        error = self.assertRaises(StartupError, make_service, config, MemoryReactorClock())
        self.assertIn("in use", str(error))

    def test_secrets_store(self) -> None:
        """The daemon's one secrets store is made 0700 in the state directory; one that cannot be made stops the start."""
        config = self.config()
        make_service(config, MemoryReactorClock())
        directory = os.path.join(config.state_dir, "secrets")
        self.assertEqual(os.stat(directory).st_mode & 0o777, 0o700)
        other = Config(state_dir=os.path.join(self.base, "other"), image_dir=self.image_dir,
                       api=ApiConfig(bind_address="127.0.0.1", port=18081), templates_tmpfs_dir=self.shm)
        os.makedirs(other.state_dir)
        with open(os.path.join(other.state_dir, "secrets"), "w"):
            pass
        error = self.assertRaises(StartupError, make_service, other, MemoryReactorClock())
        self.assertIn("secrets store", str(error))


class PrivateFilesTests(ConfiguredCase):
    """The daemon's files at start: its own alone (docs/security.md, "The daemon's files")."""

    def setUp(self) -> None:
        super().setUp()
        self.daemon = self.config()

    def tmpfs_directories(self, config: Config) -> list[str]:
        return [ram_directory(config.state_dir, config.templates_tmpfs_dir),
                memory_directory(config.state_dir, config.templates_tmpfs_dir)]

    def test_made_private(self) -> None:
        """The state directory and the daemon's directories in the tmpfs are made 0700, owned by the daemon."""
        make_service(self.daemon, MemoryReactorClock())
        for directory in [self.daemon.state_dir, *self.tmpfs_directories(self.daemon)]:
            info = os.lstat(directory)
            self.assertEqual((stat.S_ISDIR(info.st_mode), stat.S_IMODE(info.st_mode), info.st_uid),
                             (True, 0o700, os.geteuid()), directory)

    def test_squatted_tmpfs_directory_refuses_the_start(self) -> None:
        """
        A tmpfs directory of the daemon's name that another user made first,
        or a link in its place, stops the start with one line naming it and
        what is wrong; it is left as it was.
        """
        # A start that fails keeps its state directory locked until the process ends: each its own.
        for number, which in enumerate((0, 1, 0, 1)):
            config = evolve(self.daemon, state_dir=os.path.join(self.base, f"state{number}"))
            directory = self.tmpfs_directories(config)[which]
            if number < 2:
                os.mkdir(directory, 0o777)
                os.chown(directory, 65534, 65534)
                problem = "is owned by uid 65534"
            else:
                os.symlink(self.base, directory)
                problem = "is a symbolic link"
            error = self.assertRaises(StartupError, make_service, config, MemoryReactorClock())
            self.assertIn(f"templates_tmpfs_dir: {directory} {problem}", str(error))
            self.assertIn("another user may have made it first", str(error))
            if number < 2:
                self.assertEqual((os.stat(directory).st_uid, os.listdir(directory)), (65534, []))

    def test_state_directory_not_the_daemons(self) -> None:
        """A state directory that is a link, or another user's, stops the start."""
        os.symlink(self.base, self.daemon.state_dir)
        error = self.assertRaises(StartupError, make_service, self.daemon, MemoryReactorClock())
        self.assertEqual(str(error), f"state_dir: {self.daemon.state_dir} is a symbolic link")
        os.unlink(self.daemon.state_dir)
        os.mkdir(self.daemon.state_dir, 0o700)
        os.chown(self.daemon.state_dir, 65534, 65534)
        error = self.assertRaises(StartupError, make_service, self.daemon, MemoryReactorClock())
        self.assertIn("is owned by uid 65534", str(error))

    def test_modes_tightened_at_start(self) -> None:
        """
        What an earlier version left others may read (a state directory
        0755, nodes/ 0750, a record 0644, a read-only disk 0444) is the
        daemon's alone after the next start; links are left alone.
        """
        node = os.path.join(self.daemon.state_dir, "nodes", "demo-1")
        os.makedirs(node)
        outside = os.path.join(self.base, "outside")
        with open(outside, "wb"):
            pass
        os.chmod(outside, 0o644)
        for name, mode in (("node.json", 0o644), ("disk.qcow2", 0o444)):
            with open(os.path.join(node, name), "wb"):
                pass
            os.chmod(os.path.join(node, name), mode)
        os.symlink(outside, os.path.join(node, "link"))
        os.chmod(os.path.join(self.daemon.state_dir, "nodes"), 0o750)
        os.chmod(self.daemon.state_dir, 0o755)
        make_service(self.daemon, MemoryReactorClock())
        modes = {path: stat.S_IMODE(os.lstat(os.path.join(self.daemon.state_dir, path)).st_mode)
                 for path in ("", "nodes", "nodes/demo-1", "nodes/demo-1/node.json", "nodes/demo-1/disk.qcow2")}
        self.assertEqual(modes, {"": 0o700, "nodes": 0o700, "nodes/demo-1": 0o700, "nodes/demo-1/node.json": 0o600,
                                 "nodes/demo-1/disk.qcow2": 0o400})
        self.assertEqual(stat.S_IMODE(os.stat(outside).st_mode), 0o644)
