# -*- test-case-name: tests.wire.test_openheaders -*-
"""
Reading the fields of an OPEN header, which comes from the peer and is not
trusted: each reader returns the field's value (or its default when the field
is absent) or raises :class:`BadHeader`, the one error of
:mod:`vmservice.wire.openheaders`.  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Mapping, TypeVar

_T = TypeVar("_T")
_Flat = TypeVar("_Flat", bound="FlatHeader")


class BadHeader(ValueError):
    """
    An OPEN header that cannot be read: not a JSON object, or a field missing,
    of the wrong type or out of range.  The message names the field; the guest
    refuses the stream with it as it always did for that kind of stream (a
    reset with ``BAD_HEADER``, an ``invalid`` reply, ...).
    """


def header_object(value: object) -> Mapping[str, Any]:
    """
    ``value`` as a header: a JSON object (what the frame codec hands over).

    :raises BadHeader: anything else.
    """
    if not isinstance(value, Mapping):
        raise BadHeader("the header must be a JSON object")
    return value


def typed(header: Mapping[str, Any], name: str, kind: type[_T], default: _T) -> _T:
    """
    The field ``name``, of exactly ``kind`` (a bool is no int), or ``default``.

    :raises BadHeader: ``field 'NAME' must be KIND``.
    """
    value = header.get(name, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadHeader(f"field {name!r} must be {kind.__name__}")
    return value


def words(header: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """
    The field ``name``, a list of strings (none when absent).

    :raises BadHeader: ``field 'NAME' must be a list of strings``.
    """
    value = header.get(name, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadHeader(f"field {name!r} must be a list of strings")
    return tuple(value)


def flag(header: Mapping[str, Any], name: str) -> bool:
    """
    The field ``name``, true or false (false when absent).

    :raises BadHeader: ``NAME must be true or false``.
    """
    value = header.get(name, False)
    if not isinstance(value, bool):
        raise BadHeader(f"{name} must be true or false")
    return value


def is_int(value: object) -> bool:
    """Whether ``value`` is a JSON integer (``True`` and ``False`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class FlatHeader:
    """
    A header that is its ``op`` beside the fields of its record, each a JSON
    scalar: each kind names its :attr:`op` and reads its fields (:meth:`read`).
    """

    #: The operation the header names.
    op: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object: ``op``, then the fields in their order."""
        return {"op": self.op, **asdict(self)}

    @classmethod
    def from_json(cls: type[_Flat], value: object) -> _Flat:
        """
        Read and check a header (its ``op`` is not looked at).

        :raises BadHeader: naming the field.
        """
        return cls(*cls.read(header_object(value)))

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[Any, ...]:
        """
        The record's fields, in their order.

        :raises BadHeader: naming the field.
        """
        raise NotImplementedError


__all__ = ["BadHeader", "FlatHeader", "flag", "header_object", "is_int", "typed", "words"]
