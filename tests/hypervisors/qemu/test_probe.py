# -*- test-case-name: tests.hypervisors.qemu.test_probe -*-
"""
Tests for the KVM probe (:mod:`vmservice.hypervisors.qemu.probe`) on a fake process reactor (no
process is started).
"""

from __future__ import annotations

import os
import stat
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.processes import ProcessReactor
from vmservice.hypervisors.qemu import probe_accel


class ProbeTests(SynchronousTestCase):
    def run_probe(self, reactor: Any, **kw: Any) -> Deferred:
        kw.setdefault("directory", self.mktemp())
        return Deferred.fromCoroutine(probe_accel(reactor, "qemu", "/k", "/i", kw.pop("requested", "auto"), None, **kw))

    def kvm(self) -> str:
        """A file standing in for a usable /dev/kvm."""
        kvm = self.mktemp()
        open(kvm, "w").close()
        return kvm

    def test_configured(self) -> None:
        """A configured accelerator is used without a probe."""
        reactor = ProcessReactor()
        self.assertEqual(self.successResultOf(self.run_probe(reactor, requested="tcg")).accel, "tcg")
        self.assertEqual(reactor.spawned, [])

    def test_no_device(self) -> None:
        """Without a usable /dev/kvm, TCG is chosen and the reason names the device."""
        choice = self.successResultOf(self.run_probe(ProcessReactor(), kvm_path="/nonexistent/kvm"))
        self.assertEqual(choice.accel, "tcg")
        self.assertIn("/nonexistent/kvm", choice.reason)

    def test_probe_crashes(self) -> None:
        """A probe QEMU that aborts (as nested KVM does here) means TCG, with QEMU's error."""
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()
        d = self.run_probe(reactor, kvm_path=kvm)
        protocol = reactor.spawned[0][0]
        protocol.errReceived(b"error: failed to set MSR 0x10a to 0x0\n")
        protocol.processEnded(Failure(ProcessTerminated(134, None, None)))
        choice = self.successResultOf(d)
        self.assertEqual(choice.accel, "tcg")
        self.assertIn("failed to set MSR", choice.reason)

    def test_probe_boots(self) -> None:
        """A probe guest that prints the marker means KVM; the probe QEMU is then reaped."""
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()
        d = self.run_probe(reactor, kvm_path=kvm)
        protocol = reactor.spawned[0][0]
        protocol.outReceived(b"booting...\nVMSERVICE_PRO")
        protocol.outReceived(b"BE_OK\n")
        self.assertNoResult(d)
        self.assertEqual(reactor.transports[0].signals, ["KILL"])
        protocol.processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d).accel, "kvm")

    def test_probe_leaves_no_timer(self) -> None:
        """Once the probe is decided (here by the marker), its timeout is cancelled."""
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()
        d = self.run_probe(reactor, kvm_path=kvm, timeout=10)
        self.assertEqual(len(reactor.getDelayedCalls()), 1)
        reactor.spawned[0][0].outReceived(b"VMSERVICE_PROBE_OK\n")
        self.assertEqual(reactor.getDelayedCalls(), [])
        reactor.spawned[0][0].processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d).accel, "kvm")

    def test_probe_hangs(self) -> None:
        """A probe guest that shows no sign of life in time means TCG."""
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()
        d = self.run_probe(reactor, kvm_path=kvm, timeout=10)
        reactor.advance(10)
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        choice = self.successResultOf(d)
        self.assertEqual(choice.accel, "tcg")
        self.assertIn("no sign of life", choice.reason)

    def test_probe_cancelled(self) -> None:
        """
        A probe cancelled while its guest runs (the daemon stops) kills its QEMU and ends only once the
        QEMU is gone, with CancelledError; its timeout is cancelled.
        """
        reactor = ProcessReactor()
        d = self.run_probe(reactor, kvm_path=self.kvm(), timeout=10)
        d.cancel()
        self.assertEqual(reactor.transports[0].signals, ["KILL"])
        self.assertNoResult(d)
        self.assertEqual(reactor.getDelayedCalls(), [])
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.failureResultOf(d, CancelledError)

    def test_probe_dies_with_its_parent(self) -> None:
        """
        The probe QEMU is started through setpriv with a parent-death signal, SIGKILL, which setpriv
        sets before it execs QEMU in place: a daemon killed by kill -9 takes its probe with it.
        """
        import shutil

        setpriv = shutil.which("setpriv")
        self.assertIsNotNone(setpriv, "setpriv (util-linux) is not on PATH, where the daemon needs it for its probe"
                                      " QEMU to die with it (docs/security.md): install util-linux")
        reactor = ProcessReactor()
        self.run_probe(reactor, kvm_path=self.kvm())
        _, argv, _ = reactor.spawned[0]
        self.assertEqual(argv[:4], [setpriv, "--pdeathsig", "KILL", "qemu"])
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(1, None, None)))

    def test_probe_directory(self) -> None:
        """
        The probe's directory is made 0700 and holds its monitor socket; a link in its place is not
        followed: no probe, TCG, and the reason says why.
        """
        reactor = ProcessReactor()
        directory = self.mktemp()
        self.run_probe(reactor, kvm_path=self.kvm(), directory=directory)
        self.assertEqual(os.stat(directory).st_mode & 0o777, 0o700)
        self.assertIn(f"unix:{directory}/qmp.sock,server=on,wait=off", reactor.spawned[0][1])
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(1, None, None)))
        elsewhere = self.mktemp()
        os.makedirs(elsewhere)
        linked = self.mktemp()
        os.symlink(elsewhere, linked)
        choice = self.successResultOf(self.run_probe(reactor, kvm_path=self.kvm(), directory=linked))
        self.assertEqual(choice.accel, "tcg")
        self.assertIn("not a directory", choice.reason)
        self.assertEqual(len(reactor.spawned), 1)
