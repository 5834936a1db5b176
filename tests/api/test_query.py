"""
Tests for :mod:`vmservice.api.query`: parameter kinds, parsing a route's
query class, and the schema each kind gives the OpenAPI document.  (Every
route against generated input: ``tests/api/test_fuzzing.py``.)
"""

from __future__ import annotations

import re

from attrs import frozen
from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.api.query import (
    CP_MODE,
    FILE_MODE,
    GUEST_PATH,
    UMASK,
    Boolean,
    Choice,
    Duration,
    Integer,
    Text,
    UserId,
    param,
    parameters,
    parse_query,
)
from vmservice.errors import BadRequest


@frozen
class _Query:
    name: str = param(Text(1), "a name", required=True)
    count: int = param(Integer(0, 10), "a count", default=3)
    flag: bool = param(Boolean(), "a flag", default=False)
    words: tuple[str, ...] = param(Text(), "words", repeated=True)
    wait: float = param(Duration(), "a wait", default=300.0)


def _parse(**values: list[bytes]) -> _Query:
    return parse_query({name.encode(): value for name, value in values.items()}, _Query)


class ParseTests(SynchronousTestCase):
    def test_values_and_defaults(self) -> None:
        """Given values are parsed by kind; absent ones take their defaults; the last value wins."""
        query = _parse(name=[b"x", b"y"], count=[b"7"], words=[b"a", b"b c"], wait=[b"1m30s"])
        self.assertEqual(query, _Query("y", 7, False, ("a", "b c"), 90.0))
        self.assertEqual(_parse(name=[b"x"]), _Query("x", 3, False, (), 300.0))

    def test_empty_is_absent_for_values_with_a_form(self) -> None:
        """An empty integer or duration is its default; an empty boolean is false; empty text is text."""
        self.assertEqual(_parse(name=[b"x"], count=[b""], wait=[b""], flag=[b""]), _Query("x", 3, False, (), 300.0))

    def test_refusals(self) -> None:
        """Missing, out of range, not a boolean, not UTF-8, NUL: each a 400 naming the parameter."""
        cases = [
            ({}, "'name' is required"),
            ({"name": [b""]}, "'name' must not be empty"),
            ({"name": [b"x"], "count": [b"11"]}, "at most 10"),
            ({"name": [b"x"], "count": [b"1.5"]}, "'count' must be an integer"),
            ({"name": [b"x"], "flag": [b"maybe"]}, "'flag' must be true or false"),
            ({"name": [b"\xff"]}, "'name' is not valid UTF-8"),
            ({"name": [b"a\x00b"]}, "'name' must not contain NUL"),
            ({"name": [b"x"], "wait": [b"0s"]}, "'wait' must be positive"),
            ({"name": [b"x"], "wait": [b"5 parsecs"]}, "'wait'"),
        ]
        for values, words in cases:
            error = self.assertRaises(BadRequest, _parse, **values)
            self.assertIn(words, error.message, values)
            self.assertEqual(error.code, "invalid_query")

    def test_declared_once(self) -> None:
        """The parameters the document shows are the query class's fields, with their kinds."""
        self.assertEqual([(name, required, repeated) for name, _, _, required, repeated in parameters(_Query)],
                         [("name", True, False), ("count", False, False), ("flag", False, False),
                          ("words", False, True), ("wait", False, False)])


class KindTests(SynchronousTestCase):
    def test_own_words_and_codes(self) -> None:
        """Kinds that clients match on refuse in their own words: cp's 'invalid mode: <m>'; cp-v1 modes are modes."""
        error = self.assertRaises(BadRequest, CP_MODE.parse, "mode", "cp-v2-binary")
        self.assertEqual((error.code, error.message), ("invalid_mode", "invalid mode: cp-v2-binary (supported: binary, "
                                                                       "tar, cp-v1-binary, cp-v1-tar, cp-v1-recursive)"))
        for mode in ("binary", "tar", "cp-v1-binary", "cp-v1-tar", "cp-v1-recursive"):
            self.assertEqual(CP_MODE.parse("mode", mode), mode)
        self.assertEqual(self.assertRaises(BadRequest, GUEST_PATH.parse, "path", "etc").code, "invalid_path")
        self.assertIn("invalid mode", self.assertRaises(BadRequest, FILE_MODE.parse, "permissions", "999").message)

    def test_user_ids(self) -> None:
        """4294967295 is "not set"; above it is refused."""
        self.assertEqual((UserId().parse("uid", "0"), UserId().parse("uid", "4294967295")), (0, None))
        self.assertRaises(BadRequest, UserId().parse, "uid", "4294967296")

    @given(st.integers(0, 0o777), st.sampled_from(["", "0", "0o", "00"]))
    def test_umask(self, bits: int, prefix: str) -> None:
        """A umask is octal up to 0777, with or without a leading 0 or 0o."""
        self.assertEqual(UMASK.parse("permissions", prefix + f"{bits:o}"), bits)

    @given(st.text(max_size=12))
    def test_schema_and_parser_agree(self, text: str) -> None:
        """For text, octal, choice and duration kinds, what the schema accepts the parser accepts."""
        for kind in (GUEST_PATH, FILE_MODE, UMASK, Text(2, r"[^=]+=[\s\S]*"), Choice(("a", "b")), Duration()):
            schema = kind.schema()
            documented = (
                text in schema["enum"] if "enum" in schema
                else re.fullmatch(schema["pattern"][1:-1], text) is not None and len(text) >= schema.get("minLength", 0)
            )
            try:
                kind.parse("p", text)
                parsed = True
            except BadRequest:
                parsed = False
            if documented:
                self.assertTrue(parsed, (kind, text))
