# -*- test-case-name: tests.cli.test_tagging -*-
"""
Tests for :mod:`vmservice.cli.tagging`: ``vmctl tag``'s edits, taken out of the command
line before argparse reads it, and ``vmctl describe``'s arguments beside it.
"""

from __future__ import annotations

from tests.cli.parsing import GrammarCase, parse
from vmservice.cli.tagging import TagWords, tag_words


class TagParseTests(GrammarCase):
    """``vmctl describe`` and ``vmctl tag``, whose -TAG words are not options."""

    def test_describe(self) -> None:
        """describe takes HOST and --json."""
        options = parse("describe", "demo-1", "--json")
        self.assertEqual((options.command, options.hostname, options.json), ("describe", "demo-1", True))
        self.assertUsageError("describe")

    def test_words(self) -> None:
        """+TAG adds, -TAG removes, =TAG replaces, a lone = clears; no words ask for nothing."""
        self.assertEqual(tag_words(["+a", "-b", "+c=1"]), TagWords(("a", "c=1"), ("b",)))
        self.assertEqual(tag_words(["=a", "=b"]), TagWords(replace=("a", "b")))
        self.assertEqual(tag_words(["="]), TagWords(replace=()))
        self.assertEqual(tag_words(["=", "=x"]), TagWords(replace=("x",)))
        self.assertFalse(tag_words([]).changes)
        self.assertTrue(tag_words(["="]).changes)
        for words in (["+"], ["-"], ["a"], ["=a", "+b"], ["-a", "="]):
            self.assertRaises(ValueError, tag_words, words)

    def test_minus_words_are_not_options(self) -> None:
        """-TAG words anywhere after the command are edits; the command's options still work around them."""
        options = parse("tag", "demo-1", "-b", "+a", "--json", "-c")
        self.assertEqual((options.hostname, options.edits, options.json), ("demo-1", TagWords(("a",), ("b", "c")), True))
        options = parse("--url", "http://h:1", "tag", "-x", "demo-1", "--token", "t", "--url=http://g:2")
        self.assertEqual((options.hostname, options.edits, options.token, options.url),
                         ("demo-1", TagWords(remove=("x",)), "t", "http://g:2"))
        self.assertEqual(parse("tag", "demo-1").edits, TagWords())

    def test_after_double_dash(self) -> None:
        """After --, every word is an edit: -h and --json are tags to remove there."""
        options = parse("tag", "demo-1", "+a", "--", "-h", "---json", "+--")
        self.assertEqual((options.edits, options.json), (TagWords(("a", "--"), ("h", "--json")), False))

    def test_usage_errors(self) -> None:
        """Bad words are usage errors that say how to write a tag starting with -; so is a missing HOST."""
        self.assertIn("vmctl tag HOST -- -TAG", self.assertUsageError("tag", "demo-1", "=a", "-b"))
        self.assertUsageError("tag", "demo-1", "+")
        self.assertUsageError("tag", "demo-1", "extra")
        self.assertUsageError("tag")

    def test_other_commands_keep_their_words(self) -> None:
        """Only tag reads -words as edits: elsewhere they are still options (or usage errors)."""
        self.assertEqual(parse("exec", "h", "--", "tag", "-x").words, ["tag", "-x"])
        self.assertUsageError("list", "-x")
        self.assertEqual(parse("list", "tag").group, "tag")
