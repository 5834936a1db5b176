# -*- test-case-name: tests.client.test_facade -*-
"""
Tests for :mod:`vmservice.client.facade` and the package's exports: the
:class:`Client` puts every family of calls together, and
``vmservice.client`` offers what it says it offers.
"""

from __future__ import annotations

import inspect

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

import vmservice.client
from vmservice.client import Client
from vmservice.client.background import BackgroundCalls
from vmservice.client.copies import CopyCalls
from vmservice.client.execs import ExecCalls
from vmservice.client.filesystem import FilesystemCalls
from vmservice.client.lifecycle import LifecycleCalls
from vmservice.client.meta import MetaCalls
from vmservice.client.nodes import NodeCalls
from vmservice.client.requests import Requests
from vmservice.client.secrets import SecretCalls
from vmservice.client.watching import WatchCalls

FAMILIES = (MetaCalls, NodeCalls, LifecycleCalls, ExecCalls, BackgroundCalls, CopyCalls, FilesystemCalls, WatchCalls,
            SecretCalls)


def _public(cls: type) -> set[str]:
    """The public methods ``cls`` defines itself."""
    return {name for name, value in vars(cls).items() if not name.startswith("_") and inspect.isfunction(value)}


class FacadeTests(SynchronousTestCase):
    def test_every_family(self) -> None:
        """The client offers each family's calls; no two families define the same one."""
        names = [name for family in FAMILIES for name in _public(family)]
        self.assertEqual(len(names), len(set(names)))
        for family in FAMILIES:
            self.assertTrue(issubclass(Client, family), family)
            self.assertTrue(issubclass(family, Requests), family)
        self.assertLessEqual(set(names), {name for name in dir(Client) if not name.startswith("_")})

    def test_calls_of_the_cli(self) -> None:
        """The calls vmctl and the documentation make are all there."""
        for name in ("info", "images", "hostgroups", "nodes", "stats", "node_stats", "create_node", "delete_node",
                     "describe", "tags", "set_tags", "logs", "health", "healthy", "pause", "resume", "suspend",
                     "restore", "relaunch", "fork", "shutdown", "exec", "exec_buffered", "exec_background",
                     "background_execs", "background_exec", "exec_logs", "kill_exec", "wait_exec", "delete_exec",
                     "upload", "download", "readdir", "stat", "mkdir", "remove", "secrets", "create_secret",
                     "update_secret", "delete_secret", "shell", "watch", "events", "tunnel_endpoint", "close"):
            self.assertTrue(callable(getattr(Client, name, None)), name)

    def test_one_pool(self) -> None:
        """A client made over TCP or a UNIX socket keeps the address it was given."""
        reactor = MemoryReactorClock()
        self.assertEqual(Client(reactor, "/run/v.sock").url, "/run/v.sock")  # type: ignore[arg-type]
        self.assertEqual(Client(reactor, "http://h:1", token="t").url, "http://h:1")  # type: ignore[arg-type]

    def test_exports(self) -> None:
        """Every name of ``vmservice.client.__all__`` is there."""
        for name in vmservice.client.__all__:
            self.assertTrue(hasattr(vmservice.client, name), name)
