# -*- test-case-name: tests.config.test_error -*-
"""
Tests for :class:`~vmservice.config.error.ConfigError`: one line, and its location.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.config import ConfigError


class ErrorTests(SynchronousTestCase):
    def test_oneLine(self) -> None:
        """
        A message given with line breaks is folded onto one line.
        """
        self.assertEqual(str(ConfigError("config.x", "bad\n  thing")), "config.x: bad thing")

    def test_locationUnknown(self) -> None:
        """
        Without a source and a line there is no location.
        """
        self.assertIsNone(ConfigError("config.x", "bad").location)
