# -*- test-case-name: tests.wire.test_excludes -*-
"""
Tests for :mod:`vmservice.wire.excludes`: the segment matcher against
:mod:`fnmatch` where both speak the same language, ``**``, base names,
directories taking their contents with them, and patterns that do not parse.
"""

from __future__ import annotations

import fnmatch

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.excludes import Excludes, compile_segment, normalise

#: Segments of paths: plain names, dots, spaces, non-ASCII.
_NAME = st.text(alphabet="abc.é -_", min_size=1, max_size=5).filter(lambda s: s not in (".", "..") and s == s.strip())
_PATH = st.lists(_NAME, min_size=1, max_size=5).map("/".join)


class SegmentTests(SynchronousTestCase):
    """One segment's wildcards."""

    @settings(max_examples=400)
    @given(st.text(alphabet="ab.*?", max_size=6), st.text(alphabet="ab.", max_size=6))
    def test_agrees_with_fnmatch(self, pattern: str, name: str) -> None:
        """With ``*`` and ``?`` only, a segment matches exactly what fnmatchcase matches."""
        compiled = compile_segment(pattern)
        assert compiled is not None
        self.assertEqual(compiled.fullmatch(name) is not None, fnmatch.fnmatchcase(name, pattern), (pattern, name))

    @settings(max_examples=400)
    @given(st.lists(st.sampled_from(["a", "b", "c", "a-c", "b-b"]), min_size=1, max_size=3), st.booleans(),
           st.sampled_from(["a", "b", "c", "d", "-", "!"]))
    def test_classes_agree_with_fnmatch(self, items: list[str], negate: bool, char: str) -> None:
        """A well-formed bracket expression (sets, ranges, ``!``) matches what fnmatchcase matches."""
        pattern = "[" + ("!" if negate else "") + "".join(items) + "]"
        compiled = compile_segment(pattern)
        assert compiled is not None
        self.assertEqual(compiled.fullmatch(char) is not None, fnmatch.fnmatchcase(char, pattern), (pattern, char))

    def test_escapes_and_caret(self) -> None:
        """``\\c`` is the character itself; ``[^...]`` negates like ``[!...]``; ``]`` first is a member."""
        for pattern, name, expected in [
            ("\\*", "*", True), ("\\*", "a", False), ("a\\?", "a?", True), ("a\\?", "ab", False),
            ("[^a]", "b", True), ("[^a]", "a", False), ("[]a]", "]", True), ("[!]]", "]", False),
            ("[\\]]", "]", True), ("[a\\-c]", "-", True), ("[a\\-c]", "b", False), ("*.log", "x.log", True),
        ]:
            compiled = compile_segment(pattern)
            assert compiled is not None, pattern
            self.assertEqual(compiled.fullmatch(name) is not None, expected, (pattern, name))

    def test_malformed(self) -> None:
        """An unclosed class, a trailing backslash or a reversed range does not parse."""
        for pattern in ("[", "[ab", "a\\", "[z-a]", "[]", "[!]", "[a\\"):
            self.assertIsNone(compile_segment(pattern), pattern)


class ExcludesTests(SynchronousTestCase):
    """Whole patterns against relative paths."""

    def test_normalise(self) -> None:
        """White space, one leading ./ or /, and trailing / are dropped; empty patterns are ignored."""
        self.assertEqual([normalise(p) for p in (" a/b/ ", "./x", "/y", "z//", "", " / ", "./")],
                         ["a/b", "x", "y", "z", "", "", ""])
        self.assertFalse(Excludes(["", "  ", "/", "./"]))
        self.assertEqual(Excludes(["./a/", " b "]).patterns, ["a", "b"])

    @given(_PATH, _NAME)
    def test_literal_path_takes_its_contents(self, path: str, below: str) -> None:
        """A literal pattern leaves out that entry and everything below it, and not its parent."""
        excludes = Excludes([path])
        self.assertTrue(excludes.excludes(path))
        self.assertTrue(excludes.excludes(f"{path}/{below}"))
        if "/" in path:
            self.assertFalse(excludes.excludes(path.rpartition("/")[0]))

    @given(_PATH, _PATH)
    def test_literal_path_only_as_prefix(self, pattern: str, path: str) -> None:
        """A literal pattern with a slash leaves out exactly the paths it is a segment prefix of."""
        if "/" not in pattern:
            pattern = f"{pattern}/x"
        expected = path.split("/")[: pattern.count("/") + 1] == pattern.split("/")
        self.assertEqual(Excludes([pattern]).excludes(path), expected, (pattern, path))

    @given(_NAME, _PATH)
    def test_name_at_any_depth(self, name: str, path: str) -> None:
        """A pattern without a slash leaves out any entry whose path has a segment of that name."""
        self.assertEqual(Excludes([name]).excludes(path), name in path.split("/"), (name, path))

    @given(_PATH)
    def test_double_star(self, path: str) -> None:
        """``**`` leaves out everything; ``**/NAME`` is NAME at any depth; ``a/**`` is a and all below."""
        self.assertTrue(Excludes(["**"]).excludes(path))
        last = path.split("/")[-1]
        self.assertTrue(Excludes([f"**/{last}"]).excludes(path))
        first = path.split("/")[0]
        self.assertTrue(Excludes([f"{first}/**"]).excludes(path))
        self.assertFalse(Excludes([f"{first}x/**"]).excludes(path))

    def test_examples(self) -> None:
        """The documented examples."""
        excludes = Excludes(["*.log", "build/**", "**/cache", "src/*/tmp"])
        for path, expected in [
            ("a.log", True), ("deep/er/b.log", True), ("a.logx", False),
            ("build", True), ("build/x/y", True), ("builds", False),
            ("cache", True), ("x/y/cache/z", True), ("cachex", False),
            ("src/a/tmp", True), ("src/a/tmp/f", True), ("src/tmp", False), ("src/a/b/tmp", False),
            ("", False),
        ]:
            self.assertEqual(excludes.excludes(path), expected, path)

    def test_malformed_matches_nothing(self) -> None:
        """A pattern that does not parse leaves nothing out, and the others still apply."""
        excludes = Excludes(["[", "a/[b", "keep\\"])
        self.assertFalse(excludes)
        self.assertFalse(excludes.excludes("["))
        self.assertTrue(Excludes(["[", "x"]).excludes("x"))
