# -*- test-case-name: tests.api.test_openapi -*-
"""
The request fields whose JSON schema says more than their type: what the
input parser refuses, declared once for the parser and the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

from attrs import field

from ...nodes.model import MAX_TAGS, MAX_TAG_LENGTH, TAG_PATTERN


def constrained(schema: dict[str, Any], default: Any = None) -> Any:
    """
    A request field whose JSON schema says more than its type: what the
    input parser refuses (so that a request valid by the OpenAPI document is
    never refused as invalid).
    """
    return field(default=default, metadata={"schema": schema})


def unsupported(reason: str, empty: dict[str, Any]) -> Any:
    """
    A request field the daemon cannot honour yet: only its empty value is
    accepted (clients send zero values).  The one declaration of it: the
    input parser refuses anything else with ``reason`` (400 ``not_supported``),
    and the OpenAPI document shows the field as empty-only.

    :param empty: the JSON-schema words for "empty" (``maxLength: 0`` ...).
    """
    return field(default=None, metadata={"schema": {**empty, "description": f"Not supported: {reason}"},
                                         "unsupported": reason})


#: A list of tags in a request: what :func:`vmservice.nodes.model.tag_problem`
#: accepts, at most MAX_TAGS of them.
_TAG_LIST = {
    "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_LENGTH, "pattern": f"^{TAG_PATTERN}$"},
    "maxItems": MAX_TAGS,
}


def tag_list(description: str) -> Any:
    """A request field that is a list of tags (see :data:`_TAG_LIST`)."""
    return constrained({**_TAG_LIST, "description": description})
