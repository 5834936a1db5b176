# -*- test-case-name: tests.errors.test_http -*-
"""Tests for the one mapping of errors to HTTP (:mod:`vmservice.errors.http`)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice import errors


class MappingTests(SynchronousTestCase):
    def test_unknown_exception(self) -> None:
        """Anything else is a 500 that says nothing of the internals."""
        self.assertEqual(errors.http_error(ValueError("secret detail")), (500, {"error": "internal error", "code": "internal_error"}))
