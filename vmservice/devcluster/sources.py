# -*- test-case-name: tests.devcluster.test_sources -*-
"""
Source package lists derived from the machine's own apt configuration.

The control plane is built from Debian's *source* package ``kubernetes``, and apt fetches sources only
from ``deb-src`` entries, which a stock machine lacks. Rather than edit the machine's files or name an
archive, the builder writes one file of its own, :data:`SOURCES_FILE`, whose entries are the machine's
``deb`` entries with ``deb-src`` as their type: the same URIs, suites, components and keys.
"""

from __future__ import annotations

import os
import re

__all__ = ["DEB822_FILE", "ONE_LINE_FILE", "SOURCES_FILE", "SOURCES_FILE_ONE_LINE", "deb822_sources",
           "one_line_sources", "source_lists"]

#: The machine's deb822 list (Debian 12's default) and its one-line list (older installs).
DEB822_FILE = "/etc/apt/sources.list.d/debian.sources"
ONE_LINE_FILE = "/etc/apt/sources.list"

#: The files the builder writes (never one of the machine's).
SOURCES_FILE = "/etc/apt/sources.list.d/vmservice-src.sources"
SOURCES_FILE_ONE_LINE = "/etc/apt/sources.list.d/vmservice-src.list"

_TYPES = re.compile(r"^Types:(.*)$", re.IGNORECASE)


def _stanzas(text: str) -> list[list[str]]:
    """The stanzas of a deb822 text: lists of lines (comments kept), split at blank lines."""
    stanzas: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip():
            stanzas[-1].append(line)
        elif stanzas[-1]:
            stanzas.append([])
    return [stanza for stanza in stanzas if any(not line.startswith("#") for line in stanza)]


def deb822_sources(text: str) -> str:
    """
    The ``deb-src`` counterpart of a deb822 list: every stanza whose ``Types`` has ``deb`` and not
    ``deb-src``, with ``Types: deb-src`` and every other line as it was; ``""`` if there is none.
    """
    derived = []
    for stanza in _stanzas(text):
        types = [match.group(1).split() for line in stanza if (match := _TYPES.match(line))]
        if len(types) != 1 or "deb" not in types[0] or "deb-src" in types[0]:
            continue
        derived.append("\n".join("Types: deb-src" if _TYPES.match(line) else line for line in stanza))
    return "\n\n".join(derived) + "\n" if derived else ""


def one_line_sources(text: str) -> str:
    """The ``deb-src`` counterpart of a one-line list: each ``deb`` line as ``deb-src`` (comments dropped)."""
    lines = [line.strip() for line in text.splitlines()]
    present = {line[len("deb-src"):].strip() for line in lines if line.startswith("deb-src ")}
    derived = ["deb-src " + line[len("deb"):].strip() for line in lines
               if line.startswith("deb ") and line[len("deb"):].strip() not in present]
    return "".join(line + "\n" for line in derived)


def source_lists(etc: str = "/") -> tuple[str, str]:
    """
    ``(path, text)`` of the file to write for the machine's lists under ``etc`` (the root directory):
    from the deb822 list when there is one, else from the one-line list.

    :raise FileNotFoundError: the machine has neither list.
    """
    deb822 = os.path.join(etc, DEB822_FILE.lstrip("/"))
    if os.path.exists(deb822):
        with open(deb822, encoding="utf-8") as f:
            return SOURCES_FILE, deb822_sources(f.read())
    with open(os.path.join(etc, ONE_LINE_FILE.lstrip("/")), encoding="utf-8") as f:
        return SOURCES_FILE_ONE_LINE, one_line_sources(f.read())
