# -*- test-case-name: tests.client.test_errors -*-
"""
Tests for :mod:`vmservice.client.errors`: the daemon's error bodies read into :class:`ApiError`.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.client.errors import ApiError


class ErrorBodyTests(SynchronousTestCase):
    @given(st.integers(400, 599), st.text(max_size=40), st.one_of(st.none(), st.text(min_size=1, max_size=20)))
    def test_error_body_round_trip(self, status: int, message: str, code: str | None) -> None:
        """An ErrorResponse body gives back its message and code exactly."""
        body = json.dumps({"error": message, "code": code} if code else {"error": message}).encode()
        error = ApiError.from_body(status, body)
        self.assertEqual((error.status, error.code, error.message), (status, code, message))

    @given(st.integers(400, 599), st.binary(max_size=60))
    def test_any_error_body(self, status: int, body: bytes) -> None:
        """Any body at all gives an ApiError with a non-empty message, never an exception."""
        error = ApiError.from_body(status, body)
        self.assertEqual(error.status, status)
        self.assertTrue(error.message)

    def test_empty_error_body(self) -> None:
        """An empty error body is described by its status phrase."""
        self.assertEqual(ApiError.from_body(404, b"").message, "Not Found")
        self.assertEqual(ApiError.from_body(599, b"").message, "HTTP 599")
