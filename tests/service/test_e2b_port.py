"""Tests for :mod:`vmservice.service.e2b_port`: the E2B port wired into the daemon's service tree."""

from __future__ import annotations

import os
import stat

import attrs
from twisted.application.service import MultiService
from twisted.internet.testing import MemoryReactorClock

from tests.service.configured import ConfiguredCase
from vmservice.config import E2bConfig
from vmservice.e2b.sandboxes import Sandboxes
from vmservice.nodes.fleet import Fleet
from vmservice.service import make_service
from vmservice.service.e2b_port import RECORDS_DIR
from vmservice.service.host import StartupError


class E2bPortTests(ConfiguredCase):
    def test_absent(self) -> None:
        """Without ``e2b:`` no sandboxes, no second listener."""
        reactor = MemoryReactorClock()
        top = make_service(self.config(), reactor)
        self.assertFalse(any(isinstance(service, MultiService) and any(isinstance(s, Sandboxes) for s in service)
                             for service in top))

    def test_wired(self) -> None:
        """After the fleet (stopped before it): the sandboxes, then their listener on the section's address."""
        reactor = MemoryReactorClock()
        config = attrs.evolve(self.config(), e2b=E2bConfig(bind_address="127.0.0.1", port=49990,
                                                           templates=(("base", "demo"),)))
        services = list(make_service(config, reactor))
        port = services[-1]
        assert isinstance(port, MultiService)
        sandboxes, listener = list(port)
        self.assertIsInstance(sandboxes, Sandboxes)
        self.assertLess(next(i for i, s in enumerate(services) if any(isinstance(c, Fleet) for c in s)),
                        services.index(port))
        listener.startService()
        self.assertEqual(reactor.tcpServers[-1][0], 49990)
        self.assertEqual(reactor.tcpServers[-1][3], "127.0.0.1")
        directory = os.path.join(config.state_dir, RECORDS_DIR)
        self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700)

    def test_records_not_private(self) -> None:
        """A records directory that is a link (to a directory others share) stops the start."""
        config = attrs.evolve(self.config(), e2b=E2bConfig(templates=(("base", "demo"),)))
        os.makedirs(config.state_dir, mode=0o700)
        os.makedirs(os.path.join(self.base, "elsewhere"), mode=0o700)
        os.symlink(os.path.join(self.base, "elsewhere"), os.path.join(config.state_dir, RECORDS_DIR))
        error = self.assertRaises(StartupError, make_service, config, MemoryReactorClock())
        self.assertTrue(str(error).startswith("e2b: "), str(error))
