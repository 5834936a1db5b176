# -*- test-case-name: tests.config.test_yaml_source -*-
"""
Tests for :mod:`vmservice.config.yaml_source`: YAML syntax, documents and keys given twice, at their line.
"""

from __future__ import annotations

from tests.config.parsing import ConfigErrorCase


class ErrorTests(ConfigErrorCase):
    """Every kind of mistake gives one ``ConfigError`` with the key path, a message and the line of the key."""

    def test_duplicateKey(self) -> None:
        """
        A key given twice in one mapping is refused rather than silently
        keeping the last value.
        """
        self.assertConfigError(
            "config:\n  api:\n    port: 1\n    port: 2\n", "config.api.port: duplicate key", 4
        )

    def test_yamlSyntax(self) -> None:
        """
        A YAML syntax error names the file and line.
        """
        self.assertConfigError(
            "config:\n  api:\n    port: 80\n   bad: [\n",
            "test.yaml:4: YAML syntax error: expected <block end>, but found "
            "'<block mapping start>' (while parsing a block mapping)",
            4,
        )
        self.assertConfigError(
            "config:\n  image: a: b\n",
            "test.yaml:2: YAML syntax error: mapping values are not allowed here",
            2,
        )

    def test_yamlTwoDocuments(self) -> None:
        """
        More than one YAML document in the file is an error.
        """
        self.assertConfigError(
            "config: {}\n---\nconfig: {}\n",
            "test.yaml:2: YAML syntax error: but found another document "
            "(expected a single document in the stream)",
            2,
        )
