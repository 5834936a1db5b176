"""
What the tests of vmctl's grammar share: :func:`parse`, ``vmctl``'s options
for some words, in a given environment.
"""

from __future__ import annotations

from typing import Any

from vmservice.cli.main import parse_args


def parse(*argv: str, **environ: str) -> Any:
    """The options ``vmctl ARGV...`` gives in the environment ``environ`` (usage errors raise ``SystemExit``)."""
    return parse_args(argv, environ)
