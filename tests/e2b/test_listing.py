"""Tests for :mod:`vmservice.e2b.listing`: the listing's query and its pages (with properties)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import quote, urlencode

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.e2b.listing import MAX_LIMIT, ListQuery, list_query, next_token, page
from vmservice.e2b.sandbox import Sandbox, SandboxState, SandboxView
from vmservice.errors import BadRequest

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def view(number: int, micros: int, state: SandboxState = SandboxState.RUNNING, template: str = "base",
         metadata: tuple[tuple[str, str], ...] = ()) -> SandboxView:
    stamp = START + timedelta(microseconds=micros)
    return SandboxView(Sandbox(f"i{number:019d}", template, "g", stamp, stamp, metadata=metadata), state, 1, 256, 2048)


def args(**values: str | list[str]) -> dict[bytes, list[bytes]]:
    return {key.encode(): [v.encode() for v in ([value] if isinstance(value, str) else value)]
            for key, value in values.items()}


def sdk_metadata(pairs: dict[str, str]) -> str:
    """The ``metadata`` parameter as the Python SDK makes it (before the query's own encoding)."""
    return urlencode({quote(k): quote(v) for k, v in pairs.items()})


class QueryTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        """No parameter: every state, newest first, a full page."""
        self.assertEqual(list_query({}), ListQuery())

    def test_given(self) -> None:
        """Every parameter read; unknown ones ignored; state comma-separated or repeated."""
        query = list_query(args(metadata=sdk_metadata({"a b": "c&d=e", "k": "v"}), state="paused", template="base",
                                startedAfter="2026-01-01T00:00:00.000001+00:00", order="asc", limit="7",
                                nextToken=next_token(view(3, 9)), colour="blue"))
        self.assertEqual(query, ListQuery(
            metadata=(("a b", "c&d=e"), ("k", "v")), states=frozenset({SandboxState.PAUSED}), template="base",
            started_after=START + timedelta(microseconds=1), ascending=True, limit=7,
            after=(1767225600000009, "i0000000000000000003")))
        self.assertEqual(list_query(args(state=["running", "paused"])).states, frozenset(SandboxState))
        self.assertEqual(list_query(args(startedAfter="2026-01-01T00:00:00 00:00")).started_after, START)
        self.assertEqual(list_query(args(startedAfter="2026-01-01T00:00:00")).started_after, START)

    def test_bad(self) -> None:
        """Each bad parameter is a 400."""
        for bad in (args(state="sleeping"), args(limit="0"), args(limit=str(MAX_LIMIT + 1)), args(limit="x"),
                    args(order="up"), args(startedAfter="yesterday"), args(nextToken="bm9wZQ"),
                    args(nextToken="!!"), args(template=["a", "b"]), args(metadata="=&&"),
                    args(metadata="&".join(f"k{i}=v" for i in range(65))), {b"template": [b"\xff"]},
                    args(template="x" * 8193)):
            self.assertRaises(BadRequest, list_query, bad)

    @given(st.dictionaries(st.sampled_from([b"metadata", b"state", b"template", b"startedAfter", b"order", b"limit",
                                            b"nextToken", b"other"]),
                           st.lists(st.binary(max_size=40), min_size=1, max_size=3)))
    def test_any_query(self, given_args: dict[bytes, list[bytes]]) -> None:
        """Whatever a query holds, it is read or refused as a 400, nothing else."""
        try:
            list_query(given_args)
        except BadRequest:
            pass

    @given(st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=20), max_size=5))
    def test_metadata_round_trip(self, pairs: dict[str, str]) -> None:
        """Whatever the SDK encodes, the filter reads back."""
        encoded = sdk_metadata(pairs)
        query = list_query({b"metadata": [encoded.encode()]}) if encoded else ListQuery()
        self.assertEqual(dict(query.metadata), pairs)


class PageTests(SynchronousTestCase):
    def test_filters(self) -> None:
        """State, template, startedAfter (inclusive, to the microsecond) and every metadata pair must match."""
        views = [view(1, 0), view(2, 10, SandboxState.PAUSED), view(3, 20, template="other"),
                 view(4, 30, metadata=(("k", "v"), ("x", "y"))), view(5, 40, metadata=(("k", "w"),))]

        def ids(query: ListQuery) -> list[int]:
            return [int(v.sandbox.sandbox_id[1:]) for v in page(views, query)[0]]

        self.assertEqual(ids(ListQuery()), [5, 4, 3, 2, 1])
        self.assertEqual(ids(ListQuery(states=frozenset({SandboxState.PAUSED}))), [2])
        self.assertEqual(ids(ListQuery(template="other")), [3])
        self.assertEqual(ids(ListQuery(template="nothing")), [])
        self.assertEqual(ids(ListQuery(started_after=START + timedelta(microseconds=30))), [5, 4])
        self.assertEqual(ids(ListQuery(metadata=(("k", "v"),))), [4])
        self.assertEqual(ids(ListQuery(metadata=(("k", "v"), ("x", "z")))), [])
        self.assertEqual(ids(ListQuery(ascending=True)), [1, 2, 3, 4, 5])

    @given(st.lists(st.tuples(st.integers(0, 50), st.sampled_from(SandboxState)), max_size=30, unique_by=lambda t: t),
           st.integers(1, 7), st.booleans())
    def test_pages_cover_all(self, made: list[tuple[int, SandboxState]], limit: int, ascending: bool) -> None:
        """Following the tokens gives every matching sandbox exactly once, in order; a token only when more follow."""
        views = [view(number, micros, state) for number, (micros, state) in enumerate(made)]
        expected, _ = page(views, ListQuery(ascending=ascending, limit=MAX_LIMIT))
        seen: list[SandboxView] = []
        query = ListQuery(ascending=ascending, limit=limit)
        while True:
            shown, token = page(views, query)
            self.assertLessEqual(len(shown), limit)
            seen += shown
            if token is None:
                break
            self.assertEqual(len(shown), limit)
            query = list_query({b"nextToken": [token.encode()], b"limit": [str(limit).encode()],
                                b"order": [b"asc" if ascending else b"desc"]})
        self.assertEqual(seen, expected)
        keys = [(v.sandbox.started_at, v.sandbox.sandbox_id) for v in seen]
        self.assertEqual(keys, sorted(keys, reverse=not ascending))
