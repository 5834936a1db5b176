# -*- test-case-name: tests.wire.test_excludes -*-
"""
The ``exclude`` patterns of a copy: which entries below the copied directory
are left out (of a download's tar, or of what an upload's tar extracts).

A pattern is normalised first: surrounding white space, one leading ``./``
or ``/`` and trailing ``/`` are dropped, and a pattern that is then empty is
ignored.  It is matched against an entry's path *relative to the copied
directory* (``/``-separated, as in the tar), one segment at a time:

- within a segment, ``*`` matches any run of characters (``/`` never),
  ``?`` one character, ``[abc]`` / ``[a-z]`` one character of the set
  (``[!...]`` or ``[^...]``: one not in it; a ``]`` right after the opening
  bracket is a member), and ``\\c`` the character ``c`` itself;
- a whole segment ``**`` matches any number of segments, none included
  (``**/cache`` is ``cache`` at any depth, ``build/**`` is ``build`` and
  everything in it);
- a pattern without ``/`` also matches the *base name* of an entry at any
  depth: ``*.log`` leaves out every log file, ``node_modules`` every
  directory of that name.

An entry is left out when it, or any directory above it, matches: an
excluded directory goes with everything it holds.  Matching is case-sensitive.
A pattern that does not parse (an unclosed ``[``, a trailing ``\\``, a
reversed range such as ``[z-a]``) matches nothing.

These are the rules existing clients apply to the same patterns on their
side of a copy, so both ends agree on what is left out.  The guest agent
applies them to copies (:mod:`vmservice.guest.copying`), ``vmctl cp`` to
the tar it packs (:mod:`vmservice.cli.copying`).

Standard library only: the guest image copies it.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional, Pattern, Union

#: The segment that matches any number of segments.
ANY_SEGMENTS = "**"

_Segment = Union[Pattern[str], str]


def normalise(pattern: str) -> str:
    """
    ``pattern`` as it is matched: stripped of white space, of one leading
    ``./`` or ``/`` and of trailing ``/``; ``""`` means the pattern is ignored.
    """
    text = pattern.strip()
    if text.startswith("./"):
        text = text[2:]
    elif text.startswith("/"):
        text = text[1:]
    return text.rstrip("/")


def _class(segment: str, start: int) -> Optional[tuple[str, int]]:
    """
    The regular expression of the bracket expression opening at
    ``segment[start]`` and the index just past its ``]``; ``None`` when it
    does not parse.
    """
    i = start + 1
    negate = i < len(segment) and segment[i] in "!^"
    if negate:
        i += 1
    items: list[str] = []
    first = True
    while True:
        if i >= len(segment):
            return None
        c = segment[i]
        if c == "]" and not first:
            break
        first = False
        if c == "\\":
            if i + 1 >= len(segment):
                return None
            low, i = segment[i + 1], i + 2
        else:
            low, i = c, i + 1
        if i + 1 < len(segment) and segment[i] == "-" and segment[i + 1] != "]":
            high = segment[i + 1]
            i += 2
            if high == "\\":
                if i >= len(segment):
                    return None
                high, i = segment[i], i + 1
            if low > high:
                return None
            items.append(f"{re.escape(low)}-{re.escape(high)}")
        else:
            items.append(re.escape(low))
    return ("[^" if negate else "[") + "".join(items) + "]", i + 1


def compile_segment(segment: str) -> Optional[Pattern[str]]:
    """
    The compiled form of one pattern segment (``*``, ``?``, ``[...]``,
    ``\\c``), or ``None`` when it does not parse.
    """
    out: list[str] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append(".*")
            i += 1
        elif c == "?":
            out.append(".")
            i += 1
        elif c == "\\":
            if i + 1 >= len(segment):
                return None
            out.append(re.escape(segment[i + 1]))
            i += 2
        elif c == "[":
            parsed = _class(segment, i)
            if parsed is None:
                return None
            expression, i = parsed
            out.append(expression)
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def _matches(segments: list[_Segment], parts: list[str]) -> bool:
    """Whether the pattern ``segments`` matches the path ``parts`` as a whole."""
    reachable = {0}
    for segment in segments:
        if segment == ANY_SEGMENTS:
            reachable = set(range(min(reachable), len(parts) + 1))
        else:
            assert not isinstance(segment, str)
            reachable = {i + 1 for i in reachable if i < len(parts) and segment.fullmatch(parts[i])}
        if not reachable:
            return False
    return len(parts) in reachable


class Excludes:
    """
    A set of exclude patterns (see the module docstring).

    :param patterns: the patterns as the client sent them.
    """

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self.patterns: list[str] = []
        self._paths: list[list[_Segment]] = []
        self._names: list[_Segment] = []
        for raw in patterns:
            pattern = normalise(raw)
            if not pattern:
                continue
            self.patterns.append(pattern)
            segments: list[_Segment] = []
            for text in pattern.split("/"):
                if text == ANY_SEGMENTS:
                    segments.append(ANY_SEGMENTS)
                    continue
                compiled = compile_segment(text)
                if compiled is None:
                    break
                segments.append(compiled)
            else:
                if len(segments) == 1:
                    self._names.append(segments[0])
                else:
                    self._paths.append(segments)

    def __bool__(self) -> bool:
        return bool(self._paths or self._names)

    def excludes(self, rel: str) -> bool:
        """
        Whether the entry at ``rel`` (relative to the copied directory,
        ``/``-separated) is left out, itself or with a directory above it.
        """
        if not rel:
            return False
        parts = [part for part in rel.split("/") if part]
        for name in self._names:
            if name == ANY_SEGMENTS:
                return True
            assert not isinstance(name, str)
            if any(name.fullmatch(part) for part in parts):
                return True
        return any(_matches(segments, parts[:depth]) for segments in self._paths
                   for depth in range(1, len(parts) + 1))


__all__ = ["ANY_SEGMENTS", "Excludes", "compile_segment", "normalise"]
