# -*- test-case-name: tests.cli.test_tagging,tests.integration.cli.test_main -*-
"""
``vmctl tag HOST [+TAG|-TAG|=TAG]...``: the edits' grammar (:func:`tag_words`),
taken out of the command line before argparse reads it (:func:`take_tag_edits`:
it would take ``-b`` for an option), and the command.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from attrs import frozen

from ..client import Client
from . import output
from .commands import Command, add_host_and_json
from .context import Context

__all__ = ["TAG", "TagWords", "VALUE_OPTIONS", "tag_words", "take_tag_edits"]


@frozen
class TagWords:
    """
    What the words of ``vmctl tag`` ask for: nothing (show the tags), or one
    change, sent as one request.

    :ivar add: the tags of ``+TAG`` words.
    :ivar remove: the tags of ``-TAG`` words.
    :ivar replace: the tags of ``=TAG`` words (none for a lone ``=``), or
        ``None`` when there is no ``=`` word.
    """

    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    replace: tuple[str, ...] | None = None

    @property
    def changes(self) -> bool:
        """Whether the words ask for a change (otherwise the tags are shown)."""
        return bool(self.add or self.remove) or self.replace is not None


def tag_words(words: Sequence[str]) -> TagWords:
    """
    Read the edits of ``vmctl tag``: ``+TAG`` adds, ``-TAG`` removes,
    ``=TAG`` (repeated) replaces all tags with those given, a lone ``=``
    clears them.  Tags themselves are checked by the daemon.

    :raise ValueError: a word that is not an edit, an empty tag, or ``=``
        words with ``+``/``-`` words.
    """
    add: list[str] = []
    remove: list[str] = []
    replace: list[str] | None = None
    for word in words:
        sign, tag = word[:1], word[1:]
        if sign == "=":
            replace = (replace or []) + ([tag] if tag else [])
        elif sign in ("+", "-") and tag:
            (add if sign == "+" else remove).append(tag)
        elif sign in ("+", "-"):
            raise ValueError(f"{word!r}: the tag is missing")
        else:
            raise ValueError(f"{word!r} is not +TAG, -TAG or =TAG")
    if replace is not None and (add or remove):
        raise ValueError("=TAG (replace) cannot be combined with +TAG or -TAG")
    return TagWords(tuple(add), tuple(remove), tuple(replace) if replace is not None else None)


#: Options that take a value, before or after any command.
VALUE_OPTIONS = ("--url", "--token", "--token-file")
#: Options of ``vmctl tag`` that take none.
_TAG_FLAGS = ("-h", "--help", "--json")


def _command_at(argv: Sequence[str]) -> int | None:
    """Where the command is in ``argv`` (after the options before it), or ``None``."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word in VALUE_OPTIONS:
            index += 2
        elif word.startswith("-"):
            if word.split("=", 1)[0] not in VALUE_OPTIONS:
                return None  # -h, or a usage error argparse will word
            index += 1
        else:
            return index
    return None


def take_tag_edits(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """
    Take the edits out of a ``vmctl tag`` command line before argparse
    reads it (it would take ``-b`` for an option): after the command, every
    word that starts with ``+``, ``-`` or ``=`` and is not one of the
    command's options, and every word after ``--``.

    :return: the rest of ``argv`` and the edits, or ``argv`` and ``None``
        for another command.
    """
    at = _command_at(argv)
    if at is None or argv[at] != "tag":
        return argv, None
    rest = argv[: at + 1]
    edits: list[str] = []
    words = iter(argv[at + 1:])
    for word in words:
        if word == "--":
            edits.extend(words)
        elif word in _TAG_FLAGS or word.split("=", 1)[0] in VALUE_OPTIONS:
            rest.append(word)
            value = next(words, None) if word in VALUE_OPTIONS else None
            if value is not None:
                rest.append(value)
        elif word[:1] in ("+", "-", "="):
            edits.append(word)
        else:
            rest.append(word)
    return rest, edits


async def _tag(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl tag``: show or change a node's tags: +TAG adds, -TAG removes, =TAG... replaces all."""
    edits: TagWords = options.edits
    if edits.changes:
        tags = await client.set_tags(options.hostname, add=edits.add or None, remove=edits.remove or None,
                                     replace=edits.replace)
    else:
        tags = await client.tags(options.hostname)
    if options.json:
        context.out.write(output.format_json({"hostname": options.hostname, "tags": tags}))
    else:
        context.out.write("".join(f"{tag}\n" for tag in tags))
    return 0


TAG = Command(
    "tag", "show or change a node's tags: +TAG adds, -TAG removes, =TAG... replaces all", add_host_and_json, _tag
)
