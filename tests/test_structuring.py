# -*- test-case-name: tests.test_structuring -*-
"""Tests for :mod:`vmservice.structuring`: the one strict converter."""

from __future__ import annotations

from attrs import frozen
from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.structuring import format_path, strict_converter, structure_errors


@frozen
class _Inner:
    port: int
    ratio: float = 1.0


@frozen
class _Outer:
    name: str
    enabled: bool = False
    items: list[str] | None = None
    inner: tuple[_Inner, ...] = ()


def _problems(data: object) -> list[tuple[str, str]]:
    try:
        strict_converter().structure(data, _Outer)
    except Exception as error:
        return [(format_path(path), message) for path, message in structure_errors(error)]
    return []


class StrictConverterTests(SynchronousTestCase):
    def test_exact_types(self) -> None:
        """Values are taken only in their own type; an integer is a number."""
        outer = strict_converter().structure({"name": "a", "enabled": True, "inner": [{"port": 1, "ratio": 2}]}, _Outer)
        self.assertEqual(outer, _Outer("a", True, None, (_Inner(1, 2.0),)))

    def test_problems_name_their_path(self) -> None:
        """Each problem says where it is and what is wrong, without coercing anything."""
        problems = _problems({"name": 1, "enabled": "false", "items": "abc", "inner": [{"port": "80"}], "x": 1})
        self.assertEqual(
            sorted(problems),
            [
                ("enabled", "expected true or false, got string 'false'"),
                ("inner[0].port", "expected an integer, got string '80'"),
                ("items", "expected a list, got string 'abc'"),
                ("name", "expected a string, got integer 1"),
                ("x", "unknown key"),
            ],
        )

    def test_missing_and_not_a_mapping(self) -> None:
        """A missing required key and a record given as a scalar are named."""
        self.assertEqual(_problems({}), [("name", "required key missing")])
        self.assertEqual(_problems({"name": "a", "inner": [5]}), [("inner[0]", "expected a mapping, got integer 5")])

    @given(st.one_of(st.integers(), st.text(), st.booleans(), st.floats(allow_nan=False), st.none()))
    def test_integers_only_from_integers(self, value: object) -> None:
        """
        An integer field accepts exactly the integers, a JSON number such as 2.0 included (JSON has one
        number type), never a boolean, a string or a number with a fraction.
        """
        problems = _problems({"name": "a", "inner": [{"port": value}]})
        accepted = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
        self.assertEqual(problems == [], accepted)
