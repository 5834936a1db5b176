# -*- test-case-name: tests.client.test_requests -*-
"""
Tests for :mod:`vmservice.client.requests` without a server: request paths and query
parameters.  The requests against the API app served on loopback are tested in
:mod:`tests.integration.test_client`.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.client.requests import _params, _path


class QueryTests(SynchronousTestCase):
    @given(st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4))
    def test_path_segments_quoted(self, segments: list[str]) -> None:
        """Each segment becomes exactly one path segment, whatever characters it holds."""
        from urllib.parse import unquote

        path = _path(*segments)
        self.assertEqual([unquote(part) for part in path.split("/")[1:]], segments)

    def test_params(self) -> None:
        """None values are left out, lists repeat their key and numbers become text."""
        self.assertEqual(
            _params({"a": None, "b": "x", "c": ["1", "2"], "lines": 0}),
            [("b", "x"), ("c", "1"), ("c", "2"), ("lines", "0")],
        )
        self.assertEqual(_params(None), [])
