# -*- test-case-name: tests.test_published_figures -*-
"""
The figures README.md, docs/performance.md, docs/reliability.md and docs/cluster.md publish,
rewritten from the results files they cite.

A published figure is followed by a marker naming its results file and the
key in it, dot-separated (a list's items by their index)::

    a cold create answers in 5.88 s<!-- figure: boot.json#api_create_wait_agent_s.median -->

The marker is an HTML comment, invisible once rendered.  The figure is the
number just before it, with its unit, possibly in bold (``**1.80×**``): a
range ``4.5–6.5 s`` cites a list (its smallest and largest item).  The unit
shown says how the stored value is scaled, by what the key's name says it
holds (``_s`` seconds, ``_ms``, ``bytes``, ``kib``, ``mb_per_s``,
``cores``, ``ratio_``...; a marker ending ``as count`` says so where the
name cannot, ``#health_s.within_1s as count``): ``ms`` of a ``_s`` key is
1000 times its value, ``MiB`` of a ``_bytes`` key its value over 2**20, and
so on.  A figure shown without its unit, in a table whose heading or
caption gives it, names the unit at the marker's end, and is scaled to it::

    | create, cold | 10.5<!-- figure: load.json#ops.create_cold.p50_s in s --> |

A figure keeps the number of decimals it is shown with.

Figures no results file holds are inside a block that says so, between
``<!-- unrecorded -->`` and ``<!-- /unrecorded -->``; outside such blocks
every figure with a unit of time, speed, ratio or share (``s``, ``ms``,
``MB/s``, ``×``, ``%``) and every decimal number that is no size or version
carries a marker (:func:`unmarked`); a target is written ``≤ 3×`` or
``≥ 0.8``; what stands in inline code (between backticks) is literal text,
no figure.

    .venv/bin/python bench/publish.py           # rewrite the figures from bench/results/, list those that changed
    .venv/bin/python bench/publish.py --check   # exit 1 if a figure differs from its file, or is unmarked

After a rewrite, re-read the sentences around every figure it lists: the
words (faster, met, quiet ...) are not rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
#: The documents whose figures are published from results files.
DOCUMENTS = ("README.md", os.path.join("docs", "performance.md"), os.path.join("docs", "reliability.md"),
             os.path.join("docs", "cluster.md"), os.path.join("docs", "e2b.md"))

_NUMBER = r"\d+(?:\.\d+)?"
_UNITS = r"ms|µs|s|MB/s|MiB|KiB|GiB|MB|GB|×|%"
MARKER = re.compile(r"<!-- figure: (?P<file>[\w.-]+\.json)#(?P<path>[^>]*?)(?: as (?P<kind>[\w/%]+))?"
                    rf"(?: in (?P<shown_in>{_UNITS}))? -->")
#: The figure a marker follows: a number or a range, its unit, in bold or not.
FIGURE = re.compile(
    rf"(?<![\w.])(?P<bold>\*\*)?(?P<low>{_NUMBER})(?:–(?P<high>{_NUMBER}))?(?P<space> ?)(?P<unit>{_UNITS})?"
    rf"(?(bold)\*\*)$")
UNRECORDED = re.compile(r"<!-- unrecorded -->.*?<!-- /unrecorded -->", re.S)
CODE = re.compile(r"^```.*?^```", re.S | re.M)
#: Inline code: literal text (a JSON value, an option), not a figure.
INLINE_CODE = re.compile(r"`[^`\n]+`")
#: A measured figure anywhere in the text: a number with a unit of time, speed, ratio or share, or a
#: decimal number without a unit (a ratio, a load average); not a size, nor a version (QEMU 7.2).
MEASURED = re.compile(
    rf"(?<![\w.=/-])(?<!QEMU )(?<!Python )(?<!OpenAPI )(?<!python)(?<!bash )(?<![≤≥] )(?:\*\*)?"
    rf"(?:{_NUMBER}(?:–{_NUMBER})?(?: ?(?:ms|µs|s|MB/s)\b| ?×| ?%)|\d+\.\d+(?:–\d+\.\d+)?(?![\w.]| ?[KMG]i?B\b))"
    rf"(?:\*\*)?")

#: Segments of a key path that say which statistic, not what is measured.
_STATISTICS = {"median", "p50", "p95", "max", "min", "mean", "samples"}
#: What a key's name says its value is, by the words of its name (``_``-separated), the first found.
_KINDS = (("bytes", "bytes"), ("kib", "KiB"), ("mib", "MiB"), ("cores", "cores"), ("percent", "%"),
          ("ms", "ms"), ("us", "µs"), ("seconds", "s"), ("s", "s"))
#: How a value of a kind is shown in a unit: the factor it is multiplied by.
_SCALES: dict[tuple[str, str], float] = {
    ("s", "s"): 1, ("s", "ms"): 1e3, ("s", "µs"): 1e6, ("ms", "ms"): 1, ("ms", "s"): 1e-3, ("µs", "µs"): 1,
    ("µs", "ms"): 1e-3, ("bytes", "MB"): 1e-6, ("bytes", "GB"): 1e-9, ("bytes", "MiB"): 2 ** -20,
    ("bytes", "KiB"): 2 ** -10, ("bytes", "GiB"): 2 ** -30, ("KiB", "KiB"): 1, ("KiB", "MiB"): 2 ** -10, ("KiB", "MB"): 1.024e-3, ("KiB", "GiB"): 2 ** -20,
    ("MiB", "MiB"): 1, ("MB/s", "MB/s"): 1, ("cores", ""): 1, ("%", "%"): 1, ("ratio", ""): 1, ("ratio", "×"): 1,
    ("count", ""): 1,
}


class FigureError(Exception):
    """A marker that names no value, or a figure that cannot be shown from it."""


def kind_of(path: list[str]) -> str:
    """
    What the value at ``path`` holds, by the last segment whose name says
    so: ``ratio`` for a name that starts so, MB/s for one with ``mb_per_s``
    or ``mb_s``, else by its words (:data:`_KINDS`); ``count`` when none does.
    """
    for segment in reversed(path):
        if segment in _STATISTICS or segment.isdigit():
            continue
        if segment.startswith("ratio"):
            return "ratio"
        if re.search(r"(^|_)mb_(per_)?s($|_)", segment):
            return "MB/s"
        words = segment.lower().split("_")
        for word, kind in _KINDS:
            if word in words:
                return kind
    return "count"


def lookup(results: dict[str, Any], path: list[str]) -> Any:
    """The value at ``path`` (keys, or indexes of lists) in ``results``."""
    value: Any = results
    for segment in path:
        if isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        elif isinstance(value, dict) and segment in value:
            value = value[segment]
        else:
            raise FigureError(f"no {segment!r} in {'.'.join(path)}")
    return value


@dataclass(frozen=True)
class Figure:
    """
    One published figure: where it is, what it shows and what its file says.

    :ivar document: the document's path, relative to the checkout.
    :ivar line: its line number.
    :ivar start: offset of the figure's first character in the document.
    :ivar end: offset just past the figure (where its marker begins).
    :ivar shown: the figure as the document shows it.
    :ivar expected: the figure as its file gives it, at the same precision.
    :ivar source: ``file#path`` of the marker.
    """

    document: str
    line: int
    start: int
    end: int
    shown: str
    expected: str
    source: str


def _format(number: str, value: float) -> str:
    decimals = len(number.partition(".")[2])
    return f"{value:.{decimals}f}"


def expected_figure(match: re.Match[str], value: Any, path: list[str], kind: str | None = None,
                    shown_in: str | None = None) -> str:
    """
    The figure ``match`` shows, with its numbers taken from ``value`` (a list
    for a range), a value of ``kind`` (by default what ``path`` says,
    :func:`kind_of`), in the unit ``match`` shows or, for a figure shown
    without one, ``shown_in`` (the unit its table's heading gives).
    """
    if match["unit"] and shown_in and match["unit"] != shown_in:
        raise FigureError(f"a figure shown in {match['unit']!r} said to be in {shown_in!r}")
    unit = match["unit"] or shown_in or ""
    kind = kind or kind_of(path)
    scale = _SCALES.get((kind, unit))
    if scale is None:
        raise FigureError(f"a value of {'.'.join(path)} ({kind}) cannot be shown in {unit or 'no unit'!r}")
    if match["high"] is not None:
        if not isinstance(value, list) or not value or not all(isinstance(v, (int, float)) for v in value):
            raise FigureError(f"a range cites a list of numbers, not {'.'.join(path)}")
        low, high = _format(match["low"], min(value) * scale), _format(match["high"], max(value) * scale)
        numbers = f"{low}–{high}"
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FigureError(f"{'.'.join(path)} is no number: {value!r}")
        numbers = _format(match["low"], value * scale)
    bold = match["bold"] or ""
    return f"{bold}{numbers}{match['space']}{match['unit'] or ''}{bold}"


def figures(document: str, text: str, load: Callable[[str], dict[str, Any]]) -> list[Figure]:
    """Every marked figure of ``text`` (the document ``document``), with what its file gives."""
    found = []
    for marker in MARKER.finditer(text):
        line = text.count("\n", 0, marker.start()) + 1
        where = f"{document}:{line}"
        match = FIGURE.search(text, max(0, marker.start() - 40), marker.start())
        if match is None:
            raise FigureError(f"{where}: no figure just before {marker[0]}")
        path = marker["path"].split(".")
        try:
            value = lookup(load(marker["file"]), path)
            expected = expected_figure(match, value, path, marker["kind"], marker["shown_in"])
        except (FigureError, OSError, ValueError) as error:
            raise FigureError(f"{where}: {marker['file']}#{marker['path']}: {error}") from error
        found.append(Figure(document, line, match.start(), match.end(), match[0], expected,
                            f"{marker['file']}#{marker['path']}"))
    return found


def rewrite(text: str, found: list[Figure]) -> str:
    """``text`` with every figure of ``found`` (figures of ``text``) as its file gives it."""
    for figure in sorted(found, key=lambda f: f.start, reverse=True):
        text = text[:figure.start] + figure.expected + text[figure.end:]
    return text


def unmarked(text: str) -> list[tuple[int, str]]:
    """
    The measured figures of ``text`` (:data:`MEASURED`) without a marker,
    outside code (blocks and inline) and unrecorded blocks: line numbers and
    figures.
    """
    blank = text
    for block in (CODE, UNRECORDED, MARKER, INLINE_CODE):
        blank = block.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), blank)
    found = []
    for match in MEASURED.finditer(blank):
        rest = text[match.end():match.end() + 14]
        if rest.startswith("<!-- figure:"):
            continue
        found.append((text.count("\n", 0, match.start()) + 1, match[0]))
    return found


class Results:
    """The results files of a checkout, each read once."""

    def __init__(self, directory: str = RESULTS) -> None:
        self._directory = directory
        self._read: dict[str, dict[str, Any]] = {}

    def __call__(self, name: str) -> dict[str, Any]:
        if name not in self._read:
            with open(os.path.join(self._directory, name)) as f:
                self._read[name] = json.load(f)
        return self._read[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a difference")
    options = parser.parse_args()
    load = Results()
    failed = False
    for document in DOCUMENTS:
        path = os.path.join(ROOT, document)
        with open(path) as f:
            text = f.read()
        found = figures(document, text, load)
        changed = [figure for figure in found if figure.shown != figure.expected]
        for figure in changed:
            print(f"{document}:{figure.line}: {figure.shown} -> {figure.expected} ({figure.source})")
        for line, shown in unmarked(text):
            print(f"{document}:{line}: {shown} cites no results file (mark it, or put it in an unrecorded block)")
            failed = True
        if changed and not options.check:
            with open(path, "w") as f:
                f.write(rewrite(text, found))
        failed = failed or (options.check and bool(changed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
