"""
Tests for :mod:`vmservice.wire.jsontext`: JSON through ``_json`` alone, as ``json``
reads and writes it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.wire.strategies import json_values
from vmservice.wire import jsontext

whitespace = st.text(alphabet=" \t\n\r", max_size=3)


class DumpsTests(SynchronousTestCase):
    """
    :func:`jsontext.dumps` writes what ``json.dumps`` writes with compact separators.
    """

    @given(json_values, st.booleans())
    def test_same_as_json(self, value: Any, ensure_ascii: bool) -> None:
        """
        Any JSON value is written byte for byte as ``json.dumps`` writes it.
        """
        self.assertEqual(
            jsontext.dumps(value, ensure_ascii=ensure_ascii),
            json.dumps(value, separators=(",", ":"), ensure_ascii=ensure_ascii),
        )

    def test_ascii(self) -> None:
        """
        By default text outside ASCII is escaped; with ``ensure_ascii=False`` it is kept.
        """
        self.assertEqual(jsontext.dumps({"k": "é"}), '{"k":"\\u00e9"}')
        self.assertEqual(jsontext.dumps({"k": "é"}, ensure_ascii=False), '{"k":"é"}')

    def test_not_json(self) -> None:
        """
        A value JSON cannot carry is a TypeError; NaN without ``allow_nan`` and a
        circular reference are ValueErrors.
        """
        self.assertRaises(TypeError, jsontext.dumps, {"x": object()})
        self.assertEqual(jsontext.dumps(math.nan), "NaN")
        self.assertRaises(ValueError, jsontext.dumps, [math.inf], allow_nan=False)
        loop: list[object] = []
        loop.append(loop)
        self.assertRaises(ValueError, jsontext.dumps, loop)


class LoadsTests(SynchronousTestCase):
    """
    :func:`jsontext.loads` reads what ``json.loads`` reads.
    """

    @given(json_values, whitespace, whitespace)
    def test_same_as_json(self, value: Any, before: str, after: str) -> None:
        """
        Any JSON text, with whitespace around it, reads as ``json.loads`` reads it.
        """
        text = before + json.dumps(value) + after
        self.assertEqual(jsontext.loads(text), json.loads(text))

    def test_not_one_value(self) -> None:
        """
        Empty text, text after the value, a broken value and a byte-order mark are
        ValueErrors, as they are for ``json.loads``.
        """
        for text in ["", "  ", '{"a":1} x', '{"a":1}{}', '{"a":', "[1,]", '"\x01"', "\ufeff{}", "nul"]:
            with self.subTest(text=text):
                self.assertRaises(ValueError, json.loads, text)
                self.assertRaises(ValueError, jsontext.loads, text)

    def test_constants(self) -> None:
        """
        NaN and the infinities read as ``json.loads`` reads them.
        """
        self.assertEqual(jsontext.loads("[Infinity,-Infinity]"), [math.inf, -math.inf])
        self.assertTrue(math.isnan(jsontext.loads("NaN")))

