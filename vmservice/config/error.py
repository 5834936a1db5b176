# -*- test-case-name: tests.config.test_error -*-
"""
:class:`ConfigError`: the one error of a configuration that cannot be used,
one line naming the key and what is wrong, with the line of the file.
"""

from __future__ import annotations


class ConfigError(Exception):
    """
    The configuration cannot be used.

    One problem per error, described on one line so that the daemon can print
    ``str(error)`` and exit, and an operator sees at once which key to fix.

    :ivar path: The key path, e.g. ``config.host_groups[1].storage_size``; for
        problems with the file itself (missing, not YAML) the file name, with
        ``:<line>`` when there is one.
    :ivar message: What is wrong, e.g. ``unknown key``.
    :ivar source: The file (or ``<config>``) the text came from, if known.
    :ivar line: The 1-based line of the offending key in ``source``, if known.
    """

    def __init__(
        self,
        path: str,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
    ) -> None:
        message = " ".join(message.split())
        super().__init__(path, message)
        self.path = path
        self.message = message
        self.source = source
        self.line = line

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    @property
    def location(self) -> str | None:
        """
        ``<source>:<line>`` of the offending key, for editors and log lines;
        ``None`` when the line is unknown.
        """
        if self.source is None or self.line is None:
            return None
        return f"{self.source}:{self.line}"
