# -*- test-case-name: tests.test_tap -*-
"""
Tests for :mod:`vmservice.tap` and the ``vmservice`` twistd plugin: the
options, and ``makeService``'s exit with status 1 and one line on a bad
configuration or a failed start.  The daemon's service tree itself is built
by :func:`vmservice.service.make_service` (replaced here by a recorder), and
the global reactor ``makeService`` takes is replaced by a memory reactor, so
nothing is started.
"""

from __future__ import annotations

import io
import sys
from typing import Any

import twisted.internet
from twisted.application.service import IServiceMaker, MultiService
from twisted.internet.testing import MemoryReactorClock
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twisted.plugins import vmservice_plugin
from vmservice import tap
from vmservice.config import Config, ConfigError
from vmservice.service import StartupError


class OptionsTests(SynchronousTestCase):
    def test_default_config(self) -> None:
        """Without options the configuration is conf/vmservice.yaml."""
        options = tap.Options()
        options.parseOptions([])
        self.assertEqual(options["config"], "conf/vmservice.yaml")

    def test_config(self) -> None:
        """--config and -c name the configuration file."""
        for argv in (["--config", "/etc/vmservice.yaml"], ["-c", "/etc/vmservice.yaml"]):
            options = tap.Options()
            options.parseOptions(argv)
            self.assertEqual(options["config"], "/etc/vmservice.yaml")

    def test_unknown_option(self) -> None:
        """An unknown option is a usage error."""
        self.assertRaises(usage.UsageError, tap.Options().parseOptions, ["--port", "8080"])


class MakeServiceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.stderr = io.StringIO()
        self.patch(sys, "stderr", self.stderr)
        self.made: list[tuple[Config, Any]] = []
        # makeService takes the global reactor; it gets this one instead.
        self.reactor = MemoryReactorClock()
        self.patch(twisted.internet, "reactor", self.reactor)
        # makeService sets the process's umask: the test process's is kept.
        self.umasks: list[int] = []
        self.patch(tap.os, "umask", self.umasks.append)

    def options(self, path: str) -> tap.Options:
        """Options naming the configuration ``path``."""
        options = tap.Options()
        options.parseOptions(["--config", path])
        return options

    def test_builds_the_daemon(self) -> None:
        """The loaded configuration and the reactor go to make_service, whose service is returned."""
        config = Config(state_dir="/var/lib/vmservice")
        service = MultiService()
        loaded: list[str] = []

        def load(path: str) -> Config:
            loaded.append(path)
            return config

        def make(given: Config, reactor: Any) -> MultiService:
            self.made.append((given, reactor))
            return service

        self.patch(tap, "load_config", load)
        self.patch(tap, "make_service", make)
        self.assertIs(tap.makeService(self.options("/etc/vmservice.yaml")), service)
        self.assertEqual(loaded, ["/etc/vmservice.yaml"])
        self.assertIs(self.made[0][0], config)
        self.assertIs(self.made[0][1], self.reactor)
        self.assertEqual(self.stderr.getvalue(), "")

    def test_private_umask(self) -> None:
        """
        The daemon's umask is 077 before anything is made: what it and its
        children (QEMU, qemu-img) create without a mode of its own is theirs
        alone (``twistd -n`` keeps the shell's umask).
        """
        self.patch(tap, "load_config", lambda path: Config(state_dir="/var/lib/vmservice"))
        self.patch(tap, "make_service", lambda config, reactor: self.assertEqual(self.umasks, [0o077]) or MultiService())
        tap.makeService(self.options("/etc/vmservice.yaml"))
        self.assertEqual(self.umasks, [0o077])

    def test_bad_config_exits_1(self) -> None:
        """A configuration that cannot be read exits with status 1 and one line naming the file; nothing is built."""
        self.patch(tap, "make_service", lambda config, reactor: self.fail("make_service called"))
        path = self.mktemp()
        error = self.assertRaises(SystemExit, tap.makeService, self.options(path))
        self.assertEqual(error.code, 1)
        line = self.stderr.getvalue()
        self.assertTrue(line.startswith("vmservice: "), line)
        self.assertIn(path, line)
        self.assertEqual(line.count("\n"), 1)

    def test_bad_value_exits_1(self) -> None:
        """A configuration error names the key and what is wrong, on one line, and exits 1."""

        def load(path: str) -> Config:
            raise ConfigError("api.port", "must be an integer", source=path)

        self.patch(tap, "load_config", load)
        error = self.assertRaises(SystemExit, tap.makeService, self.options("/etc/vmservice.yaml"))
        self.assertEqual(error.code, 1)
        expected = ConfigError("api.port", "must be an integer", source="/etc/vmservice.yaml")
        self.assertEqual(self.stderr.getvalue(), f"vmservice: {expected}\n")

    def test_startup_error_exits_1(self) -> None:
        """A daemon that cannot start (an image missing, a range claimed) exits 1 with its one line."""

        def make(config: Config, reactor: Any) -> MultiService:
            raise StartupError("network ranges: network range 10.77.0.0/22 is already claimed")

        self.patch(tap, "load_config", lambda path: Config(state_dir="/var/lib/vmservice"))
        self.patch(tap, "make_service", make)
        error = self.assertRaises(SystemExit, tap.makeService, self.options("/etc/vmservice.yaml"))
        self.assertEqual(error.code, 1)
        self.assertEqual(self.stderr.getvalue(),
                         "vmservice: network ranges: network range 10.77.0.0/22 is already claimed\n")


class PluginTests(SynchronousTestCase):
    def test_service_maker(self) -> None:
        """The plugin is a lazy ServiceMaker named vmservice, whose options and makeService are vmservice.tap's."""
        maker = vmservice_plugin.vmservice
        self.assertTrue(IServiceMaker.providedBy(maker))
        self.assertEqual((maker.tapname, maker.name), ("vmservice", "vmservice"))
        self.assertIs(maker.options, tap.Options)
        self.assertIs(maker.makeService, tap.makeService)
