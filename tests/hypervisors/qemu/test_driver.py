# -*- test-case-name: tests.hypervisors.qemu.test_driver -*-
"""
Tests for the QEMU driver (:mod:`vmservice.hypervisors.qemu.driver`) and its child process, on a
fake process reactor.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet.error import ProcessTerminated
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.qemu_argv import SPEC
from vmservice.hypervisors.base import HypervisorError
from tests.processes import ProcessReactor
from vmservice.hypervisors.qemu import QemuDriver, QemuSettings, qemu_command


class DriverTests(SynchronousTestCase):
    def test_start_and_kill(self) -> None:
        """start spawns QEMU with the built argv; kill sends SIGKILL and fires once reaped."""
        reactor = ProcessReactor()
        driver = QemuDriver(reactor, QemuSettings())
        machine = self.successResultOf(driver.start(SPEC, self.mktemp()))
        protocol, argv, fds = reactor.spawned[0]
        self.assertEqual(argv[-len(qemu_command(SPEC, QemuSettings())):], qemu_command(SPEC, QemuSettings()))
        self.assertEqual(os.path.basename(argv[0]), "setsid")
        self.assertIsInstance(fds[1], int)
        self.assertEqual(machine.pid, 4242)
        d = machine.kill()
        self.assertNoResult(d)
        self.assertEqual(reactor.transports[0].signals, ["KILL"])
        protocol.processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.assertEqual(self.successResultOf(d).signal, 9)
        self.assertEqual(self.successResultOf(machine.ended).signal, 9)


    def test_ended_within_the_spawn(self) -> None:
        """
        A QEMU that ends as it starts (killed at once), reaped within
        spawnProcess so that its transport no longer has a pid: still a
        machine with its pid, that has ended (a HypervisorError for whoever
        drives it, never a TypeError).
        """

        class EndingAtOnce(ProcessReactor):
            def spawnProcess(self, protocol: Any, *args: Any, **kwargs: Any) -> Any:
                transport = super().spawnProcess(protocol, *args, **kwargs)
                transport.pid = None  # reaped: Twisted's process forgets its pid
                protocol.processEnded(Failure(ProcessTerminated(None, 9, None)))
                return transport

        machine = self.successResultOf(QemuDriver(EndingAtOnce(), QemuSettings()).start(SPEC, self.mktemp()))
        self.assertEqual(machine.pid, 4242)
        self.assertEqual(self.successResultOf(machine.ended).signal, 9)
        self.failureResultOf(machine.run_state(), HypervisorError)
