# -*- test-case-name: tests.cli.test_secrets -*-
"""
Tests for :mod:`vmservice.cli.secrets`: ``vmctl secret``'s grammar.
"""

from __future__ import annotations

from tests.cli.parsing import GrammarCase, parse


class SecretParseTests(GrammarCase):
    def test_secret_commands(self) -> None:
        """secret create/update take NAME, --file, --mode (sent as four octal digits), --uid, --gid; list and rm."""
        options = parse("secret", "create", "db", "--file", "pw.txt", "--mode", "440", "--uid", "1000", "--gid", "7")
        self.assertEqual((options.secret_command, options.name, options.file, options.mode, options.uid, options.gid),
                         ("create", "db", "pw.txt", "0440", 1000, 7))
        options = parse("secret", "update", "db", "--mode", "0400")
        self.assertEqual((options.secret_command, options.file, options.mode, options.uid), ("update", None, "0400", None))
        self.assertEqual(parse("secret", "list", "--json").json, True)
        self.assertEqual(parse("secret", "rm", "db").name, "db")
        self.assertEqual(parse("--url", "http://h:1", "secret", "list").url, "http://h:1")

    def test_no_content_on_the_command_line(self) -> None:
        """There is no option that takes the content itself; NAME is required; a second word is refused."""
        self.assertUsageError("secret", "create")
        self.assertUsageError("secret", "create", "db", "the-content")
        self.assertUsageError("secret", "create", "db", "--data", "x")
        self.assertUsageError("secret", "update", "db", "--uid", "-1")
        self.assertUsageError("secret")
