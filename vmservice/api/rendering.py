# -*- test-case-name: tests.api.test_app -*-
"""
Turning response records into bytes on the wire.

JSON keys are the attrs field names; times are RFC 3339 in UTC with a ``Z``;
``None`` fields are left out (clients break on ``""`` times).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import attrs
import cattrs
from twisted.web.iweb import IRequest

_converter = cattrs.Converter()


def rfc3339(value: datetime) -> str:
    """Format ``value`` as RFC 3339 in UTC, e.g. ``2026-11-22T10:59:26Z``."""
    value = value.astimezone(timezone.utc)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + "Z"


_converter.register_unstructure_hook(datetime, rfc3339)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def to_json(value: Any) -> Any:
    """The JSON-ready form of a record, a list of records, or plain data."""
    if attrs.has(type(value)) or isinstance(value, (list, tuple)):
        return _drop_none(_converter.unstructure(value))
    return value


def format_mode(bits: int) -> str:
    """
    Permission bits as octal text of at least four digits: ``0644``, ``4755``,
    ``1777``.  The same text is used wherever the API shows a file mode.
    """
    return f"{bits & 0o7777:04o}"


def json_body(request: IRequest, value: Any, status: int = 200) -> bytes:
    """Set status and content type on ``request`` and return ``value`` as JSON bytes."""
    request.setResponseCode(status)
    request.setHeader(b"Content-Type", b"application/json")
    return json.dumps(to_json(value)).encode() + b"\n"


def text_body(request: IRequest, text: str, status: int = 200, content_type: bytes = b"text/plain; charset=utf-8") -> bytes:
    """Set status and content type on ``request`` and return ``text`` encoded."""
    request.setResponseCode(status)
    request.setHeader(b"Content-Type", content_type)
    return text.encode()
