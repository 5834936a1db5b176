# -*- test-case-name: tests.api.inputs -*-
"""
JSON bodies: the body read as one JSON object (size-limited), and structured
strictly into a model (:mod:`vmservice.api.models`).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from twisted.web.iweb import IRequest

from ...errors import BadRequest, BodyTooLarge
from ...structuring import format_path, strict_converter, structure_errors


T = TypeVar("T")


#: Bodies of control requests are small; anything larger is refused.
MAX_JSON_BODY = 1 << 20


_converter = strict_converter()


def structure(data: Any, cls: type[T]) -> T:
    """
    Build ``cls`` (an attrs class) from decoded JSON, strictly.

    :raise BadRequest: unknown fields, wrong types, missing fields; the
        message names the first problem and where it is.
    """
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_body")
    try:
        return _converter.structure(data, cls)
    except Exception as error:
        path, message = next(structure_errors(error), ((), str(error)))
        where = format_path(path)
        raise BadRequest(f"field {where!r}: {message}" if where else message, code="invalid_body") from None


def json_object(request: IRequest, *, empty_ok: bool = True, limit: int = MAX_JSON_BODY) -> dict[str, Any]:
    """
    The request body as a JSON object; an empty body is ``{}`` when
    ``empty_ok``.

    :param limit: the most bytes of body accepted.
    :raise BadRequest: invalid JSON, not an object, or too large
        (:class:`~vmservice.errors.BodyTooLarge`, 413).
    """
    content = request.content
    raw = content.read(limit + 1) if content is not None else b""
    if len(raw) > limit:
        raise BodyTooLarge(f"the body is over this route's limit of {limit} bytes")
    if not raw.strip():
        if empty_ok:
            return {}
        raise BadRequest("a JSON body is required", code="invalid_body")
    try:
        value = json.loads(raw)
    except ValueError as error:
        raise BadRequest(f"invalid JSON: {error}", code="invalid_json") from None
    if not isinstance(value, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_body")
    return value
