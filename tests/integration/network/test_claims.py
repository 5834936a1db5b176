# -*- test-case-name: tests.integration.network.test_claims -*-
"""
Tests for :mod:`vmservice.network.claims` that need another thread or
process: ``claim()`` waits while another daemon holds the directory lock,
and a claim held by another process refuses ours until that process is
killed.  The rest is in :mod:`tests.network.test_claims`.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from ipaddress import IPv4Network

import vmservice
from tests.network.claims_case import A, B, NET, ClaimsTestCase, claimFiles
from vmservice.network.claims import Claim, RangeTaken

#: A daemon stand-in: claims argv[2] for owner argv[3] in directory argv[1],
#: says so, then holds the claim until its stdin closes or it is killed.
_CHILD = """
import signal, sys
from ipaddress import IPv4Network
from vmservice.network.claims import RangeClaims
signal.alarm(120)
RangeClaims(sys.argv[1]).claim([IPv4Network(sys.argv[2])], sys.argv[3])
sys.stdout.write("claimed\\n")
sys.stdout.flush()
sys.stdin.read()
"""


class DirectoryLockTests(ClaimsTestCase):
    """
    The directory lock, held by another open file description while a
    thread claims.
    """

    def test_directoryLockSerializes(self) -> None:
        """
        ``claim()`` waits while another daemon holds ``.lock``.
        """
        os.makedirs(self.directory)
        fd = os.open(os.path.join(self.directory, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        self.addCleanup(os.close, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)
        claims = self.claims()
        thread = threading.Thread(target=claims.claim, args=([NET], A))
        thread.start()
        try:
            thread.join(0.3)
            self.assertTrue(thread.is_alive())
            self.assertEqual(claimFiles(self.directory), [])
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            thread.join(30)
        self.assertFalse(thread.is_alive())
        self.assertEqual(claimFiles(self.directory), ["10.77.0.0_22.claim"])


class OtherProcessTests(ClaimsTestCase):
    """
    A claim held by another process.
    """

    def spawnClaimer(self, network: str, owner: str) -> subprocess.Popen[str]:
        """
        Start a process that claims ``network`` for ``owner`` and holds it;
        return once it has claimed. It is killed at the end of the test.
        """
        root = os.path.dirname(os.path.dirname(os.path.abspath(vmservice.__file__)))
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        environ = dict(os.environ, PYTHONPATH=path)
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, self.directory, network, owner],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )

        def reap() -> None:
            if child.poll() is None:
                child.kill()
            child.communicate()

        self.addCleanup(reap)
        assert child.stdout is not None
        line = child.stdout.readline()
        if line != "claimed\n":
            child.kill()
            _, errors = child.communicate()
            self.fail(f"the claiming process failed: {errors}")
        return child

    def test_refusedWhileHeld(self) -> None:
        """
        A range overlapping one a live process claims is refused, naming that
        process; once the process is gone (killed, so it released nothing),
        its file is stale and the range can be claimed.
        """
        child = self.spawnClaimer("10.77.0.0/22", B)
        error = self.assertRaises(RangeTaken, self.claims().claim, [IPv4Network("10.77.3.0/24")], A)
        self.assertEqual(
            str(error),
            f"network range 10.77.3.0/24 overlaps 10.77.0.0/22 claimed by the vmservice daemon "
            f"of {B} (pid {child.pid})",
        )
        self.assertEqual(self.claims().held(), [Claim(NET, B, child.pid)])
        error = self.assertRaises(RangeTaken, self.claims().claim, [IPv4Network("10.78.0.0/24")], B)
        self.assertIsNone(error.range)

        child.kill()
        child.communicate()
        self.assertEqual(self.claims().held(), [])
        claims = self.claims()
        claims.claim([IPv4Network("10.77.3.0/24")], A)
        self.assertEqual(claims.held(), [Claim(IPv4Network("10.77.3.0/24"), A, os.getpid())])
        self.assertEqual(claimFiles(self.directory), ["10.77.3.0_24.claim"])
