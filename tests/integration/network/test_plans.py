# -*- test-case-name: tests.integration.network.test_plans -*-
"""
Tests for :mod:`vmservice.network.plans` with the real ``nft``: it parses
every variant of the ruleset.  The plans as text are tested in
:mod:`tests.network.test_plans`.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from twisted.trial.unittest import SynchronousTestCase

from tests.network.plan_ranges import ALLOW, DROP, PROTECTED
from vmservice.network.plans import ruleset


class RulesetTests(SynchronousTestCase):
    def test_nft_accepts(self) -> None:
        """nft itself parses each variant of the ruleset (nft --check, nothing applied); needs root and nft."""
        nft = shutil.which("nft") or (os.path.exists("/usr/sbin/nft") and "/usr/sbin/nft")
        self.assertTrue(nft, "nft is missing: `make apt` installs nftables")
        self.assertEqual(os.geteuid(), 0, "nft --check needs root (the integration tests run as root)")
        for allow, drop in (([], DROP), (ALLOW, []), (ALLOW, DROP), ([], [])):
            done = subprocess.run([nft, "--check", "-f", "-"], input=ruleset(allow, drop, PROTECTED).encode(),
                                  capture_output=True, timeout=30)
            self.assertEqual(done.returncode, 0, done.stderr.decode())
