"""Tests for :mod:`vmservice.api.inputs.forks`: the body of a fork request."""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.api.inputs.requests import dummy_request
from vmservice.api.inputs.forks import fork_request
from vmservice.errors import BadRequest
from vmservice.nodes.warm_port import ForkRequest
from vmservice.nodes.model import MAX_FORK_COUNT


class ForkInputTests(SynchronousTestCase):
    def test_empty(self) -> None:
        """No body, {} or nulls: one child, no tags, the parent's persistence."""
        for body in (b"", {}, {"count": None, "tags": None, "persistent": None}):
            self.assertEqual(fork_request(dummy_request(body)), ForkRequest(1, (), None))

    def test_full(self) -> None:
        self.assertEqual(fork_request(dummy_request({"count": 4, "tags": ["a", "b", "a"], "persistent": True})),
                         ForkRequest(4, ("a", "b"), True))

    @given(st.integers(min_value=1, max_value=MAX_FORK_COUNT))
    def test_counts_in_range(self, count: int) -> None:
        self.assertEqual(fork_request(dummy_request({"count": count})).count, count)

    @given(st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_FORK_COUNT + 1)))
    def test_counts_out_of_range(self, count: int) -> None:
        error = self.assertRaises(BadRequest, fork_request, dummy_request({"count": count}))
        self.assertEqual(error.code, "limit_exceeded")

    @given(st.one_of(st.text(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
    def test_bad_count_types(self, count: Any) -> None:
        """Anything but an integer (or null) as the count is 400 invalid_body."""
        if isinstance(count, float) and count.is_integer():
            count = 0.5  # 2.0 is the integer 2
        error = self.assertRaises(BadRequest, fork_request, dummy_request({"count": count}))
        self.assertEqual(error.code, "invalid_body")

    def test_bad_bodies(self) -> None:
        self.assertEqual(self.assertRaises(BadRequest, fork_request, dummy_request(b"{")).code, "invalid_json")
        for body in (b"[]", {"tags": "a"}, {"tags": [""]}, {"persistent": "yes"}, {"other": 1}):
            self.assertEqual(self.assertRaises(BadRequest, fork_request, dummy_request(body)).code, "invalid_body",
                             body)
