# -*- test-case-name: tests.api.test_query -*-
"""
Query parameters, declared once: each route's query is a frozen attrs class
whose fields say, through :func:`param`, what kind of value they take.

:func:`parse_query` reads a request's query string into that class (or
raises :class:`~vmservice.errors.BadRequest` naming the parameter), and the
OpenAPI document takes each parameter's schema from the same kind, so what
the document allows the parser accepts.

Values are UTF-8 after percent-decoding; anything else is a 400.  The last
value of a parameter given twice wins, except for repeated parameters.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, TypeVar, cast

import attrs
from attrs import frozen

from ..durations import parse_go_duration
from ..errors import BadRequest

_T = TypeVar("_T")

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no", "")

#: uid/gid value that existing clients send for "not set".
UNSET_ID = 4294967295


class Kind:
    """
    What values a parameter takes: how its text is parsed and its JSON schema.

    Kinds that refuse in words clients match on (``invalid mode: …``) carry
    a ``message`` template (``{name}``, ``{text}``) and a ``code``.
    """

    #: Whether an empty value counts as absent (the field's default).
    empty_is_absent = True
    #: The ErrorResponse code of a refusal.
    code = "invalid_query"
    #: The words of a refusal, if not the usual ones.
    message: str | None = None

    def refuse(self, name: str, text: str, must: str) -> BadRequest:
        """The 400 for ``text``, which is not what parameter ``name`` must be."""
        if self.message is not None:
            return BadRequest(self.message.format(name=name, text=text), code=self.code)
        return BadRequest(f"query parameter {name!r} must be {must}, not {text!r}", code=self.code)

    def parse(self, name: str, text: str) -> Any:
        """The value of ``text``; :class:`BadRequest` when it is not one."""
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        """The parameter's JSON schema."""
        raise NotImplementedError


@frozen
class Text(Kind):
    """
    Text; never holds NUL (no guest path, command or variable can).

    :ivar min_length: shortest accepted (1 for values that must not be empty).
    :ivar pattern: a regular expression the whole text must match.
    :ivar meaning: what the pattern means, for messages.
    """

    min_length: int = 0
    pattern: str | None = None
    meaning: str = ""
    code: str = "invalid_query"
    message: str | None = None

    @property
    def empty_is_absent(self) -> bool:  # type: ignore[override]
        return False

    def parse(self, name: str, text: str) -> str:
        if "\x00" in text:
            raise BadRequest(f"query parameter {name!r} must not contain NUL", code=self.code)
        if len(text) < self.min_length:
            raise BadRequest(f"query parameter {name!r} must not be empty", code=self.code)
        if self.pattern is not None and not re.fullmatch(self.pattern, text):
            raise self.refuse(name, text, self.meaning or f"text matching {self.pattern}")
        return text

    def schema(self) -> dict[str, Any]:
        pattern = "[^\\u0000]*" if self.pattern is None else f"(?![\\s\\S]*\\u0000)(?:{self.pattern})"
        schema: dict[str, Any] = {"type": "string", "pattern": f"^{pattern}$"}
        if self.min_length:
            schema["minLength"] = self.min_length
        return schema


@frozen
class Integer(Kind):
    """A decimal integer within ``[minimum, maximum]``."""

    minimum: int | None = None
    maximum: int | None = None

    def parse(self, name: str, text: str) -> int:
        if not re.fullmatch(r"-?[0-9]+", text):
            raise self.refuse(name, text, "an integer")
        value = int(text, 10)
        if self.minimum is not None and value < self.minimum:
            raise BadRequest(f"query parameter {name!r} must be at least {self.minimum}", code="invalid_query")
        if self.maximum is not None and value > self.maximum:
            raise BadRequest(f"query parameter {name!r} must be at most {self.maximum}", code="invalid_query")
        return value

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer"}
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema


@frozen
class UserId(Kind):
    """A uid or gid, 0 .. 4294967294; 4294967295 is what clients send for "not set" (``None``)."""

    def parse(self, name: str, text: str) -> int | None:
        value = Integer(0, UNSET_ID).parse(name, text)
        return None if value == UNSET_ID else value

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": 0, "maximum": UNSET_ID}


@frozen
class Boolean(Kind):
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``, any case; empty is false)."""

    @property
    def empty_is_absent(self) -> bool:  # type: ignore[override]
        return False

    def parse(self, name: str, text: str) -> bool:
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise self.refuse(name, text, "true or false")

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@frozen
class Choice(Kind):
    """One of ``values``."""

    values: tuple[str, ...]
    code: str = "invalid_query"
    message: str | None = None

    def parse(self, name: str, text: str) -> str:
        if text not in self.values:
            raise self.refuse(name, text, f"one of {', '.join(self.values)}")
        return text

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.values)}


#: A Go duration with at least one non-zero digit (so it is positive).
_DURATION = r"(?=[^1-9]*[1-9])(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h)(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))*"


@frozen
class Octal(Kind):
    """
    Octal text of permission bits (``0755``, ``755``, ``0o755``), at most
    ``maximum``: a file mode or a umask.
    """

    maximum: int = 0o7777
    code: str = "invalid_query"
    message: str | None = None

    @property
    def pattern(self) -> str:
        digits = len(f"{self.maximum:o}")
        return f"(?:0[oO])?0*[0-7]{{1,{digits}}}"

    def parse(self, name: str, text: str) -> int:
        if not re.fullmatch(self.pattern, text) or int(text, 8) > self.maximum:
            raise self.refuse(name, text, f"octal bits 0 .. {self.maximum:o}")
        return int(text, 8)

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^{self.pattern}$"}


@frozen
class Duration(Kind):
    """A positive Go duration (``30s``, ``2m``, ``1m30s``), in seconds."""

    def parse(self, name: str, text: str) -> float:
        try:
            seconds = parse_go_duration(text)
        except ValueError as error:
            raise BadRequest(f"query parameter {name!r}: {error}", code="invalid_query") from None
        if seconds <= 0:
            raise BadRequest(f"query parameter {name!r} must be positive", code="invalid_query")
        return seconds

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^{_DURATION}$"}


#: A path inside a guest: absolute, or ``~`` / ``~/...`` for root's home
#: directory (expanded by the guest).
GUEST_PATH = Text(1, r"/[\s\S]*|~|~/[\s\S]*", "an absolute path (or start with ~/)", code="invalid_path")
#: A file's permission bits as octal text; refused as ``invalid mode: …``.
FILE_MODE = Octal(0o7777, code="invalid_mode", message="invalid mode: {text} ({name} must be octal text such as 0755)")
#: A process's umask as octal text.
UMASK = Octal(0o777, message="query parameter {name!r} must be an octal umask 0 .. 0777, not {text!r}")

#: The copy modes of ``/vm/{hostname}/cp``: the legacy ``binary`` and
#: ``tar``, and the ``cp-v1-*`` modes (placed like ``cp``).  Anything else is
#: refused as ``invalid mode: <m>``, the words on which existing clients fall
#: back to the legacy modes, so a mode listed here is never refused so.
CP_MODES = ("binary", "tar", "cp-v1-binary", "cp-v1-tar", "cp-v1-recursive")
CP_MODE = Choice(CP_MODES, code="invalid_mode", message="invalid mode: {text} (supported: " + ", ".join(CP_MODES) + ")")
#: ``copy_semantics``: only ``cp-v1`` (the ``cp-v1-*`` modes imply it).
COPY_SEMANTICS = Choice(("cp-v1",), message="query parameter {name!r} must be cp-v1, not {text!r}")
#: ``source_type`` of a cp-v1 upload.
SOURCE_TYPE = Choice(("file", "directory"))

@frozen
class _Param:
    kind: Kind
    description: str
    required: bool
    repeated: bool


def param(kind: Kind, description: str, *, default: Any = None, required: bool = False, repeated: bool = False) -> Any:
    """
    A query parameter of a route's query class.

    :param kind: what values it takes.
    :param default: its value when absent (or empty, for most kinds); ``()``
        for repeated ones.
    :param required: absent (or empty) is a 400; for a repeated one, given
        no value at all.
    :param repeated: given once per value (``args=a&args=b``): a tuple.
    """
    if repeated:
        default = ()
    return attrs.field(default=default, metadata={"param": _Param(kind, description, required, repeated)})


@frozen
class NoQuery:
    """A route without query parameters."""


def parameters(cls: type) -> list[tuple[str, Kind, str, bool, bool]]:
    """``(name, kind, description, required, repeated)`` of each parameter of ``cls``."""
    result = []
    for field in attrs.fields(cls):
        spec: _Param = field.metadata["param"]
        result.append((field.name, spec.kind, spec.description, spec.required, spec.repeated))
    return result


def _decode(name: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"query parameter {name!r} is not valid UTF-8", code="invalid_query") from None


def parse_query(args: Mapping[bytes, list[bytes]] | None, cls: type[_T]) -> _T:
    """
    The query of a request as ``cls``.

    :param args: the request's decoded query (``request.args``).
    :raise BadRequest: a parameter is missing, not UTF-8 or not of its kind.
    """
    values: dict[str, Any] = {}
    fields: Any = attrs.fields(cast(Any, cls))
    for field in fields:
        spec: _Param = field.metadata["param"]
        raw = (args or {}).get(field.name.encode()) or []
        texts = [_decode(field.name, item) for item in raw]
        if spec.repeated:
            if spec.required and not texts:
                raise BadRequest(f"query parameter {field.name!r} is required", code=spec.kind.code)
            values[field.name] = tuple(spec.kind.parse(field.name, text) for text in texts)
            continue
        text = texts[-1] if texts else None
        if text is None or (text == "" and spec.kind.empty_is_absent):
            if spec.required:
                raise BadRequest(f"query parameter {field.name!r} is required", code=spec.kind.code)
            continue
        values[field.name] = spec.kind.parse(field.name, text)
    return cls(**values)


__all__ = [
    "COPY_SEMANTICS",
    "CP_MODE",
    "CP_MODES",
    "SOURCE_TYPE",
    "FILE_MODE",
    "GUEST_PATH",
    "UMASK",
    "Boolean",
    "Choice",
    "Duration",
    "Integer",
    "Kind",
    "NoQuery",
    "Octal",
    "Text",
    "UNSET_ID",
    "UserId",
    "param",
    "parameters",
    "parse_query",
]
