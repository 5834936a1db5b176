# -*- test-case-name: tests.test_structuring -*-
"""
The one strict cattrs converter, for the configuration file and for API input.

cattrs' defaults coerce: ``"8080"`` becomes 8080, ``"false"`` becomes
``True``, a string becomes a tuple of characters.  Input a person or a client
wrote must not be guessed at, so :func:`strict_converter` builds a converter
that takes every value only in its own type (a boolean is not an integer, an
integer is a number), lists and tuples only from lists, attrs records only from
mappings, and refuses unknown keys.  Each problem is a :class:`BadValue` whose
text is the whole message; cattrs adds the key path as notes, which
:func:`structure_errors` walks into ``(path, message)`` pairs.

Callers register hooks of their own on top (the configuration's sizes and
CIDRs), then say where the problem is in their own words:
:func:`format_path` gives ``host_groups[0].vcpu``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import get_args, get_origin

import attrs
import cattrs
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn

#: A key path: attribute names and list indexes.
Path = tuple[str | int, ...]


class BadValue(ValueError):
    """A value of the wrong type or form; its text is the whole message, the key path comes from cattrs."""


def describe(value: object) -> str:
    """
    Name a value for a message, with its type, because a value that looks
    right may have been read as another type (``'8080'`` vs ``8080``).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{type(value).__name__} {value}"


def _structure_int(value: object, _type: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)  # JSON has one number type: 2.0 is the integer 2 (as JSON Schema says)
    raise BadValue(f"expected an integer, got {describe(value)}")


def _structure_float(value: object, _type: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise BadValue(f"expected a number, got {describe(value)}")


def _structure_str(value: object, _type: object) -> str:
    if isinstance(value, str):
        return value
    raise BadValue(f"expected a string, got {describe(value)}")


def _structure_bool(value: object, _type: object) -> bool:
    if isinstance(value, bool):
        return value
    raise BadValue(f"expected true or false, got {describe(value)}")


def _is_sequence(type_: object) -> bool:
    args = get_args(type_)
    if get_origin(type_) is list:
        return len(args) == 1
    return get_origin(type_) is tuple and len(args) == 2 and args[1] is Ellipsis


def _sequence_factory(type_: type, converter: cattrs.Converter) -> Callable[[object, object], object]:
    """
    Structure ``list[X]`` and ``tuple[X, ...]`` from a list only: cattrs' own
    hook takes any iterable, so ``allow: 10.0.0.0/8`` would become a tuple of
    characters.  Element errors carry cattrs' index notes, so their paths read
    ``[i]``.
    """
    element = get_args(type_)[0]
    hook = converter.get_structure_hook(element)
    make = list if get_origin(type_) is list else tuple

    def structure(value: object, _type: object) -> object:
        if not isinstance(value, list):
            raise BadValue(f"expected a list, got {describe(value)}")
        items = []
        errors: list[Exception] = []
        for index, item in enumerate(value):
            try:
                items.append(hook(item, element))
            except Exception as error:
                error.add_note(IterableValidationNote(f"Structuring {type_!r} @ index {index}", index, element))
                errors.append(error)
        if errors:
            raise IterableValidationError(f"While structuring {type_!r}", errors, type_)
        return make(items)

    return structure


def _mapping_factory(cl: type, converter: cattrs.Converter) -> Callable[[object, object], object]:
    """
    Structure attrs classes from mappings only, so that ``api: 8080`` says
    "expected a mapping" instead of a Python error.
    """
    inner: Callable[[Mapping[str, object], object], object] = make_dict_structure_fn(cl, converter)

    def structure(value: object, _type: object) -> object:
        if not isinstance(value, dict):
            raise BadValue(f"expected a mapping, got {describe(value)}")
        return inner(value, cl)

    return structure


def strict_converter() -> cattrs.Converter:
    """
    A new strict converter; register further hooks on it before its first use
    (cattrs' factories look up element and field hooks when they build theirs).
    """
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook_factory(_is_sequence, _sequence_factory)
    converter.register_structure_hook_factory(attrs.has, _mapping_factory)
    return converter


def format_path(parts: Path) -> str:
    """The key path ``parts`` as text: ``host_groups[0].network.range``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def structure_errors(error: BaseException, parts: Path = ()) -> Iterator[tuple[Path, str]]:
    """
    Walk what a strict converter raised into ``(key path, message)`` pairs.

    :param error: what cattrs raised (or one of its sub-exceptions).
    :param parts: the key path of the value ``error`` is about.
    """
    if isinstance(error, ClassValidationError):
        with_notes, without = error.group_exceptions()
        for sub, note in with_notes:
            yield from structure_errors(sub, (*parts, note.name))
        for sub in without:
            yield from structure_errors(sub, parts)
    elif isinstance(error, IterableValidationError):
        indexed, without_index = error.group_exceptions()
        for sub, index_note in indexed:
            yield from structure_errors(sub, (*parts, index_note.index))
        for sub in without_index:
            yield from structure_errors(sub, parts)
    elif isinstance(error, ForbiddenExtraKeysError):
        for key in sorted(error.extra_fields):
            yield (*parts, str(key)), "unknown key"
    elif isinstance(error, KeyError):
        yield parts, "required key missing"
    elif isinstance(error, BadValue):
        yield parts, str(error)
    else:
        yield parts, f"invalid value ({error})"


__all__ = ["BadValue", "Path", "describe", "format_path", "strict_converter", "structure_errors"]
