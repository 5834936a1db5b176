"""
Tests for :mod:`vmservice.devcluster.__main__`: the command line's usage errors.
"""

from __future__ import annotations

import io
import sys

from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.__main__ import main


class UsageTests(SynchronousTestCase):
    def usage_error(self, argv: list[str]) -> str:
        """Run ``argv``; assert it exits with status 2; what it wrote to stderr."""
        stderr = io.StringIO()
        self.patch(sys, "stderr", stderr)
        self.patch(sys, "stdout", io.StringIO())
        error = self.assertRaises(SystemExit, main, argv)
        self.assertEqual(error.code, 2)
        return stderr.getvalue()

    def test_bad_ports(self) -> None:
        """A bad --ports is a usage error that says what is wanted, without a traceback."""
        said = self.usage_error(["start", "--dir", "/nonexistent", "--ports", "80"])
        self.assertIn("--ports takes 'auto' or a first port from 1024 to 65531, not '80'", said)
        self.assertNotIn("Traceback", said)

    def test_bad_nodes(self) -> None:
        """A bad --nodes is a usage error naming the bad name."""
        said = self.usage_error(["start", "--dir", "/nonexistent", "--nodes", "vms-a,Bad/Name"])
        self.assertIn("'Bad/Name' is no node name", said)
        self.assertNotIn("Traceback", said)

    def test_dir_required(self) -> None:
        """start, stop and status need --dir."""
        for command in ("start", "stop", "status"):
            self.assertIn("--dir", self.usage_error([command]))
